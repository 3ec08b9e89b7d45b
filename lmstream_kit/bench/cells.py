"""One cell's per-batch metrics summarised: its results row (:func:`cell_row`), its data
batches (:func:`batch_rows`) and its latency bound (:func:`bound_s`)."""

from __future__ import annotations

import math
from typing import Any, Optional

from ..record import latency_bound, summarize


def bound_s(workload, speedup: float) -> float:
    """The latency bound in wall seconds (:func:`~lmstream_kit.record.latency_bound`) of ``workload``."""
    return latency_bound(workload.slide_s, workload.window_range_s, speedup)


#: the results' columns and the :func:`~lmstream_kit.record.summarize` keys they hold
_CELL_SUMMARY = {
    "wall_s": "wall_s",
    "avg_latency_s": "latency_mean_s",
    "mean_max_latency_s": "max_latency_mean_s",
    "p95_max_latency_s": "max_latency_p95_s",
    "max_latency_s": "max_latency_max_s",
    "within_bound": "within_bound",
    "throughput_rows_s": "throughput_rows_s",
    "sustained_rows_s": "sustained_rows_s",
    "mean_rows_per_batch": "rows_per_batch",
    "buffering_s": "buffering_s",
    "decision_s": "decision_s",
    "mapping_s": "mapping_s",
    "processing_s": "processing_s",
    "optimizer_s": "optimizer_s",
    "result_latency_s": "result_latency_mean_s",
    "max_result_latency_s": "result_latency_max_s",
}


#: the results' columns a capacity probe's row shares with a cell's: how large its batches were, how late
#: (the mean of their maximum latencies) and how fast a batch processed its rows, which tell whether a
#: policy's larger batches bought speed or only spent the bound's slack
PROBE_SUMMARY = ("mean_rows_per_batch", "mean_max_latency_s", "throughput_rows_s")


def batch_fields(metrics, bound: float | None = None) -> dict:
    """:data:`PROBE_SUMMARY`'s columns of a run, as :func:`cell_row` has them (NaN without data batches).

    >>> import pandas as pd
    >>> m = pd.DataFrame({"rows": [0, 100, 300], "processing_s": [0.5, 1.0, 1.0], "max_latency_s": [None, 2.0, 2.0],
    ...                   "avg_latency_s": [None, 1.0, 1.0]})
    >>> batch_fields(m)
    {'mean_rows_per_batch': 200.0, 'mean_max_latency_s': 2.0, 'throughput_rows_s': 200.0}
    """
    summary = summarize(metrics.to_dict("records") if len(metrics) else [], bound_s=bound)
    nan = float("nan")
    return {column: _float(summary.get(_CELL_SUMMARY[column], nan)) for column in PROBE_SUMMARY}


def metrics_so_far(run_dir):
    """The batches a run wrote before it failed (a :func:`~lmstream_kit.metrics.load_metrics` frame
    with at least a ``rows`` column, empty where it wrote none)."""
    import pandas as pd

    from ..metrics import METRICS_FILE, has_journal, load_metrics

    metrics = load_metrics(run_dir) if has_journal(run_dir / METRICS_FILE) else pd.DataFrame()
    return metrics if "rows" in metrics else pd.DataFrame({"rows": []})


