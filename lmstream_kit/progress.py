"""Spark's progress of one micro-batch (``StreamingQueryProgress`` JSON) as a :class:`BatchRecord`.

No pyspark here: :mod:`lmstream_kit.engine.attach` hands in the progress as a dict.

>>> p = {"batchId": 2, "name": "counts", "runId": "r1", "timestamp": "2026-11-23T12:14:01.437Z",
...      "batchDuration": 695, "numInputRows": 200, "inputRowsPerSecond": 189.8,
...      "processedRowsPerSecond": 287.8, "durationMs": {"addBatch": 555, "triggerExecution": 695},
...      "eventTime": {"min": "2026-11-23T12:13:59.629Z", "avg": "2026-11-23T12:14:00.126Z",
...                    "max": "2026-11-23T12:14:00.624Z", "watermark": "2026-11-23T12:13:57.624Z"},
...      "stateOperators": [{"numRowsTotal": 4, "memoryUsedBytes": 2152, "numRowsDroppedByWatermark": 0}],
...      "sink": {"numOutputRows": 2}}
>>> r = progress_record(p, event_time=True, bound_s=2.0)
>>> r.batch_id, r.rows, r.processing_s, r.buffering_s, r.max_latency_s, r.avg_latency_s, r.within_bound
(2, 200, 0.695, 1.808, 2.503, 2.006, False)
>>> r.extra["state_rows"], r.extra["watermark"], r.extra["spark_addBatch_ms"]
(4, 1795436037.624, 555)
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from .record import BatchRecord

__all__ = ["ATTACHED_FIELDS", "DURATION_PARTS", "POLICY", "epoch_ms", "offsets_behind", "progress_record",
           "ran_batch", "source_lag"]

#: the ``policy`` of every record of an attached query
POLICY = "attached"

#: the parts of ``durationMs`` Spark 4.1 reports for a batch that ran
DURATION_PARTS = ("addBatch", "commitOffsets", "getBatch", "latestOffset", "queryPlanning",
                  "triggerExecution", "walCommit")

#: the fields an attached query's records add to the typed ones
ATTACHED_FIELDS: dict[str, str] = {
    **{f"spark_{part}_ms": f"Spark's durationMs.{part} (ms)" for part in DURATION_PARTS},
    "input_rate_rows_s": "Spark's inputRowsPerSecond: rows that arrived per second since the last batch",
    "spark_processed_rows_s": "Spark's processedRowsPerSecond: rows over the batch's duration",
    "state_rows": "rows held by the stateful operators (numRowsTotal, summed; None without state)",
    "state_memory_bytes": "memory of the state stores (memoryUsedBytes, summed; None without state)",
    "late_rows": "rows dropped as later than the watermark (numRowsDroppedByWatermark, summed)",
    "watermark": "the event-time watermark after the batch (epoch s; None until Spark sets one)",
    "event_time_max": "the newest event time in the batch (epoch s; with event_time only)",
    "run_id": "Spark's runId: it changes when the query restarts from its checkpoint",
    "source_lag": "offsets the sources held past what the batch read (latestOffset minus endOffset, summed "
                  "over topics and partitions: a Kafka consumer's lag; None where a source reports no latest)",
}

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def epoch_ms(text: str | None) -> int | None:
    """Milliseconds since the epoch of one of Spark's progress timestamps (None stays None).

    >>> epoch_ms("1970-01-01T00:00:01.250Z"), epoch_ms(None)
    (1250, None)
    """
    if text is None:
        return None
    stamp = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z")
    return (stamp - _EPOCH) // timedelta(milliseconds=1)


def ran_batch(progress: Mapping[str, Any]) -> bool:
    """Whether ``progress`` reports a batch that ran (with or without rows).

    A trigger that found nothing to run also reports progress in ``recentProgress``
    (durationMs holds only latestOffset and triggerExecution, under the *next*
    batch id); the listener gets an idle event for it instead.

    >>> ran_batch({"durationMs": {"latestOffset": 0, "triggerExecution": 1}})
    False
    """
    return "addBatch" in (progress.get("durationMs") or {})


def _offsets(value: Any) -> Any:
    """A source's offset as Spark's progress gives it: a JSON object, its text, or a number."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            try:  # PySpark 4.1's lastProgress gives a nested offset as the repr of a dict
                return ast.literal_eval(value)
            except (ValueError, SyntaxError):
                return None
    return value


