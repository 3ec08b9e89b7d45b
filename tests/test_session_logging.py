"""What a session started the kit's way prints: nothing of Spark's start-up chatter (one JVM start)."""

from __future__ import annotations

import subprocess
import sys

import pytest

START = """
from lmstream_kit.engine.session import build_session
spark = build_session(master="local[1]")
print("session", spark.version, flush=True)
args = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
print("heap", [str(a) for a in args if str(a).startswith(("-Xms", "-Xmx"))], flush=True)
spark.stop()
"""


@pytest.mark.spark
def test_a_kit_session_starts_without_spark_log_level_lines(tmp_path):
    # a subprocess, because the lines come from the JVM's start, which the test session did long ago
    proc = subprocess.run([sys.executable, "-c", START], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "session " in proc.stdout, out[-3000:]
    # the heap starts at its maximum (Spark's 1g): no full collections to grow it
    assert "heap ['-Xms1g', '-Xmx1g']" in proc.stdout or "heap ['-Xmx1g', '-Xms1g']" in proc.stdout, proc.stdout
    for line in ("Setting default log level", "To adjust logging level", "Using Spark's default log4j profile"):
        assert line not in out, out[-3000:]


def test_the_drivers_collector_is_the_parallel_one_unless_the_caller_names_another(monkeypatch):
    from lmstream_kit.engine.session import driver_java_options

    monkeypatch.delenv("LMSTREAM_DRIVER_JAVA_OPTIONS", raising=False)
    default = driver_java_options().split()
    assert default[:3] == ["-Xss16m", "-XX:+UseParallelGC", "-XX:+ExitOnOutOfMemoryError"]
    assert default[3].startswith("-Dlog4j2.configurationFile=")
    given = driver_java_options("-XX:+UseSerialGC -XX:TieredStopAtLevel=1").split()
    assert "-XX:+UseParallelGC" not in given and given[-2:] == ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    assert driver_java_options("-Xmx2g").split()[1] == "-XX:+UseParallelGC"  # no collector named: the kit's


def test_the_drivers_heap_starts_at_its_maximum_unless_the_caller_sizes_it(monkeypatch):
    from lmstream_kit.engine.session import driver_java_options

    monkeypatch.delenv("LMSTREAM_DRIVER_JAVA_OPTIONS", raising=False)
    assert driver_java_options(memory="4g").split()[3] == "-Xms4g"
    assert "-Xms4g" not in driver_java_options("-Xms512m", memory="4g").split()
    assert not [o for o in driver_java_options(memory="lots").split() if o.startswith("-Xms")]
    assert not [o for o in driver_java_options().split() if o.startswith("-Xms")]


def test_the_environments_driver_options_come_before_the_callers(monkeypatch):
    from lmstream_kit.engine.session import driver_java_options

    monkeypatch.setenv("LMSTREAM_DRIVER_JAVA_OPTIONS", " -XX:TieredStopAtLevel=1 ")
    assert driver_java_options("-Xmx2g").split()[-2:] == ["-XX:TieredStopAtLevel=1", "-Xmx2g"]
    assert driver_java_options().split()[-1] == "-XX:TieredStopAtLevel=1"
    monkeypatch.setenv("LMSTREAM_DRIVER_JAVA_OPTIONS", "-XX:+UseSerialGC")  # a collector there wins too
    assert "-XX:+UseParallelGC" not in driver_java_options().split()
    monkeypatch.setenv("LMSTREAM_DRIVER_JAVA_OPTIONS", "-Xshare:off")  # and so does its own sharing
    assert not [o for o in driver_java_options().split() if "SharedArchiveFile" in o]
