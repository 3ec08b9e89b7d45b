"""Every stop is a clean stop: real signals to real commands (Spark's JVM, a standalone cluster).

SIGTERM and SIGHUP, to the command alone or to its whole process group, and Ctrl-C during
Spark's start-up: the command stops as it does on Ctrl-C, prints no traceback, and leaves no
child process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[1]


def _start(args, tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "lmstream_kit", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, env=env, start_new_session=True)


def _descendants(proc, seen: set) -> set:
    try:
        seen.update(c.pid for c in psutil.Process(proc.pid).children(recursive=True))
    except psutil.NoSuchProcess:
        pass
    return seen


def _wait_for(proc, seen: set, until, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        _descendants(proc, seen)
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the command ended before {what}: {proc.returncode}\n{out[-2000:]}\n{err[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {what} within {timeout:.0f} s")
        time.sleep(0.2)


def _alive(pids: set) -> list:
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append((pid, " ".join(p.cmdline())[:120]))
        except psutil.NoSuchProcess:
            pass
    return out


def _assert_no_child_left(pids: set) -> None:
    deadline = time.monotonic() + 15  # the JVM exits on its own once the driver's Python is gone
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(pids) == [], "a child outlived the command"


def _assert_clean(out: str, err: str) -> None:
    for marker in ("Traceback", "Exception", "ERROR"):
        assert marker not in out + err, (out + err)[-3000:]


def _batches(run: Path) -> int:
    path = run / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize("sig, group", [(signal.SIGTERM, False), (signal.SIGHUP, True)])
def test_a_stop_signal_stops_run_as_cleanly_as_ctrl_c(tmp_path, sig, group):
    run = tmp_path / "run"
    proc = _start(["run", "--workload", "PASSTHROUGH", "--duration", "600", "--speedup", "4", "--out", str(run)],
                  tmp_path)
    seen: set = set()
    try:
        _wait_for(proc, seen, lambda: _batches(run) >= 3, 180, "third batch")
        _descendants(proc, seen)
        assert any("java" in cmd for _, cmd in _alive(seen)), "the JVM is a child of the command"
        if group:  # as systemd and a closed terminal do: the JVM gets it too, and must not die first
            os.killpg(proc.pid, sig)
        else:  # as `kill PID` and `timeout` do
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, (out[-2000:], err[-2000:])
    assert f"{signal.Signals(sig).name}: stopping cleanly" in out
    _assert_clean(out, err)
    _assert_no_child_left(seen)
    info = json.loads((run / "run.json").read_text())
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert info["stopped_at"] and info["rows_processed"] == sum(r["rows"] for r in records) > 0


def test_ctrl_c_during_sparks_start_up_waits_for_it_and_leaves_no_jvm(tmp_path):
    run = tmp_path / "early"
    proc = _start(["run", "--workload", "LR2S", "--duration", "600", "--out", str(run)], tmp_path)
    seen: set = set()
    try:
        _wait_for(proc, seen, lambda: proc.stdout.readline().startswith("starting Spark"), 120, "start-up")
        time.sleep(1.0)  # the JVM is being launched
        _descendants(proc, seen)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, (out[-2000:], err[-2000:])
    assert "SIGINT: stopping once Spark has started" in out and "stopping cleanly" in out
    _assert_clean(out, err)
    _assert_no_child_left(seen)


@pytest.mark.cluster
def test_sigterm_stops_the_standalone_cluster_and_its_jvms(tmp_path):
    proc = _start(["cluster", "--workers", "1", "--cores", "1", "--memory", "512m"], tmp_path)
    seen: set = set()
    try:
        _wait_for(proc, seen, lambda: proc.stdout.readline().startswith("master: spark://"), 180, "ready line")
        time.sleep(1.0)
        _descendants(proc, seen)
        assert sum("java" in cmd for _, cmd in _alive(seen)) >= 2, _alive(seen)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, (out[-2000:], err[-2000:])
    assert "stopping" in out
    _assert_clean(out, err)
    _assert_no_child_left(seen)


def test_a_jvm_killed_under_a_running_stream_is_one_line(tmp_path):
    run = tmp_path / "jvm"
    proc = _start(["run", "--duration", "600", "--speedup", "4", "--out", str(run)], tmp_path)
    seen: set = set()
    try:
        _wait_for(proc, seen, lambda: _batches(run) >= 2, 180, "second batch")
        _descendants(proc, seen)
        [jvm] = [pid for pid, cmd in _alive(seen) if cmd.startswith("/") and "java" in cmd.split()[0]]
        os.kill(jvm, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 2, (out[-2000:], err[-2000:])
    assert "Traceback" not in out + err and "Exception" not in out + err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith(f"error: Spark's JVM exited (pid {jvm})"), err[-2000:]
    _assert_no_child_left(seen)
