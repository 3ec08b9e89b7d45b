"""The batch record: one typed record per micro-batch, computed once and read everywhere.

Widgets, the CLI, bench and the reports read these fields; none of them derives
a latency bound, a net processing time or a summary again.

>>> r = BatchRecord.from_batch(batch_id=3, policy="lmstream", admitted_at=15.0, completed_at=16.0,
...                            datasets=[Dataset(10.0, 100, 1000), Dataset(14.0, 300, 3000)],
...                            bound_s=5.0, mapping_s=0.25)
>>> r.max_latency_s, r.avg_latency_s, r.buffering_s, r.net_processing_s, r.within_bound
(6.0, 3.0, 5.0, 0.75, False)
>>> BatchRecord.from_dict(r.to_dict()) == r
True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "FIELD_DOCS",
    "BatchRecord",
    "Dataset",
    "controller_target_s",
    "tumbling_start_s",
    "fields_markdown",
    "latency_bound",
    "net_processing",
    "plan_of",
    "summarize",
    "window_params",
]


class Dataset(NamedTuple):
    """What a record needs of one input dataset: its arrival (epoch s), rows and bytes."""

    arrival: float
    rows: int
    nbytes: int


def latency_bound(slide_s: float, window_range_s: float, speedup: float = 1.0) -> float:
    """The pass/fail latency bound in wall seconds: the slide, or a tumbling window's length.

    The controller's own tumbling target (the running mean of past maximum
    latencies, :func:`controller_target_s`) moves, and a steady run exceeds it
    about half of the time, so it cannot serve as a bound to judge a run by.

    >>> latency_bound(10, 30, speedup=4), latency_bound(0, 30, speedup=4)
    (2.5, 7.5)
    """
    length = slide_s if slide_s > 0 else window_range_s
    return float(length) / float(speedup)


def window_params(workload: Any, speedup: float = 1.0) -> dict:
    """The controller parameters a workload's windows give (``{}`` for a query without windows).

    Every windowed query with a known watermark: its windows' ends (``window_period_s``, the slide
    or a tumbling window's length) and the watermark's delay, which the feature service-time model
    counts closing windows by.  A tumbling one also gets the ``"window"`` target: the window's
    length in wall seconds (the query's bound), and where its results wait for a window to close
    (``results_at_close``) the windows' ends, so that data closing a window is admitted at once.

    >>> from lmstream_kit.workloads import get_workload
    >>> window_params(get_workload("CM1T"), speedup=2)   # doctest: +NORMALIZE_WHITESPACE
    {'window_period_s': 60.0, 'lateness_s': 5.0, 'tumbling_target': 'window', 'window_target_s': 30.0,
     'close_period_s': 60.0}
    >>> window_params(get_workload("LR1T"), speedup=2)["close_period_s"], window_params(get_workload("LR2S"))
    (0.0, {'window_period_s': 10.0, 'lateness_s': 5.0})
    """
    if not workload.window_range_s:
        return {}
    out: dict = {}
    if workload.lateness_s is not None:
        period = workload.slide_s if workload.slide_s > 0 else workload.window_range_s
        out.update(window_period_s=float(period), lateness_s=float(workload.lateness_s))
    if workload.slide_s > 0:
        return out
    at_close = bool(workload.results_at_close and workload.lateness_s is not None)
    out.update(tumbling_target="window", window_target_s=float(workload.window_range_s) / float(speedup),
               close_period_s=float(workload.window_range_s) if at_close else 0.0)
    return out


def controller_target_s(slide_s: float, speedup: float = 1.0) -> float | None:
    """The admission controller's latency target in wall seconds; None means the running mean.

    >>> controller_target_s(10, 4), controller_target_s(0, 4) is None
    (2.5, True)
    """
    return float(slide_s) / float(speedup) if slide_s > 0 else None


#: a tumbling window's first controller target, as a fraction of its length: the paper pairs
#: each tumbling query with a sliding one whose slide is a sixth of the same range
#: (LR1S 30 s by 5 s, CM1S 60 s by 10 s), so a tumbling query starts at its twin's bound
TUMBLING_START_FRACTION = 1 / 6


def tumbling_start_s(window_s: float, speedup: float = 1.0) -> float:
    """The admission controller's first target (wall s) for a tumbling window of ``window_s``.

    The target then follows the running mean of the batches' maximum latencies
    (:func:`controller_target_s`); this is where it starts.

    >>> tumbling_start_s(30, speedup=2), tumbling_start_s(60)
    (2.5, 10.0)
    """
    return float(window_s) * TUMBLING_START_FRACTION / float(speedup)


def _doc(text: str, default: Any = None, *, keep_none: bool = True) -> Any:
    return field(default=default, metadata={"doc": text, "keep_none": keep_none})


@dataclass(frozen=True)
class BatchRecord:
    """One micro-batch, as written to ``metrics.jsonl``. Times are epoch or wall seconds."""

    batch_id: int = _doc("Spark's batch id")
    policy: str = _doc("the admission policy that admitted the batch")
    n_datasets: int = _doc("input datasets in the batch", 0)
    rows: int = _doc("input rows", 0)
    bytes: int = _doc("input bytes (Arrow IPC)", 0)
    oldest_arrival: float | None = _doc("arrival of the oldest dataset (epoch s)")
    admitted_at: float = _doc("when the gate admitted the batch (epoch s)", 0.0)
    completed_at: float = _doc("when the batch's output was written (epoch s)", 0.0)
    buffering_s: float | None = _doc("admission minus the oldest arrival")
    processing_s: float = _doc("completion minus admission", 0.0)
    max_latency_s: float | None = _doc("completion minus the oldest arrival")
    avg_latency_s: float | None = _doc("row-weighted mean of completion minus arrival")
    throughput_rows_s: float | None = _doc("rows over processing_s")
    bound_s: float | None = _doc("the latency bound in force (wall s): the slide, or a tumbling window's length")
    within_bound: bool | None = _doc("max_latency_s <= bound_s (None without data or bound)")
    net_processing_s: float = _doc("processing_s minus mapping_s and optimizer_s", 0.0)
    workload: str | None = _doc("the query's registered name")
    start_seq: int | None = _doc("first spool dataset of the batch")
    end_seq: int | None = _doc("one past the last spool dataset of the batch")
    batch_started_at: float | None = _doc("when foreachBatch started (epoch s)")
    foreach_s: float | None = _doc("seconds inside foreachBatch")
    output_rows: int | None = _doc("rows the batch wrote")
    decision_s: float = _doc("seconds the gate spent deciding since the last admission", 0.0)
    polls: int = _doc("how often Spark asked the gate before it admitted", 0)
    decision_reason: str | None = _doc("why the batch was admitted (bound, trigger, drain, replay, ...)")
    target_s: float | None = _doc("the controller's latency target in force (wall s; NaN for baselines)")
    predicted_s: float | None = _doc("the controller's predicted processing time")
    margin_s: float | None = _doc("the controller's safety margin")
    estimate_s: float | None = _doc("the controller's estimated latency at admission")
    device_mode: str | None = _doc("how the device plan is carried out (advisory, rapids, twin)", keep_none=False)
    inflection_point: float | None = _doc("the mapper's inflection point (bytes)", keep_none=False)
    partition_bytes: float | None = _doc("bytes per partition the mapper saw", keep_none=False)
    device_plan: Mapping[str, Any] | None = _doc(
        "the device plan: entries (id, exec, class, device, reason, children), inflection point, partition bytes",
        keep_none=False)
    gpu_ops: int | None = _doc("operators the plan puts on the GPU", keep_none=False)
    plan_cache: str | None = _doc("hit or miss of the per-query DAG cache", keep_none=False)
    planning_s: float | None = _doc("seconds spent extracting the operator DAG", keep_none=False)
    mapping_s: float | None = _doc("seconds spent mapping and applying the plan (planning included)",
                                      keep_none=False)
    optimizer_s: float | None = _doc("seconds spent waiting for the inflection optimizer", keep_none=False)
    rapids_confs_set: int | None = _doc("RAPIDS confs changed for the batch", keep_none=False)
    rapids_conflicts: int | None = _doc("plan entries RAPIDS could not honour", keep_none=False)
    plan_applied: bool | None = _doc("RAPIDS: the plan was in force when the batch was planned",
                                        keep_none=False)
    twin_s: float | None = _doc("twin executor: operator plus transition seconds", keep_none=False)
    twin_transition_s: float | None = _doc("twin executor: CPU/GPU transition seconds", keep_none=False)
    twin_transitions: int | None = _doc("twin executor: CPU/GPU transitions", keep_none=False)
    twin_late_rows: int | None = _doc("twin executor: rows dropped behind the watermark", keep_none=False)
    twin_backend: str | None = _doc("twin executor: cudf or pandas", keep_none=False)
    flumina_passes: int | None = _doc("Flumina workload: Spark jobs (passes) the batch took", keep_none=False)
    flumina_epochs: int | None = _doc("Flumina workload: epochs (synchronising events + 1) in the batch",
                                      keep_none=False)
    flumina_events: int | None = _doc("Flumina workload: events the workers processed, over all passes",
                                      keep_none=False)
    flumina_worker_events: dict | None = _doc("Flumina workload: events each worker processed {worker: n}",
                                              keep_none=False)
    changes: tuple | None = _doc("live changes first in force for this batch (param, old, value, at, ...)")
    extra: Mapping[str, Any] = field(default_factory=dict, metadata={"doc": "fields of plug-in controllers"})

    @classmethod
    def from_batch(
        cls,
        *,
        batch_id: int,
        policy: str,
        datasets: Sequence[Any],
        admitted_at: float,
        completed_at: float,
        bound_s: float | None = None,
        changes: Iterable[Mapping] | None = None,
        extra: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> BatchRecord:
        """Compute a record from the batch's datasets (``arrival``, ``rows``, ``nbytes``) and times.

        ``fields`` fill the other typed fields; names that are not fields become plug-in fields.
        """
        rows = sum(int(d.rows) for d in datasets)
        processing = completed_at - admitted_at
        if datasets:
            oldest = min(float(d.arrival) for d in datasets)
            max_latency = completed_at - oldest
            weighted = sum(int(d.rows) * (completed_at - float(d.arrival)) for d in datasets)
            avg_latency = weighted / rows if rows else max_latency
            buffering = admitted_at - oldest
        else:
            oldest = max_latency = avg_latency = buffering = None
        within = None if max_latency is None or bound_s is None else max_latency <= bound_s
        net = net_processing({"processing_s": processing, **fields})
        plugin = {k: fields.pop(k) for k in list(fields) if k not in FIELD_DOCS or k == "extra"}
        return cls(
            batch_id=int(batch_id),
            policy=policy,
            n_datasets=len(datasets),
            rows=rows,
            bytes=batch_bytes(datasets),
            oldest_arrival=oldest,
            admitted_at=admitted_at,
            completed_at=completed_at,
            buffering_s=buffering,
            processing_s=processing,
            max_latency_s=max_latency,
            avg_latency_s=avg_latency,
            throughput_rows_s=rows / processing if processing > 0 else None,
            bound_s=bound_s,
            within_bound=within,
            net_processing_s=net,
            changes=tuple(dict(c) for c in changes) if changes else None,
            extra={**(extra or {}), **plugin},
            **fields,
        )

    def to_dict(self) -> dict:
        """The JSON form: the typed fields (device and twin fields only when set), then plug-in fields."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if value is None and not f.metadata["keep_none"]:
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchRecord:
        """Read a record back (keys that are not fields become plug-in fields)."""
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kwargs = {k: v for k, v in data.items() if k in known}
        if kwargs.get("changes") is not None:
            kwargs["changes"] = tuple(kwargs["changes"])
        if kwargs.get("device_plan") is not None:
            kwargs["device_plan"] = plan_of(kwargs)
        return cls(**kwargs, extra={k: v for k, v in data.items() if k not in known})


#: every field of the record and what it means (the README's table is made from this)
FIELD_DOCS: dict[str, str] = {
    f.name: f.metadata["doc"] for f in dataclasses.fields(BatchRecord)
}


def fields_markdown() -> str:
    """The record's fields as a markdown table (the README's is this one).

    >>> fields_markdown().splitlines()[2]
    "| `batch_id` | Spark's batch id |"
    """
    lines = ["| field | meaning |", "|---|---|"]
    lines += [f"| `{name}` | {doc} |" for name, doc in FIELD_DOCS.items() if name != "extra"]
    return "\n".join(lines)


def net_processing(record: Mapping[str, Any]) -> float | None:
    """Processing time net of device mapping and waiting for the optimizer (both spent inside it).

    Records written before ``net_processing_s`` existed get it from their parts.

    >>> net_processing({"processing_s": 1.0, "mapping_s": 0.25, "optimizer_s": None})
    0.75
    >>> net_processing({"processing_s": 1.0, "net_processing_s": 0.5}), net_processing({}) is None
    (0.5, True)
    """
    stored = _num(record.get("net_processing_s"))
    if stored is not None:
        return stored
    processing = _num(record.get("processing_s"))
    if processing is None:
        return None
    return processing - (_num(record.get("mapping_s")) or 0.0) - (_num(record.get("optimizer_s")) or 0.0)


def plan_of(record: Mapping[str, Any]) -> dict | None:
    """The record's device plan as a dict (records written before it was structured hold JSON text).

    >>> plan_of({"device_plan": '{"entries": []}'}), plan_of({"device_plan": {"entries": []}}), plan_of({})
    ({'entries': []}, {'entries': []}, None)
    """
    plan = record.get("device_plan")
    if plan is None or (isinstance(plan, float) and math.isnan(plan)):
        return None
    if isinstance(plan, (str, bytes)):
        import json

        return json.loads(plan)
    return dict(plan)


def batch_bytes(datasets: Iterable[Any]) -> int:
    """Total bytes of datasets (objects with ``nbytes``).

    >>> batch_bytes([Dataset(0.0, 1, 10), Dataset(0.0, 2, 20)])
    30
    """
    return sum(int(d.nbytes) for d in datasets)


def _quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default method), stdlib only."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _num(value: Any) -> float | None:
    """A finite float, or None for a missing value (None, NaN from a DataFrame)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def summarize(records: Iterable[Mapping[str, Any]], *, bound_s: float | None = None) -> dict:
    """Summary of a run's data batches (batches with rows): the one summary every view shows.

    Returns batches, rows, mean/p50/p95/p99/max of the per-batch maximum latency,
    the row-weighted mean latency, throughput (rows over summed processing
    time), sustained throughput (rows over first arrival to last completion),
    rows per batch and the summed time components; the mean and largest
    ``result_latency_s`` of the batches that emitted windows (any batch: a
    watermark's no-data batch emits too; NaN without).  ``within_bound`` is the
    share of batches whose maximum latency is within ``bound_s``, or within each
    record's own ``bound_s`` when no bound is given; it is absent when neither is known.

    >>> s = summarize([{"rows": 10, "max_latency_s": 1.0, "avg_latency_s": 0.5, "processing_s": 0.1},
    ...                {"rows": 30, "max_latency_s": 3.0, "avg_latency_s": 1.5, "processing_s": 0.3}],
    ...               bound_s=2.0)
    >>> s["batches"], s["rows"], s["max_latency_mean_s"], s["latency_mean_s"], s["within_bound"]
    (2, 40, 2.0, 1.25, 0.5)
    """
    records = list(records)
    data = [r for r in records if (_num(r.get("rows")) or 0) > 0 and _num(r.get("max_latency_s")) is not None]
    maxlat = [float(r["max_latency_s"]) for r in data]
    rows = sum(int(r["rows"]) for r in data)
    nan = float("nan")

    def total(key: str) -> float:
        return sum(_num(r.get(key)) or 0.0 for r in data)

    proc = total("processing_s")
    arrivals = [_num(r.get("oldest_arrival")) for r in data]
    completions = [_num(r.get("completed_at")) for r in data]
    wall = (max(completions) - min(arrivals)) if data and None not in arrivals + completions else nan
    out = {
        "batches": len(data),
        "rows": rows,
        "max_latency_mean_s": sum(maxlat) / len(maxlat) if maxlat else nan,
        "max_latency_p50_s": _quantile(maxlat, 0.50),
        "max_latency_p95_s": _quantile(maxlat, 0.95),
        "max_latency_p99_s": _quantile(maxlat, 0.99),
        "max_latency_max_s": max(maxlat) if maxlat else nan,
        "latency_mean_s": (  # NaN where a batch does not say (a journal cut short, a stand-in's)
            sum(float(r["avg_latency_s"]) * int(r["rows"]) for r in data) / rows
            if rows and all(_num(r.get("avg_latency_s")) is not None for r in data) else nan
        ),
        "throughput_rows_s": rows / proc if proc > 0 else nan,
        "sustained_rows_s": rows / wall if wall > 0 else nan,
        "wall_s": wall,
        "rows_per_batch": rows / len(data) if data else nan,
        "buffering_s": total("buffering_s"),
        "decision_s": total("decision_s"),
        "mapping_s": total("mapping_s"),
        "optimizer_s": total("optimizer_s"),
        "processing_s": proc,
    }
    bounds = [bound_s if bound_s is not None else _num(r.get("bound_s")) for r in data]
    # windows emitted (by any batch: a no-data batch, where a session runs them, emits too)
    results = [float(r["result_latency_s"]) for r in records if _num(r.get("result_latency_s")) is not None]
    out["result_latency_mean_s"] = sum(results) / len(results) if results else nan
    out["result_latency_max_s"] = max(results) if results else nan
    if bound_s is not None or (data and None not in bounds):
        out["within_bound"] = (
            sum(1 for x, b in zip(maxlat, bounds) if x <= b) / len(maxlat) if maxlat else nan
        )
    return out