def cell_row(metrics, *, workload, policy: str, traffic: str, rep: int, seed: int, rate: float,
             speedup: float, duration_s: float, cpu: Optional[dict] = None) -> dict:
    """Summarise one cell's per-batch metrics (a :func:`~lmstream_kit.metrics.load_metrics` frame).

    Latencies and times are wall seconds.  ``avg_latency_s`` is the row-weighted
    mean latency, ``throughput_rows_s`` the rows over the summed processing
    time, ``sustained_rows_s`` the rows over first arrival to last completion,
    ``within_bound`` the share of data batches whose maximum latency is at most
    ``bound_s``, ``result_latency_s`` / ``max_result_latency_s`` the mean and largest
    result latency of the windows the cell emitted (queries whose windows emit when
    they close; NaN for others).  The five time components are summed over the data batches
    (Table IV); ``mapping_s`` (DAG lookup, mapping and applying the plan) and ``optimizer_s``
    (waiting for the optimizer) are spent inside ``processing_s``.
    """
    data = metrics[metrics["rows"] > 0] if len(metrics) else metrics
    rows = int(data["rows"].sum()) if len(data) else 0
    bound = bound_s(workload, speedup)
    row: dict[str, Any] = {
        "query": workload.name,
        "window_kind": workload.window_kind,
        "policy": policy,
        "traffic": traffic,
        "rep": int(rep),
        "seed": int(seed),
        "rate": float(rate),
        "speedup": float(speedup),
        "duration_s": float(duration_s),
        "slide_s": float(workload.slide_s),
        "range_s": float(workload.window_range_s),
        "bound_s": bound,
        "batches": int(len(data)),
        "rows": rows,
    }
    nan = float("nan")
    summary = summarize(metrics.to_dict("records") if len(metrics) else [], bound_s=bound)
    row.update({column: summary[key] for column, key in _CELL_SUMMARY.items()})
    cpu = cpu or {}
    jvm, workers, kit = (float(cpu.get(k, nan)) for k in ("jvm_s", "workers_s", "kit_s"))
    total = sum(v for v in (jvm, workers, kit) if not math.isnan(v)) if cpu else nan
    row.update(
        cpu_jvm_s=jvm,
        cpu_workers_s=workers,
        cpu_kit_s=kit,
        cpu_total_s=total,
        cpu_s_per_mrows=total / rows * 1e6 if rows and not math.isnan(total) else nan,
    )
    row.update(collector_fields(metrics))
    return row


def collector_fields(metrics) -> dict:
    """The driver JVM's garbage collection over a run's data batches, from Spark's progress.

    ``gc_s``: the collectors' seconds (each progress counts those since the batch before),
    ``gc_share``: their share of the batches' processing seconds, ``full_gcs``: the full
    (old-generation) collections.  NaN where the progress carries no collector counts (a run
    before the kit recorded them, or a JVM that does not say).

    >>> import pandas as pd
    >>> m = pd.DataFrame({"rows": [0, 100, 100], "processing_s": [0.5, 2.0, 2.0],
    ...                   "spark_jvm_gc_ms": [50.0, 200.0, 1800.0], "spark_jvm_full_gc_count": [0, 0, 1]})
    >>> collector_fields(m)
    {'gc_s': 2.0, 'gc_share': 0.5, 'full_gcs': 1.0}
    """
    nan = float("nan")
    out = {"gc_s": nan, "gc_share": nan, "full_gcs": nan}
    if not len(metrics) or "spark_jvm_gc_ms" not in metrics.columns:
        return out
    data = metrics[metrics["rows"] > 0]
    gc_ms = data["spark_jvm_gc_ms"].astype(float)
    if not len(data) or gc_ms.isna().all():
        return out
    gc_s = float(gc_ms.sum()) / 1000.0
    processing = float(data["processing_s"].astype(float).sum())
    out.update(gc_s=round(gc_s, 3), gc_share=round(gc_s / processing, 4) if processing > 0 else nan)
    if "spark_jvm_full_gc_count" in data.columns:
        full = data["spark_jvm_full_gc_count"].astype(float)
        out["full_gcs"] = float(full.sum()) if full.notna().any() else nan
    return out


def _float(value) -> float:
    return float("nan") if value is None else float(value)


def batch_rows(metrics, *, workload, policy: str, traffic: str, rep: int, speedup: float) -> list[dict]:
    """The data batches of one cell, for the per-batch figures."""
    data = metrics[metrics["rows"] > 0] if len(metrics) else metrics
    if not len(data):
        return []
    first = float(data["oldest_arrival"].min())
    bound = bound_s(workload, speedup)
    out = []
    for r in data.itertuples(index=False):
        out.append(
            {
                "query": workload.name,
                "window_kind": workload.window_kind,
                "policy": policy,
                "traffic": traffic,
                "rep": int(rep),
                "batch_id": int(r.batch_id),
                "t_s": float(r.completed_at) - first,
                "max_latency_s": float(r.max_latency_s),
                "avg_latency_s": float(r.avg_latency_s),
                "rows": int(r.rows),
                "bytes": int(r.bytes),
                "buffering_s": float(r.buffering_s),
                "processing_s": float(r.processing_s),
                "predicted_s": _float(getattr(r, "predicted_s", None)),  # the controller's (NaN: none)
                "margin_s": _float(getattr(r, "margin_s", None)),  # the margin it admitted the batch with
                "bound_s": bound,
            }
        )
    return out
