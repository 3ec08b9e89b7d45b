"""Events as Arrow tables: the one place where Flumina events become rows (files, DataFrames, workloads).

A table has columns ``tag`` (string), ``ts`` (double seconds), ``payload`` (the given Arrow type) and
``seq`` (int64, the arrival order, which breaks ties of equal ``ts``).  A payload that Arrow cannot
type as it is (page view's ``int`` views and ``(page, value)`` updates) goes through an ``encode``
on the way in and the matching ``decode`` on the way out (:class:`Codec`).

>>> from lmstream_kit.flumina.spec import Event
>>> t = events_table([Event("view0", 1.0, 3), Event("update", 2.0, (3, 7))], pa.list_(pa.int64()), codec=PAGE_VIEW)
>>> t.column("payload").to_pylist(), t.column("seq").to_pylist()
([[3], [3, 7]], [0, 1])
>>> [PAGE_VIEW.decode(v) for v in t.column("payload").to_pylist()]
[3, (3, 7)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import pyarrow as pa

from ..exceptions import ConfigError
from .spec import Event

__all__ = ["PAGE_VIEW", "Codec", "events_table", "table_events"]


class Codec(NamedTuple):
    """How a payload is stored in an Arrow column: ``encode`` (Python -> Arrow value) and its inverse."""

    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


def _page_view_decode(value: Any) -> Any:
    if value is None or len(value) == 1:
        return None if value is None else value[0]
    return tuple(value)


#: page view: a view's page id as ``[page]``, an update's ``(page, value)`` as ``[page, value]``
PAGE_VIEW = Codec(encode=lambda p: None if p is None else (list(p) if isinstance(p, (tuple, list)) else [p]),
                  decode=_page_view_decode)


def events_table(events: Iterable[Event], payload_type: pa.DataType, *, codec: Codec | None = None,
                 ts: Sequence[float] | None = None, seq: Sequence[int] | None = None) -> pa.Table:
    """``events`` as a table (see the module); ``ts`` and ``seq`` replace the events' own when given.

    A payload that does not fit ``payload_type`` is a ConfigError naming the first such event.
    """
    events = list(events)
    encode = codec.encode if codec is not None else (lambda p: p)
    payloads = [encode(e.payload) for e in events]
    try:
        payload = pa.array(payloads, payload_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        bad = next((e for e, p in zip(events, payloads) if not _fits(p, payload_type)), None)
        what = f"event {bad!r}" if bad is not None else "an event"
        raise ConfigError(f"{what} has a payload that is not {payload_type}: {exc}") from None
    n = len(events)
    for label, given in (("ts", ts), ("seq", seq)):
        if given is not None and len(given) != n:
            raise ConfigError(f"{label} has {len(given)} values for {n} events")
    return pa.table({
        "tag": pa.array([e.tag for e in events], pa.string()),
        "ts": pa.array([float(e.ts) for e in events] if ts is None else ts, pa.float64()),
        "payload": payload,
        "seq": pa.array(range(n) if seq is None else seq, pa.int64()),
    })


def table_events(table: pa.Table, *, codec: Codec | None = None) -> list[Event]:
    """The inverse of :func:`events_table`: the rows as events, in the sequential order (``ts``, ties
    by ``seq``), payloads decoded with ``codec``.

    >>> t = events_table([Event("update", 2.0, (3, 7)), Event("view0", 1.0, 3)], pa.list_(pa.int64()), codec=PAGE_VIEW)
    >>> table_events(t, codec=PAGE_VIEW)
    [Event(tag='view0', ts=1.0, payload=3), Event(tag='update', ts=2.0, payload=(3, 7))]
    """
    table = table.sort_by([("ts", "ascending"), ("seq", "ascending")])
    decode = codec.decode if codec is not None else (lambda p: p)
    return [Event(tag, ts, decode(p)) for tag, ts, p in zip(table.column("tag").to_pylist(),
                                                            table.column("ts").to_pylist(),
                                                            table.column("payload").to_pylist())]


def _fits(value: Any, payload_type: pa.DataType) -> bool:
    try:
        pa.array([value], payload_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return False
    return True
