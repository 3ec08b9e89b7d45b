"""Figures of the device mapping: one device plan as its operator DAG, coloured by device, and the
number of GPU operators over partition size x inflection point; pure, plain data in, a figure out."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from .records import _empty, _is_missing, records_frame

__all__ = [
    "DEVICE_COLORS",
    "device_plan_figure",
    "gpu_ops_grid_figure",
    "latest_plan",
    "plan_edges",
    "plan_layout",
]

#: marker colour per device in :func:`device_plan_figure` (anything else is grey)
DEVICE_COLORS = {"CPU": "#4C78A8", "GPU": "#54A24B"}
_OTHER_COLOR = "#9D9D9D"


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


# --------------------------------------------------------------------------- the mapper's grid


def gpu_ops_grid_figure(grid: pd.DataFrame, operators: int, workload: str | None = None) -> go.Figure:
    """A heatmap of how many operators the mapper puts on the GPU, per inflection point and partition size.

    Parameters
    ----------
    grid : DataFrame
        GPU-operator counts: one row per inflection point, one column per partition size.  The index
        and column labels (e.g. ``"150 KiB"``) become the tick labels, in their order.
    operators : int
        The number of operators in the plan, shown in the title.
    workload : str, optional
        The query's name, the title's prefix.

    Returns
    -------
    plotly.graph_objects.Figure
        One green ``Heatmap`` trace, each cell labelled with its count; x is the partition
        size, y the inflection point.

    Examples
    --------
    >>> grid = pd.DataFrame({"128 KiB": [3, 0], "512 KiB": [5, 2]}, index=["64 KiB", "150 KiB"])
    >>> fig = gpu_ops_grid_figure(grid, operators=6, workload="LR2S")
    >>> fig.layout.title.text, fig.layout.xaxis.title.text, fig.layout.yaxis.title.text
    ('LR2S: operators on the GPU (of 6)', 'partition size', 'inflection point')
    >>> heat = fig.data[0]
    >>> heat.x, heat.y, heat.z.tolist()
    (('128 KiB', '512 KiB'), ('64 KiB', '150 KiB'), [[3, 5], [0, 2]])
    >>> gpu_ops_grid_figure(grid, operators=6).layout.title.text
    'Operators on the GPU (of 6)'
    """
    title = f"operators on the GPU (of {operators})"
    title = f"{workload}: {title}" if workload else title[0].upper() + title[1:]
    fig = go.Figure(go.Heatmap(z=grid.values, x=list(grid.columns), y=list(grid.index), text=grid.values,
                               texttemplate="%{text}", colorscale="Greens",
                               colorbar={"title": {"text": "GPU ops"}}))
    fig.update_layout(title=title, xaxis_title="partition size", yaxis_title="inflection point", height=380)
    return fig
