"""CPU seconds a run costs, read from the operating system.

A :class:`CpuMeter` splits the CPU (user + system seconds) of one machine's
share of a Spark stream into three parts:

``jvm_s``
    The driver JVM's own user + system time, all its threads included. Its
    ``children_*`` fields are *not* counted here.
``workers_s``
    Every process that descends from the JVM: the ``pyspark.daemon``, the
    Python workers it forks, and the Python data-source runners. For every
    live descendant it adds user + system + children_user + children_system,
    plus the JVM's own children_user + children_system. The children fields
    hold the CPU of processes that already exited and were reaped: the
    daemon reaps its forked workers, so their time lands in the daemon's
    children fields, and a reaped daemon's (with its own children fields) in
    the JVM's. The sum therefore only grows while the tree works.
``kit_s``
    The kit's own Python process (by default the calling one): user + system,
    without its children fields. When PySpark launched the JVM the JVM is a
    child of this process, and its time must not be counted twice. If the
    kit process happens to be a JVM descendant it is left out of
    ``workers_s`` for the same reason.

Processes that vanish between listing and reading (``NoSuchProcess``,
``AccessDenied``, ``ZombieProcess``) are skipped silently. A descendant that
vanishes mid-sample may have been reaped after its parent was read, so the
pass is read again (at most three times). The tree is listed before the JVM
is read and then read parents first, so a process reaped during the pass is
either missed and retried or counted once, never twice.

``jvm_pid=None`` (for example a remote cluster whose driver is not on this
machine) gives ``jvm_s = workers_s = nan``; so does a JVM that has exited.
``total_s`` is then ``nan`` as well: an unknown part makes the total unknown.

Limitations
-----------
- Executors of a standalone cluster run in other processes (or on other
  machines) that do not descend from the driver JVM; they are not counted.
- CPU of a descendant that exits and is never reaped by a process of the
  tree (for example one whose parent died first, so it was re-parented to
  init) is lost.
- The kernel reports times in clock ticks (usually 10 ms).

Examples
--------
>>> import os
>>> meter = CpuMeter(jvm_pid=None, kit_pid=os.getpid())
>>> meter.start().jvm_s
nan
>>> delta = meter.stop()
>>> delta.kit_s >= 0.0
True
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass

import psutil

from .exceptions import ConfigError

__all__ = ["CpuMeter", "CpuSample"]

_NAN = float("nan")
_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)
#: passes of one sample when a listed descendant vanishes while it is read
_ATTEMPTS = 3


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds (user + system) read at one moment, or the difference of two readings.

    Parameters
    ----------
    jvm_s : float
        The driver JVM's own CPU seconds (``nan`` when it is not local).
    workers_s : float
        CPU seconds of the JVM's descendant processes, live and reaped.
    kit_s : float
        The kit process's own CPU seconds.
    at : float
        ``time.monotonic()`` when read; in a difference, the elapsed seconds.
    """

    jvm_s: float
    workers_s: float
    kit_s: float
    at: float

    @property
    def total_s(self) -> float:
        """Sum of the three parts (``nan`` if any part is unknown)."""
        return self.jvm_s + self.workers_s + self.kit_s

    def __sub__(self, other: CpuSample) -> CpuSample:
        if not isinstance(other, CpuSample):
            return NotImplemented
        return CpuSample(
            jvm_s=self.jvm_s - other.jvm_s,
            workers_s=self.workers_s - other.workers_s,
            kit_s=self.kit_s - other.kit_s,
            at=self.at - other.at,
        )

    def to_dict(self) -> dict[str, float]:
        """The fields plus ``total_s``, as a plain dict (for JSON records)."""
        out = dataclasses.asdict(self)
        out["total_s"] = self.total_s
        return out

    def per_million_rows(self, rows: int) -> dict[str, float]:
        """CPU seconds per million rows of each part and of the total.

        Meant for a difference of two samples. ``rows <= 0`` gives ``nan``.

        >>> CpuSample(1.0, 0.5, 0.5, 3.0).per_million_rows(2_000_000)["total_s"]
        1.0
        """
        scale = 1e6 / rows if rows > 0 else _NAN
        return {
            "jvm_s": self.jvm_s * scale,
            "workers_s": self.workers_s * scale,
            "kit_s": self.kit_s * scale,
            "total_s": self.total_s * scale,
        }


