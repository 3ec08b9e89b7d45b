"""Reading a landed file of a supported format into an Arrow table of the spool's schema.

:func:`parse_file` picks the reader by extension (CSV, JSON / JSON Lines, Parquet); the rows that
fail :mod:`.validate`'s checks come back as dead-letter entries instead.

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
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from ..exceptions import one_line as _one_line
from .validate import _convert_python, _convert_strings, _Rejects, _whole, apply_checks

__all__ = ["parse_file"]

_CSV_EXT = {".csv"}
_JSON_EXT = {".json", ".jsonl", ".ndjson"}
_PARQUET_EXT = {".parquet", ".pq"}


def parse_file(
    path: Path, schema: pa.Schema, checks: Mapping[str, tuple]
) -> tuple[pa.Table | None, list[dict], int]:
    """Return (good rows or None, dead-letter entries, number of rows rejected)."""
    ext = path.suffix.lower()
    if ext in _CSV_EXT:
        return _parse_csv(path, schema, checks)
    if ext in _JSON_EXT:
        return _parse_json(path, schema, checks)
    if ext in _PARQUET_EXT:
        return _parse_parquet(path, schema, checks)
    return None, [_whole(f"unsupported file type {ext or '(none)'!r}; use .csv, .json, .jsonl or .parquet")], 1


def _parse_csv(path: Path, schema: pa.Schema, checks: Mapping[str, tuple]):
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    # Physical line numbers of non-empty lines: pyarrow numbers records
    # counting non-empty lines only, and we report physical lines.
    nonempty = [i + 1 for i, ln in enumerate(lines) if ln not in (b"", b"\r")]
    n_data = max(0, len(nonempty) - 1)
    text_of = lambda ln: lines[ln - 1].rstrip(b"\r").decode("utf-8", "replace")
    try:
        header = next(csv.reader([text_of(nonempty[0]).lstrip("\ufeff")])) if nonempty else []
    except csv.Error as exc:
        return None, [_whole(f"unreadable CSV header: {_one_line(exc)}")], max(1, n_data)
    header = [h.strip() for h in header]
    missing = [c for c in schema.names if c not in header]
    if missing:
        return None, [_whole(f"header lacks column(s) {', '.join(map(repr, missing))}", line=nonempty[0] if nonempty else None,
                             record=text_of(nonempty[0]) if nonempty else None)], max(1, n_data)

    if n_data == 0:  # header only: nothing to ingest, nothing wrong
        return pa.Table.from_batches([], schema=schema), [], 0

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


def _parse_json(path: Path, schema: pa.Schema, checks: Mapping[str, tuple]):
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
    arrays = [_convert_python(f, [r.get(f.name) for r in records], problems) for f in schema]
    good, bad_rows = apply_checks(arrays, problems, len(records), schema, checks)
    for i in bad_rows:
        rejects.append({"line": where[i][0], "record": where[i][1], "reason": "; ".join(problems.by_row[i])})
    rejects.sort(key=lambda r: r["line"])
    return good, rejects, len(rejects)


def _parse_parquet(path: Path, schema: pa.Schema, checks: Mapping[str, tuple]):
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        return None, [_whole(f"unreadable Parquet file: {_one_line(exc)}")], 1
    missing = [c for c in schema.names if c not in table.column_names]
    if missing:
        return None, [_whole(f"file lacks column(s) {', '.join(map(repr, missing))}")], max(1, table.num_rows)
    loose = pa.schema([f.with_nullable(True) for f in schema])
    try:
        table = table.select(schema.names).cast(loose)
    except (pa.ArrowException, ValueError) as exc:
        return None, [_whole(f"cannot convert to the spool schema: {_one_line(exc)}")], max(1, table.num_rows)
    problems = _Rejects()
    arrays = []
    for field in schema:
        arr = table.column(field.name).combine_chunks()
        if not field.nullable and arr.null_count:
            nulls = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))
            problems.add_many(nulls, lambda r, n=field.name: f"column '{n}': value is missing")
        arrays.append(arr)
    good, bad_rows = apply_checks(arrays, problems, table.num_rows, schema, checks)
    rejects = [{"line": i, "record": table.slice(i, 1).to_pylist()[0], "reason": "; ".join(problems.by_row[i])}
               for i in bad_rows]
    return good, rejects, len(rejects)
