"""Reading a landed file of a supported format into an Arrow table of the spool's schema.

:func:`parse_file` picks the reader by extension (CSV, JSON / JSON Lines, Parquet); the rows that
fail :mod:`.validate`'s checks come back as dead-letter entries instead, and so does a whole file
that cannot be read as its format at all (random bytes, another text encoding, a truncated
Parquet file), with a one-line reason.

Example
-------
>>> import pyarrow as pa, tempfile
>>> from pathlib import Path
>>> path = Path(tempfile.mkdtemp()) / "a.jsonl"
>>> _ = path.write_text('{"x": 1}\\n{"x": "two"}\\n{"x": 3}\\n')
>>> table, rejects, rows_bad = parse_file(path, pa.schema([("x", pa.int32())]), {})
>>> table.column("x").to_pylist(), rows_bad
([1, 3], 1)
>>> rejects
[{'line': 2, 'record': '{"x": "two"}', 'reason': "column 'x': value 'two' is not int32"}]

A file that is not text is rejected whole, naming the first byte that gives it away:

>>> _ = path.with_suffix(".csv").write_bytes(b"x\\n1\\n\\x9c\\x01\\n")
>>> table, rejects, rows_bad = parse_file(path.with_suffix(".csv"), pa.schema([("x", pa.int32())]), {})
>>> table, rows_bad, rejects[0]["line"]
(None, 2, None)
>>> print(rejects[0]["reason"])
file is not UTF-8 text (byte 0x9c at offset 4, line 3): not a CSV file, or one in another encoding
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv

from ..exceptions import ConfigError
from ..exceptions import one_line as _one_line
from .validate import (
    _ColumnTypeError,
    _convert_arrow,
    _convert_python,
    _convert_strings,
    _Rejects,
    _show,
    _whole,
    apply_checks,
)

__all__ = ["parse_file"]

_CSV_EXT = {".csv"}
_JSON_EXT = {".json", ".jsonl", ".ndjson"}
_PARQUET_EXT = {".parquet", ".pq"}

#: Start of the reason of a file whose parsing failed in a way no reader foresaw (a bug).
INTERNAL_ERROR = "could not parse the file (internal error, please report it):"

# pyarrow's CSV reader ends a line at "\r\n", "\n" or a lone "\r"; line numbers must agree with it.
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
_UTF8_BOM = b"\xef\xbb\xbf"
# Byte order marks of the encodings a "text" file most often has instead of UTF-8 (UTF-32 first:
# its little-endian mark starts with UTF-16's).
_OTHER_BOMS = ((b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe\x00\x00", "UTF-32"),
               (b"\xfe\xff", "UTF-16"), (b"\xff\xfe", "UTF-16"))
_UTF8_STEP = 1 << 20  # bytes decoded at a time when checking a file is UTF-8 (bounds the memory)
_MIN_BLOCK = 1 << 20  # pyarrow's default CSV block size


def parse_file(
    path: Path, schema: pa.Schema, checks: Mapping[str, Any]
) -> tuple[pa.Table | None, list[dict], int]:
    """Read the landed file ``path`` into rows of ``schema``, checking each row.

    Parameters
    ----------
    path : Path
        A ``.csv``, ``.json`` / ``.jsonl`` / ``.ndjson`` or ``.parquet`` / ``.pq`` file.
    schema : pa.Schema
        The spool's schema: columns are matched by name and converted to its types.
    checks : mapping
        Value checks per column, as returned by :func:`~.validate.validate_checks`.

    Returns
    -------
    table : pa.Table or None
        The good rows (possibly none), or None when the whole file is rejected.
    rejects : list of dict
        Dead-letter entries (``line``, ``record``, ``reason``).  A file rejected whole has one
        entry, with ``line`` and ``record`` None (or the header line and its text, for a CSV
        header that lacks or repeats a column).
    rows_bad : int
        Rows rejected: ``len(rejects)``, or for a file rejected whole the rows it seems to hold
        (at least 1).

    Raises
    ------
    OSError
        If the file cannot be read (gone, no permission): the file itself may be fine.
    ConfigError
        If a check does not fit its column (allowed values of another type).

    Notes
    -----
    * A ``.csv`` or JSON file must be UTF-8 text (a UTF-8 byte order mark, and ``\\r\\n`` or
      ``\\r`` line ends, are fine); one that is not (another encoding, a NUL byte, random bytes)
      is rejected whole, the reason naming the first offending byte, its offset and line.
    * Repeated columns: a CSV header naming a spool column twice, or a Parquet file holding it
      twice, rejects the file; a JSON record giving a spool column twice rejects the record.  A
      repeated column the spool does not use is ignored, like any extra column.
    * Parquet values convert column by column with Arrow's safe cast (text like CSV cells; a
      finer time unit truncated): a value that does not convert rejects its row only.  A column
      of a type that cannot convert at all (a list for an int32 column), a missing or repeated
      column, or a file that is not Parquet (truncated, random bytes) rejects the file.
    * No content makes this raise: a failure no reader foresaw rejects the file whole with a
      reason starting with :data:`INTERNAL_ERROR`, so one odd file never stops the ingest.
    """
    ext = path.suffix.lower()
    if ext in _CSV_EXT:
        reader = _parse_csv
    elif ext in _JSON_EXT:
        reader = _parse_json
    elif ext in _PARQUET_EXT:
        reader = _parse_parquet
    else:
        return None, [_whole(f"unsupported file type {ext or '(none)'!r}; use .csv, .json, .jsonl or .parquet")], 1
    try:
        return reader(path, schema, checks)
    except (OSError, MemoryError, ConfigError):
        raise  # not the file's content: the caller decides (the next scan may succeed)
    except Exception as exc:  # noqa: BLE001 - a reader bug must not kill the ingest; say what it was
        return None, [_whole(f"{INTERNAL_ERROR} {type(exc).__name__}: {_one_line(exc)}")], 1


# ----------------------------------------------------------------------------- text files
def _line_of(raw: bytes, offset: int) -> int:
    return raw.count(b"\n", 0, offset) + 1


def _first_non_utf8(raw: bytes) -> int | None:
    """Offset of the first byte of ``raw`` that is not part of valid UTF-8, or None."""
    if raw.isascii():
        return None
    view = memoryview(raw)
    start, n = 0, len(raw)
    while start < n:
        end = min(n, start + _UTF8_STEP)
        # Do not cut a character in two: back up over (at most 3) continuation bytes.
        for _ in range(3):
            if start < end < n and 0x80 <= raw[end] < 0xC0:
                end -= 1
        try:
            str(view[start:end], "utf-8")
        except UnicodeDecodeError as exc:
            return start + exc.start
        start = end
    return None


def _not_text(raw: bytes, kind: str) -> str | None:
    """Why ``raw`` is not UTF-8 text (a reason naming the first offending byte), or None."""
    for bom, encoding in _OTHER_BOMS:
        if raw.startswith(bom):
            return (f"file is {encoding} text (byte order mark {bom.hex(' ')}), not UTF-8: "
                    f"save the {kind} file as UTF-8")
    bad = _first_non_utf8(raw)
    nul = raw.find(b"\x00")
    # A NUL is valid UTF-8 but no text file holds one: the mark of a binary (or UTF-16) file.
    if nul >= 0 and (bad is None or nul < bad):
        return f"file is not text (NUL byte at offset {nul}, line {_line_of(raw, nul)}): not a {kind} file"
    if bad is not None:
        return (f"file is not UTF-8 text (byte 0x{raw[bad]:02x} at offset {bad}, line {_line_of(raw, bad)}): "
                f"not a {kind} file, or one in another encoding")
    return None


def _split_lines(raw: bytes) -> list[bytes]:
    """``raw`` cut at ``\\r\\n``, ``\\n`` or a lone ``\\r`` (as pyarrow's CSV reader does)."""
    n_cr = raw.count(b"\r")
    if n_cr == 0:  # the usual case, and bytes.split is much faster than the regex
        return raw.split(b"\n")
    if n_cr == raw.count(b"\r\n"):
        return [ln[:-1] if ln.endswith(b"\r") else ln for ln in raw.split(b"\n")]
    return _LINE_BREAK.split(raw)


def _rough_rows(raw: bytes, header: bool) -> int:
    """Rows a file rejected whole seems to hold (non-empty lines, less a header), at least 1."""
    lines = sum(1 for ln in _LINE_BREAK.split(raw) if ln.strip())
    return max(1, lines - (1 if header else 0))


# ------------------------------------------------------------------------------------- CSV
def _parse_csv(path: Path, schema: pa.Schema, checks: Mapping[str, Any]):
    raw = path.read_bytes()
    reason = _not_text(raw, "CSV")
    if reason is not None:
        return None, [_whole(reason)], _rough_rows(raw, header=True)
    raw = raw.removeprefix(_UTF8_BOM)
    lines = _split_lines(raw)
    # Physical line numbers of non-empty lines: pyarrow numbers records
    # counting non-empty lines only, and we report physical lines.
    nonempty = [i + 1 for i, ln in enumerate(lines) if ln]
    n_data = max(0, len(nonempty) - 1)
    text_of = lambda ln: lines[ln - 1].decode("utf-8")  # checked to be UTF-8 above
    if not nonempty:
        return None, [_whole("file has no header line")], 1
    try:
        header = next(csv.reader([text_of(nonempty[0])]))
    except csv.Error as exc:
        return None, [_whole(f"unreadable CSV header: {_one_line(exc)}", line=nonempty[0],
                             record=text_of(nonempty[0]))], max(1, n_data)
    header = [h.strip() for h in header]
    missing = [c for c in schema.names if c not in header]
    if missing:
        return None, [_whole(f"header lacks column(s) {', '.join(map(repr, missing))}", line=nonempty[0],
                             record=text_of(nonempty[0]))], max(1, n_data)
    # Which of two same-named columns holds the value is anyone's guess: refuse to pick one.
    # A repeated column the spool does not use is ignored like any extra column.
    repeated = [c for c in schema.names if header.count(c) > 1]
    if repeated:
        return None, [_whole(f"header repeats column(s) {', '.join(map(repr, repeated))}", line=nonempty[0],
                             record=text_of(nonempty[0]))], max(1, n_data)

    if n_data == 0:  # header only: nothing to ingest, nothing wrong
        return pa.Table.from_batches([], schema=schema), [], 0

    invalid: list[tuple[int, str, int, int]] = []

    def on_invalid(row) -> str:
        invalid.append((row.number, row.text, row.expected_columns, row.actual_columns))
        return "skip"

    # Hand pyarrow only the bytes after the header line: its skip_rows
    # counts blank lines too, which would misplace the header.
    body_start = len(raw)
    for k, brk in enumerate(_LINE_BREAK.finditer(raw)):
        if k == nonempty[0] - 1:
            body_start = brk.end()
            break
    # A record longer than a block fails the whole read ("straddles two block boundaries").
    block = min(max(_MIN_BLOCK, 2 * max(map(len, lines)) + 64), 2**31 - 1)
    try:
        table = pa_csv.read_csv(
            io.BytesIO(raw[body_start:]),
            read_options=pa_csv.ReadOptions(use_threads=False, column_names=header, block_size=block),
            parse_options=pa_csv.ParseOptions(invalid_row_handler=on_invalid),
            convert_options=pa_csv.ConvertOptions(
                column_types={h: pa.string() for h in header},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                include_columns=list(schema.names),
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
        row_record = lambda i: text_of(row_line[i])
    else:  # quoted newlines inside values: physical lines are unknown
        row_line = [None] * table.num_rows
        row_record = lambda i: {c: table.column(c)[i].as_py() for c in table.column_names}

    problems = _Rejects()
    arrays = []
    for field in schema:
        arrays.append(_convert_strings(field, table.column(field.name).combine_chunks(), problems))
    good, bad_rows = apply_checks(arrays, problems, table.num_rows, schema, checks)
    for i in bad_rows:
        rejects.append({"line": row_line[i], "record": row_record(i), "reason": "; ".join(problems.by_row[i])})
    rejects.sort(key=lambda r: (r["line"] is None, r["line"] or 0))
    return good, rejects, len(rejects)


# ------------------------------------------------------------------------------------ JSON
class _Repeated(dict):
    """A JSON object naming a key more than once; ``repeated`` maps each such key to its values."""

    repeated: dict[str, list]


def _object(pairs: list[tuple[str, Any]]) -> dict:
    # json.loads keeps the last of repeated keys silently; remember them so the row can say so.
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    out = _Repeated(obj)
    values: dict[str, list] = {}
    for k, v in pairs:
        values.setdefault(k, []).append(v)
    out.repeated = {k: vs for k, vs in values.items() if len(vs) > 1}
    return out


def _repeated_reason(item: dict, schema: pa.Schema) -> str | None:
    repeated = getattr(item, "repeated", None)
    if not repeated:
        return None
    parts = [f"column '{k}': given {len(vs)} times ({', '.join(_show(v) for v in vs)})"
             for k, vs in repeated.items() if k in schema.names]
    return "; ".join(parts) or None


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _parse_json(path: Path, schema: pa.Schema, checks: Mapping[str, Any]):
    """JSON Lines, or one JSON array of objects: a file is an array if it starts with ``[`` and
    parses whole (a one-line file ``[1, 2]`` is an array of two non-objects) or its first line
    alone does not parse (a broken array); otherwise it is JSON Lines."""
    raw = path.read_bytes()
    reason = _not_text(raw, "JSON")
    if reason is not None:
        return None, [_whole(reason)], _rough_rows(raw, header=False)
    text = raw.decode("utf-8-sig")
    rejects: list[dict] = []
    records: list[dict] = []
    where: list[tuple[int, Any]] = []  # (line or index, raw record) of each kept record

    def keep(item: Any, line: int, record: Any) -> None:
        if not isinstance(item, dict):
            rejects.append({"line": line, "record": record, "reason": "record is not a JSON object"})
            return
        repeated = _repeated_reason(item, schema)
        if repeated:
            rejects.append({"line": line, "record": record, "reason": repeated})
            return
        records.append(item)
        where.append((line, record))

    items = None
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text, object_pairs_hook=_object)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            # JSON Lines whose first record happens to be an array: the first line parses alone.
            if not _parses(text.lstrip().split("\n", 1)[0]):
                return None, [_whole(f"invalid JSON array: {_one_line(exc)}")], 1
    if items is not None:
        for i, item in enumerate(items):
            keep(item, i, item)
    else:
        for i, ln in enumerate(text.split("\n"), start=1):
            s = ln.strip()
            if not s:
                continue
            try:
                item = json.loads(s, object_pairs_hook=_object)
            except (ValueError, RecursionError) as exc:
                rejects.append({"line": i, "record": ln.rstrip("\r"), "reason": f"invalid JSON: {_one_line(exc)}"})
                continue
            keep(item, i, ln.rstrip("\r"))
    problems = _Rejects()
    arrays = [_convert_python(f, [r.get(f.name) for r in records], problems) for f in schema]
    good, bad_rows = apply_checks(arrays, problems, len(records), schema, checks)
    for i in bad_rows:
        rejects.append({"line": where[i][0], "record": where[i][1], "reason": "; ".join(problems.by_row[i])})
    rejects.sort(key=lambda r: r["line"])
    return good, rejects, len(rejects)


# --------------------------------------------------------------------------------- Parquet
def _parse_parquet(path: Path, schema: pa.Schema, checks: Mapping[str, Any]):
    import pyarrow.parquet as pq

    # Read the bytes first: an OSError is then about the file system (raised, as for CSV), and
    # everything pyarrow says afterwards is about the content.
    raw = path.read_bytes()
    try:
        table = pq.ParquetFile(pa.BufferReader(raw)).read()
    except (pa.ArrowException, OSError, ValueError, IndexError) as exc:
        return None, [_whole(f"not a readable Parquet file: {_one_line(exc)}")], 1
    names = table.column_names
    missing = [c for c in schema.names if c not in names]
    if missing:
        return None, [_whole(f"file lacks column(s) {', '.join(map(repr, missing))}")], max(1, table.num_rows)
    repeated = [c for c in schema.names if names.count(c) > 1]
    if repeated:
        return None, [_whole(f"file has column(s) {', '.join(map(repr, repeated))} more than once")], \
            max(1, table.num_rows)
    table = table.select(schema.names)
    problems = _Rejects()
    arrays = []
    try:
        for field in schema:
            arrays.append(_convert_arrow(field, table.column(field.name).combine_chunks(), problems))
    except _ColumnTypeError as exc:
        return None, [_whole(f"cannot convert to the spool schema: {exc}")], max(1, table.num_rows)
    good, bad_rows = apply_checks(arrays, problems, table.num_rows, schema, checks)
    # The record is the row as the file held it (before conversion), so the bad value shows.
    records = table.take(pa.array(bad_rows, type=pa.int64())).to_pylist() if bad_rows else []
    rejects = [{"line": i, "record": rec, "reason": "; ".join(problems.by_row[i])}
               for i, rec in zip(bad_rows, records)]
    return good, rejects, len(rejects)
