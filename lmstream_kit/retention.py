"""Spool retention: how a stream that runs for days keeps a bounded disk.

A spool keeps every dataset it was given; at 1000 rows/s that is about 7 GB a day.
:class:`SpoolRetention` is a live object plugged into the run loop.  After each batch it
hands a background thread the *floor*: the first spool dataset that a restart from the
checkpoint could still read.  Spark plans batch *N* only once batch *N - 1* is in its
commit log, so when batch *N* completes, everything before *N*'s first dataset is
committed; ``keep_batches`` more batches are kept behind that on top.  The thread then
deletes the data of the datasets before the floor that are older than ``max_age_s`` or
beyond ``max_bytes`` (:func:`release_point`, oldest first), compacts the ingest manifest
(entries of files gone from the inbox), rotates the dead-letter file, and rotates the
run's journals ``metrics.jsonl`` and ``spark_progress.jsonl`` (:func:`rotate_journal`):
each is renamed to a part once over ``journal_bytes``, the part gzipped a minute later
and deleted once older than ``journal_age_s``; a metrics part's totals are folded into
``metrics.released.json`` first (:func:`fold_released`), so that ``run.json``'s totals
stay whole.

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

import calendar
import collections
import ctypes
import ctypes.util
import functools
import gzip
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .exceptions import ConfigError, one_line
from .metrics import (
    METRICS_FILE,
    PROGRESS_FILE,
    RELEASED_FILE,
    batch_key,
    journal_parts,
    iter_part,
    part_order,
    read_released,
)
from .protocol import BATCH, BatchController, Param
from .units import parse_bytes, parse_duration

__all__ = ["DEFAULT_RETENTION", "JOURNAL_COMPRESS_AFTER_S", "SpoolRetention", "fold_released", "make_retention",
           "release_point", "retention_from_spec", "rotate_dead_letter", "rotate_journal", "trim_freed_memory"]

#: the defaults, documented in the README: committed data older than an hour goes, 100 batches
#: behind the committed offset stay, dead letters rotate at 64 MiB and rotated parts live a week;
#: the metrics journals rotate at 64 MiB and their rotated parts live 30 days
DEFAULT_RETENTION: Mapping[str, Any] = {
    "max_age_s": 3600.0,
    "max_bytes": None,
    "keep_batches": 100,
    "dead_letter_bytes": 64 * 2**20,
    "dead_letter_age_s": 7 * 86400.0,
    "journal_bytes": 64 * 2**20,
    "journal_age_s": 30 * 86400.0,
}

#: the copy buffer of a part being gzipped: small, so that the retention thread's malloc arena
#: stays small (a 1 MiB buffer left about 3.7 MiB resident after each gzip of a 4 MiB part)
GZIP_BUFFER_BYTES = 1 << 16

#: how often (seconds, at most) the retention thread gives the C allocator's freed memory back to
#: the system (:func:`trim_freed_memory`; about 0.3 ms a time); also after every sweep that gzipped,
#: rotated or deleted a journal part
TRIM_EVERY_S = 60.0

#: a rotated journal part is gzipped once this long has passed since it was rotated and last
#: written: a writer that raced the rename has ended its line by then
JOURNAL_COMPRESS_AFTER_S = 60.0


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


def rotate_journal(path: str | os.PathLike, *, max_bytes: int, max_age_s: float | None, now: float | None = None,
                   compress_after_s: float | None = None,
                   before_delete: Callable[[Path], Any] | None = None) -> dict:
    """Rotate the journal ``path`` once it is over ``max_bytes``; gzip rotated parts, delete old ones.

    Returns ``{"rotated": bool, "compressed": [names], "deleted": [names]}``.

    Rotation renames ``path`` to ``<stem>.<UTC time>[-N]<suffix>`` beside it (``-N`` for a
    second rotation within a second); the writer starts a new file at ``path`` with its next
    line (:class:`~lmstream_kit.metrics.JsonlWriter` follows the rename; a process that keeps
    appending to the old file appends to the rotated part, so nothing is lost).  A part's age
    counts from when it was rotated or last written, whichever is later.  With
    ``compress_after_s``, plain parts older than that are gzipped (``<part>.gz``, written to
    ``<part>.gz.tmp``, fsynced and renamed, then the plain part unlinked).  With
    ``max_age_s``, parts older than that are deleted, oldest first (the first one young
    enough stops it), each handed to ``before_delete`` first: if that raises, the part stays.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); f = d / "metrics.jsonl"; _ = f.write_text("x" * 10 + "\\n")
    >>> os.utime(f, (0.0, 0.0))  # last written at the epoch
    >>> rotate_journal(f, max_bytes=5, max_age_s=None, now=0.0, compress_after_s=60)
    {'rotated': True, 'compressed': [], 'deleted': []}
    >>> rotate_journal(f, max_bytes=5, max_age_s=None, now=62.0, compress_after_s=60)["compressed"]
    ['metrics.19700101T000000Z.jsonl']
    >>> sorted(p.name for p in d.iterdir())
    ['metrics.19700101T000000Z.jsonl.gz']
    """
    path = Path(path)
    now = time.time() if now is None else float(now)
    rotated = False
    try:
        if path.stat().st_size > max_bytes:
            os.replace(path, _next_part(path, now))
            rotated = True
    except FileNotFoundError:
        pass
    compressed: list[str] = []
    if compress_after_s is not None:
        for part in journal_parts(path):
            if part.suffix == ".gz":
                continue
            try:
                mtime = part.stat().st_mtime
            except FileNotFoundError:
                continue
            if now - _part_age_from(part, mtime) > compress_after_s:
                _gzip_part(part, mtime)
                compressed.append(part.name)
    deleted: list[str] = []
    if max_age_s is not None:
        for part in journal_parts(path):
            try:
                old = now - _part_age_from(part, part.stat().st_mtime) > max_age_s
            except FileNotFoundError:
                continue
            if not old:
                break  # parts go oldest first: what is kept is the journal's newest stretch
            if before_delete is not None:
                before_delete(part)
            plain = part.with_name(part.name[:-3]) if part.suffix == ".gz" else part
            for leftover in (plain, plain.with_name(plain.name + ".gz"), plain.with_name(plain.name + ".gz.tmp")):
                leftover.unlink(missing_ok=True)
            deleted.append(part.name)
    return {"rotated": rotated, "compressed": compressed, "deleted": deleted}


def _next_part(path: Path, now: float) -> Path:
    """The name ``path`` is rotated to: after every part there is, even where the clock went back."""
    key = (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)), 0)
    parts = journal_parts(path)
    last = part_order(parts[-1]) if parts else None
    if last is not None and key <= last:
        key = (last[0], last[1] + 1)
    while True:
        target = path.with_name(f"{path.stem}.{key[0]}{f'-{key[1]}' if key[1] else ''}{path.suffix}")
        if not target.exists() and not target.with_name(target.name + ".gz").exists():
            return target
        key = (key[0], key[1] + 1)


def _part_age_from(part: Path, mtime: float) -> float:
    """When a part's age starts: its rotation (the second its name says, to the end of it) or its
    last write, whichever is later."""
    key = part_order(part)
    if key is None:
        return mtime
    return max(mtime, calendar.timegm(time.strptime(key[0], "%Y%m%dT%H%M%SZ")) + 1.0)


def _gzip_part(part: Path, mtime: float) -> None:
    """Replace the plain part by ``<part>.gz`` (same records, same modification time)."""
    gz = part.with_name(part.name + ".gz")
    tmp = part.with_name(part.name + ".gz.tmp")
    try:
        with open(part, "rb") as src, open(tmp, "wb") as raw:
            with gzip.GzipFile(filename=part.name, mode="wb", fileobj=raw, mtime=int(mtime)) as out:
                shutil.copyfileobj(src, out, GZIP_BUFFER_BYTES)
            raw.flush()
            os.fsync(raw.fileno())
        os.utime(tmp, (mtime, mtime))
        os.replace(tmp, gz)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk keeps no half-written copy
        raise
    part.unlink()


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, looked up once; None where the C library has none."""
    try:
        trim = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), "malloc_trim", None)
    except OSError:
        return None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def trim_freed_memory() -> bool:
    """Give the C allocator's freed memory back to the system (glibc's ``malloc_trim(0)``); returns
    whether it could (False where the C library has no such call, as on macOS or musl).

    A sweep that gzips or folds a journal part allocates a few MiB in the retention thread and
    frees them; glibc keeps freed memory in that thread's arena, so the driver's resident memory
    stepped up by about 2 MiB at a part's gzip in a soak, and stayed there.  Trimming after such a
    sweep returns it (measured: +3.7 MiB kept after gzipping and folding a 4 MiB part in a thread;
    -0.8 MiB with the small buffer and the trim).

    >>> isinstance(trim_freed_memory(), bool)
    True
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def fold_released(part: str | os.PathLike) -> dict:
    """Add the totals of the metrics part ``part`` to ``metrics.released.json`` beside it, before
    the part is deleted; returns the new totals.

    The totals are ``batches`` and ``rows_processed`` (each batch once: its newest record in the
    part; a batch that a crash made run again right at the boundary with the part before, whose
    key is ``last_key``, is not counted twice), ``parts``, ``last_key`` (the ``[batch_id,
    start_seq, end_seq]`` of the newest record released), ``through_batch_id`` (its batch id) and
    ``through_part`` (the newest part folded: a part folded already, whose deletion a crash
    stopped, is not added again).  The file is replaced atomically.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); part = d / "metrics.20260101T000000Z.jsonl"
    >>> _ = part.write_text('{"batch_id": 0, "rows": 5, "start_seq": 0, "end_seq": 1}\\n')
    >>> fold_released(part)
    {'batches': 1, 'rows_processed': 5, 'parts': 1, 'last_key': [0, 0, 1], 'through_batch_id': 0, 'through_part': '20260101T000000Z'}
    >>> fold_released(part)["batches"]  # folded already
    1
    """
    part = Path(part)
    key = part_order(part)
    if key is None:
        raise ConfigError(f"{part} is not a rotated metrics part (<stem>.<UTC stamp>.jsonl)")
    released = read_released(part.parent)
    through = part_order(f"x.{released.get('through_part')}.jsonl")
    if through is not None and through >= key:
        return released
    last_key = tuple(released["last_key"]) if released.get("last_key") is not None else None
    rows: dict[tuple, int] = {}
    newest = None
    for record in iter_part(part):  # one record at a time: a 64 MiB part is never held whole
        k = batch_key(record)
        if k is not None:
            rows[k] = int(record.get("rows") or 0)
            newest = k
    rows.pop(last_key, None)  # counted with the part before: the same batch, run again after a crash
    out = {
        "batches": int(released.get("batches", 0)) + len(rows),
        "rows_processed": int(released.get("rows_processed", 0)) + sum(rows.values()),
        "parts": int(released.get("parts", 0)) + 1,
        "last_key": list(newest) if newest is not None else released.get("last_key"),
        "through_batch_id": newest[0] if newest is not None else released.get("through_batch_id"),
        "through_part": key[0] + (f"-{key[1]}" if key[1] else ""),
    }
    path = part.parent / RELEASED_FILE
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(out, sort_keys=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return out


def rotate_dead_letter(path: str | os.PathLike, *, max_bytes: int, max_age_s: float | None,
                       now: float | None = None) -> tuple[bool, list[str]]:
    """Rotate the dead-letter file ``path`` once it is over ``max_bytes``; delete rotated parts
    older than ``max_age_s``.  Returns (whether it rotated, the names of the parts deleted).

    A rotated part is ``dead_letter.<UTC time>.jsonl`` beside it.  A process that still
    appends to the old file (Spark's source reader writes dead letters too) appends to the
    rotated part, so nothing is lost.  Dead letters are not compressed (:func:`rotate_journal`).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); f = d / "dead_letter.jsonl"; _ = f.write_text("x" * 10 + "\\n")
    >>> rotate_dead_letter(f, max_bytes=5, max_age_s=None, now=0.0)
    (True, [])
    >>> sorted(p.name for p in d.iterdir())
    ['dead_letter.19700101T000000Z.jsonl']
    """
    done = rotate_journal(path, max_bytes=max_bytes, max_age_s=max_age_s, now=now)
    return done["rotated"], done["deleted"]


def retention_from_spec(spec: str | Mapping[str, Any] | None) -> dict | None:
    """Retention settings from ``spec``: ``"off"`` / None (keep everything), ``"default"``,
    a dict of :class:`SpoolRetention`'s parameters, or text such as ``"age=2h,size=5GiB,batches=50"``.

    Text keys: ``age``, ``size``, ``batches``, ``dead-letter-size``, ``dead-letter-age``,
    ``journal-size``, ``journal-age`` (the metrics journals: :func:`rotate_journal`); ``none``
    turns a limit off.  Raises ConfigError (a ValueError) naming the bad part.

    >>> retention_from_spec("age=30 minutes,size=1GiB")["max_age_s"], retention_from_spec("off")
    (1800.0, None)
    >>> got = retention_from_spec("journal-size=16MiB,journal-age=7d")
    >>> got["journal_bytes"], got["journal_age_s"]
    (16777216, 604800.0)
    >>> retention_from_spec("age=1h,colour=red")
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: retention: unknown setting 'colour' in 'age=1h,colour=red'; known: age, size, batches, dead-letter-size, dead-letter-age, journal-size, journal-age
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
            "dead-letter-size": "dead_letter_bytes", "dead-letter-age": "dead_letter_age_s",
            "journal-size": "journal_bytes", "journal-age": "journal_age_s"}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or key not in keys:
            what = f"unknown setting {key!r}" if sep else f"{part.strip()!r} is not key=value"
            raise ConfigError(f"retention: {what} in {spec!r}; known: {', '.join(keys)}")
        name = keys[key]
        if value.lower() == "none" and name in ("max_age_s", "max_bytes", "dead_letter_age_s", "journal_age_s"):
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
    """Delete committed spool data by age or size, compact the ingest manifest, rotate dead letters
    and the metrics journals.

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
    journal_bytes : int
        ``metrics.jsonl`` and ``spark_progress.jsonl`` are each rotated once larger (64 MiB:
        about 17,000 batch records); a rotated part is gzipped a minute later.
    journal_age_s : float or None
        Rotated journal parts older than this are deleted (None: kept); the batches and rows of
        a metrics part are first added to ``metrics.released.json``, which ``run.json``'s totals
        count (:func:`fold_released`).  Readers of the whole run (``load_metrics``, ``compare``,
        the dashboard's replay) no longer see the deleted batches.

    All seven are live: a change applies at the next sweep, after the next batch.
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
        Param("journal_bytes", int, low=1, unit="bytes", label="journal size",
              doc="metrics.jsonl and spark_progress.jsonl are rotated once larger (parts are gzipped)"),
        Param("journal_age_s", float, low=0, nullable=True, label="journal parts kept for (s)",
              doc="rotated journal parts older than this are deleted, their totals kept in "
                  "metrics.released.json (None: kept)"),
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
                 journal_bytes: int = DEFAULT_RETENTION["journal_bytes"],
                 journal_age_s: float | None = DEFAULT_RETENTION["journal_age_s"],
                 clock=time.time) -> None:
        super().__init__()
        values = {"max_age_s": max_age_s, "max_bytes": max_bytes, "keep_batches": keep_batches,
                  "dead_letter_bytes": dead_letter_bytes, "dead_letter_age_s": dead_letter_age_s,
                  "journal_bytes": journal_bytes, "journal_age_s": journal_age_s}
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
        self._trimmed_at = time.monotonic()
        #: totals so far: datasets and bytes deleted, sweeps run, manifest entries dropped, dead-letter
        #: rotations, and the metrics journals' parts rotated, gzipped and deleted
        self.released_datasets = 0
        self.released_bytes = 0
        self.sweeps = 0
        self.manifest_dropped = 0
        self.dead_letter_rotations = 0
        self.journal_rotations = 0
        self.journal_compressions = 0
        self.journal_deletions = 0
        self.trims = 0  # times freed memory was given back (trim_after)
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

    @property
    def resume_records(self) -> int:
        """The newest records :meth:`on_resume` uses: ``keep_batches + 1`` starts.  Fewer only
        delay a deletion (the floor is known later), never make one early."""
        return self.keep_batches + 1

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
                done = self.sweep()
                self.error = None
                self.trim_after(done)
            except Exception as exc:  # noqa: BLE001 - retention must never stop the stream; said in status()
                self.error = one_line(exc)

    def trim_after(self, done: Mapping[str, Any], now: float | None = None) -> bool:
        """Give freed memory back (:func:`trim_freed_memory`) after the sweep that did ``done``, where
        it gzipped, rotated or deleted a journal part or rotated the dead letters, else at most once
        per :data:`TRIM_EVERY_S`; returns whether it trimmed.  Without it a driver that runs for
        days kept each gzip's buffers, and its resident memory crept by about 2 MiB an hour with
        the Python heap flat (soak, issue 16)."""
        now = time.monotonic() if now is None else float(now)
        heavy = bool(done.get("journal_compressed") or done.get("journal_deleted") or done.get("journal_rotated")
                     or done.get("dead_letter_rotated"))
        if not heavy and now - self._trimmed_at < TRIM_EVERY_S:
            return False
        self._trimmed_at = now
        self.trims += 1
        trim_freed_memory()
        return True

    def sweep(self, now: float | None = None) -> dict:
        """Apply the policy once, up to the floor: returns what it deleted (also counted in totals)."""
        now = self._clock() if now is None else float(now)
        host = self._host
        spool = getattr(host, "spool", None)
        done = {"datasets": 0, "bytes": 0, "manifest_dropped": 0, "dead_letter_rotated": False,
                "journal_rotated": 0, "journal_compressed": 0, "journal_deleted": 0}
        failed: Exception | None = None
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
            for name in (METRICS_FILE, PROGRESS_FILE):  # one that fails leaves the other to go on
                try:
                    journal = rotate_journal(Path(run_dir) / name, max_bytes=self.journal_bytes,
                                             max_age_s=self.journal_age_s, now=now,
                                             compress_after_s=JOURNAL_COMPRESS_AFTER_S,
                                             before_delete=fold_released if name == METRICS_FILE else None)
                except Exception as exc:  # noqa: BLE001 - said once both are done
                    failed = failed or exc
                    continue
                done["journal_rotated"] += int(journal["rotated"])
                done["journal_compressed"] += len(journal["compressed"])
                done["journal_deleted"] += len(journal["deleted"])
        self.sweeps += 1
        self.released_datasets += done["datasets"]
        self.released_bytes += done["bytes"]
        self.manifest_dropped += done["manifest_dropped"]
        self.dead_letter_rotations += int(done["dead_letter_rotated"])
        self.journal_rotations += done["journal_rotated"]
        self.journal_compressions += done["journal_compressed"]
        self.journal_deletions += done["journal_deleted"]
        if failed is not None:
            raise failed
        return done

    def status(self) -> dict:
        """Totals so far (``trims``: times freed memory was given back), the floor, and the last
        sweep's failure (None when it went well)."""
        return {"sweeps": self.sweeps, "released_datasets": self.released_datasets,
                "released_bytes": self.released_bytes, "manifest_dropped": self.manifest_dropped,
                "dead_letter_rotations": self.dead_letter_rotations, "journal_rotations": self.journal_rotations,
                "journal_compressions": self.journal_compressions, "journal_deletions": self.journal_deletions,
                "trims": self.trims, "floor": self._floor, "error": self.error}

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
