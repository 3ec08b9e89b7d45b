"""A driver JVM that runs out of heap exits at once, and the engine starts a new session in its place.

In a subprocess: the test session's shared SparkSession must not be the one that dies.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

SCRIPT = r"""
import time
from lmstream_kit.engine.adapter import SparkEngine

engine = SparkEngine(master="local[1]", conf={"spark.driver.memory": "512m"}).open()
first = engine.driver_pid()
assert engine.jvm_exited() is None
try:  # a list of 3 GB in a 512 MB heap
    engine.spark.sql("SELECT collect_list(repeat('x', 1000)) FROM range(0, 3000000)").collect()
    raise SystemExit("the query did not run out of heap")
except Exception as exc:
    print("FAILED", type(exc).__name__)
deadline = time.monotonic() + 30
while engine.jvm_exited() is None and time.monotonic() < deadline:
    time.sleep(0.1)
print("EXITED", engine.jvm_exited())
print("WHY", engine.restart())
assert engine.driver_pid() not in (None, first) and engine.jvm_exited() is None
print("COUNT", engine.spark.range(7).count())
engine.close()
"""


def run_script(script: str) -> subprocess.CompletedProcess:
    """``script`` in a new Python process (its own JVMs), which must succeed."""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def said(proc: subprocess.CompletedProcess, prefix: str) -> str:
    """What the script printed after ``prefix`` on its first line that starts so."""
    return next(line for line in proc.stdout.splitlines() if line.startswith(prefix + " "))[len(prefix) + 1:]


def test_a_driver_out_of_heap_exits_and_the_engine_restarts_on_a_new_jvm():
    proc = run_script(SCRIPT)
    # without -XX:+ExitOnOutOfMemoryError the JVM would stay, collecting, and the query hang
    assert "Terminating due to java.lang.OutOfMemoryError" in proc.stdout + proc.stderr
    exited = said(proc, "EXITED")
    assert "Spark's JVM exited (pid" in exited and "out of memory" in exited
    assert said(proc, "WHY") == exited
    assert "COUNT 7" in proc.stdout.splitlines()


LOST = r"""
import time
from lmstream_kit.engine.adapter import SparkEngine

engine = SparkEngine(master="local[1]").open()
first = engine.driver_pid()
assert engine.session_lost() is None
# a context stopped while its JVM runs on: no exit comes, so the engine kills that JVM for a new one
engine.spark.sparkContext._jsc.sc().stop()
print("STOPPED", engine.session_lost(wait_s=2.0))
print("CODE1", engine.jvm_exit_code())
engine.restart()
second = engine.driver_pid()
assert second not in (None, first) and engine.session_lost() is None
# Spark's own exit, as an executor that lost its heartbeat to the driver makes it (System.exit(56))
try:
    engine.spark.sparkContext._jvm.java.lang.System.exit(56)
except Exception as exc:
    print("EXIT CALL", type(exc).__name__)
print("LOST", engine.session_lost(wait_s=60.0))
print("CODE2", engine.jvm_exit_code())
engine.restart()
assert engine.driver_pid() not in (None, first, second)
print("COUNT", engine.spark.range(5).count())
engine.close()
"""


def test_a_session_spark_stopped_or_exited_is_lost_with_its_reason_and_restarts():
    proc = run_script(LOST)
    assert said(proc, "STOPPED").startswith("Spark stopped its context and its JVM (pid ")
    assert said(proc, "STOPPED").endswith("did not exit within 2 s: killed, for a new session")
    assert said(proc, "CODE1") == "-9"
    assert said(proc, "LOST").startswith("Spark's JVM exited (pid ") and "lost its heartbeat" in said(proc, "LOST")
    assert said(proc, "CODE2") == "56"
    assert "COUNT 5" in proc.stdout.splitlines()


HUNG = r"""
import os, signal, sys, time
from pathlib import Path
from lmstream_kit.engine.adapter import SparkEngine
from lmstream_kit.bench.config import BenchConfig
from lmstream_kit.bench.run import _Runner

out = Path(sys.argv[1])
engine = SparkEngine(master="local[1]").open()
first = engine.jvm_pid


frozen = []


class QuickRunner(_Runner):  # the test's deadlines in seconds, not minutes
    START_SLACK_S = STOP_SLACK_S = 4.0

    def feed_wait_s(self, duration_s):
        return 30.0

    def _watchdog(self):
        dog = super()._watchdog()
        arm = dog.arm

        def arm_then_freeze(seconds, what):  # once the feed ended, the JVM answers no more calls, as one
            arm(seconds, what)               # collecting a full heap over and over does
            if what != "start and feed":
                os.kill(first, signal.SIGSTOP)
                frozen.append(time.monotonic())
                print("FROZEN", flush=True)

        dog.arm = arm_then_freeze
        return dog


runner = QuickRunner(BenchConfig(queries=["LR1S"], policies=["asap"], rate=500, speedup=2.0), out, engine.spark,
                     None, engine=engine)
metrics = out / "hang" / "metrics.jsonl"
try:
    runner.run("LR1S", "asap", "constant", rate=500, seed=0, duration_s=8.0, run_dir=out / "hang", catch_up_s=1.0)
    raise SystemExit("the run returned")
except Exception as exc:
    print("RAISED", type(exc).__name__, exc)
print("AFTER", round(time.monotonic() - frozen[0]))
print("RECOVER", runner.recover())
assert engine.jvm_pid not in (None, first) and engine.session_lost() is None and runner.spark is engine.spark
print("BATCHES", sum('"batch_id"' in line for line in metrics.read_text().splitlines()))
print("COUNT", engine.spark.range(3).count())
engine.close()
"""


def test_a_bench_run_whose_jvm_answers_no_more_is_killed_by_its_watchdog_and_the_next_runs_on_a_new_one(tmp_path):
    proc = subprocess.run([sys.executable, "-c", HUNG, str(tmp_path)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "FROZEN" in proc.stdout.splitlines()
    raised = said(proc, "RAISED")
    assert re.fullmatch(r"EngineError the run's catch-up and stop outlived its timeouts: Spark's JVM \(pid \d+\) "
                        r"answered no call, as one collecting a full heap over and over does, and was killed",
                        raised), raised
    # from the freeze: the catch-up's 1 s and the stop's slack of 4 s, not the 10 minutes a frozen stop waited
    # (counted from the freeze, not the run's start, whose Spark start-up a busy machine stretches)
    assert int(said(proc, "AFTER")) < 30
    assert said(proc, "RECOVER") == raised[len("EngineError "):]
    assert int(said(proc, "BATCHES")) >= 1  # what ran before is kept
    assert "COUNT 3" in proc.stdout.splitlines()
