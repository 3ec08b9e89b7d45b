"""Plotly figures of a stream's per-micro-batch metrics and of its device plan.

Every function here is pure: it takes metric records (a list of dicts, as
``LiveStream`` writes them, or the DataFrame of
:func:`lmstream_kit.metrics.load_metrics`) and returns a
``plotly.graph_objects.Figure``.  Nothing here imports ipywidgets or pyspark,
so the dashboard can wrap a figure in a ``FigureWidget`` and the tests need no
kernel.  List input and DataFrame input give identical figures.

*Data batches* are the batches with rows; empty batches (``rows == 0``, most
fields ``None``) are left out of the per-batch latency, throughput, time-split
and inflection traces, but are kept where they carry information (the rows per
batch, the latency bound in force).  Missing values become gaps, never errors.
With no batch, or no data batch, a figure carries a "no micro-batch yet"
annotation instead.

Every live change (``changes`` of a record) is drawn as a dashed vertical line
at the id of the batch it first applied to, labelled by :func:`change_markers`.

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
>>> change_markers(recs)
[(1, 'slide_s=3')]
>>> [a.text for a in fig.layout.annotations]
['slide_s=3']
>>> [a.text for a in latency_figure([]).layout.annotations]
['no micro-batch yet']
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from lmstream_kit.record import net_processing

__all__ = [
    "DEVICE_COLORS",
    "EMPTY_TEXT",
    "batch_size_figure",
    "change_markers",
    "device_plan_figure",
    "inflection_figure",
    "latency_figure",
    "latest_plan",
    "plan_edges",
    "plan_layout",
    "records_frame",
    "throughput_figure",
    "time_split_figure",
]

#: the annotation of a figure with nothing to show yet
EMPTY_TEXT = "no micro-batch yet"

#: marker colour per device in :func:`device_plan_figure` (anything else is grey)
DEVICE_COLORS = {"CPU": "#4C78A8", "GPU": "#54A24B"}
_OTHER_COLOR = "#9D9D9D"
_MARKER_COLOR = "#7F7F7F"

#: numeric columns (None/strings become NaN)
_NUMERIC = (
    "rows",
    "bytes",
    "max_latency_s",
    "avg_latency_s",
    "buffering_s",
    "processing_s",
    "throughput_rows_s",
    "completed_at",
    "target_s",
    "inflection_point",
    "partition_bytes",
    "gpu_ops",
    "mapping_s",
    "optimizer_s",
)
_OBJECT = ("changes", "device_plan")
_COUNTS = ("rows", "bytes", "gpu_ops")


# --------------------------------------------------------------------------- records


def records_frame(records: Any) -> pd.DataFrame:
    """The records as a DataFrame: one row per batch, sorted by ``batch_id``.

    Accepts a list (or any iterable) of dicts, a DataFrame or ``None``.  The
    columns the figures read always exist (numeric ones as floats, NaN where a
    record has ``None`` or lacks the field; ``changes`` and ``device_plan`` as
    objects); records without a ``batch_id`` are dropped.  The input is not
    modified.

    >>> df = records_frame([{"batch_id": 2, "rows": 5}, {"batch_id": 1, "rows": 0, "target_s": None}])
    >>> df["batch_id"].tolist(), df["rows"].tolist(), bool(df["target_s"].isna().all())
    ([1, 2], [0.0, 5.0], True)
    >>> len(records_frame(None)), len(records_frame([]))
    (0, 0)
    """
    if records is None:
        df = pd.DataFrame()
    elif isinstance(records, pd.DataFrame):
        df = records.copy()
    else:
        rows = [dict(r) for r in records]
        df = pd.DataFrame.from_records(rows) if rows else pd.DataFrame()
    if "batch_id" not in df.columns:
        df["batch_id"] = pd.Series(dtype="float64")
    df["batch_id"] = pd.to_numeric(df["batch_id"], errors="coerce")
    df = df[df["batch_id"].notna()].copy()
    df["batch_id"] = df["batch_id"].astype("int64")
    for col in _NUMERIC:
        if col in df.columns:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
        else:
            df[col] = pd.Series(float("nan"), index=df.index, dtype="float64")
    for col in _OBJECT:
        if col not in df.columns:
            df[col] = pd.Series([None] * len(df), index=df.index, dtype="object")
    return df.sort_values("batch_id", kind="stable").reset_index(drop=True)


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(isinstance(value, float) and math.isnan(value)) or value is pd.NA
    except TypeError:
        return False


def _fmt_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, float)) or hasattr(value, "__float__") and not isinstance(value, str):
        try:
            f = float(value)
        except (TypeError, ValueError):
            return str(value)
        if math.isfinite(f) and f == int(f) and abs(f) < 1e15:
            return str(int(f))
        return f"{f:.6g}"
    return str(value)


def _change_label(change: Any) -> str:
    if isinstance(change, Mapping):
        if "param" in change:
            return f"{change['param']}={_fmt_value(change.get('value'))}"
        if "change" in change:
            return str(change["change"])
        return ", ".join(f"{k}={_fmt_value(v)}" for k, v in change.items() if k != "at")
    return str(change)


def _parse_changes(value: Any) -> list:
    if _is_missing(value):
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [value]
    if isinstance(value, Mapping):
        return [value]
    if isinstance(value, Iterable):
        return list(value)
    return [value]


def change_markers(records: Any) -> list[tuple[int, str]]:
    """``(batch_id, label)`` for every batch whose record lists live changes.

    A change is labelled ``param=value`` (integral values without ``.0``); the
    changes of one batch are joined with ``", "``.  Sorted by batch id.

    >>> change_markers([
    ...     {"batch_id": 7, "changes": [{"param": "mapper.inflection_point", "old": 153600.0,
    ...                                   "value": 65536.0, "at": 1.0}]},
    ...     {"batch_id": 3, "changes": [{"param": "slide_s", "value": 5},
    ...                                 {"param": "rate_scale", "value": 1.5}]},
    ...     {"batch_id": 4, "changes": None}])
    [(3, 'slide_s=5, rate_scale=1.5'), (7, 'mapper.inflection_point=65536')]
    """
    df = records_frame(records)
    out = []
    for bid, value in zip(df["batch_id"].tolist(), df["changes"].tolist(), strict=True):
        changes = _parse_changes(value)
        if changes:
            out.append((int(bid), ", ".join(_change_label(c) for c in changes)))
    return out


# --------------------------------------------------------------------------- helpers


def _values(series: pd.Series, *, count: bool = False) -> list:
    """Python values of a numeric column, ``None`` for NaN (a gap in plotly)."""
    out = []
    for v in series.tolist():
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            out.append(None)
        elif count and float(v) == int(v):
            out.append(int(v))
        else:
            out.append(float(v))
    return out


def _ids(df: pd.DataFrame) -> list[int]:
    return [int(b) for b in df["batch_id"].tolist()]


def _data(df: pd.DataFrame) -> pd.DataFrame:
    """The data batches (rows > 0)."""
    return df[df["rows"].fillna(0) > 0]


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


def _empty(fig: go.Figure, text: str = EMPTY_TEXT) -> go.Figure:
    fig.add_annotation(
        text=text, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False, font={"size": 16}
    )
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False)
    return fig


def _add_markers(fig: go.Figure, df: pd.DataFrame) -> go.Figure:
    """A dashed vertical line and a label at every batch with changes."""
    for i, (bid, label) in enumerate(change_markers(df)):
        fig.add_shape(
            type="line", xref="x", yref="paper", x0=bid, x1=bid, y0=0, y1=1,
            line={"color": _MARKER_COLOR, "width": 1, "dash": "dash"},
        )
        fig.add_annotation(
            text=label, xref="x", yref="paper", x=bid, y=1.0 if i % 2 == 0 else 0.92,
            showarrow=False, xanchor="left", yanchor="top", font={"size": 10, "color": _MARKER_COLOR},
            bgcolor="rgba(255,255,255,0.7)",
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


# --------------------------------------------------------------------------- device plan


def _plan_dict(plan: Any) -> dict | None:
    if plan is None or _is_missing(plan):
        return None
    if hasattr(plan, "to_dict") and not isinstance(plan, Mapping):
        plan = plan.to_dict()
    if isinstance(plan, (str, bytes)):
        plan = json.loads(plan)
    if not isinstance(plan, Mapping):
        raise TypeError(f"a device plan is a dict, a JSON string or has to_dict(), not {type(plan)}")
    return dict(plan)


def latest_plan(records: Any) -> dict | None:
    """The device plan (a dict) of the last batch that recorded one, or ``None``.

    >>> latest_plan([{"batch_id": 1, "device_plan": '{"entries": [], "inflection_point": 1, '
    ...               '"partition_bytes": 2}'}, {"batch_id": 2, "device_plan": None}])
    {'entries': [], 'inflection_point': 1, 'partition_bytes': 2}
    """
    df = records_frame(records)
    for value in reversed(df["device_plan"].tolist()):
        if not _is_missing(value):
            return _plan_dict(value)
    return None


def _entry_ids(plan: Mapping) -> list[int]:
    return [int(e["id"]) for e in plan.get("entries") or ()]


def _children_of(plan: Mapping, children: Mapping | None) -> dict[int, list[int]] | None:
    """The children relation: given, or from the entries' ``children``; ``None`` if unknown."""
    ids = _entry_ids(plan)
    known = set(ids)
    if children is None:
        entries = plan.get("entries") or ()
        if not any("children" in e for e in entries):
            return None
        children = {e["id"]: e.get("children") or () for e in entries}
    out: dict[int, list[int]] = {i: [] for i in ids}
    for key, kids in children.items():
        parent = int(key)
        if parent in known:
            out[parent] = [int(c) for c in kids or () if int(c) in known and int(c) != parent]
    return out


