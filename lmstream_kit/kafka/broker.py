"""A single-node Apache Kafka broker on 127.0.0.1, in KRaft mode, from its jars on Maven Central.

For development, tests and demos: one JVM process that is both the broker and its own controller
(no ZooKeeper), with its data and logs in one directory.  The jars come from
:func:`lmstream_kit.jars.resolve` (``"kafka"``); the process is stopped by pid.

>>> with KafkaBroker() as broker:   # doctest: +SKIP
...     print(broker.bootstrap)      # 127.0.0.1:<port>, for producers, consumers and the kit's source
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from ..exceptions import ConfigError, KitError
from ..jars import classpath, find_java

__all__ = ["KafkaBroker"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_cluster_id(raw: bytes | None = None) -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64 without padding, as Kafka's own
    ``Uuid.randomUuid`` makes it, and like it never starting with ``-`` (the storage tool would
    read that as an option).

    >>> new_cluster_id(bytes(16))
    'AAAAAAAAAAAAAAAAAAAAAA'
    >>> new_cluster_id(b"\\xf8" + bytes(15)).startswith("-")
    False
    """
    while True:
        cid = base64.urlsafe_b64encode(raw if raw is not None else uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid
        raw = None  # a fresh random one


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class KafkaBroker:
    """Start a KRaft broker on 127.0.0.1; stop it by pid.

    Parameters
    ----------
    port : int, optional
        The client port (default, or 0: a free one).  The controller listens on another free port.
    data_dir : path, optional
        Its storage, its configuration and its log (default: a new temporary directory, removed
        by :meth:`stop`).  A directory formatted by an earlier broker is started again as it is, so
        its topics and offsets are kept across restarts.
    heap : str
        The JVM's maximum heap (``-Xmx``).
    """

    def __init__(self, port: int | None = None, data_dir: str | Path | None = None, heap: str = "512m") -> None:
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536):
            raise ConfigError(f"port must be an integer between 0 (a free one) and 65535, got {port!r}")
        self.port = port or None
        self.heap = heap
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.proc: subprocess.Popen | None = None
        self.controller_port: int | None = None

    # ------------------------------------------------------------------ what clients use
    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT``: the ``bootstrap.servers`` of producers and consumers."""
        if self.port is None:
            raise KitError("the broker has not started")
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    # ------------------------------------------------------------------ files
    def _write_config(self) -> Path:
        props = self.data_dir / "server.properties"
        lines = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
        }
        props.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        log4j = self.data_dir / "log4j2.properties"
        log4j.write_text(
            "status = warn\n"
            "appender.file.type = File\n"
            "appender.file.name = FILE\n"
            f"appender.file.fileName = {self.log_file}\n"
            "appender.file.layout.type = PatternLayout\n"
            "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = INFO\n"
            "rootLogger.appenderRef.file.ref = FILE\n"
            "logger.kafka.name = org.apache.kafka\n"
            "logger.kafka.level = WARN\n"
        )
        return props

    def _java(self, main: str, *args: str, **popen) -> list[str]:
        return [find_java(), f"-Xmx{self.heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
                "-cp", classpath("kafka"), main, *args]

    def _saved_ports(self) -> tuple[int, int] | None:
        saved = self.data_dir / "ports"
        if not saved.is_file():
            return None
        client, controller = saved.read_text().split()
        return int(client), int(controller)

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout_s: float = 90.0) -> KafkaBroker:
        """Format the storage (the first time), start the broker and wait until it accepts clients."""
        if self.proc is not None:
            raise KitError(f"the broker is running already ({self.bootstrap})")
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="lmstream-kafka-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        saved = self._saved_ports()
        if saved is not None:  # a directory formatted before: its listeners stay where they were
            if self.port is not None and self.port != saved[0]:
                raise ConfigError(f"{self.data_dir} belongs to a broker on port {saved[0]}, not {self.port}")
            self.port, self.controller_port = saved
        else:
            self.port = self.port or _free_port()
            self.controller_port = _free_port()
        if _port_open(self.port):
            raise KitError(f"port {self.port} is in use: is a broker running already? (data: {self.data_dir})")
        props = self._write_config()
        if not (self.data_dir / "data" / "meta.properties").is_file():
            cluster_id = new_cluster_id()
            fmt = subprocess.run(self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)),
                                 capture_output=True, text=True)
            if fmt.returncode != 0:
                tail = (fmt.stderr or fmt.stdout).strip().splitlines()[-1:] or [f"exit {fmt.returncode}"]
                raise KitError(f"formatting the broker's storage failed: {tail[0]}")
            (self.data_dir / "ports").write_text(f"{self.port} {self.controller_port}\n")
        log = open(self.data_dir / "broker.out", "ab")
        try:
            self.proc = subprocess.Popen(self._java("kafka.Kafka", str(props)), stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        finally:
            log.close()
        (self.data_dir / "broker.pid").write_text(f"{self.proc.pid}\n")
        deadline = time.monotonic() + timeout_s
        try:
            while not _port_open(self.port):
                if self.proc.poll() is not None:
                    code = self.proc.returncode
                    self.proc = None
                    raise KitError(f"the Kafka broker exited with {code}: {self._last_error()}")
                if time.monotonic() > deadline:
                    raise KitError(f"the Kafka broker did not open port {self.port} within {timeout_s:g} s "
                                   f"(log: {self.log_file})")
                time.sleep(0.2)
        except BaseException:  # a timeout, or Ctrl-C while it starts: the process goes too, never left behind
            self.stop()
            raise
        return self

    def _last_error(self) -> str:
        for path in (self.log_file, self.data_dir / "broker.out"):
            if path.is_file():
                lines = [ln for ln in path.read_text(errors="replace").splitlines() if "ERROR" in ln or "Exception" in ln]
                if lines:
                    return lines[-1].strip()[:300]
        return f"see {self.log_file}"

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after ``timeout_s``); a temporary directory goes too."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            except ProcessLookupError:
                pass
        if self.data_dir is not None:
            (self.data_dir / "broker.pid").unlink(missing_ok=True)
            if self._own_dir:
                import shutil

                shutil.rmtree(self.data_dir, ignore_errors=True)
                self.data_dir = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
