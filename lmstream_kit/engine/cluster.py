"""A standalone Spark cluster on 127.0.0.1, started from the installed PySpark.

PySpark's wheel ships ``bin/spark-class`` but no ``sbin/start-master.sh``, so
the master and workers are started directly as ``spark-class`` processes and
stopped by pid.

>>> with StandaloneCluster(workers=1, cores=2) as cluster:   # doctest: +SKIP
...     LiveStream("LR2S", master=cluster.master_url).start()
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from ..exceptions import EngineError
from .session import find_java, prepare_environment


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout_s: float, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise EngineError(f"Spark process exited with {proc.returncode}: {' '.join(tail)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise EngineError(f"Spark process did not open port {port} within {timeout_s:g} s (log: {log})")


class StandaloneCluster:
    """Start a master and ``workers`` workers on 127.0.0.1; stop them by pid.

    Parameters
    ----------
    workers : int
        Number of worker processes.
    cores, memory : per worker (``--cores``, ``--memory``).
    log_dir : path, optional
        Where the processes' logs go (a temp dir by default).
    """

    def __init__(
        self,
        *,
        workers: int = 1,
        cores: int = 2,
        memory: str = "2g",
        port: Optional[int] = None,
        log_dir: Optional[Path] = None,
    ) -> None:
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port = port or _free_port()
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="lmstream-cluster-"))
        self._procs: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        home = spark_home()
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(home),
            SPARK_LOCAL_IP="127.0.0.1",
            PYSPARK_PYTHON=sys.executable,
            SPARK_WORKER_DIR=str(self.log_dir / "work"),
            SPARK_NO_DAEMONIZE="1",
        )
        log = self.log_dir / f"{name}.log"
        fh = open(log, "wb")
        proc = subprocess.Popen(
            [str(home / "bin" / "spark-class"), *args],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # so that stop() can kill the whole process group
        )
        fh.close()
        self._procs.append(proc)
        return proc

    def start(self, timeout_s: float = 60.0) -> "StandaloneCluster":
        find_java()
        prepare_environment()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            ui = _free_port()
            master = self._spawn(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(ui),
            )
            _wait_port(self.port, timeout_s, master, self.log_dir / "master.log")
            for i in range(self.workers):
                wport = _free_port()
                self._spawn(
                    f"worker-{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host", "127.0.0.1", "--port", str(wport), "--webui-port", str(_free_port()),
                    "--cores", str(self.cores), "--memory", self.memory,
                )
                _wait_port(wport, timeout_s, self._procs[-1], self.log_dir / f"worker-{i}.log")
            self._wait_registered(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_registered(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        log = self.log_dir / "master.log"
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            if text.count("Registering worker") >= self.workers:
                return
            time.sleep(0.2)
        raise EngineError(f"workers did not register with {self.master_url} within {timeout_s:g} s")

    def stop(self) -> None:
        import signal

        for proc in reversed(self._procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
        for proc in reversed(self._procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
        self._procs.clear()

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
