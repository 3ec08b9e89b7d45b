"""Directory ingest: turn the user's own files, as they land, into spool datasets.

:class:`DirectoryIngest` composes :mod:`.watch` (which files landed and settled), :mod:`.parse`
(reading them) and :mod:`.validate` (row checks, dead letters), each file becoming one dataset.

Example
-------
>>> import os, tempfile, time
>>> import pyarrow as pa
>>> from pathlib import Path
>>> root = Path(tempfile.mkdtemp())
>>> (root / "inbox").mkdir()
>>> _ = (root / "inbox" / "a.csv").write_text("x\\n1\\n-5\\n2\\n")
>>> os.utime(root / "inbox" / "a.csv", (time.time() - 10, time.time() - 10))
>>> spool = Spool(root / "spool", schema=pa.schema([("x", pa.int32())]), durable=False)
>>> ing = DirectoryIngest(root / "inbox", spool, checks={"x": (0, None)})
>>> ing.scan_once()
IngestReport(files=1, datasets=1, rows_ok=2, rows_bad=1, deferred=0)
>>> spool.read_table().column("x").to_pylist(), ing.manifest()[0]["file"]
([1, 2], 'a.csv')
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from lmstream_kit.diskguard import is_disk_full
from lmstream_kit.exceptions import ConfigError, IngestError, one_line

from .parse import parse_file
from .spool import Spool
from .validate import _whole, validate_checks, write_dead_letter
from .watch import DEFAULT_PATTERNS, MANIFEST_NAME, DirectoryWatch, Manifest

__all__ = ["DEFAULT_PATTERNS", "MANIFEST_NAME", "DirectoryIngest", "IngestReport"]


@dataclass
class IngestReport:
    """What one :meth:`DirectoryIngest.scan_once` did.

    Attributes
    ----------
    files : int
        Files handled (ingested fully, partly, or rejected).
    datasets : int
        Datasets appended to the spool.
    rows_ok, rows_bad : int
        Rows appended / rows sent to the dead-letter file.
    deferred : int
        Matching files skipped because they have not settled yet.
    """

    files: int = 0
    datasets: int = 0
    rows_ok: int = 0
    rows_bad: int = 0
    deferred: int = 0


class DirectoryIngest:
    """Index files landing in ``directory`` into ``spool``, each exactly once.

    It watches one local directory (not recursively).  Each new file matching
    ``patterns`` becomes **one** dataset in the spool (its ``source`` is the
    file name) once it has settled, i.e. its size and mtime have not changed
    for ``settle_s`` seconds.

    Parameters
    ----------
    directory : str or os.PathLike
        Local directory to watch (top level only).
    spool : Spool
        Writable spool; its schema is what rows are converted to.
    checks : mapping of str to (lo, hi), optional
        Inclusive value ranges per column; ``None`` leaves a side open.
    dead_letter : str or os.PathLike, optional
        Local JSON Lines file for rejected records; defaults to
        ``dead_letter.jsonl`` in the spool root (local spools only).
    poll_interval_s : float
        Seconds between scans of the background thread.
    settle_s : float
        A file is picked up once its size and mtime have been unchanged for
        this long (0 = as soon as seen).
    patterns : sequence of str
        Shell-style file name patterns to pick up.
    clock : callable
        Wall clock in epoch seconds (compared with file mtimes); for tests.

    Raises
    ------
    IngestError
        If ``directory`` is missing or unreadable.
    ConfigError
        For a bad check (unknown column, lo > hi), negative intervals, or a
        missing ``dead_letter`` with a non-local spool.

    Notes
    -----
    * **Formats** by extension: ``.csv`` (header row required), ``.json`` /
      ``.jsonl`` / ``.ndjson`` (JSON Lines, or one top-level JSON array of
      objects), ``.parquet`` / ``.pq``.
    * **Columns** are matched by name; extra columns are ignored; a column of the
      spool schema missing from a CSV header or a Parquet file rejects the whole
      file (one dead-letter entry).
    * **Missing values**: an empty CSV cell, a JSON null or absent key, a Parquet
      null.  They become null in nullable columns and reject the row in
      non-nullable ones (for string columns too: an empty cell is missing).
    * **Types**: CSV cells are read as text and converted to the column's type
      (surrounding whitespace ignored for non-string columns).  JSON values must
      already have the right JSON type: integers (or integral floats such as
      ``3.0``) for integer columns, numbers for float columns, booleans for bool
      columns, strings for string columns.  Parquet columns are cast column by
      column; a value that does not convert rejects its row only (a column that
      cannot convert at all, or a missing one, rejects the whole file).
    * **Checks**: ``checks={"speed": (0, 100)}`` rejects rows whose value lies
      outside the inclusive range (``None`` leaves a side open).
    * **Malformed records** never stop ingestion: they are written to the
      dead-letter file with a one-line reason (the entries are described in
      :func:`~.validate.write_dead_letter`), and the well-formed rest of the
      file is appended.
    * **Exactly once**: ``ingested.jsonl`` in the spool root records every file
      handled (name, size, mtime, seq, rows_ok, rows_bad).  A file is identified
      by its name: a later file with the same name is ignored.  Datasets in the
      spool whose ``source`` is missing from the manifest (a crash between the
      two writes) are recovered into it on start, so nothing is ingested twice.
    * Empty (0-byte) files and names starting with ``.`` or ``_`` (the usual
      marks of files still being copied) are skipped until they change.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        spool: Spool,
        *,
        checks: Mapping[str, tuple[float | None, float | None]] | None = None,
        dead_letter: str | os.PathLike | None = None,
        poll_interval_s: float = 0.5,
        settle_s: float = 0.5,
        patterns: Sequence[str] = DEFAULT_PATTERNS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        directory = Path(directory)
        self.spool = spool
        self.schema: pa.Schema = spool.schema
        self.checks = validate_checks(checks or {}, self.schema)
        if poll_interval_s <= 0:
            raise ConfigError(f"poll_interval_s must be > 0, got {poll_interval_s!r}")
        if settle_s < 0:
            raise ConfigError(f"settle_s must be >= 0, got {settle_s!r}")
        self.poll_interval_s = float(poll_interval_s)
        if isinstance(patterns, str):
            patterns = (patterns,)
        patterns = tuple(patterns)
        self._clock = clock
        if dead_letter is None:
            if not isinstance(spool.filesystem, pafs.LocalFileSystem):
                raise ConfigError(f"dead_letter path is required for a non-local spool ({spool.uri})")
            dead_letter = os.path.join(spool.root, "dead_letter.jsonl")
        self.dead_letter = Path(dead_letter).absolute()
        self._watch = DirectoryWatch(directory, patterns, settle_s, skip=self.dead_letter)
        self._watch.list_directory()  # fail now, naming the directory, if it is unusable

        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        #: why ingest waits now (the spool's disk is full), or None
        self.blocked: str | None = None
        self.last_report = IngestReport()
        self._manifest = Manifest(spool)
        self._manifest.recover_from_spool()

    @property
    def directory(self) -> Path:
        """The watched directory."""
        return self._watch.directory

    @property
    def patterns(self) -> tuple[str, ...]:
        """Shell-style file name patterns picked up."""
        return self._watch.patterns

    @property
    def settle_s(self) -> float:
        """Seconds a file's size and mtime must stay unchanged before it is picked up."""
        return self._watch.settle_s

    # --------------------------------------------------------------- manifest
    @property
    def files_done(self) -> int:
        """Files handled so far, including by earlier runs on this spool."""
        return len(self._manifest.done) + int(self._manifest.compacted["files"])

    @property
    def total_rows_ok(self) -> int:
        """Rows ingested so far, including by earlier runs on this spool."""
        return (sum(int(e.get("rows_ok") or 0) for e in self._manifest.done.values())
                + int(self._manifest.compacted["rows_ok"]))

    @property
    def total_rows_bad(self) -> int:
        """Rows dead-lettered so far, including by earlier runs on this spool."""
        return (sum(int(e.get("rows_bad") or 0) for e in self._manifest.done.values())
                + int(self._manifest.compacted["rows_bad"]))

    def compact_manifest(self, *, before_seq: int, older_than: float) -> int:
        """Drop the manifest entries of files gone from the directory, handled before ``older_than``
        (epoch seconds), whose dataset is before ``before_seq``; return how many went.

        A file still in the directory keeps its entry, or it would be ingested again; a file
        that comes back after its entry went is a new file.  Totals keep their counts.
        """
        with self._lock:
            try:
                present = {entry.name for entry in self._watch.list_directory()}
            except IngestError:
                return 0  # the directory is unusable just now: keep everything

            def drop(entry: dict) -> bool:
                seq = entry.get("seq")
                return (entry["file"] not in present and float(entry.get("at") or 0) < older_than
                        and (seq is None or int(seq) < before_seq))

            return self._manifest.compact(drop)

    def manifest(self) -> list[dict]:
        """The manifest entries, one per handled file."""
        return list(self._manifest.done.values())

    # -------------------------------------------------------------- scanning
    def scan_once(self) -> IngestReport:
        """Ingest every settled new file once, in (mtime, name) order.

        Raises
        ------
        IngestError
            If the directory cannot be listed.
        """
        with self._lock:
            report = IngestReport()
            ready, report.deferred = self._watch.candidates(self._clock(), self._manifest.done)
            for name, handled in self._watch.relanded:  # said once, so its rows are not lost unseen
                write_dead_letter(self.dead_letter, name, [_whole(
                    f"a file landed again under the name {name!r}, handled before (dataset "
                    f"{handled.get('seq')}): a file is known by its name, so it is ignored; land it "
                    f"under a new name")])
            for _, name, st in ready:
                path = self.directory / name
                try:
                    table, rejects, rows_bad = parse_file(path, self.schema, self.checks)
                except FileNotFoundError:
                    continue  # moved away before we read it
                write_dead_letter(self.dead_letter, name, rejects)
                seq = None
                if table is not None and table.num_rows > 0:
                    seq = self.spool.append(table, source=name).seq
                    report.datasets += 1
                rows_ok = 0 if table is None else table.num_rows
                self._manifest.record(
                    {"file": name, "size": st.st_size, "mtime": st.st_mtime, "seq": seq,
                     "rows_ok": rows_ok, "rows_bad": rows_bad,
                     "at": time.time()}
                )
                self._watch.forget(name)
                report.files += 1
                report.rows_ok += rows_ok
                report.rows_bad += rows_bad
            self.last_report = report
            return report

    # ------------------------------------------------------------- threading
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan_once()
                self.error = self.blocked = None
            except Exception as exc:  # noqa: BLE001 - kept for the caller; the directory may come back
                if is_disk_full(exc):  # the file stays in the inbox, unrecorded: the next scan takes it
                    self.blocked = f"ingest waits: {one_line(exc)}"
                else:
                    self.error = exc
            self._stop.wait(self.poll_interval_s)

    def start(self) -> DirectoryIngest:
        """Poll the directory every ``poll_interval_s`` in a daemon thread; returns self."""
        if self._thread is not None and self._thread.is_alive():
            raise ConfigError("the directory ingest is already running")
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="lmstream-ingest", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop polling after the current scan and wait up to ``timeout`` s."""
        self._stop.set()
        self.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the polling thread to end; True if it has ended (or never started)."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __repr__(self) -> str:
        return f"DirectoryIngest({str(self.directory)!r}, files_done={self.files_done})"
