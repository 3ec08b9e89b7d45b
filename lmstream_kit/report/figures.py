"""The bench report's figures: re-exported from :mod:`lmstream_kit.plots.bench`, where they are defined.

The paper's Figs. 1, 6, 7, 8 and 9, the capacity bars and what a row costs by batch size; each
builder takes the benchmark's data frames and returns a figure, or ``None`` (or a "no data" figure).

>>> import lmstream_kit.plots.bench as bench
>>> fig_avg_latency is bench.fig_avg_latency
True
>>> import pandas as pd
>>> df = pd.DataFrame({"query": ["LR1T", "CM2S"], "window_kind": ["tumbling", "sliding"]})
>>> pick_timeline_queries(df)
{'sliding': 'CM2S', 'tumbling': 'LR1T'}
"""

from __future__ import annotations

from lmstream_kit.plots.bench import (
    fig_avg_latency,
    fig_batch_timeline,
    fig_capacity,
    fig_fixed_latency_growth,
    fig_row_cost,
    fig_throughput,
    pick_timeline_queries,
)

__all__ = [
    "fig_avg_latency",
    "fig_batch_timeline",
    "fig_capacity",
    "fig_fixed_latency_growth",
    "fig_row_cost",
    "fig_throughput",
    "pick_timeline_queries",
]
