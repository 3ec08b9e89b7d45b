"""Figures of a stream's per-micro-batch metrics: latency, batch size, throughput, time split, inflection.

Pure: metric records (dicts, or the frame of :func:`lmstream_kit.metrics.load_metrics`) in, a figure out."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from lmstream_kit.record import net_processing

from .records import _add_markers, _data, _empty, _ids, _values, records_frame

__all__ = [
    "batch_size_figure",
    "inflection_figure",
    "latency_figure",
    "source_lag_figure",
    "throughput_figure",
    "time_split_figure",
]

# List input and DataFrame input give identical figures.  *Data batches* are the batches with rows;
# empty batches (``rows == 0``, most fields ``None``) are left out of the per-batch latency,
# throughput, time-split and inflection traces, but kept where they carry information (the rows per
# batch, the latency bound in force).  Missing values become gaps, never errors.  With no batch, or
# no data batch, a figure carries a "no micro-batch yet" annotation instead.  Every live change
# (``changes`` of a record) is a dashed vertical line at the id of the batch it first applied to,
# labelled by :func:`~lmstream_kit.plots.records.change_markers`.

_LEGEND_BELOW = {"orientation": "h", "yanchor": "top", "y": -0.28, "xanchor": "left", "x": 0}


def _figure(title: str, ytitle: str, *, xtitle: str = "batch id") -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title={"text": title},
        xaxis={"title": {"text": xtitle}},
        yaxis={"title": {"text": ytitle}},
        # the legend goes below the x axis: above the plot it covers the title in a narrow grid cell
        legend=_LEGEND_BELOW,
        margin={"t": 50, "b": 40},
        hovermode="x unified",
    )
    return fig


def _secondary_axis(fig: go.Figure, title: str, **kw: Any) -> None:
    fig.update_layout(
        yaxis2=dict(title={"text": title}, overlaying="y", side="right", showgrid=False, **kw)
    )


# --------------------------------------------------------------------------- per-batch figures


def latency_figure(records: Any) -> go.Figure:
    """Maximum and average latency (wall s) of each data batch, the bound and the changes.

    The bound is ``target_s`` of every batch (it can change mid-run), drawn as a
    step line that holds each value until the batch where it changes; it is left
    out when no record has one (baselines).

    >>> recs = [
    ...     {"batch_id": 0, "rows": 100, "max_latency_s": 1.5, "avg_latency_s": 1.0,
    ...      "target_s": 2.0, "changes": None},
    ...     {"batch_id": 1, "rows": 300, "max_latency_s": 2.5, "avg_latency_s": 2.0,
    ...      "target_s": 3.0, "changes": [{"param": "slide_s", "old": 2.0, "value": 3.0}]},
    ... ]
    >>> fig = latency_figure(recs)
    >>> [t.name for t in fig.data]
    ['max latency', 'avg latency', 'bound (target_s)']
    >>> fig.data[0].x, fig.data[0].y
    ((0, 1), (1.5, 2.5))
    >>> [a.text for a in fig.layout.annotations]
    ['slide_s=3']
    >>> [a.text for a in latency_figure([]).layout.annotations]
    ['no micro-batch yet']
    """
    df = records_frame(records)
    fig = _figure("Latency per micro-batch", "latency (wall s)")
    data = _data(df)
    if data.empty:
        return _empty(fig)
    x = _ids(data)
    fig.add_trace(go.Scatter(x=x, y=_values(data["max_latency_s"]), name="max latency",
                             mode="lines+markers", hovertemplate="%{y:.3f} s"))
    fig.add_trace(go.Scatter(x=x, y=_values(data["avg_latency_s"]), name="avg latency",
                             mode="lines+markers", hovertemplate="%{y:.3f} s"))
    if df["target_s"].notna().any():
        fig.add_trace(go.Scatter(x=_ids(df), y=_values(df["target_s"]), name="bound (target_s)",
                                 mode="lines", line={"shape": "hv", "dash": "dot", "color": "#D62728"},
                                 hovertemplate="%{y:.3f} s"))
    return _add_markers(fig, df)


def batch_size_figure(records: Any) -> go.Figure:
    """Rows per batch (bars, left axis) and bytes per batch (line, right axis), all batches."""
    df = records_frame(records)
    fig = _figure("Micro-batch size", "rows per batch")
    if _data(df).empty:
        return _empty(fig)
    x = _ids(df)
    fig.add_trace(go.Bar(x=x, y=_values(df["rows"], count=True), name="rows", opacity=0.6))
    fig.add_trace(go.Scatter(x=x, y=_values(df["bytes"], count=True), name="bytes",
                             mode="lines+markers", yaxis="y2"))
    _secondary_axis(fig, "bytes per batch", rangemode="tozero")
    fig.update_yaxes(rangemode="tozero")
    return _add_markers(fig, df)


def source_lag_figure(records: Any) -> go.Figure:
    """Rows read per batch (bars) and the source's lag after it (line, ``source_lag``: what a Kafka
    topic held past the batch's end offsets), all batches; a gap where a record has no lag.

    >>> fig = source_lag_figure([{"batch_id": 0, "rows": 100, "source_lag": 400},
    ...                          {"batch_id": 1, "rows": 100, "source_lag": 300}])
    >>> [t.name for t in fig.data], list(fig.data[1].y)
    (['rows read', 'lag after the batch'], [400.0, 300.0])
    """
    df = records_frame(records)
    fig = _figure("Rows read and consumer lag per micro-batch", "rows")
    if _data(df).empty:
        return _empty(fig)
    x = _ids(df)
    lag = df["source_lag"] if "source_lag" in df else pd.Series([None] * len(df), index=df.index)
    fig.add_trace(go.Bar(x=x, y=_values(df["rows"], count=True), name="rows read", opacity=0.6))
    fig.add_trace(go.Scatter(x=x, y=_values(pd.to_numeric(lag, errors="coerce")), name="lag after the batch",
                             mode="lines+markers", hovertemplate="%{y:,.0f} records behind"))
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(legend=_LEGEND_BELOW)
    return _add_markers(fig, df)


def throughput_figure(records: Any) -> go.Figure:
    """``throughput_rows_s`` (rows / processing s) of each data batch."""
    df = records_frame(records)
    fig = _figure("Throughput per micro-batch", "throughput (rows/s)")
    data = _data(df)
    if data.empty:
        return _empty(fig)
    fig.add_trace(go.Scatter(x=_ids(data), y=_values(data["throughput_rows_s"]), name="throughput",
                             mode="lines+markers", hovertemplate="%{y:,.0f} rows/s"))
    return _add_markers(fig, df)


def time_split_figure(records: Any) -> go.Figure:
    """Where each data batch's latency went: stacked buffering, processing, mapping, optimizer (s).

    ``processing`` is the record's ``net_processing_s`` (processing minus
    mapping and optimizer; clipped at 0), so the stack sums to
    ``buffering_s + processing_s``.  The mapping and optimizer segments appear
    only when some record has them.
    """
    df = records_frame(records)
    fig = _figure("Time split per micro-batch", "time (wall s)")
    data = _data(df)
    if data.empty:
        return _empty(fig)
    x = _ids(data)
    has_map = data["mapping_s"].notna().any()
    has_opt = data["optimizer_s"].notna().any()
    net = pd.Series([net_processing(r) for r in data.to_dict("records")], index=data.index, dtype="float64")
    net = net.clip(lower=0.0)
    name = "processing" + (" (net of mapping/optimizer)" if has_map or has_opt else "")
    fig.add_trace(go.Bar(x=x, y=_values(data["buffering_s"]), name="buffering",
                         hovertemplate="%{y:.3f} s"))
    fig.add_trace(go.Bar(x=x, y=_values(net), name=name, hovertemplate="%{y:.3f} s"))
    if has_map:
        fig.add_trace(go.Bar(x=x, y=_values(data["mapping_s"]), name="mapping",
                             hovertemplate="%{y:.4f} s"))
    if has_opt:
        fig.add_trace(go.Bar(x=x, y=_values(data["optimizer_s"]), name="optimizer",
                             hovertemplate="%{y:.4f} s"))
    fig.update_layout(barmode="stack")
    return _add_markers(fig, df)


def inflection_figure(records: Any) -> go.Figure:
    """The inflection point in force (step line) and the partition size (markers), bytes, log y;
    the number of GPU operators on the right axis.  Data batches only.
    """
    df = records_frame(records)
    fig = _figure("Inflection point and partition size", "bytes (log)")
    # log ticks at 1, 2 and 5 of each decade, in SI units (16k, 50k, 100k): readable when narrow
    fig.update_yaxes(type="log", dtick="D2", exponentformat="SI")
    data = _data(df)
    if data.empty:
        return _empty(fig)
    if not (data["inflection_point"].notna().any() or data["partition_bytes"].notna().any()):
        return _empty(fig, "no device mapping recorded")
    x = _ids(data)
    fig.add_trace(go.Scatter(x=x, y=_values(data["inflection_point"]), name="inflection point",
                             mode="lines", line={"shape": "hv"}, hovertemplate="%{y:,.0f} B"))
    fig.add_trace(go.Scatter(x=x, y=_values(data["partition_bytes"]), name="partition bytes",
                             mode="markers", hovertemplate="%{y:,.0f} B"))
    if data["gpu_ops"].notna().any():
        fig.add_trace(go.Scatter(x=x, y=_values(data["gpu_ops"], count=True), name="GPU operators",
                                 mode="lines+markers", line={"shape": "hv", "dash": "dot"}, yaxis="y2"))
        _secondary_axis(fig, "operators on the GPU", rangemode="tozero", tickformat="d")
    return _add_markers(fig, df)
