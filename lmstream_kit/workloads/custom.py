"""Your own query as a workload: a schema, a query function and its window, in one call.

:func:`define_workload` builds a :class:`~lmstream_kit.workloads.base.Workload` that
``LiveStream``, ``lmstream-kit run --workload FILE.py:NAME`` and ``bench`` run like the built-ins.

>>> w = define_workload("LANES", schema="lane INT, ts TIMESTAMP, speed DOUBLE",
...                     query=lambda s: s, window="20 seconds", event_time="ts", watermark="10 s")
>>> w.window_kind, w.window_range_s, w.slide_s, w.event_time, w.make_rows is None
('tumbling', 20.0, 0.0, 'ts', True)
>>> define_workload("BAD", schema="lane INT", query=lambda s: s, window="20 seconds", slide="30 s")
Traceback (most recent call last):
...
lmstream_kit.exceptions.ConfigError: workload BAD: slide 30 s is longer than its window (20 s)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from ..exceptions import ConfigError
from ..units import parse_duration
from .base import Workload, register as _register, window_phrase

__all__ = ["define_workload", "INFER", "arrow_schema"]

#: ``window=INFER``: read the window from the query's plan when the stream starts
INFER = "infer"

#: type names a schema may use (Spark DDL and pyarrow spellings) -> Arrow type
_TYPES = {
    "boolean": pa.bool_(), "bool": pa.bool_(),
    "tinyint": pa.int8(), "byte": pa.int8(), "int8": pa.int8(),
    "smallint": pa.int16(), "short": pa.int16(), "int16": pa.int16(),
    "int": pa.int32(), "integer": pa.int32(), "int32": pa.int32(),
    "bigint": pa.int64(), "long": pa.int64(), "int64": pa.int64(),
    "float": pa.float32(), "real": pa.float32(), "float32": pa.float32(),
    "double": pa.float64(), "float64": pa.float64(),
    "string": pa.string(), "str": pa.string(), "varchar": pa.string(),
    "date": pa.date32(), "date32": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"), "binary": pa.binary(),
}


def arrow_schema(schema: Any) -> pa.Schema:
    """A schema from a ``pyarrow.Schema``, a ``{column: type}`` mapping, or Spark DDL text.

    >>> arrow_schema("lane INT, ts TIMESTAMP").types
    [DataType(int32), TimestampType(timestamp[us, tz=UTC])]
    >>> arrow_schema({"plate": "string", "speed": "double"}).names
    ['plate', 'speed']
    >>> arrow_schema({"speed": "decimal"})
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: column 'speed': unknown type 'decimal'; known: bigint, binary, bool, boolean, byte, date, date32, double, float, float32, float64, int, int16, int32, int64, int8, integer, long, real, short, smallint, str, string, timestamp, tinyint, varchar
    """
    if isinstance(schema, pa.Schema):
        fields = list(schema)
    elif isinstance(schema, Mapping):
        fields = [pa.field(str(name), _arrow_type(name, typ)) for name, typ in schema.items()]
    elif isinstance(schema, str):
        fields = []
        for column in filter(None, (c.strip() for c in schema.split(","))):
            parts = column.replace("`", "").split()
            if len(parts) != 2:
                raise ConfigError(f"schema column must be 'NAME TYPE', got {column!r}")
            fields.append(pa.field(parts[0], _arrow_type(parts[0], parts[1])))
    else:
        raise ConfigError(f"schema must be a pyarrow.Schema, a {{column: type}} dict or DDL text, got {schema!r}")
    if not fields:
        raise ConfigError("schema has no columns")
    names = [f.name for f in fields]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"schema names column(s) {', '.join(map(repr, dupes))} more than once")
    return pa.schema(fields)


def _arrow_type(name: Any, typ: Any) -> pa.DataType:
    if isinstance(typ, pa.DataType):
        return typ
    key = str(typ).strip().lower()
    if re.fullmatch(r"timestamp(\[.*\])?", key):
        return _TYPES["timestamp"]
    if key not in _TYPES:
        raise ConfigError(f"column {str(name)!r}: unknown type {typ!r}; known: {', '.join(sorted(_TYPES))}")
    return _TYPES[key]


def define_workload(
    name: str | None = None,
    *,
    schema: Any,
    query: Callable[[Any], Any] | None = None,
    window: Any = None,
    slide: Any = None,
    bound: Any = None,
    event_time: str | None = None,
    watermark: Any = None,
    rows: Callable[..., Any] | None = None,
    checks: Mapping[str, Any] | None = None,
    output_mode: str = "append",
    description: str | None = None,
    finish_batch: Callable[[Any], Any] | None = None,
    results_at_close: bool | None = None,
    register: bool = False,
):
    """Declare your own streaming query as a workload; also usable as a decorator on the query.

    Parameters
    ----------
    name : str
        The workload's name (default: the decorated function's name).
    schema : pyarrow.Schema, mapping or str
        The input rows: ``{"lane": "int", "ts": "timestamp"}`` or DDL ``"lane INT, ts TIMESTAMP"``.
    query : callable
        ``query(stream_df) -> DataFrame``: your Spark query over the input stream.
    window, slide : seconds, timedelta or text such as ``"20 seconds"``
        The query's event-time window: ``window`` alone is tumbling, with ``slide`` it slides.
        ``window="infer"`` reads both from the query's plan (``F.window(...)``) when the stream
        starts.  The latency bound is the slide, or a tumbling window's length.
    bound : duration, optional
        The latency bound of a query without a window (e.g. a filter or a projection).
    event_time : str, optional
        The event-time column.  A ``timestamp`` column is used as it is; a numeric one (seconds,
        e.g. the simulated seconds of generated traffic) reaches ``query`` as a timestamp.
    watermark : duration, optional
        How late a row may arrive; applied to ``event_time`` before ``query`` runs.
    rows : callable, optional
        A generator of test traffic, ``rows(second, n, rng)`` returning a pyarrow Table, a pandas
        DataFrame or a ``{column: values}`` dict of ``n`` rows.  Without it the query runs on
        files (``input_dir`` / ``--input DIR``).
    checks : mapping, optional
        Value checks of ingested rows, per column: a ``(lo, hi)`` range (either may be None), a
        set of allowed values, or a function ``f(value) -> bool``; failing rows go to the dead
        letter file with the reason.
    output_mode : {"append", "update", "complete"}
    results_at_close : bool, optional
        Whether the query emits a window's rows only once the watermark closes it, so that each
        batch's record tells the *result latency* of the windows it emitted and a tumbling
        window's controller admits at once what closes one (default: a windowed query with a
        watermark in append mode does, as a windowed aggregation; say False for a windowed join).
    register : bool
        Also register it by name, so that ``LiveStream("NAME")`` finds it.
    """
    if query is None:  # used as a decorator: @define_workload(schema=..., window=...)
        def decorate(fn: Callable[[Any], Any]) -> Workload:
            return define_workload(name or fn.__name__, schema=schema, query=fn, window=window, slide=slide,
                                   bound=bound, event_time=event_time, watermark=watermark, rows=rows,
                                   checks=checks, output_mode=output_mode,
                                   description=description or (fn.__doc__ or "").strip().split("\n")[0] or None,
                                   finish_batch=finish_batch, results_at_close=results_at_close,
                                   register=register)
        return decorate
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
        raise ConfigError(f"workload name must be a word such as 'LANES', got {name!r}")
    if not callable(query):
        raise ConfigError(f"workload {name}: query must be a function of the input stream, got {query!r}")
    arrow = arrow_schema(schema)
    range_s, slide_s, infer = _window(name, window, slide, bound)
    time_column = None
    if event_time is not None:
        if event_time not in arrow.names:
            raise ConfigError(f"workload {name}: event_time {event_time!r} is not a column; "
                              f"columns: {', '.join(arrow.names)}")
        etype = arrow.field(event_time).type
        if not (pa.types.is_timestamp(etype) or pa.types.is_integer(etype) or pa.types.is_floating(etype)):
            raise ConfigError(f"workload {name}: event_time {event_time!r} must be a timestamp or numeric "
                              f"seconds, got {etype}")
        if not pa.types.is_timestamp(etype):
            time_column = event_time  # a resumed generator continues after its largest second
    lateness_s = None
    if watermark is not None:
        if event_time is None:
            raise ConfigError(f"workload {name}: a watermark needs event_time (the column it applies to)")
        lateness_s = parse_duration(watermark, "watermark")
    if results_at_close is None:  # a windowed aggregation with a watermark, in append mode, emits at close
        results_at_close = (range_s > 0 or infer) and lateness_s is not None and output_mode == "append"
    elif results_at_close and lateness_s is None:
        raise ConfigError(f"workload {name}: results_at_close needs a watermark (it says when a window closes)")
    from ..feed.validate import validate_checks

    checks = validate_checks(checks or {}, arrow)
    workload = Workload(
        name=name,
        description=description or _describe(range_s, slide_s, infer),
        schema=arrow,
        make_rows=_table_maker(name, arrow, rows) if rows is not None else None,
        build_query=_with_event_time(query, event_time, time_column, lateness_s),
        window_range_s=range_s,
        slide_s=slide_s,
        output_mode=output_mode,
        checks=checks,
        time_column=time_column,
        finish_batch=finish_batch,
        event_time=event_time,
        window_from_plan=infer,
        lateness_s=lateness_s,
        results_at_close=bool(results_at_close),
    )
    return _register(workload) if register else workload


def _window(name: str, window: Any, slide: Any, bound: Any) -> tuple[float, float, bool]:
    """(window range, slide, infer from the plan) in seconds; slide 0 means tumbling."""
    if isinstance(window, str) and window.strip().lower() == INFER:
        if slide is not None or bound is not None:
            raise ConfigError(f"workload {name}: window='infer' reads the slide from the plan; drop slide/bound")
        return 0.0, 0.0, True
    if window is None:
        if slide is not None:
            raise ConfigError(f"workload {name}: a slide needs a window (its range)")
        if bound is None:
            raise ConfigError(f"workload {name}: give its window (e.g. window='20 seconds'), window='infer', "
                              "or for a query without a window its latency bound (bound='10 seconds')")
        b = parse_duration(bound, "bound")
        if b <= 0:
            raise ConfigError(f"workload {name}: bound must be > 0 seconds, got {bound!r}")
        return 0.0, b, False
    if bound is not None:
        raise ConfigError(f"workload {name}: the bound of a windowed query is its slide (or a tumbling "
                          f"window's length); drop bound={bound!r}")
    range_s = parse_duration(window, "window")
    if range_s <= 0:
        raise ConfigError(f"workload {name}: window must be > 0 seconds, got {window!r}")
    slide_s = 0.0 if slide is None else parse_duration(slide, "slide")
    if slide is not None and slide_s <= 0:
        raise ConfigError(f"workload {name}: slide must be > 0 seconds (leave it out for a tumbling window), "
                          f"got {slide!r}")
    if slide_s > range_s:
        raise ConfigError(f"workload {name}: slide {slide_s:g} s is longer than its window ({range_s:g} s)")
    return range_s, (0.0 if slide_s == range_s else slide_s), False


def _describe(range_s: float, slide_s: float, infer: bool) -> str:
    if infer:
        return "your query; its window is read from Spark's plan at start"
    if range_s == 0:
        return f"your query, latency bound {slide_s:g} s"
    return f"your query over {window_phrase(range_s, slide_s)}"


def _with_event_time(query, event_time: str | None, numeric_column: str | None, lateness_s: float | None):
    """``query`` behind the event-time conversion and the watermark the workload declares."""
    if event_time is None:
        return query

    def build_query(stream):
        from pyspark.sql import functions as F

        if numeric_column is not None:
            stream = stream.withColumn(numeric_column, F.timestamp_seconds(numeric_column))
        if lateness_s is not None:
            stream = stream.withWatermark(event_time, f"{lateness_s:g} seconds")
        return query(stream)

    build_query.__wrapped__ = query
    return build_query


def _table_maker(name: str, schema: pa.Schema, rows: Callable[..., Any]):
    """``rows`` as a ``make_rows(second, n, rng) -> pa.Table`` of exactly ``schema``."""
    if not callable(rows):
        raise ConfigError(f"workload {name}: rows must be a function rows(second, n, rng), got {rows!r}")

    def make_rows(second: int, n: int, rng) -> pa.Table:
        out = rows(second, n, rng)
        if isinstance(out, pa.Table):
            table = out
        elif isinstance(out, Mapping):
            table = pa.table(dict(out))
        else:
            table = pa.Table.from_pandas(out, preserve_index=False)
        try:
            table = table.select(schema.names)
            # sub-microsecond digits of a timestamp (pandas keeps ns) are dropped, other casts are safe
            return pa.table([table.column(f.name).cast(f.type, safe=not pa.types.is_timestamp(f.type))
                             for f in schema], schema=schema)
        except (KeyError, pa.ArrowException, ValueError) as exc:
            raise ConfigError(f"workload {name}: rows({second}, {n}, rng) does not fit its schema: "
                              f"{str(exc).splitlines()[0]}") from None

    return make_rows
