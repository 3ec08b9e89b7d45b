"""CPU accounting: where the CPU of a real process tree lands.

The pure tests stand a plain Python process in for the driver JVM and give it
descendants that burn a known amount of CPU (``time.process_time`` loops, so
the amount does not depend on how busy the machine is).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from types import SimpleNamespace

import psutil
import pytest

from lmstream_kit.cpu import CpuMeter, CpuSample
from lmstream_kit.exceptions import ConfigError

# One node of a process tree, driven by a JSON spec:
#   {"burn": s, "child": spec or null, "reap_child": bool}
# It starts its child (if any) and waits until the child is ready; with
# "reap_child" it then makes the child exit and reaps it. It then burns
# "burn" CPU seconds, prints "ready", and waits for EOF on stdin before exiting
# (closing a live child's stdin and reaping it first).
_NODE = r"""
import json, subprocess, sys, time
spec = json.loads(sys.argv[1])
child = None
if spec.get("child"):
    child = subprocess.Popen([sys.executable, "-c", sys.argv[2], json.dumps(spec["child"]), sys.argv[2]],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    if spec.get("reap_child"):
        child.stdin.close()
        child.wait()
end = time.process_time() + spec.get("burn", 0.0)
while time.process_time() < end:
    pass
print("ready", flush=True)
sys.stdin.read()
if child is not None and child.poll() is None:
    child.stdin.close()
    child.wait()
"""


class Tree:
    """A running process tree built from a ``_NODE`` spec; ready when constructed."""

    def __init__(self, spec: dict) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _NODE, json.dumps(spec), _NODE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline().strip()
        assert line == "ready", f"tree did not start (got {line!r}, rc={self.proc.poll()})"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def close(self) -> None:
        """Let the whole tree exit and reap its root."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture
def tree():
    trees: list[Tree] = []

    def make(spec: dict) -> Tree:
        trees.append(Tree(spec))
        return trees[-1]

    yield make
    for t in trees:
        t.close()


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


# Python's own start-up costs a few tens of ms per process.
STARTUP_S = 0.2


@pytest.mark.timeout(60)
def test_live_descendant_cpu_lands_in_workers_not_jvm(tree):
    t = tree({"burn": 0.0, "child": {"burn": 0.5}})
    child = psutil.Process(t.pid).children()
    assert len(child) == 1 and child[0].is_running()  # still alive: counted as a live descendant

    s = CpuMeter(jvm_pid=t.pid).sample()

    assert 0.45 <= s.workers_s < 0.5 + STARTUP_S
    assert s.jvm_s < STARTUP_S


@pytest.mark.timeout(60)
def test_reaped_child_cpu_lands_in_workers_and_parent_cpu_in_jvm(tree):
    t = tree({"burn": 0.3, "child": {"burn": 0.6}, "reap_child": True})
    assert psutil.Process(t.pid).children() == []  # the child is gone: only the children fields hold it

    s = CpuMeter(jvm_pid=t.pid).sample()

    assert 0.55 <= s.workers_s < 0.6 + STARTUP_S
    assert 0.25 <= s.jvm_s < 0.3 + STARTUP_S
    assert s.total_s == pytest.approx(s.jvm_s + s.workers_s + s.kit_s)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("reaped", [False, True], ids=["grandchild-alive", "grandchild-reaped"])
def test_grandchild_cpu_lands_in_workers_alive_or_reaped_by_a_live_middle(tree, reaped):
    # root -> middle (alive) -> grandchild (burnt 0.5 s; alive, or exited and reaped by middle)
    t = tree({"burn": 0.0, "child": {"burn": 0.0, "child": {"burn": 0.5}, "reap_child": reaped}})
    (middle,) = psutil.Process(t.pid).children()
    assert len(middle.children()) == (0 if reaped else 1)

    s = CpuMeter(jvm_pid=t.pid).sample()

    assert 0.45 <= s.workers_s < 0.5 + 2 * STARTUP_S
    assert s.jvm_s < STARTUP_S


@pytest.mark.timeout(60)
def test_kit_busy_loop_lands_in_kit_only(tree):
    t = tree({"burn": 0.0, "child": {"burn": 0.0}})  # an idle tree
    meter = CpuMeter(jvm_pid=t.pid)

    meter.start()
    _burn(0.4)
    d = meter.stop()

    assert d.kit_s >= 0.38
    assert d.jvm_s < 0.1
    assert d.workers_s < 0.1
    assert d.at > 0.0


@pytest.mark.timeout(60)
def test_kit_excludes_the_cpu_of_its_reaped_children(tree):
    # The kit is the tree's parent, as the Python driver is the JVM's parent.
    meter = CpuMeter(jvm_pid=None)
    before = meter.sample()
    t = tree({"burn": 0.3, "child": {"burn": 0.4}, "reap_child": True})
    root = CpuMeter(jvm_pid=t.pid).sample()
    t.close()  # the kit reaps the root: ~0.7 s moves into the kit's children fields
    d = meter.sample() - before

    assert root.workers_s >= 0.35 and root.jvm_s >= 0.25  # the tree did burn
    assert d.kit_s < 0.25


@pytest.mark.timeout(60)
def test_kit_inside_the_tree_is_not_counted_as_a_worker(tree):
    t = tree({"burn": 0.0, "child": {"burn": 0.5}})
    (child,) = psutil.Process(t.pid).children()

    as_worker = CpuMeter(jvm_pid=t.pid).sample()
    as_kit = CpuMeter(jvm_pid=t.pid, kit_pid=child.pid).sample()

    assert as_worker.workers_s >= 0.45
    assert as_kit.kit_s >= 0.45
    assert as_kit.workers_s < 0.1


def test_difference_of_samples_subtracts_each_field():
    a = CpuSample(jvm_s=5.0, workers_s=3.0, kit_s=1.5, at=100.0)
    b = CpuSample(jvm_s=2.0, workers_s=1.0, kit_s=0.5, at=90.0)

    d = a - b

    assert d == CpuSample(jvm_s=3.0, workers_s=2.0, kit_s=1.0, at=10.0)
    assert d.total_s == 6.0
    assert d.to_dict() == {"jvm_s": 3.0, "workers_s": 2.0, "kit_s": 1.0, "at": 10.0, "total_s": 6.0}
    assert d.per_million_rows(2_000_000) == {"jvm_s": 1.5, "workers_s": 1.0, "kit_s": 0.5, "total_s": 3.0}
    assert math.isnan(d.per_million_rows(0)["total_s"])


def test_no_jvm_gives_nan_jvm_and_workers_but_reads_the_kit():
    meter = CpuMeter(jvm_pid=None)

    s = meter.sample()

    assert math.isnan(s.jvm_s) and math.isnan(s.workers_s) and math.isnan(s.total_s)
    assert s.kit_s > 0.0
    assert meter.jvm_pid is None


def test_exited_jvm_reads_nan():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    meter = CpuMeter(jvm_pid=proc.pid)
    assert not math.isnan(meter.sample().jvm_s)
    proc.stdin.close()
    proc.wait(timeout=30)

    s = meter.sample()

    assert math.isnan(s.jvm_s) and math.isnan(s.workers_s)


def test_unknown_pid_is_rejected():
    with pytest.raises(ConfigError, match="names no running process"):
        CpuMeter(jvm_pid=2**22 + 12345)


def test_stop_without_start_is_an_error():
    with pytest.raises(RuntimeError, match="before start"):
        CpuMeter(jvm_pid=None).stop()


def _fake_session(pid):
    """An object shaped like a classic SparkSession whose JVM reports ``pid``."""
    handle = SimpleNamespace(pid=lambda: pid)
    lang = SimpleNamespace(ProcessHandle=SimpleNamespace(current=lambda: handle))
    return SimpleNamespace(
        sparkContext=SimpleNamespace(_jvm=SimpleNamespace(java=SimpleNamespace(lang=lang)))
    )


def test_driver_jvm_pid_is_none_without_a_local_java_process():
    from lmstream_kit.engine.procs import driver_jvm_pid

    assert driver_jvm_pid(object()) is None  # no sparkContext, as in Spark Connect
    assert driver_jvm_pid(_fake_session(psutil.Process().pid)) is None  # alive, but python, not java
    assert driver_jvm_pid(_fake_session(2**22 + 12345)) is None  # no such local process


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_spark_job_with_python_udf_costs_jvm_and_worker_cpu(spark):
    from pyspark.sql import functions as F

    from lmstream_kit.engine.procs import driver_cpu_meter, driver_jvm_pid

    pid = driver_jvm_pid(spark)
    assert pid is not None and pid != psutil.Process().pid
    assert psutil.Process(pid).name().lower().startswith("java")

    meter = driver_cpu_meter(spark)
    assert meter.jvm_pid == pid

    @F.udf("long")
    def plus_one(x):
        return x + 1

    meter.start()
    # filter on the UDF's result so the optimizer cannot prune it away
    n = spark.range(200_000, numPartitions=2).select(plus_one("id").alias("v")).where("v % 2 = 0").count()
    d = meter.stop()

    assert n == 100_000
    assert d.jvm_s > 0.0
    assert d.workers_s > 0.0
    assert d.kit_s >= 0.0