def offsets_behind(end: Any, latest: Any) -> int | None:
    """How far ``latest`` is past ``end``: numbers subtract, objects (Kafka's ``{topic: {partition:
    offset}}``) sum over the keys both have; None where they cannot be compared.

    >>> offsets_behind({"t": {"0": 410, "1": 90}}, '{"t": {"0": 415, "1": 90, "2": 7}}')
    5
    >>> offsets_behind("{'t': {'0': 3}}", {"t": {"0": 3}}), offsets_behind(12, 20), offsets_behind(None, 3)
    (0, 8, None)
    """
    end, latest = _offsets(end), _offsets(latest)
    if isinstance(end, bool) or isinstance(latest, bool):
        return None
    if isinstance(end, (int, float)) and isinstance(latest, (int, float)):
        return max(0, int(latest) - int(end))
    if isinstance(end, Mapping) and isinstance(latest, Mapping):
        parts = [offsets_behind(end[k], latest[k]) for k in end.keys() & latest.keys()]
        parts = [p for p in parts if p is not None]
        return sum(parts) if parts else None
    return None


def source_lag(progress: Mapping[str, Any]) -> int | None:
    """The batch's consumer lag: :func:`offsets_behind` of each source's ``endOffset`` and
    ``latestOffset``, summed (None where no source reports both)."""
    lags = [offsets_behind(s.get("endOffset"), s.get("latestOffset")) for s in progress.get("sources") or ()]
    lags = [lag for lag in lags if lag is not None]
    return sum(lags) if lags else None


def _sum(operators: Iterable[Mapping[str, Any]], key: str) -> int | None:
    values = [int(op[key]) for op in operators if op.get(key) is not None]
    return sum(values) if values else None


def progress_record(progress: Mapping[str, Any], *, event_time: bool = False, bound_s: float | None = None,
                    workload: str | None = None, changes: Iterable[Mapping] | None = None) -> BatchRecord:
    """The record of the batch that ``progress`` (a ``StreamingQueryProgress`` as JSON) reports.

    The batch starts at ``timestamp`` (Spark's trigger start, the record's
    ``admitted_at``) and completes ``batchDuration`` ms later.  With
    ``event_time``, the event-time statistics Spark keeps for the watermarked
    column give the latencies: the oldest event (``eventTime.min``) is the
    record's ``oldest_arrival``, and the row mean of completion minus event time
    is completion minus ``eventTime.avg``.
    """
    durations = dict(progress.get("durationMs") or {})
    start = epoch_ms(progress["timestamp"])
    took = int(progress.get("batchDuration", durations.get("triggerExecution", 0)))
    end = start + took
    rows = int(progress.get("numInputRows") or 0)
    times = progress.get("eventTime") or {}
    oldest = epoch_ms(times.get("min")) if event_time else None
    mean = epoch_ms(times.get("avg")) if event_time else None
    max_latency = None if oldest is None else (end - oldest) / 1000
    operators = progress.get("stateOperators") or []
    watermark = epoch_ms(times.get("watermark"))
    output_rows = (progress.get("sink") or {}).get("numOutputRows")
    extra = {f"spark_{k}_ms": v for k, v in durations.items()}
    extra.update(
        input_rate_rows_s=progress.get("inputRowsPerSecond"),
        spark_processed_rows_s=progress.get("processedRowsPerSecond"),
        state_rows=_sum(operators, "numRowsTotal"),
        state_memory_bytes=_sum(operators, "memoryUsedBytes"),
        late_rows=_sum(operators, "numRowsDroppedByWatermark"),
        watermark=watermark / 1000 if watermark else None,  # Spark says 1970-01-01 before it has one
        event_time_max=epoch_ms(times.get("max")) / 1000 if event_time and times.get("max") else None,
        run_id=progress.get("runId"),
        source_lag=source_lag(progress),
    )
    return BatchRecord(
        batch_id=int(progress["batchId"]),
        policy=POLICY,
        n_datasets=None,  # Spark's progress counts rows, not datasets or bytes
        rows=rows,
        bytes=None,
        oldest_arrival=None if oldest is None else oldest / 1000,
        admitted_at=start / 1000,
        completed_at=end / 1000,
        buffering_s=None if oldest is None else (start - oldest) / 1000,
        processing_s=took / 1000,
        max_latency_s=max_latency,
        avg_latency_s=None if mean is None else (end - mean) / 1000,
        throughput_rows_s=rows * 1000 / took if took > 0 else None,
        bound_s=bound_s,
        within_bound=None if max_latency is None or bound_s is None else max_latency <= bound_s,
        net_processing_s=took / 1000,
        workload=workload if workload is not None else progress.get("name"),
        output_rows=None if output_rows is None or output_rows < 0 else int(output_rows),
        decision_reason="trigger",
        changes=tuple(dict(c) for c in changes) if changes else None,
        extra=extra,
    )