def plan_edges(plan: Any, children: Mapping | None = None) -> list[tuple[int, int]]:
    """The ``(parent, child)`` pairs drawn by :func:`device_plan_figure`.

    From ``children`` (``{id: [child ids]}``) when given, else from the entries'
    own ``children`` lists when they have them, else the id-order chain
    ``(0, 1), (1, 2), ...`` of :func:`plan_layout` (the pre-order alone does not
    determine the tree).

    >>> plan = {"entries": [{"id": 0}, {"id": 1}, {"id": 2}]}
    >>> plan_edges(plan), plan_edges(plan, {0: [1, 2]})
    ([(0, 1), (1, 2)], [(0, 1), (0, 2)])
    """
    plan = _plan_dict(plan) or {}
    rel = _children_of(plan, children)
    if rel is None:
        ids = sorted(_entry_ids(plan))
        return list(itertools.pairwise(ids))
    return [(p, c) for p in sorted(rel) for c in rel[p]]


def plan_layout(plan: Any, children: Mapping | None = None) -> dict[int, tuple[float, float]]:
    """A layered layout of the operator DAG: ``{operator id: (x, y)}``, root at the top.

    The recorded entries are in pre-order from the root (id 0), which alone does
    not determine the tree.  With ``children`` (``{id: [child ids]}``, keys may be
    strings as from JSON), or when the entries carry their own ``children``
    lists, the DAG is laid out in layers: ``y = -depth`` (the root at 0, each
    node one layer below the parent that first reaches it in a depth-first walk
    from the roots in id order, children in the given order), leaves at
    successive integer ``x`` in that walk, each parent centred over the children
    it placed.  Nodes that no root reaches start walks of their own.  Without
    any children relation the operators form a vertical chain in id order:
    ``x = 0``, ``y = -position``.  Deterministic: the same input gives the same
    layout.

    >>> plan = {"entries": [{"id": 0}, {"id": 1}, {"id": 2}, {"id": 3}]}
    >>> plan_layout(plan)
    {0: (0.0, 0.0), 1: (0.0, -1.0), 2: (0.0, -2.0), 3: (0.0, -3.0)}
    >>> plan_layout(plan, {0: [1], 1: [2, 3]})
    {0: (0.5, 0.0), 1: (0.5, -1.0), 2: (0.0, -2.0), 3: (1.0, -2.0)}
    """
    plan = _plan_dict(plan) or {}
    ids = _entry_ids(plan)
    rel = _children_of(plan, children)
    if rel is None:
        return {i: (0.0, float(-k)) for k, i in enumerate(sorted(ids))}
    has_parent = {c for kids in rel.values() for c in kids}
    starts = [i for i in sorted(ids) if i not in has_parent] + sorted(ids)
    pos: dict[int, tuple[float, float]] = {}
    depth: dict[int, int] = {}
    next_x = 0
    for start in starts:
        if start in depth:
            continue
        # iterative DFS: (node, iterator over its children, placed children)
        depth[start] = 0
        stack = [(start, iter(rel[start]), [])]
        while stack:
            node, it, placed = stack[-1]
            child = next((c for c in it if c not in depth), None)
            if child is not None:
                depth[child] = depth[node] + 1
                placed.append(child)
                stack.append((child, iter(rel[child]), []))
                continue
            stack.pop()
            if placed:
                x = sum(pos[c][0] for c in placed) / len(placed)
            else:
                x = float(next_x)
                next_x += 1
            pos[node] = (float(x), float(-depth[node]))
    return {i: pos[i] for i in ids}


