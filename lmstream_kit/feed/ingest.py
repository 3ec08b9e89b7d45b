"""Directory ingest: turn the user's own files, as they land, into spool datasets.

:class:`DirectoryIngest` watches one local directory (not recursively).  Each
new file matching ``patterns`` becomes **one** dataset in the spool (its
``source`` is the file name) once it has settled, i.e. its size and mtime
have not changed for ``settle_s`` seconds.  Malformed records never stop
ingestion: they are written to a JSON Lines dead-letter file with a one-line
reason, and the well-formed rest of the file is appended.

Rules
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
  columns, strings for string columns.  Parquet files are cast as a whole;
  a failed cast rejects the whole file.
* **Checks**: ``checks={"speed": (0, 100)}`` rejects rows whose value lies
  outside the inclusive range (``None`` leaves a side open).
* **Exactly once**: ``ingested.jsonl`` in the spool root records every file
  handled (name, size, mtime, seq, rows_ok, rows_bad).  A file is identified
  by its name: a later file with the same name is ignored.  Datasets in the
  spool whose ``source`` is missing from the manifest (a crash between the
  two writes) are recovered into it on start, so nothing is ingested twice.
* Empty (0-byte) files and names starting with ``.`` or ``_`` (the usual
  marks of files still being copied) are skipped until they change.

Dead-letter entries (JSON Lines)::

    {"file": "a.csv", "line": 7, "record": "12,abc,...",
     "reason": "column 'speed': value 'abc' is not int32", "at": 1718000000.0}

``line`` is the 1-based physical line for CSV and JSON Lines, the 0-based
row index for Parquet and JSON arrays, and null when the whole file is
rejected.  ``record`` is the raw line (CSV, JSON Lines) or the row as an
object (JSON array, Parquet).
"""

from __future__ import annotations

import csv
import fnmatch
import io
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.fs as pafs

from lmstream_kit.exceptions import ConfigError, IngestError

from .spool import Spool

__all__ = ["DirectoryIngest", "IngestReport", "MANIFEST_NAME", "DEFAULT_PATTERNS"]

MANIFEST_NAME = "ingested.jsonl"
DEFAULT_PATTERNS = ("*.csv", "*.json", "*.jsonl", "*.parquet")
_CSV_EXT = {".csv"}
_JSON_EXT = {".json", ".jsonl", ".ndjson"}
_PARQUET_EXT = {".parquet", ".pq"}
_CAST_CHUNK = 4096  # rows per cast attempt; a bad value costs per-value casts of one chunk only
_SHOW_MAX = 80


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _show(value: Any) -> str:
    """Render a bad value for a reason: quoted text for strings, JSON otherwise."""
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= _SHOW_MAX else text[: _SHOW_MAX - 3] + "..."


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


class _Rejects:
    """Collects per-row problems; several problems of one row join with '; '."""

    def __init__(self) -> None:
        self.by_row: dict[int, list[str]] = {}

    def add(self, row: int, reason: str) -> None:
        self.by_row.setdefault(row, []).append(reason)

    def add_many(self, rows, reason_of: Callable[[int], str]) -> None:
        for r in rows:
            self.add(int(r), reason_of(int(r)))

    def good_mask(self, n: int) -> np.ndarray:
        mask = np.ones(n, dtype=bool)
        if self.by_row:
            mask[np.fromiter(self.by_row.keys(), dtype=np.int64)] = False
        return mask


