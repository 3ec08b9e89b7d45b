"""Checks of ingested rows and columns (types, missing values, ranges) and the dead-letter records.

A row that fails a check is dropped with a one-line reason; :func:`write_dead_letter` appends the
reasons to a JSON Lines file, so malformed records never stop ingestion.

Example
-------
>>> import pyarrow as pa
>>> schema = pa.schema([("speed", pa.int32())])
>>> problems = _Rejects()
>>> speed = _convert_strings(schema.field("speed"), pa.array(["55", "abc", "120"]), problems)
>>> good, bad_rows = apply_checks([speed], problems, 3, schema, validate_checks({"speed": (0, 100)}, schema))
>>> good.column("speed").to_pylist(), bad_rows
([55], [1, 2])
>>> problems.by_row[1], problems.by_row[2]
(["column 'speed': value 'abc' is not int32"], ["column 'speed': value 120 is outside [0, 100]"])
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lmstream_kit.exceptions import ConfigError

__all__ = ["apply_checks", "validate_checks", "write_dead_letter"]

_CAST_CHUNK = 4096  # rows per cast attempt; a bad value costs per-value casts of one chunk only
_SHOW_MAX = 80




def _show(value: Any) -> str:
    """Render a bad value for a reason: quoted text for strings, JSON otherwise."""
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= _SHOW_MAX else text[: _SHOW_MAX - 3] + "..."


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


def validate_checks(checks: Mapping, schema: pa.Schema) -> dict[str, Any]:
    """``checks`` after checking each names a column of ``schema`` and is a check of a known kind.

    A check is a ``(lo, hi)`` range (either end may be None), a set of allowed
    values, or a function ``f(value) -> bool`` of one non-null value.

    Raises
    ------
    ConfigError
        For an unknown column, a check of another kind, or ``lo > hi``.
    """
    out: dict[str, Any] = {}
    for col, check in checks.items():
        if col not in schema.names:
            raise ConfigError(f"check on unknown column {col!r}; spool columns: {', '.join(schema.names)}")
        if isinstance(check, (set, frozenset)):
            out[col] = frozenset(check)
            continue
        if callable(check):
            out[col] = check
            continue
        try:
            lo, hi = check
        except (TypeError, ValueError):
            raise ConfigError(f"check for column {col!r} must be a (lo, hi) pair, a set of allowed values "
                              f"or a function of the value, got {check!r}") from None
        if lo is not None and hi is not None and lo > hi:
            raise ConfigError(f"check for column {col!r} has lo > hi: ({lo}, {hi})")
        out[col] = (lo, hi)
    return out


def _check_name(fn: Callable) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def _failing(arr: pa.Array, col: str, check: Any) -> tuple[np.ndarray, Callable[[int], str]]:
    """Rows of ``arr`` that fail ``check`` (nulls never do) and the reason for a row."""
    show = lambda r: _show(arr[r].as_py())  # noqa: E731
    if isinstance(check, (set, frozenset)):
        allowed = sorted(check, key=repr)
        try:
            inside = pc.is_in(arr, value_set=pa.array(allowed, type=arr.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            raise ConfigError(f"check for column {col!r}: allowed values {allowed!r} are not {arr.type}") from None
        bad = pc.and_(pc.invert(inside), arr.is_valid())
        listed = ", ".join(map(repr, allowed[:10])) + (", ..." if len(allowed) > 10 else "")
        return (np.flatnonzero(bad.to_numpy(zero_copy_only=False)),
                lambda r: f"column '{col}': value {show(r)} is not one of {{{listed}}}")
    if callable(check):
        errors: dict[int, str] = {}
        bad_rows = []
        for r, v in enumerate(arr.to_pylist()):
            if v is None:
                continue
            try:
                ok = bool(check(v))
            except Exception as exc:  # the user's check raised: the row fails with the reason
                ok, errors[r] = False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if not ok:
                bad_rows.append(r)
        name = _check_name(check)
        return (np.array(bad_rows, dtype=np.int64),
                lambda r: f"column '{col}': value {show(r)} fails check {name}"
                + (f" ({errors[r]})" if r in errors else ""))
    lo, hi = check
    out = None
    if lo is not None:
        out = pc.less(arr, pa.scalar(lo))
    if hi is not None:
        gt = pc.greater(arr, pa.scalar(hi))
        out = gt if out is None else pc.or_(out, gt)
    if out is None:
        return np.array([], dtype=np.int64), show
    lo_s, hi_s = ("-inf" if lo is None else lo), ("inf" if hi is None else hi)
    return (np.flatnonzero(out.fill_null(False).to_numpy(zero_copy_only=False)),
            lambda r: f"column '{col}': value {show(r)} is outside [{lo_s}, {hi_s}]")


def apply_checks(
    arrays: list[pa.Array], problems: _Rejects, n: int, schema: pa.Schema, checks: Mapping[str, Any]
) -> tuple[pa.Table, list[int]]:
    """Apply the value checks, drop rejected rows, return (good table, bad row indices)."""
    for col, check in checks.items():
        arr = arrays[schema.get_field_index(col)]
        bad, reason_of = _failing(arr, col, check)
        if bad.size:
            problems.add_many(bad, reason_of)
    mask = problems.good_mask(n)
    mask_arr = pa.array(mask, type=pa.bool_())
    kept = [a.filter(mask_arr) for a in arrays]
    good = pa.Table.from_arrays(kept, schema=schema)
    return good, sorted(problems.by_row)


def write_dead_letter(path: Path, name: str, rejects: list[dict]) -> None:
    """Append the ``rejects`` of file ``name`` to the JSON Lines dead-letter file ``path``.

    One entry per rejected record::

        {"file": "a.csv", "line": 7, "record": "12,abc,...",
         "reason": "column 'speed': value 'abc' is not int32", "at": 1718000000.0}

    ``line`` is the 1-based physical line for CSV and JSON Lines, the 0-based
    row index for Parquet and JSON arrays, and null when the whole file is
    rejected.  ``record`` is the raw line (CSV, JSON Lines) or the row as an
    object (JSON array, Parquet).
    """
    if not rejects:
        return
    at = time.time()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.writelines(json.dumps({"file": name, "line": r["line"], "record": r["record"],
                                 "reason": r["reason"], "at": at}, default=str) + "\n" for r in rejects)


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
        if pa.types.is_timestamp(typ) and typ.tz is not None:
            trimmed = _zoned(trimmed)
        values = _cast_or_null(pc.if_else(empty, pa.scalar(None, pa.string()), trimmed), typ, name, problems)
    if not field.nullable:
        rows = np.flatnonzero(empty.to_numpy(zero_copy_only=False))
        problems.add_many(rows, lambda r: f"column '{name}': value is empty")
    return values


def _zoned(text: pa.Array) -> pa.Array:
    """ISO timestamps without a zone offset read as UTC (pyarrow wants one for a zoned type)."""
    naive = pc.match_substring_regex(text, r"^\d{4}-\d\d-\d\d([T ]\d\d:\d\d(:\d\d(\.\d+)?)?)?$")
    return pc.if_else(naive.fill_null(False), pc.binary_join_element_wise(text, "Z", ""), text)


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


def _timestamps_from_json(field: pa.Field, values: list, problems: _Rejects) -> pa.Array:
    name, typ = field.name, field.type
    text: list = [None] * len(values)
    seconds: list = [None] * len(values)
    for i, v in enumerate(values):
        if v is None:
            if not field.nullable:
                problems.add(i, f"column '{name}': value is missing")
        elif isinstance(v, str):
            text[i] = v.strip()
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            seconds[i] = float(v)
        else:
            problems.add(i, f"column '{name}': value {_show(v)} is not {typ}")
    texts = pa.array(text, type=pa.string())
    if typ.tz is not None:
        texts = _zoned(texts)
    parsed = _cast_or_null(texts, typ, name, problems)
    micros = pa.array([None if s is None else int(round(s * 1e6)) for s in seconds], type=pa.int64())
    from_seconds = micros.cast(pa.timestamp("us", tz=typ.tz)).cast(typ)
    return pc.if_else(pc.is_valid(micros), from_seconds, parsed)


def _convert_python(field: pa.Field, values: list, problems: _Rejects) -> pa.Array:
    """Convert JSON values to ``field.type``; bad values become null + a problem.

    Timestamps come as ISO text (without a zone: UTC) or as epoch seconds.
    """
    name, typ = field.name, field.type
    if pa.types.is_timestamp(typ):
        return _timestamps_from_json(field, values, problems)
    clean = []
    for i, v in enumerate(values):
        if v is None:
            if not field.nullable:
                problems.add(i, f"column '{name}': value is missing")
        elif not _json_type_ok(v, typ):
            problems.add(i, f"column '{name}': value {_show(v)} is not {typ}")
            v = None
        clean.append(v)
    return _array_of(field, clean, problems)


def _array_of(field: pa.Field, values: list, problems: _Rejects) -> pa.Array:
    """``values`` (Python values of the right kind) as ``field.type``; one that does not fit it (an
    integer too large for int32) becomes null and a problem."""
    typ = field.type
    try:
        return pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        pass
    out = []
    for i, v in enumerate(values):
        try:
            out.append(pa.array([v], type=typ)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            problems.add(i, f"column '{field.name}': value {_show(v)} is not {typ}")
            out.append(None)
    return pa.array(out, type=typ)