def _own(times) -> float:
    return times.user + times.system


def _reaped(times) -> float:
    return times.children_user + times.children_system


class CpuMeter:
    """Read the CPU of a driver JVM, its descendant processes and the kit process.

    Parameters
    ----------
    jvm_pid : int or None
        OS pid of the driver JVM (see ``lmstream_kit.engine.procs.driver_jvm_pid``);
        ``None`` when the driver is not on this machine.
    kit_pid : int, optional
        The kit's own process; the calling process by default.

    Raises
    ------
    ConfigError
        When a pid given names no process.

    Examples
    --------
    >>> meter = CpuMeter(jvm_pid=None)
    >>> _ = meter.start()
    >>> _ = sum(range(100_000))
    >>> delta = meter.stop()
    >>> delta.kit_s >= 0.0, delta.workers_s
    (True, nan)
    """

    def __init__(self, jvm_pid: int | None, kit_pid: int | None = None) -> None:
        # Holding the Process objects guards against pid reuse: psutil
        # checks the creation time before each read.
        self._jvm = None if jvm_pid is None else self._process(jvm_pid, "jvm_pid")
        self._kit = self._process(os.getpid() if kit_pid is None else kit_pid, "kit_pid")
        self._start: CpuSample | None = None

    @staticmethod
    def _process(pid: int, what: str) -> psutil.Process:
        try:
            return psutil.Process(int(pid))
        except (psutil.NoSuchProcess, ValueError, TypeError) as exc:
            raise ConfigError(f"{what}={pid!r} names no running process") from exc

    @property
    def jvm_pid(self) -> int | None:
        """The JVM's pid, or None."""
        return None if self._jvm is None else self._jvm.pid

    @property
    def kit_pid(self) -> int:
        """The kit process's pid."""
        return self._kit.pid

    def sample(self) -> CpuSample:
        """Read the three parts now.

        Returns
        -------
        CpuSample
            Cumulative CPU seconds since each process started.
        """
        jvm_s, workers_s = self._read_tree()
        try:
            kit_s = _own(self._kit.cpu_times())
        except _GONE:
            kit_s = _NAN
        return CpuSample(jvm_s=jvm_s, workers_s=workers_s, kit_s=kit_s, at=time.monotonic())

    def _read_tree(self) -> tuple[float, float]:
        if self._jvm is None:
            return _NAN, _NAN
        for attempt in range(_ATTEMPTS):
            try:
                # List first, then read the JVM: a descendant reaped by the JVM
                # in between is then a vanished listed process (retried), not
                # a silent miss.
                tree = self._jvm.children(recursive=True)
                jvm = self._jvm.cpu_times()
            except _GONE:
                return _NAN, _NAN
            workers_s = _reaped(jvm)
            vanished = False
            # psutil lists every parent before its children: reading top-down,
            # a process reaped during the pass is missed (and retried), never
            # counted both live and in its parent's children fields.
            for proc in tree:
                if proc.pid == self._kit.pid:
                    continue
                try:
                    t = proc.cpu_times()
                except _GONE:
                    vanished = True
                    continue
                workers_s += _own(t) + _reaped(t)
            if not vanished or attempt == _ATTEMPTS - 1:
                return _own(jvm), workers_s
        raise AssertionError("unreachable")  # pragma: no cover

    def start(self) -> CpuSample:
        """Take and keep the baseline sample for :meth:`stop`."""
        self._start = self.sample()
        return self._start

    def stop(self) -> CpuSample:
        """CPU spent since :meth:`start`, as a difference sample.

        Raises
        ------
        RuntimeError
            When :meth:`start` was not called first.
        """
        if self._start is None:
            raise RuntimeError("CpuMeter.stop() called before start()")
        delta = self.sample() - self._start
        self._start = None
        return delta

    def __repr__(self) -> str:
        return f"CpuMeter(jvm_pid={self.jvm_pid!r}, kit_pid={self.kit_pid!r})"
