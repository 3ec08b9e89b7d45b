"""The OS processes behind a SparkSession, for CPU accounting.

The driver JVM is asked for its own pid through py4j, then the answer is
checked against the local process table: a py4j gateway may belong to a JVM
on another machine, whose pid means nothing here.

>>> meter = driver_cpu_meter(spark)            # doctest: +SKIP
>>> meter.start(); run(); meter.stop().to_dict()  # doctest: +SKIP
"""

from __future__ import annotations

import os

import psutil

from ..cpu import CpuMeter

__all__ = ["driver_cpu_meter", "driver_jvm_pid"]


def _looks_like_java(proc: psutil.Process) -> bool:
    names = [proc.name()]
    try:
        names.append(os.path.basename(proc.exe()))
    except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
        pass
    return any(n.lower().startswith("java") for n in names if n)


def driver_jvm_pid(spark) -> int | None:
    """OS pid of the driver JVM of ``spark``, or None when it is not a local process.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        A classic session. Spark Connect sessions have no ``sparkContext``
        (no JVM on this side) and give None.

    Returns
    -------
    int or None
        The pid, when the JVM reports it through py4j
        (``java.lang.ProcessHandle.current().pid()``) and a local process with
        that pid exists and is a ``java`` executable. None when the JVM cannot
        be asked, or the pid names no local process or one that is not java
        (a remote gateway). If the local process cannot be inspected
        (access denied) the JVM's answer is trusted.
    """
    try:
        jvm = spark.sparkContext._jvm
        pid = int(jvm.java.lang.ProcessHandle.current().pid())
    # Connect sessions raise PySparkNotImplementedError, a stopped context an
    # AttributeError, a dead gateway a Py4JError: each means "no local JVM".
    except Exception:  # noqa: BLE001
        return None
    try:
        proc = psutil.Process(pid)
        if not _looks_like_java(proc):
            return None
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        pass
    return pid


def driver_cpu_meter(spark, kit_pid: int | None = None) -> CpuMeter:
    """A :class:`~lmstream_kit.cpu.CpuMeter` on the driver JVM of ``spark``.

    The JVM and worker parts read ``nan`` when the driver is not local.
    """
    return CpuMeter(driver_jvm_pid(spark), kit_pid=kit_pid)