def _strip_exec(name: Any) -> str:
    name = str(name or "?")
    return name[: -len("Exec")] if name.endswith("Exec") and len(name) > 4 else name


def _cost(value: Any) -> str:
    return "-" if _is_missing(value) else f"{float(value):.3f}"


def device_plan_figure(plan: Any, children: Mapping | None = None) -> go.Figure:
    """The device plan drawn with :func:`plan_layout`: one marker per operator, coloured by device.

    ``plan`` is a :meth:`DevicePlan.to_dict` dict, its JSON string, or an object
    with ``to_dict()``; ``children`` as in :func:`plan_layout`.  One marker trace
    per device (``CPU``, ``GPU``, then any other, in that order) gives one legend
    entry per device; each marker's text is the exec name without ``Exec``, its
    hover the class, device, CPU/GPU costs and reason, and its ``customdata`` the
    operator id.  The edges (:func:`plan_edges`) are one line trace, ``None``
    between segments (dotted when the tree is unknown and the chain is drawn).
    ``None`` or a plan without operators gives an annotated empty figure.
    """
    plan = _plan_dict(plan)
    fig = go.Figure()
    fig.update_layout(
        xaxis={"visible": False}, yaxis={"visible": False}, plot_bgcolor="white",
        legend={"orientation": "h", "yanchor": "top", "y": 0.0, "xanchor": "left", "x": 0},
        margin={"t": 70, "b": 30},
    )
    entries = list((plan or {}).get("entries") or ())
    if not entries:
        fig.update_layout(title={"text": "Device plan"})
        return _empty(fig, "no device plan yet")
    ip = plan.get("inflection_point")
    pb = plan.get("partition_bytes")
    kib = lambda v: "-" if _is_missing(v) else f"{float(v) / 1024:.1f} KiB"
    n_gpu = sum(1 for e in entries if e.get("device") == "GPU")
    # two short lines: one long line runs past a narrow figure
    fig.update_layout(title={"text": (
        f"Device plan: {n_gpu} of {len(entries)} operators on the GPU"
        f"<br><sup>inflection point {kib(ip)}, partition {kib(pb)}</sup>"
    )})
    pos = plan_layout(plan, children)
    known_tree = _children_of(plan, children) is not None
    edges = plan_edges(plan, children)
    ex: list = []
    ey: list = []
    for parent, child in edges:
        ex += [pos[parent][0], pos[child][0], None]
        ey += [pos[parent][1], pos[child][1], None]
    fig.add_trace(go.Scatter(
        x=ex, y=ey, mode="lines", name="edges" if known_tree else "pre-order (tree unknown)",
        line={"color": "#B0B0B0", "width": 1.5, "dash": "solid" if known_tree else "dot"},
        hoverinfo="skip", showlegend=not known_tree,
    ))
    devices = [d for d in ("CPU", "GPU") if any(e.get("device") == d for e in entries)]
    devices += sorted({str(e.get("device")) for e in entries} - {"CPU", "GPU"})
    for device in devices:
        group = [e for e in entries if str(e.get("device")) == device]
        fig.add_trace(go.Scatter(
            x=[pos[int(e["id"])][0] for e in group],
            y=[pos[int(e["id"])][1] for e in group],
            mode="markers+text", name=device,
            marker={"size": 18, "color": DEVICE_COLORS.get(device, _OTHER_COLOR),
                        "line": {"color": "white", "width": 1}},
            text=[_strip_exec(e.get("exec_name")) for e in group],
            textposition="middle right",
            customdata=[int(e["id"]) for e in group],
            hovertext=[
                f"{e.get('exec_name')} (id {e['id']})<br>class: {e.get('op_class') or '-'}"
                f"<br>device: {device}<br>cpu cost: {_cost(e.get('cpu_cost'))}"
                f"<br>gpu cost: {_cost(e.get('gpu_cost'))}<br>reason: {e.get('reason') or '-'}"
                for e in group
            ],
            hoverinfo="text",
        ))
    xs = [p[0] for p in pos.values()]
    fig.update_xaxes(range=[min(xs) - 0.5, max(xs) + 1.5])
    # room for one label per level: a 14-operator chain's labels overlap at the default height
    levels = len({p[1] for p in pos.values()})
    fig.update_layout(height=max(400, 130 + 24 * levels))
    return fig
