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

_SHOW_MAX = 80
# Errors of pc.cast that a bad *value* raises (a parse failure, an overflow, lost precision).
_CAST_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
# Errors of pa.array for a Python value that does not fit the type (UnicodeEncodeError: a lone surrogate).
_ARRAY_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, UnicodeEncodeError)
# Below this many values a failing slice is tried value by value instead of halved again.
_BISECT_LEAF = 16


def _show(value: Any) -> str:
    """Render a bad value for a reason: quoted text for strings (and bytes), JSON otherwise."""
    text = repr(value) if isinstance(value, (str, bytes)) else json.dumps(value, default=str)
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
    rejected (the header's line for a CSV header problem).  ``record`` is the
    raw line (CSV, JSON Lines) or the row as an object (JSON array; Parquet,
    with the values as the file held them, before conversion).
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
        empty = pc.equal(arr, "").fill_null(False)
        values = pc.if_else(empty, pa.scalar(None, pa.string()), arr).cast(typ)
    else:
        trimmed = pc.utf8_trim_whitespace(arr)
        # fill_null: a Parquet text column may hold nulls (CSV cells never do); null is not "empty".
        empty = pc.equal(trimmed, "").fill_null(False)
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


def _cast(values: pa.Array, typ: pa.DataType) -> pa.Array:
    """The safe cast of ``values`` to ``typ``, except that a finer time unit is truncated to a
    coarser one: pandas writes nanoseconds, the spool keeps (say) microseconds, and refusing the
    row for its last three digits would help no one.  Overflows still fail."""
    if pa.types.is_temporal(values.type) and pa.types.is_temporal(typ):
        return pc.cast(values, options=pc.CastOptions(typ, allow_time_truncate=True))
    return pc.cast(values, typ)


def _bisect(values: pa.Array, typ: pa.DataType) -> list[int]:
    """Offsets of the values of ``values`` that :func:`_cast` refuses, halving failing slices.

    A good stretch costs one vectorised cast and a bad value about ``log2(len(values))`` casts of
    shrinking slices; only slices of fewer than ``_BISECT_LEAF`` values that still fail are tried
    value by value.
    """
    bad: list[int] = []
    todo = [(0, len(values))]
    while todo:
        start, n = todo.pop()
        try:
            _cast(values.slice(start, n), typ)
            continue
        except _CAST_ERRORS:
            pass
        if n < _BISECT_LEAF:
            for k in range(start, start + n):
                try:
                    _cast(values.slice(k, 1), typ)
                except _CAST_ERRORS:
                    bad.append(k)
            continue
        half = n // 2
        todo += [(start + half, n - half), (start, half)]  # the left half is popped first
    return sorted(bad)


def _uncastable(values: pa.Array, typ: pa.DataType) -> np.ndarray:
    """Rows of ``values`` whose value :func:`_cast` refuses (a cast of the whole array failed).

    The distinct values are tried rather than the rows where there are fewer (a column of
    ``'fast'`` repeated costs one failed cast, not one per row).
    """
    try:
        distinct = pc.unique(values)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):  # a type without hashing
        distinct = None
    if distinct is None or len(distinct) * 2 > len(values):
        return np.asarray(_bisect(values, typ), dtype=np.int64)
    bad_values = distinct.take(pa.array(_bisect(distinct, typ), type=pa.int64()))
    bad = pc.is_in(values, value_set=bad_values).fill_null(False)
    return np.flatnonzero(bad.to_numpy(zero_copy_only=False))


def _cast_or_null(values: pa.Array, typ: pa.DataType, name: str, problems: _Rejects,
                  shown: pa.Array | None = None) -> pa.Array:
    """``values`` cast to ``typ``; a value that does not convert becomes null and a problem of its
    row naming the value (taken from ``shown``, the value as the file held it, if given)."""
    try:
        return _cast(values, typ)
    except _CAST_ERRORS:
        pass
    bad = _uncastable(values, typ)
    shown = values if shown is None else shown
    for r in bad.tolist():
        problems.add(r, f"column '{name}': value {_show(shown[r].as_py())} is not {typ}")
    mask = np.zeros(len(values), dtype=bool)
    mask[bad] = True
    return _cast(pc.if_else(pa.array(mask), pa.scalar(None, values.type), values), typ)


class _ColumnTypeError(ValueError):
    """A file's column has a type that no value of can be converted to the spool's (a whole-file
    problem, unlike a single value that does not convert)."""


def _int_overflow_rows(arr: pa.Array, typ: pa.DataType) -> np.ndarray | None:
    """Rows of a numeric ``arr`` whose value does not fit integer type ``typ`` (too large, or a
    float with a fraction, NaN or infinite), found without a per-row loop; None for other casts."""
    if not (pa.types.is_integer(typ) and (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type))):
        return None
    # An unsafe cast wraps or truncates the values that do not fit; the round trip shows which.
    back = pc.cast(pc.cast(arr, typ, safe=False), arr.type, safe=False)
    differs = pc.not_equal(back, arr).fill_null(False)
    return np.flatnonzero(differs.to_numpy(zero_copy_only=False))


def _convert_arrow(field: pa.Field, arr: pa.Array, problems: _Rejects) -> pa.Array:
    """Convert a typed (Parquet) column to ``field.type``, value by value in effect.

    A null in a non-nullable column, and a value the safe cast refuses (``'fast'`` for an int32
    column, an int64 too large for int32), become null and a problem of their row; the other rows
    convert in one vectorised cast.  A text column converts like CSV cells (trimmed; empty is
    missing), so a column of numbers written as text still reads.

    Raises
    ------
    _ColumnTypeError
        If no value of the column's type can be converted (a list or struct column for an int32
        field, say).
    """
    name, typ = field.name, field.type
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not field.nullable and arr.null_count:
        nulls = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))
        problems.add_many(nulls, lambda r: f"column '{name}': value is missing")
    if arr.type == typ:
        return arr
    try:
        _cast(arr.slice(0, 0), typ)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        raise _ColumnTypeError(f"column '{name}' is {arr.type}, which does not convert to {typ}") from None
    if _is_text(arr.type) and not _is_text(typ):
        # Nulls were reported above; _convert_strings reports empty text only.
        return _convert_strings(field, arr.cast(pa.string()), problems)
    try:
        return _cast(arr, typ)
    except _CAST_ERRORS:
        pass
    overflow = _int_overflow_rows(arr, typ)
    if overflow is not None:
        mask = np.zeros(len(arr), dtype=bool)
        mask[overflow] = True
        try:
            out = _cast(pc.if_else(pa.array(mask), pa.scalar(None, arr.type), arr), typ)
        except _CAST_ERRORS:
            out = None  # the round trip missed a case: find the rows the slow way
        if out is not None:
            for r in overflow:
                problems.add(int(r), f"column '{name}': value {_show(arr[int(r)].as_py())} is not {typ}")
            return out
    return _cast_or_null(arr, typ, name, problems)


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
    except _ARRAY_ERRORS:
        pass
    out = []
    for i, v in enumerate(values):
        try:
            out.append(pa.array([v], type=typ)[0].as_py())
        except UnicodeEncodeError:  # a JSON "\ud800" escape: a lone surrogate has no UTF-8 form
            problems.add(i, f"column '{field.name}': value {_show(v)} is not valid Unicode text")
            out.append(None)
        except _ARRAY_ERRORS:
            problems.add(i, f"column '{field.name}': value {_show(v)} is not {typ}")
            out.append(None)
    return pa.array(out, type=typ)
