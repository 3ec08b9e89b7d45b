"""A full disk holds admission instead of failing the stream: nothing is lost, it goes on when space returns.

When the run directory's or the spool's filesystem fills mid-run, a batch that writes its
output, its metrics or Spark's checkpoint fails, and the feed cannot spool what arrives.
:class:`DiskGuard` watches the free space of those filesystems and holds admission
(:meth:`~lmstream_kit.protocol.BatchController.admission_held`) while it is below
``min_free_bytes``, so the batch in flight still has room to finish and no new one starts.
The data waits in the spool (or, where the spool is full too, the feed waits: the generator
makes the same rows again for the second it could not write; an ingested file stays in the
inbox).  When space returns, admission goes on by itself.

>>> free = {"/run": 5 * 2**20}
>>> guard = DiskGuard(min_free_bytes=64 * 2**20, paths=["/run"], free_bytes=free.get, clock=iter(range(100)).__next__)
>>> guard.admission_held()
'disk full: 5.0 MiB free on /run (admission waits for 64.0 MiB; nothing is lost)'
>>> free["/run"] = 2**30
>>> guard.admission_held() is None
True
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .protocol import BATCH, BatchController, Param
from .units import format_bytes

__all__ = ["DEFAULT_MIN_FREE", "DiskGuard", "is_disk_full"]

#: a stream holds admission below this much free disk by default (a batch writes far less)
DEFAULT_MIN_FREE = 64 * 2**20


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the disk is full.

    >>> is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    True
    >>> is_disk_full(RuntimeError("cannot append")), is_disk_full(None)
    (False, False)
    """
    seen = 0
    while exc is not None and seen < 10:
        if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(exc)
        if "No space left on device" in text or "Disk quota exceeded" in text:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _statvfs_free(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return int(st.f_bavail * st.f_frsize)


class DiskGuard(BatchController):
    """Hold admission while a filesystem the stream writes to has less than ``min_free_bytes`` free.

    Parameters
    ----------
    min_free_bytes : int
        Free space below which no batch is admitted (a batch in flight writes its output,
        its record and Spark's checkpoint into it).
    paths : iterable of path, optional
        The directories to watch; by default the stream's run directory and its spool.
    check_every_s : float
        Free space is read at most this often (Spark asks for the next batch many times a second).
    free_bytes, clock : callable
        How free space and time are read (tests pass their own).
    """

    prefix = "disk"
    change_phase = BATCH
    drawn = False  # housekeeping, not tuning: set_param changes it
    PARAMS = (Param("min_free_bytes", int, low=0, unit="bytes", label="min. free disk",
                    doc="admission waits while a filesystem the stream writes to has less free space"),)
    FIELDS = {"disk_free_bytes": "the least free space among the filesystems the stream writes to, "
                                 "after the batch (bytes)"}

    def __init__(self, *, min_free_bytes: int = DEFAULT_MIN_FREE, paths: Iterable[Any] | None = None,
                 check_every_s: float = 0.5, free_bytes: Callable[[str], int | None] = _statvfs_free,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.min_free_bytes = self.param("min_free_bytes").validate(min_free_bytes, label="disk.min_free_bytes")
        self._paths = None if paths is None else [str(p) for p in paths]
        self._every = float(check_every_s)
        self._free_bytes = free_bytes
        self._clock = clock
        self._host: Any = None
        self._checked_at: float | None = None
        self._held: str | None = None
        #: how often admission was held (a hold that lasts counts once), and the last reason
        self.holds = 0
        self.last_reason: str | None = None

    def plugged(self, host: Any) -> None:
        self._host = host

    def paths(self) -> list[str]:
        """The directories watched: those given, or the stream's run directory and local spool."""
        if self._paths is not None:
            return self._paths
        out = []
        run_dir = getattr(self._host, "run_dir", None)
        if run_dir is not None:
            out.append(str(run_dir))
        spool = getattr(self._host, "spool", None)
        if spool is not None and getattr(spool, "uri", "").startswith("/"):
            out.append(str(spool.root))
        return out

    def least_free(self) -> tuple[int | None, str | None]:
        """The least free space among the watched filesystems, and where."""
        least, where = None, None
        for path in self.paths():
            probe = path
            while probe and not Path(probe).exists():  # a directory not made yet: its parent's disk
                parent = str(Path(probe).parent)
                probe = None if parent == probe else parent
            free = self._free_bytes(probe) if probe else None
            if free is not None and (least is None or free < least):
                least, where = free, path
        return least, where

    def admission_held(self) -> str | None:
        now = self._clock()
        if self._checked_at is not None and now - self._checked_at < self._every:
            return self._held
        self._checked_at = now
        free, where = self.least_free()
        held = None
        if free is not None and free < self.min_free_bytes:
            held = (f"disk full: {format_bytes(free)} free on {where} (admission waits for "
                    f"{format_bytes(self.min_free_bytes)}; nothing is lost)")
            if self._held is None:
                self.holds += 1
            self.last_reason = held
        self._held = held
        return held

    def after_batch(self, record: Any) -> dict | None:
        free, _ = self.least_free()
        return None if free is None else {"disk_free_bytes": int(free)}
