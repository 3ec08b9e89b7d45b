"""Every plotly figure of lmstream_kit, as pure functions of plain data: per-batch records
(:mod:`.batches`, :mod:`.records`, :mod:`.tuning`), device plans (:mod:`.plan`) and bench sweeps
(:mod:`.bench`)."""

from __future__ import annotations

from .batches import (
    batch_size_figure,
    inflection_figure,
    latency_figure,
    source_lag_figure,
    throughput_figure,
    time_split_figure,
)
from .bench import (
    fig_avg_latency,
    fig_batch_timeline,
    fig_capacity,
    fig_fixed_latency_growth,
    fig_throughput,
    pick_timeline_queries,
    within_bound_figure,
)
from .flumina import (
    PLAN_NODE_COLORS,
    flumina_figures,
    joins_figure,
    plan_nodes,
    plan_tree_figure,
    worker_events_figure,
)
from .plan import (
    DEVICE_COLORS,
    device_plan_figure,
    gpu_ops_grid_figure,
    latest_plan,
    plan_edges,
    plan_layout,
)
from .records import EMPTY_TEXT, change_markers, records_frame
from .tuning import bottleneck_figure, overhead_figure, parallelism_figure, reconfigurations, tuner_figures
from .windows import catch_up_figure, collection_figure, result_latency_figure

__all__ = [
    "DEVICE_COLORS",
    "EMPTY_TEXT",
    "PLAN_NODE_COLORS",
    "batch_size_figure",
    "bottleneck_figure",
    "catch_up_figure",
    "collection_figure",
    "change_markers",
    "device_plan_figure",
    "fig_avg_latency",
    "fig_batch_timeline",
    "fig_capacity",
    "fig_fixed_latency_growth",
    "fig_throughput",
    "flumina_figures",
    "gpu_ops_grid_figure",
    "inflection_figure",
    "joins_figure",
    "latency_figure",
    "result_latency_figure",
    "latest_plan",
    "overhead_figure",
    "parallelism_figure",
    "pick_timeline_queries",
    "source_lag_figure",
    "plan_edges",
    "plan_layout",
    "plan_nodes",
    "plan_tree_figure",
    "reconfigurations",
    "records_frame",
    "throughput_figure",
    "time_split_figure",
    "tuner_figures",
    "within_bound_figure",
    "worker_events_figure",
]
