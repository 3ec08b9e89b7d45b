"""Every plotly figure of lmstream_kit, as pure functions of plain data: per-batch records
(:mod:`.batches`, :mod:`.records`, :mod:`.tuning`, :mod:`.retention`), device plans (:mod:`.plan`), bench
sweeps (:mod:`.bench`) and soaks (:mod:`.retention`)."""

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
    fig_row_cost,
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
from .retention import SOAK_MEMORY, soak_figure, spool_retention_figure
from .tuning import bottleneck_figure, overhead_figure, parallelism_figure, reconfigurations, tuner_figures
from .windows import catch_up_figure, collection_figure, result_latency_figure

__all__ = [
    "DEVICE_COLORS",
    "EMPTY_TEXT",
    "PLAN_NODE_COLORS",
    "SOAK_MEMORY",
    "batch_size_figure",
    "bottleneck_figure",
    "catch_up_figure",
    "change_markers",
    "collection_figure",
    "device_plan_figure",
    "fig_avg_latency",
    "fig_batch_timeline",
    "fig_capacity",
    "fig_fixed_latency_growth",
    "fig_row_cost",
    "fig_throughput",
    "flumina_figures",
    "gpu_ops_grid_figure",
    "inflection_figure",
    "joins_figure",
    "latency_figure",
    "latest_plan",
    "overhead_figure",
    "parallelism_figure",
    "pick_timeline_queries",
    "plan_edges",
    "plan_layout",
    "plan_nodes",
    "plan_tree_figure",
    "reconfigurations",
    "records_frame",
    "result_latency_figure",
    "soak_figure",
    "source_lag_figure",
    "spool_retention_figure",
    "throughput_figure",
    "time_split_figure",
    "tuner_figures",
    "within_bound_figure",
    "worker_events_figure",
]