class DirectoryIngest:
    """Index files landing in ``directory`` into ``spool``, each exactly once.

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
        self.directory = Path(directory)
        self.spool = spool
        self.schema: pa.Schema = spool.schema
        self.checks = self._validate_checks(checks or {})
        if poll_interval_s <= 0:
            raise ConfigError(f"poll_interval_s must be > 0, got {poll_interval_s!r}")
        if settle_s < 0:
            raise ConfigError(f"settle_s must be >= 0, got {settle_s!r}")
        self.poll_interval_s = float(poll_interval_s)
        self.settle_s = float(settle_s)
        if isinstance(patterns, str):
            patterns = (patterns,)
        self.patterns = tuple(patterns)
        self._clock = clock
        if dead_letter is None:
            if not isinstance(spool.filesystem, pafs.LocalFileSystem):
                raise ConfigError(f"dead_letter path is required for a non-local spool ({spool.uri})")
            dead_letter = os.path.join(spool.root, "dead_letter.jsonl")
        self.dead_letter = Path(dead_letter).absolute()
        self._list_directory()  # fail now, naming the directory, if it is unusable

        self._manifest_path = f"{spool.root}/{MANIFEST_NAME}"
        self._done: dict[str, dict] = {}
        self._seen: dict[str, tuple[tuple[int, int], float]] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.last_report = IngestReport()
        self._load_manifest()
        self._recover_from_spool()

    # ----------------------------------------------------------------- config
    def _validate_checks(self, checks: Mapping) -> dict[str, tuple]:
        out = {}
        for col, bounds in checks.items():
            if col not in self.schema.names:
                raise ConfigError(f"check on unknown column {col!r}; spool columns: {', '.join(self.schema.names)}")
            try:
                lo, hi = bounds
            except (TypeError, ValueError):
                raise ConfigError(f"check for column {col!r} must be a (lo, hi) pair, got {bounds!r}") from None
            if lo is not None and hi is not None and lo > hi:
                raise ConfigError(f"check for column {col!r} has lo > hi: ({lo}, {hi})")
            out[col] = (lo, hi)
        return out

    # --------------------------------------------------------------- manifest
    def _load_manifest(self) -> None:
        fs = self.spool.filesystem
        if fs.get_file_info(self._manifest_path).type != pafs.FileType.File:
            return
        with fs.open_input_stream(self._manifest_path, compression=None) as f:
            raw = f.read()
        for line in raw.split(b"\n"):
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # blank, or a line torn by a crash: that file is re-examined
            if isinstance(entry, dict) and "file" in entry:
                self._done[str(entry["file"])] = entry
        self._manifest_torn = bool(raw) and not raw.endswith(b"\n")

    def _recover_from_spool(self) -> None:
        # A crash after the spool append but before the manifest line would
        # otherwise make the next run ingest that file a second time.
        for info in self.spool.datasets():
            if info.source and info.source != "generator" and info.source not in self._done:
                self._record(
                    {"file": info.source, "size": None, "mtime": None, "seq": info.seq,
                     "rows_ok": info.rows, "rows_bad": 0, "at": time.time(), "recovered": True}
                )

    def _record(self, entry: dict) -> None:
        fs = self.spool.filesystem
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode("utf-8")
        if getattr(self, "_manifest_torn", False):
            line = b"\n" + line  # end the torn line so ours parses
            self._manifest_torn = False
        with fs.open_append_stream(self._manifest_path, compression=None) as out:
            out.write(line)
        self._done[entry["file"]] = entry

    @property
    def files_done(self) -> int:
        """Files handled so far, including by earlier runs on this spool."""
        return len(self._done)

    @property
    def total_rows_ok(self) -> int:
        """Rows ingested so far, including by earlier runs on this spool."""
        return sum(int(e.get("rows_ok") or 0) for e in self._done.values())

    @property
    def total_rows_bad(self) -> int:
        """Rows dead-lettered so far, including by earlier runs on this spool."""
        return sum(int(e.get("rows_bad") or 0) for e in self._done.values())

    def manifest(self) -> list[dict]:
        """The manifest entries, one per handled file."""
        return list(self._done.values())

    # -------------------------------------------------------------- scanning
    def _list_directory(self) -> list[os.DirEntry]:
        try:
            with os.scandir(self.directory) as it:
                return list(it)
        except OSError as exc:
            raise IngestError(f"cannot read ingest directory {self.directory}: {exc.strerror or _one_line(exc)}") from exc

    def _candidates(self, now: float, report: IngestReport) -> list[tuple[float, str, os.stat_result]]:
        ready = []
        for entry in self._list_directory():
            name = entry.name
            if name.startswith((".", "_")) or name in self._done:
                continue
            if not any(fnmatch.fnmatch(name, p) for p in self.patterns):
                continue
            try:
                if not entry.is_file():
                    continue
                st = entry.stat()
            except OSError:
                continue  # vanished between listing and stat
            if Path(entry.path).absolute() == self.dead_letter:
                continue
            sig = (st.st_size, st.st_mtime_ns)
            prev = self._seen.get(name)
            if prev is None or prev[0] != sig:
                # First sight: trust the mtime.  A change since the last scan
                # proves the file is being written: restart the settle clock.
                stable_since = st.st_mtime if prev is None else now
                self._seen[name] = (sig, stable_since)
            else:
                stable_since = prev[1]
            if st.st_size == 0 or now - max(stable_since, st.st_mtime) < self.settle_s:
                report.deferred += 1
                continue
            ready.append((st.st_mtime, name, st))
        ready.sort(key=lambda t: (t[0], t[1]))
        return ready

    def scan_once(self) -> IngestReport:
        """Ingest every settled new file once, in (mtime, name) order.

        Raises
        ------
        IngestError
            If the directory cannot be listed.
        """
        with self._lock:
            report = IngestReport()
            for _, name, st in self._candidates(self._clock(), report):
                path = self.directory / name
                try:
                    table, rejects, rows_bad = self._parse_file(path)
                except FileNotFoundError:
                    continue  # moved away before we read it
                self._dead_letter(name, rejects)
                seq = None
                if table is not None and table.num_rows > 0:
                    seq = self.spool.append(table, source=name).seq
                    report.datasets += 1
                rows_ok = 0 if table is None else table.num_rows
                self._record(
                    {"file": name, "size": st.st_size, "mtime": st.st_mtime, "seq": seq,
                     "rows_ok": rows_ok, "rows_bad": rows_bad,
                     "at": time.time()}
                )
                self._seen.pop(name, None)
                report.files += 1
                report.rows_ok += rows_ok
                report.rows_bad += rows_bad
            self.last_report = report
            return report

    def _dead_letter(self, name: str, rejects: list[dict]) -> None:
        if not rejects:
            return
        at = time.time()
        self.dead_letter.parent.mkdir(parents=True, exist_ok=True)
        with open(self.dead_letter, "a", encoding="utf-8") as f:
            for r in rejects:
                f.write(json.dumps({"file": name, "line": r["line"], "record": r["record"],
                                    "reason": r["reason"], "at": at}, default=str) + "\n")

    # ---------------------------------------------------------------- parsing
    def _parse_file(self, path: Path) -> tuple[pa.Table | None, list[dict], int]:
        """Return (good rows or None, dead-letter entries, number of rows rejected)."""
        ext = path.suffix.lower()
        if ext in _CSV_EXT:
            return self._parse_csv(path)
        if ext in _JSON_EXT:
            return self._parse_json(path)
        if ext in _PARQUET_EXT:
            return self._parse_parquet(path)
        return None, [_whole(f"unsupported file type {ext or '(none)'!r}; use .csv, .json, .jsonl or .parquet")], 1

    def _parse_csv(self, path: Path):
        raw = path.read_bytes()
        lines = raw.split(b"\n")
        # Physical line numbers of non-empty lines: pyarrow numbers records
        # counting non-empty lines only, and we report physical lines.
        nonempty = [i + 1 for i, ln in enumerate(lines) if ln not in (b"", b"\r")]
        n_data = max(0, len(nonempty) - 1)
        text_of = lambda ln: lines[ln - 1].rstrip(b"\r").decode("utf-8", "replace")  # noqa: E731
        try:
            header = next(csv.reader([text_of(nonempty[0]).lstrip("\ufeff")])) if nonempty else []
        except csv.Error as exc:
            return None, [_whole(f"unreadable CSV header: {_one_line(exc)}")], max(1, n_data)
        header = [h.strip() for h in header]
        missing = [c for c in self.schema.names if c not in header]
        if missing:
            return None, [_whole(f"header lacks column(s) {', '.join(map(repr, missing))}", line=nonempty[0] if nonempty else None,
                                 record=text_of(nonempty[0]) if nonempty else None)], max(1, n_data)

        if n_data == 0:  # header only: nothing to ingest, nothing wrong
            return pa.Table.from_batches([], schema=self.schema), [], 0

        invalid: list[tuple[int, str, int, int]] = []

        def on_invalid(row) -> str:
            invalid.append((row.number, row.text, row.expected_columns, row.actual_columns))
            return "skip"

        # Hand pyarrow only the bytes after the header line: its skip_rows
        # counts blank lines too, which would misplace the header.
        body_start = sum(len(ln) + 1 for ln in lines[: nonempty[0]])
        try:
            table = pa_csv.read_csv(
                io.BytesIO(raw[body_start:]),
                read_options=pa_csv.ReadOptions(use_threads=False, column_names=header),
                parse_options=pa_csv.ParseOptions(invalid_row_handler=on_invalid),
                convert_options=pa_csv.ConvertOptions(
                    column_types={h: pa.string() for h in header},
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                    include_columns=list(self.schema.names),
                ),
            )
        except (pa.ArrowException, ValueError) as exc:
            return None, [_whole(f"unreadable CSV: {_one_line(exc)}")], max(1, n_data)

        rejects: list[dict] = []
        bad_numbers = set()
        for number, text, expected, actual in invalid:
            # pyarrow numbers records 1-based over non-empty lines; nonempty[0]
            # is the header, so data record k sits on physical line nonempty[k].
            rec = number if number is not None and number > 0 else None
            bad_numbers.add(rec)
            line = nonempty[rec] if rec is not None and rec < len(nonempty) else None
            rejects.append({"line": line, "record": text, "reason": f"expected {expected} columns, got {actual}"})

        valid_recs = [k for k in range(1, len(nonempty)) if k not in bad_numbers]
        if len(valid_recs) == table.num_rows:
            row_line = [nonempty[k] for k in valid_recs]
            row_record = lambda i: text_of(row_line[i])  # noqa: E731
        else:  # quoted newlines inside values: physical lines are unknown
            row_line = [None] * table.num_rows
            row_record = lambda i: {c: table.column(c)[i].as_py() for c in table.column_names}  # noqa: E731

        problems = _Rejects()
        arrays = []
        for field in self.schema:
            arrays.append(_convert_strings(field, table.column(field.name).combine_chunks(), problems))
        good, bad_rows = self._finish(arrays, problems, table.num_rows)
        for i in bad_rows:
            rejects.append({"line": row_line[i], "record": row_record(i), "reason": "; ".join(problems.by_row[i])})
        rejects.sort(key=lambda r: (r["line"] is None, r["line"] or 0))
        return good, rejects, len(rejects)

    def _parse_json(self, path: Path):
        try:
            text = path.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            return None, [_whole(f"file is not UTF-8: {_one_line(exc)}")], 1
        rejects: list[dict] = []
        records: list[dict] = []
        where: list[tuple[int, Any]] = []  # (line or index, raw record) of each kept record
        if text.lstrip().startswith("["):
            try:
                items = json.loads(text)
            except ValueError as exc:
                return None, [_whole(f"invalid JSON array: {_one_line(exc)}")], 1
            for i, item in enumerate(items):
                if isinstance(item, dict):
                    records.append(item)
                    where.append((i, item))
                else:
                    rejects.append({"line": i, "record": item, "reason": "record is not a JSON object"})
        else:
            for i, ln in enumerate(text.split("\n"), start=1):
                s = ln.strip()
                if not s:
                    continue
                try:
                    item = json.loads(s)
                except ValueError as exc:
                    rejects.append({"line": i, "record": ln.rstrip("\r"), "reason": f"invalid JSON: {_one_line(exc)}"})
                    continue
                if not isinstance(item, dict):
                    rejects.append({"line": i, "record": ln.rstrip("\r"), "reason": "record is not a JSON object"})
                    continue
                records.append(item)
                where.append((i, ln.rstrip("\r")))
        problems = _Rejects()
        arrays = [_convert_python(f, [r.get(f.name) for r in records], problems) for f in self.schema]
        good, bad_rows = self._finish(arrays, problems, len(records))
        for i in bad_rows:
            rejects.append({"line": where[i][0], "record": where[i][1], "reason": "; ".join(problems.by_row[i])})
        rejects.sort(key=lambda r: r["line"])
        return good, rejects, len(rejects)

    def _parse_parquet(self, path: Path):
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            return None, [_whole(f"unreadable Parquet file: {_one_line(exc)}")], 1
        missing = [c for c in self.schema.names if c not in table.column_names]
        if missing:
            return None, [_whole(f"file lacks column(s) {', '.join(map(repr, missing))}")], max(1, table.num_rows)
        loose = pa.schema([f.with_nullable(True) for f in self.schema])
        try:
            table = table.select(self.schema.names).cast(loose)
        except (pa.ArrowException, ValueError) as exc:
            return None, [_whole(f"cannot convert to the spool schema: {_one_line(exc)}")], max(1, table.num_rows)
        problems = _Rejects()
        arrays = []
        for field in self.schema:
            arr = table.column(field.name).combine_chunks()
            if not field.nullable and arr.null_count:
                nulls = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))
                problems.add_many(nulls, lambda r, n=field.name: f"column '{n}': value is missing")
            arrays.append(arr)
        good, bad_rows = self._finish(arrays, problems, table.num_rows)
        rejects = [{"line": i, "record": table.slice(i, 1).to_pylist()[0], "reason": "; ".join(problems.by_row[i])}
                   for i in bad_rows]
        return good, rejects, len(rejects)

    def _finish(self, arrays: list[pa.Array], problems: _Rejects, n: int) -> tuple[pa.Table, list[int]]:
        """Apply range checks, drop rejected rows, return (good table, bad row indices)."""
        for col, (lo, hi) in self.checks.items():
            arr = arrays[self.schema.get_field_index(col)]
            out = None
            if lo is not None:
                out = pc.less(arr, pa.scalar(lo))
            if hi is not None:
                gt = pc.greater(arr, pa.scalar(hi))
                out = gt if out is None else pc.or_(out, gt)
            if out is None:
                continue
            bad = np.flatnonzero(out.fill_null(False).to_numpy(zero_copy_only=False))
            if bad.size:
                lo_s, hi_s = ("-inf" if lo is None else lo), ("inf" if hi is None else hi)
                problems.add_many(
                    bad, lambda r, a=arr, c=col, l=lo_s, h=hi_s: f"column '{c}': value {_show(a[r].as_py())} is outside [{l}, {h}]"
                )
        mask = problems.good_mask(n)
        mask_arr = pa.array(mask, type=pa.bool_())
        kept = [a.filter(mask_arr) for a in arrays]
        good = pa.Table.from_arrays(kept, schema=self.schema)
        return good, sorted(problems.by_row)

    # ------------------------------------------------------------- threading
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan_once()
                self.error = None
            except Exception as exc:  # kept for the caller; the directory may come back
                self.error = exc
            self._stop.wait(self.poll_interval_s)

    def start(self) -> "DirectoryIngest":
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


def _whole(reason: str, *, line: int | None = None, record: Any = None) -> dict:
    return {"line": line, "record": record, "reason": reason}


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _convert_strings(field: pa.Field, arr: pa.Array, problems: _Rejects) -> pa.Array:
    """Convert a CSV text column to ``field.type``; bad cells become null + a problem."""
    name, typ = field.name, field.type
    if _is_text(typ):
        empty = pc.equal(arr, "")
        values = pc.if_else(empty, pa.scalar(None, pa.string()), arr).cast(typ)
    else:
        trimmed = pc.utf8_trim_whitespace(arr)
        empty = pc.equal(trimmed, "")
        values = _cast_or_null(pc.if_else(empty, pa.scalar(None, pa.string()), trimmed), typ, name, problems)
    if not field.nullable:
        rows = np.flatnonzero(empty.to_numpy(zero_copy_only=False))
        problems.add_many(rows, lambda r: f"column '{name}': value is empty")
    return values


def _cast_or_null(values: pa.Array, typ: pa.DataType, name: str, problems: _Rejects) -> pa.Array:
    try:
        return pc.cast(values, typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    # Cast chunk by chunk; only a failing chunk pays for value-by-value casts.
    parts = []
    for start in range(0, len(values), _CAST_CHUNK):
        chunk = values.slice(start, _CAST_CHUNK)
        try:
            parts.append(pc.cast(chunk, typ))
            continue
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
        out = []
        for j, v in enumerate(chunk.to_pylist()):
            if v is None:
                out.append(None)
                continue
            try:
                out.append(pc.cast(pa.array([v], pa.string()), typ)[0].as_py())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                problems.add(start + j, f"column '{name}': value {_show(v)} is not {typ}")
                out.append(None)
        parts.append(pa.array(out, type=typ))
    return pa.concat_arrays(parts) if parts else pa.array([], type=typ)


def _json_type_ok(v: Any, typ: pa.DataType) -> bool:
    if pa.types.is_integer(typ):
        return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    if pa.types.is_floating(typ) or pa.types.is_decimal(typ):
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if pa.types.is_boolean(typ):
        return isinstance(v, bool)
    if _is_text(typ):
        return isinstance(v, str)
    return True  # other types: whatever pyarrow accepts


def _convert_python(field: pa.Field, values: list, problems: _Rejects) -> pa.Array:
    """Convert JSON values to ``field.type``; bad values become null + a problem."""
    name, typ = field.name, field.type
    clean = []
    for i, v in enumerate(values):
        if v is None:
            if not field.nullable:
                problems.add(i, f"column '{name}': value is missing")
        elif not _json_type_ok(v, typ):
            problems.add(i, f"column '{name}': value {_show(v)} is not {typ}")
            v = None
        clean.append(v)
    try:
        return pa.array(clean, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        pass
    out = []
    for i, v in enumerate(clean):  # e.g. an integer too large for int32
        try:
            out.append(pa.array([v], type=typ)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            problems.add(i, f"column '{name}': value {_show(v)} is not {typ}")
            out.append(None)
    return pa.array(out, type=typ)
