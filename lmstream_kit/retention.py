"""Spool retention: how a stream that runs for days keeps a bounded disk.

A spool keeps every dataset it was given; at 1000 rows/s that is about 7 GB a day.
:class:`SpoolRetention` is a live object plugged into the run loop.  After each batch it
hands a background thread the *floor*: the first spool dataset that a restart from the
checkpoint could still read.  Spark plans batch *N* only once batch *N - 1* is in its
commit log, so when batch *N* completes, everything before *N*'s first dataset is
committed; ``keep_batches`` more batches are kept behind that on top.  The thread then
deletes the data of the datasets before the floor that are older than ``max_age_s`` or
beyond ``max_bytes`` (:func:`release_point`, oldest first), compacts the ingest manifest
(entries of files gone from the inbox) and rotates the dead-letter file.

Nothing a restart could need is ever deleted: the floor never passes the batch that ran
last, whatever the policy says.

>>> release_point([0.0, 10.0, 20.0, 30.0], [100, 100, 100, 100], first_seq=0, floor_seq=3, now=40.0,
...               max_age_s=25.0, max_bytes=None)
2
>>> release_point([0.0, 10.0, 20.0, 30.0], [100, 100, 100, 100], first_seq=0, floor_seq=3, now=40.0,
...               max_age_s=None, max_bytes=150)
3
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .exceptions import ConfigError, one_line
from .protocol import BATCH, BatchController, Param
from .units import parse_bytes, parse_duration

__all__ = ["DEFAULT_RETENTION", "SpoolRetention", "make_retention", "release_point", "retention_from_spec",
           "rotate_dead_letter"]

#: the defaults, documented in the README: committed data older than an hour goes, 100 batches
#: behind the committed offset stay, dead letters rotate at 64 MiB and rotated parts live a week
DEFAULT_RETENTION: Mapping[str, Any] = {
    "max_age_s": 3600.0,
    "max_bytes": None,
    "keep_batches": 100,
    "dead_letter_bytes": 64 * 2**20,
    "dead_letter_age_s": 7 * 86400.0,
}


def release_point(arrivals: Sequence[float], nbytes: Sequence[int], *, first_seq: int, floor_seq: int,
                  now: float, max_age_s: float | None, max_bytes: int | None) -> int:
    """The new first kept dataset: those in ``[first_seq, result)`` may be deleted.

    ``arrivals`` and ``nbytes`` describe the datasets from ``first_seq`` on (the end of
    the spool at least up to ``floor_seq``).  Only datasets before ``floor_seq`` may go,
    oldest first: a dataset goes when it arrived more than ``max_age_s`` before ``now``,
    or while the datasets kept add up to more than ``max_bytes``.  With neither limit
    nothing goes.

    >>> release_point([0.0, 1.0], [5, 5], first_seq=4, floor_seq=6, now=9.0, max_age_s=None, max_bytes=None)
    4
    >>> release_point([0.0, 1.0, 2.0], [5, 5, 5], first_seq=4, floor_seq=5, now=99.0, max_age_s=1.0,
    ...               max_bytes=None)     # the floor holds the second dataset, however old
    5
    """
    if floor_seq <= first_seq or (max_age_s is None and max_bytes is None):
        return first_seq
    kept = int(sum(nbytes))
    point = first_seq
    for arrival, size in zip(arrivals[: floor_seq - first_seq], nbytes):
        too_old = max_age_s is not None and now - float(arrival) > max_age_s
        too_big = max_bytes is not None and kept > max_bytes
        if not (too_old or too_big):
            break
        kept -= int(size)
        point += 1
    return point


def rotate_dead_letter(path: str | os.PathLike, *, max_bytes: int, max_age_s: float | None,
                       now: float | None = None) -> tuple[bool, list[str]]:
    """Rotate the dead-letter file ``path`` once it is over ``max_bytes``; delete rotated parts
    older than ``max_age_s``.  Returns (whether it rotated, the names of the parts deleted).

    A rotated part is ``dead_letter.<UTC time>.jsonl`` beside it.  A process that still
    appends to the old file (Spark's source reader writes dead letters too) appends to the
    rotated part, so nothing is lost.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); f = d / "dead_letter.jsonl"; _ = f.write_text("x" * 10 + "\\n")
    >>> rotate_dead_letter(f, max_bytes=5, max_age_s=None, now=0.0)
    (True, [])
    >>> sorted(p.name for p in d.iterdir())
    ['dead_letter.19700101T000000Z.jsonl']
    """
    path = Path(path)
    now = time.time() if now is None else float(now)
    rotated = False
    try:
        if path.stat().st_size > max_bytes:
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
            target = path.with_name(f"{path.stem}.{stamp}{path.suffix}")
            n = 1
            while target.exists():  # two rotations in one second
                target = path.with_name(f"{path.stem}.{stamp}-{n}{path.suffix}")
                n += 1
            os.replace(path, target)
            rotated = True
    except FileNotFoundError:
        pass
    removed: list[str] = []
    if max_age_s is not None:
        for part in sorted(path.parent.glob(f"{path.stem}.*{path.suffix}")):
            try:
                if now - part.stat().st_mtime > max_age_s:
                    part.unlink()
                    removed.append(part.name)
            except FileNotFoundError:
                pass
    return rotated, removed


def retention_from_spec(spec: str | Mapping[str, Any] | None) -> dict | None:
    """Retention settings from ``spec``: ``"off"`` / None (keep everything), ``"default"``,
    a dict of :class:`SpoolRetention`'s parameters, or text such as ``"age=2h,size=5GiB,batches=50"``.

    Text keys: ``age``, ``size``, ``batches``, ``dead-letter-size``, ``dead-letter-age``; ``none``
    turns a limit off.  Raises ConfigError (a ValueError) naming the bad part.

    >>> retention_from_spec("age=30 minutes,size=1GiB")["max_age_s"], retention_from_spec("off")
    (1800.0, None)
    >>> retention_from_spec("age=1h,colour=red")
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: retention: unknown setting 'colour' in 'age=1h,colour=red'; known: age, size, batches, dead-letter-size, dead-letter-age
    """
    if spec is None or (isinstance(spec, str) and spec.strip().lower() in ("off", "none", "")):
        return None
    out = dict(DEFAULT_RETENTION)
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - set(DEFAULT_RETENTION))
        if unknown:
            raise ConfigError(f"retention: unknown setting {unknown[0]!r}; known: {', '.join(DEFAULT_RETENTION)}")
        out.update(spec)
        return out
    if spec.strip().lower() == "default":
        return out
    keys = {"age": "max_age_s", "size": "max_bytes", "batches": "keep_batches",
            "dead-letter-size": "dead_letter_bytes", "dead-letter-age": "dead_letter_age_s"}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or key not in keys:
            what = f"unknown setting {key!r}" if sep else f"{part.strip()!r} is not key=value"
            raise ConfigError(f"retention: {what} in {spec!r}; known: {', '.join(keys)}")
        name = keys[key]
        if value.lower() == "none" and name in ("max_age_s", "max_bytes", "dead_letter_age_s"):
            out[name] = None
        elif name.endswith("_s"):
            out[name] = parse_duration(_hours(value), f"retention {key}")
        elif name == "keep_batches":
            if not value.isdigit():
                raise ConfigError(f"retention batches must be a whole number >= 0, got {value!r}")
            out[name] = int(value)
        else:
            out[name] = parse_bytes(value, f"retention {key}")
    return out


def _hours(text: str) -> str:
    """``2h`` / ``30m`` / ``7d`` as Spark's duration words (``parse_duration`` reads those)."""
    for short, word in (("d", " days"), ("h", " hours"), ("m", " minutes")):
        if text[-1:].lower() == short and text[:-1].replace(".", "", 1).strip().isdigit():
            return text[:-1] + word
    return text


