"""Figures of Flumina synchronisation plans: the tree of workers, synchronising nodes above leaves.

Pure: a plan's :meth:`~lmstream_kit.flumina.plan.Plan.to_dict` (or the plan) in, a plotly figure out.

>>> fig = plan_tree_figure({"spec": "vb", "id": "w0", "tags": ["b"], "rate": 1.0, "children": [
...     {"id": "w1", "tags": ["a0"], "rate": 1000.0, "children": []},
...     {"id": "w2", "tags": ["a1"], "rate": 1000.0, "children": []}]})
>>> [t.name for t in fig.data], list(fig.data[2].text)
(['edges', 'synchronising', 'workers'], ['w1: a0', 'w2: a1'])
>>> fig.layout.title.text
'Plan for vb: 2 workers, depth 2'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

from .plan import plan_layout

__all__ = ["PLAN_NODE_COLORS", "flumina_figures", "joins_figure", "plan_nodes", "plan_tree_figure",
           "worker_events_figure"]

#: marker colour of synchronising (non-leaf) nodes and of workers (leaves)
PLAN_NODE_COLORS = {"synchronising": "#E45756", "workers": "#4C78A8"}


def plan_nodes(plan: Any) -> list[dict]:
    """The nodes of a plan (a :class:`Plan` or its ``to_dict()``) in pre-order, each
    ``{"id", "tags", "rate", "children": [child ids], "parent"}``.

    >>> tree = {"id": "w0", "tags": ["b"], "children": [{"id": "w1", "tags": ["a"]}]}
    >>> [(n["id"], n["parent"]) for n in plan_nodes(tree)]
    [('w0', None), ('w1', 'w0')]
    """
    tree = plan if isinstance(plan, Mapping) else plan.to_dict()
    out: list[dict] = []

    def walk(node: Mapping, parent: str | None) -> None:
        name = str(node.get("id", f"w{len(out)}"))
        entry = {"id": name, "tags": list(node.get("tags", [])), "rate": node.get("rate"),
                 "children": [], "parent": parent}
        out.append(entry)
        for child in node.get("children", []):
            entry["children"].append(str(child.get("id", f"w{len(out)}")))
            walk(child, name)
    walk(tree, None)
    return out


def plan_tree_figure(plan: Any) -> go.Figure:
    """The plan as a tree: the root at the top, workers (leaves) at the bottom row of each branch.

    One marker trace for the synchronising nodes and one for the workers (leaves), each marker
    labelled ``name: tags`` with a hover of the tags and events per second; one line trace for
    the edges.  The title names the spec, the number of workers and the depth.
    """
    nodes = plan_nodes(plan)
    index = {n["id"]: i for i, n in enumerate(nodes)}
    children = {index[n["id"]]: [index[c] for c in n["children"]] for n in nodes}
    pos = plan_layout({"entries": [{"id": i} for i in range(len(nodes))]}, children)
    fig = go.Figure()
    ex: list = []
    ey: list = []
    for n in nodes:
        for c in n["children"]:
            ex += [pos[index[n["id"]]][0], pos[index[c]][0], None]
            ey += [pos[index[n["id"]]][1], pos[index[c]][1], None]
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", name="edges", hoverinfo="skip", showlegend=False,
                             line={"color": "#B0B0B0", "width": 1.5}))
    for kind in ("synchronising", "workers"):
        group = [n for n in nodes if bool(n["children"]) == (kind == "synchronising")]
        fig.add_trace(go.Scatter(
            x=[pos[index[n["id"]]][0] for n in group], y=[pos[index[n["id"]]][1] for n in group],
            mode="markers+text", name=kind, textposition="bottom center",
            marker={"size": 22, "color": PLAN_NODE_COLORS[kind], "line": {"color": "white", "width": 1}},
            text=[f"{n['id']}: {', '.join(map(str, n['tags'])) or '-'}" for n in group],
            hovertext=[f"{n['id']}<br>tags: {', '.join(map(str, n['tags'])) or '-'}<br>"
                       f"{'-' if n['rate'] is None else format(float(n['rate']), 'g')} events/s" for n in group],
            hoverinfo="text"))
    depth = 1 - min((y for _, y in pos.values()), default=0.0)
    workers = sum(1 for n in nodes if not n["children"])
    spec = plan.get("spec", "") if isinstance(plan, Mapping) else plan.spec.name
    fig.update_layout(title={"text": f"Plan for {spec}: {workers} workers, depth {depth:g}"},
                      xaxis={"visible": False}, yaxis={"visible": False}, plot_bgcolor="white",
                      legend={"orientation": "h"})
    return fig


def worker_events_figure(records: Any) -> go.Figure:
    """Events each worker processed, batch by batch (stacked bars over the batch id), from the records'
    ``flumina_worker_events``; a pass run again counts again, so a second pass shows as a taller bar.

    >>> fig = worker_events_figure([{"batch_id": 3, "flumina_worker_events": {"w1": 10, "w2": 12}},
    ...                             {"batch_id": 4, "rows": 0}])
    >>> [(t.name, t.x, t.y) for t in fig.data]
    [('w1', (3,), (10,)), ('w2', (3,), (12,))]
    """
    data = [r for r in records if r.get("flumina_worker_events")]
    workers = sorted({w for r in data for w in r["flumina_worker_events"]}, key=lambda w: (len(w), w))
    fig = go.Figure(layout={"title": {"text": "Events per worker and micro-batch"}, "barmode": "stack",
                            "xaxis": {"title": {"text": "batch"}}, "yaxis": {"title": {"text": "events"}}})
    for w in workers:
        fig.add_trace(go.Bar(x=[r["batch_id"] for r in data], y=[r["flumina_worker_events"].get(w, 0) for r in data],
                             name=w, hovertemplate=f"{w}: %{{y}} events<extra>batch %{{x}}</extra>"))
    if not data:
        fig.add_annotation(text="no Flumina batch yet", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


def joins_figure(records: Any) -> go.Figure:
    """Joins over time: the synchronising events (``flumina_epochs - 1``) of each micro-batch by the
    batch's completion (``completed_at``, seconds since the first), and the Spark jobs (passes) each took.

    >>> fig = joins_figure([{"batch_id": 1, "completed_at": 100.0, "flumina_epochs": 4, "flumina_passes": 2},
    ...                     {"batch_id": 2, "completed_at": 103.5, "flumina_epochs": 1, "flumina_passes": 1}])
    >>> [(t.name, t.x, t.y) for t in fig.data]
    [('joins (synchronising events)', (0.0, 3.5), (3, 0)), ('passes (Spark jobs)', (0.0, 3.5), (2, 1))]
    """
    data = [r for r in records if r.get("flumina_epochs")]
    t0 = min((float(r.get("completed_at") or 0.0) for r in data), default=0.0)
    x = [float(r.get("completed_at") or 0.0) - t0 for r in data]
    fig = go.Figure(layout={"title": {"text": "Joins over time"}, "xaxis": {"title": {"text": "wall s"}},
                            "yaxis": {"title": {"text": "per micro-batch"}}})
    fig.add_trace(go.Bar(x=x, y=[int(r["flumina_epochs"]) - 1 for r in data], name="joins (synchronising events)",
                         customdata=[r["batch_id"] for r in data],
                         hovertemplate="batch %{customdata}: %{y} joins<extra></extra>"))
    fig.add_trace(go.Scatter(x=x, y=[int(r.get("flumina_passes") or 0) for r in data], name="passes (Spark jobs)",
                             mode="lines+markers", line={"shape": "hv"}))
    if not data:
        fig.add_annotation(text="no Flumina batch yet", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


def flumina_figures(records: Any, plan: Any = None) -> dict[str, go.Figure]:
    """The Flumina panel's figures: ``plan`` (when given), ``workers`` and ``joins``."""
    out = {"plan": plan_tree_figure(plan)} if plan is not None else {}
    out.update(workers=worker_events_figure(records), joins=joins_figure(records))
    return out
