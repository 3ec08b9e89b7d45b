"""Figures of a backlog's catch-up, of windows' result latency and of the driver's garbage
collection per batch, from per-batch records.

>>> import pandas as pd
>>> runs = {"chunks": pd.DataFrame({"batch_id": [1, 2], "processing_s": [1.0, 1.2], "rows": [10, 12]})}
>>> catch_up_figure(runs).layout.title.text
'A restart with a backlog: catch-up chunks against one batch'
>>> emitted = {"asap": pd.DataFrame({"windows_closed": [0, 1], "closed_window_end": [None, 60.0],
...                                  "result_latency_s": [None, 0.7]})}
>>> [list(t.x) for t in result_latency_figure(emitted).data]
[['window ending 60 s']]
>>> gc = pd.DataFrame({"batch_id": [1, 2, 3], "rows": [10, 10, 10], "processing_s": [0.5, 1.1, 0.5],
...                    "spark_jvm_gc_ms": [0, 620, 0], "full_gc_due": [0.0, 1.0, 0.0]})
>>> [(t.name, [float(y) for y in t.y]) for t in collection_figure(gc).data]
[('processing', [0.5, 1.1, 0.5]), ('garbage collection', [0.0, 0.62, 0.0]), ('full collection forecast', [1.1])]
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

__all__ = ["catch_up_figure", "collection_figure", "result_latency_figure"]


def catch_up_figure(runs: Mapping[str, pd.DataFrame]) -> go.Figure:
    """Processing time and rows per data batch of each run (``{label: records}``), side by side."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("processing time per batch (s)", "rows per batch"))
    for label, df in runs.items():
        data = df[df["rows"] > 0] if "rows" in df else df
        fig.add_trace(go.Bar(x=data["batch_id"], y=data["processing_s"], name=str(label)), row=1, col=1)
        fig.add_trace(go.Bar(x=data["batch_id"], y=data["rows"], name=str(label), showlegend=False), row=1, col=2)
    fig.update_layout(title="A restart with a backlog: catch-up chunks against one batch", barmode="group")
    return fig


def result_latency_figure(runs: Mapping[str, pd.DataFrame]) -> go.Figure:
    """The result latency of every window each run emitted (``{label: records}``), grouped by window."""
    fig = go.Figure()
    for label, df in runs.items():
        if "windows_closed" not in df:
            continue
        emitted = df[df["windows_closed"].fillna(0) > 0]
        fig.add_trace(go.Bar(x=[f"window ending {float(e):g} s" for e in emitted["closed_window_end"]],
                             y=emitted["result_latency_s"], name=str(label)))
    fig.update_layout(title="Result latency per window (wall s)", barmode="group", yaxis_title="s")
    return fig


def collection_figure(records: pd.DataFrame) -> go.Figure:
    """Each data batch's processing time beside the driver JVM's garbage collection since the batch
    before (``spark_jvm_gc_ms``, from :func:`lmstream_kit.metrics.load_metrics`), with a marker on the
    batches the heap forecast said would start a full collection (``full_gc_due``, where recorded)."""
    data = records[records["rows"] > 0] if "rows" in records else records
    fig = go.Figure()
    fig.add_trace(go.Bar(x=data["batch_id"], y=data["processing_s"], name="processing"))
    if "spark_jvm_gc_ms" in data:
        fig.add_trace(go.Bar(x=data["batch_id"], y=data["spark_jvm_gc_ms"].fillna(0) / 1000.0,
                             name="garbage collection"))
    if "full_gc_due" in data:
        due = data[data["full_gc_due"].fillna(0) > 0]
        fig.add_trace(go.Scatter(x=due["batch_id"], y=due["processing_s"], mode="markers", name="full collection forecast",
                                 marker={"symbol": "x", "size": 10}))
    fig.update_layout(title="Processing time and the driver's garbage collection per batch", barmode="group",
                      xaxis_title="batch id", yaxis_title="s")
    return fig