class SpoolRetention(BatchController):
    """Delete committed spool data by age or size, compact the ingest manifest, rotate dead letters.

    Parameters
    ----------
    max_age_s : float or None
        Committed datasets that arrived more than this long ago are deleted (None: no age limit).
    max_bytes : int or None
        The spool's data files are kept under this size, oldest committed datasets first (None:
        no size limit).  Datasets a restart could need stay even when they are over it.
    keep_batches : int
        Batches kept behind the committed offset whatever their age or size.
    dead_letter_bytes : int
        The dead-letter file is rotated once it is larger.
    dead_letter_age_s : float or None
        Rotated dead-letter parts older than this are deleted (None: kept).

    All five are live: a change applies at the next sweep, after the next batch.
    """

    prefix = "retention"
    change_phase = BATCH
    drawn = False  # housekeeping, not tuning: set_param and reconfigure change it
    PARAMS = (
        Param("max_age_s", float, low=0, nullable=True, label="keep for (s)",
              doc="committed spool data older than this is deleted (None: no age limit)"),
        Param("max_bytes", int, low=0, nullable=True, unit="bytes", label="spool size",
              doc="the spool's data is kept under this size, oldest committed first (None: no limit)"),
        Param("keep_batches", int, low=0, label="batches kept",
              doc="batches kept behind the committed offset whatever their age or size"),
        Param("dead_letter_bytes", int, low=1, unit="bytes", label="dead-letter size",
              doc="the dead-letter file is rotated once it is larger"),
        Param("dead_letter_age_s", float, low=0, nullable=True, label="dead letters kept for (s)",
              doc="rotated dead-letter parts older than this are deleted (None: kept)"),
    )
    FIELDS = {
        "spool_bytes": "bytes of spool data files kept after the latest retention sweep",
        "spool_first_seq": "first spool dataset whose data is still kept (retention deleted those before)",
    }

    def __init__(self, *, max_age_s: float | None = DEFAULT_RETENTION["max_age_s"],
                 max_bytes: int | None = DEFAULT_RETENTION["max_bytes"],
                 keep_batches: int = DEFAULT_RETENTION["keep_batches"],
                 dead_letter_bytes: int = DEFAULT_RETENTION["dead_letter_bytes"],
                 dead_letter_age_s: float | None = DEFAULT_RETENTION["dead_letter_age_s"],
                 clock=time.time) -> None:
        super().__init__()
        values = {"max_age_s": max_age_s, "max_bytes": max_bytes, "keep_batches": keep_batches,
                  "dead_letter_bytes": dead_letter_bytes, "dead_letter_age_s": dead_letter_age_s}
        for p in self.PARAMS:
            setattr(self, p.name, p.validate(values[p.name], label=self.qualified(p.name)))
        self._clock = clock
        self._host: Any = None
        self._starts: collections.deque = collections.deque(maxlen=self.keep_batches + 1)
        self._floor: int | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        #: totals so far: datasets and bytes deleted, sweeps run, manifest entries dropped, dead-letter rotations
        self.released_datasets = 0
        self.released_bytes = 0
        self.sweeps = 0
        self.manifest_dropped = 0
        self.dead_letter_rotations = 0
        self.error: str | None = None  # the last sweep's failure (the stream goes on), or None

    # ------------------------------------------------------------- live parameters
    def _apply_keep_batches(self, value: int) -> None:
        old = self.keep_batches
        with self._lock:
            self.keep_batches = value
            self._starts = collections.deque(self._starts, maxlen=value + 1)
        self.log_change("keep_batches", value, old=old)

    # ------------------------------------------------------------------- hooks
    def plugged(self, host: Any) -> None:
        self._host = host

    def on_resume(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Earlier runs' batches count towards ``keep_batches`` (each started at or before the
        checkpoint's committed offset)."""
        with self._lock:
            for r in records:
                if r.get("start_seq") is not None:
                    self._starts.append(int(r["start_seq"]))

    def after_batch(self, record: Any) -> Mapping[str, Any] | None:
        start = getattr(record, "start_seq", None)
        with self._lock:
            if start is not None:
                self._starts.append(int(start))
            if len(self._starts) == self._starts.maxlen:
                self._floor = self._starts[0]
        self._ensure_thread()
        self._wake.set()
        spool = getattr(self._host, "spool", None)
        if spool is None:
            return None
        return {"spool_bytes": spool.kept_bytes, "spool_first_seq": spool.first_seq}

    @property
    def floor(self) -> int | None:
        """The first dataset a restart could read, ``keep_batches`` back (None: not known yet)."""
        return self._floor

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="lmstream-retention", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.sweep()
                self.error = None
            except Exception as exc:  # noqa: BLE001 - retention must never stop the stream; said in status()
                self.error = one_line(exc)

    def sweep(self, now: float | None = None) -> dict:
        """Apply the policy once, up to the floor: returns what it deleted (also counted in totals)."""
        now = self._clock() if now is None else float(now)
        host = self._host
        spool = getattr(host, "spool", None)
        done = {"datasets": 0, "bytes": 0, "manifest_dropped": 0, "dead_letter_rotated": False}
        with self._lock:
            floor = self._floor
        if spool is not None and floor is not None and spool.kafka is None:
            first = spool.first_seq
            infos = spool.datasets(first)  # all kept: a size limit counts those past the floor too
            point = release_point([i.arrival for i in infos], [i.nbytes for i in infos], first_seq=first,
                                  floor_seq=min(floor, first + len(infos)), now=now,
                                  max_age_s=self.max_age_s, max_bytes=self.max_bytes)
            if point > first:
                done["datasets"], done["bytes"] = spool.release(point)
            compact = getattr(getattr(host, "feed", None), "compact_manifest", None)
            if compact is not None:
                done["manifest_dropped"] = compact(before_seq=spool.first_seq, older_than=now - (self.max_age_s or 0))
        run_dir = getattr(host, "run_dir", None)
        if run_dir is not None:
            rotated, _ = rotate_dead_letter(Path(run_dir) / "dead_letter.jsonl", max_bytes=self.dead_letter_bytes,
                                            max_age_s=self.dead_letter_age_s, now=now)
            done["dead_letter_rotated"] = rotated
        self.sweeps += 1
        self.released_datasets += done["datasets"]
        self.released_bytes += done["bytes"]
        self.manifest_dropped += done["manifest_dropped"]
        self.dead_letter_rotations += int(done["dead_letter_rotated"])
        return done

    def status(self) -> dict:
        """Totals so far, the floor, and the last sweep's failure (None when it went well)."""
        return {"sweeps": self.sweeps, "released_datasets": self.released_datasets,
                "released_bytes": self.released_bytes, "manifest_dropped": self.manifest_dropped,
                "dead_letter_rotations": self.dead_letter_rotations, "floor": self._floor, "error": self.error}

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def make_retention(spec: Any) -> SpoolRetention | None:
    """The retention a stream plugs in for ``spec``: a SpoolRetention as it is, else
    :func:`retention_from_spec`'s settings (None: keep everything)."""
    if isinstance(spec, SpoolRetention):
        return spec
    settings = retention_from_spec(spec)
    return None if settings is None else SpoolRetention(**settings)
