"""Figures of per-operator parallelism tuning (StreamTune): parallelism, bottlenecks and the tuner's cost.

Pure: per-batch records in (those of :class:`~lmstream_kit.tune.operators.OperatorMetrics` or of
:class:`~lmstream_kit.tune.tuner.ParallelismTuner`), plotly figures out.  A record's ``operators``
lists the batch's Spark stages (``key``, ``tasks``, ``load``, ``bottleneck``, ...); the tuner adds
``tuner_proposal`` ``{key: p}``, ``tuner_reason`` ``{key: why}`` and ``tuner_s``, and its applied
changes appear in ``changes`` as ``tuner.*`` params (a *reconfiguration*, marked on every figure at
the batch whose record lists it; a change of the tuner's settings, such as ``tuner.mode``, is not one).

Each operator keeps one colour in every figure (its place among the keys, upstream first).

>>> recs = [{"batch_id": 0, "operators": [{"key": "j0.s0", "tasks": 2, "load": 0.9, "bottleneck": True}],
...          "tuner_proposal": {"j0.s0": 3}, "tuner_reason": {"j0.s0": "apply: 2 -> 3"}},
...         {"batch_id": 1, "operators": [{"key": "j0.s0", "tasks": 3, "load": 0.5, "bottleneck": False}],
...          "changes": [{"param": "tuner.partitions", "old": 2, "value": 3, "at": 1.0}]}]
>>> fig = parallelism_figure(recs)
>>> [(t.name, t.x, t.y) for t in fig.data]
[('j0.s0', (0, 1), (2, 3)), ('j0.s0 proposed', (0,), (3,)), ('reconfigurations', (1,), (3,))]
>>> [s.x0 for s in fig.layout.shapes], fig.layout.title.text
([1], 'Parallelism per operator (dotted: the tuner’s proposal)')
>>> reconfigurations(recs)
[(1, 'tuner.partitions: 2 -> 3')]
>>> parallelism_figure([{"batch_id": 0, "rows": 5}]).layout.title.text
'no operator metrics yet'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go
from plotly.colors import qualitative

__all__ = [
    "DEFAULT_BUSY_SHARE",
    "EMPTY_TUNING_TEXT",
    "bottleneck_figure",
    "busy_share",
    "operator_colors",
    "operator_keys",
    "overhead_figure",
    "parallelism_figure",
    "predicted_side",
    "reconfigurations",
    "tuner_figures",
]

#: the title of a tuning figure with no operator metrics to show
EMPTY_TUNING_TEXT = "no operator metrics yet"
#: the busy share above which a stage is a bottleneck, where the records do not say otherwise
DEFAULT_BUSY_SHARE = 0.7

_PALETTE = qualitative.Plotly
_MARKER_COLOR = "#7F7F7F"
_THRESHOLD_COLOR = "#D62728"
#: the tuner's settings: a change of one is not a reconfiguration (``tuner.partitions``, ``tuner.pin.<key>``,
#: ``tuner.parallelism.<key>`` and the like are)
_SETTINGS = frozenset({"mode", "busy_share", "cooldown", "low", "high", "threshold", "margin", "utilisation",
                       "policy", "refit_every"})


# --------------------------------------------------------------------------- reading the records


def _records(records: Any) -> list[Mapping]:
    """The batch records (mappings with an integral ``batch_id``), sorted by batch id; the last of one id wins."""
    by_id: dict[int, Mapping] = {}
    for r in records or ():
        if not isinstance(r, Mapping):
            continue
        try:
            by_id[int(r["batch_id"])] = r
        except (KeyError, TypeError, ValueError):
            continue
    return [by_id[b] for b in sorted(by_id)]


def _operators(record: Mapping) -> list[Mapping]:
    ops = record.get("operators")
    if not isinstance(ops, (list, tuple)):
        return []
    return [o for o in ops if isinstance(o, Mapping) and o.get("key") is not None]


def _number(value: Any) -> float | int | None:
    """A finite number (ints stay ints), else None (a gap in plotly)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    return int(value) if isinstance(value, int) else f


def _key_order(key: str, op: Mapping | None) -> tuple:
    """Upstream first: by (job, position) where the record says them, else parsed from ``j<job>.s<position>``."""
    job, pos = (op or {}).get("job"), (op or {}).get("position")
    if job is None or pos is None:
        try:
            j, s = str(key).split(".", 1)
            job, pos = int(j.lstrip("j")), int(s.lstrip("s"))
        except ValueError:
            return (1, str(key))
    try:
        return (0, int(job), int(pos), str(key))
    except (TypeError, ValueError):
        return (1, str(key))


def operator_keys(records: Any) -> list[str]:
    """Every operator key in the records, upstream first (by job, then position in the job).

    >>> operator_keys([{"batch_id": 0, "operators": [{"key": "j1.s0"}, {"key": "j0.s10"}, {"key": "j0.s2"}]}])
    ['j0.s2', 'j0.s10', 'j1.s0']
    """
    seen: dict[str, Mapping] = {}
    for r in _records(records):
        for op in _operators(r):
            seen.setdefault(str(op["key"]), op)
    return sorted(seen, key=lambda k: _key_order(k, seen[k]))


def operator_colors(records: Any) -> dict[str, str]:
    """Each operator key's colour (the same in every tuning figure)."""
    return {k: _PALETTE[i % len(_PALETTE)] for i, k in enumerate(operator_keys(records))}


def _changes(record: Mapping) -> list[Mapping]:
    changes = record.get("changes")
    if isinstance(changes, Mapping):
        changes = [changes]
    if not isinstance(changes, (list, tuple)):
        return []
    return [c for c in changes if isinstance(c, Mapping) and isinstance(c.get("param"), str)]


def _fmt(value: Any) -> str:
    n = _number(value)
    if n is None:
        return str(value)
    return str(int(n)) if float(n) == int(n) else f"{float(n):.4g}"


def reconfigurations(records: Any) -> list[tuple[int, str]]:
    """``(batch_id, label)`` of every batch whose ``changes`` include a ``tuner.*`` param that sets a
    parallelism (``tuner.partitions``, ``tuner.pin.<key>``, ...; not a setting such as ``tuner.mode``).

    A change is labelled ``param: old -> value`` (``param=value`` without an old value); the
    changes of one batch are joined with ``", "``.
    """
    out = []
    for r in _records(records):
        tuned = [c for c in _changes(r) if c["param"].startswith("tuner.")
                 and c["param"].split(".")[1] not in _SETTINGS]
        if tuned:
            out.append((int(r["batch_id"]), ", ".join(
                f"{c['param']}: {_fmt(c['old'])} -> {_fmt(c.get('value'))}" if c.get("old") is not None
                else f"{c['param']}={_fmt(c.get('value'))}" for c in tuned)))
    return out


def busy_share(records: Any, default: float = DEFAULT_BUSY_SHARE) -> float:
    """The bottleneck threshold in force at the last batch: the last ``*.busy_share`` change in the
    records (``operators.busy_share`` or ``tuner.busy_share``), else ``default``.

    >>> busy_share([{"batch_id": 3, "changes": [{"param": "tuner.busy_share", "old": 0.7, "value": 0.8}]}])
    0.8
    >>> busy_share([])
    0.7
    """
    value = default
    for r in _records(records):
        for c in _changes(r):
            if c["param"].rsplit(".", 1)[-1] == "busy_share":
                v = _number(c.get("value"))
                if v is not None and 0 < v <= 1:
                    value = float(v)
    return value


def predicted_side(tasks: Any, proposal: Any, reason: Any) -> str | None:
    """What the tuner predicts of an operator at its current parallelism, where its reason is
    ``apply``, ``recommend`` or ``hold``: ``"bottleneck"`` (it proposes more), ``"over-provisioned"``
    (it proposes fewer) or ``"ok"``; None where it says nothing (no proposal, ``fixed``, ``pinned``).

    >>> predicted_side(2, 3, "apply: 2 -> 3"), predicted_side(4, 2, "hold: cooldown"), predicted_side(2, 2, "hold: x")
    ('bottleneck', 'over-provisioned', 'ok')
    >>> predicted_side(2, 4, "fixed: not a knob"), predicted_side(2, None, "apply: 2 -> 3")
    (None, None)
    >>> predicted_side(2, 4, "recommend: 2 -> 4")
    'bottleneck'
    """
    t, p = _number(tasks), _number(proposal)
    if t is None or p is None or not isinstance(reason, str) \
            or not reason.startswith(("apply", "recommend", "hold")):
        return None
    return "bottleneck" if p > t else "over-provisioned" if p < t else "ok"


# --------------------------------------------------------------------------- figure helpers


def _empty(title: str = EMPTY_TUNING_TEXT) -> go.Figure:
    fig = go.Figure(layout={"title": {"text": title}})
    fig.add_annotation(text=title, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False, font={"size": 16})
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False)
    return fig


def _mark_reconfigurations(fig: go.Figure, records: list[Mapping], y: float | None) -> None:
    """A dashed vertical line at every reconfiguration and one marker trace (``reconfigurations``,
    at height ``y``) whose hover lists the changes."""
    marks = reconfigurations(records)
    if not marks:
        return
    for bid, _ in marks:
        fig.add_shape(type="line", xref="x", yref="paper", x0=bid, x1=bid, y0=0, y1=1,
                      line={"color": _MARKER_COLOR, "width": 1, "dash": "dash"})
    fig.add_trace(go.Scatter(
        x=[b for b, _ in marks], y=[y] * len(marks), mode="markers", name="reconfigurations",
        marker={"symbol": "triangle-down", "size": 11, "color": _MARKER_COLOR},
        hovertext=[f"batch {b}: {label}" for b, label in marks], hoverinfo="text"))


def _layout(fig: go.Figure, title: str, ytitle: str) -> go.Figure:
    fig.update_layout(title={"text": title}, xaxis={"title": {"text": "batch"}}, yaxis={"title": {"text": ytitle}},
                      legend={"orientation": "h", "y": -0.2}, hovermode="closest")
    return fig


# --------------------------------------------------------------------------- figures


def parallelism_figure(records: Any) -> go.Figure:
    """Each operator's parallelism (its stage's tasks) over the batch id, one line per key; the tuner's
    proposal for it as a dotted line of the same colour (``<key> proposed``, at the batch after which it
    was proposed, its reason in the hover); every reconfiguration a dashed vertical line, with a marker
    trace ``reconfigurations`` at the top.
    """
    recs = _records(records)
    keys = operator_keys(recs)
    if not keys:
        return _empty()
    colors = operator_colors(recs)
    fig = go.Figure()
    top = 0.0
    for key in keys:
        x, y = [], []
        for r in recs:
            for op in _operators(r):
                if str(op["key"]) == key:
                    x.append(int(r["batch_id"]))
                    y.append(_number(op.get("tasks")))
        top = max([top, *(v for v in y if v is not None)])
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=key, legendgroup=key,
                                 line={"color": colors[key], "shape": "hv"},
                                 hovertemplate=f"{key}: %{{y}} tasks<extra>batch %{{x}}</extra>"))
        px, py, hover = [], [], []
        for r in recs:
            proposal, reason = r.get("tuner_proposal"), r.get("tuner_reason")
            if not isinstance(proposal, Mapping) or _number(proposal.get(key)) is None:
                continue
            px.append(int(r["batch_id"]))
            py.append(_number(proposal[key]))
            why = reason.get(key) if isinstance(reason, Mapping) else None
            hover.append(f"{key}: proposed {_fmt(proposal[key])} after batch {r['batch_id']}"
                         + (f"<br>{why}" if why else ""))
        if px:
            top = max([top, *(v for v in py if v is not None)])
            fig.add_trace(go.Scatter(x=px, y=py, mode="lines", name=f"{key} proposed", legendgroup=key,
                                     line={"color": colors[key], "dash": "dot", "shape": "hv"},
                                     hovertext=hover, hoverinfo="text"))
    _mark_reconfigurations(fig, recs, top)
    return _layout(fig, "Parallelism per operator (dotted: the tuner’s proposal)", "tasks")


def bottleneck_figure(records: Any, threshold: float | None = None) -> go.Figure:
    """Each operator's observed load (one task's busy seconds over the batch's bound) over the batch id,
    one line per key; its observed bottleneck batches as crosses (``<key> bottleneck``); where the
    tuner's reason says apply or hold and it proposes more tasks, its predicted bottleneck as open
    circles (``<key> predicted``); the tuner's prediction and reason in every point's hover.  The
    busy-share threshold (``threshold``, else :func:`busy_share` of the records) is a horizontal line;
    reconfigurations are marked as in :func:`parallelism_figure`.
    """
    recs = _records(records)
    keys = operator_keys(recs)
    if not keys:
        return _empty()
    share = float(threshold) if threshold is not None else busy_share(recs)
    colors = operator_colors(recs)
    fig = go.Figure()
    top = share
    for key in keys:
        x, y, hover, observed, predicted = [], [], [], [], []
        for r in recs:
            for op in _operators(r):
                if str(op["key"]) != key:
                    continue
                bid, load = int(r["batch_id"]), _number(op.get("load"))
                proposal, reason = r.get("tuner_proposal"), r.get("tuner_reason")
                p = proposal.get(key) if isinstance(proposal, Mapping) else None
                why = reason.get(key) if isinstance(reason, Mapping) else None
                side = predicted_side(op.get("tasks"), p, why)
                x.append(bid)
                y.append(load)
                text = f"{key}, batch {bid}: load {'-' if load is None else format(load, '.3g')}, " \
                       f"{_fmt(op.get('tasks'))} tasks"
                if op.get("bottleneck"):
                    text += "<br>observed: bottleneck"
                    observed.append((bid, load))
                if side is not None:
                    text += f"<br>predicted: {side} (proposes {_fmt(p)})"
                    if side == "bottleneck":
                        predicted.append((bid, load))
                if why:
                    text += f"<br>{why}"
                hover.append(text)
        top = max([top, *(v for v in y if v is not None)])
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=key, legendgroup=key,
                                 line={"color": colors[key]}, hovertext=hover, hoverinfo="text"))
        if observed:
            fig.add_trace(go.Scatter(x=[b for b, _ in observed], y=[v for _, v in observed], mode="markers",
                                     name=f"{key} bottleneck", legendgroup=key,
                                     marker={"symbol": "x", "size": 12, "color": colors[key]},
                                     hovertemplate=f"{key}: observed bottleneck<extra>batch %{{x}}</extra>"))
        if predicted:
            fig.add_trace(go.Scatter(x=[b for b, _ in predicted], y=[v for _, v in predicted], mode="markers",
                                     name=f"{key} predicted", legendgroup=key,
                                     marker={"symbol": "circle-open", "size": 16, "color": colors[key],
                                             "line": {"width": 2}},
                                     hovertemplate=f"{key}: predicted bottleneck<extra>batch %{{x}}</extra>"))
    fig.add_hline(y=share, line={"color": _THRESHOLD_COLOR, "width": 1, "dash": "dot"},
                  annotation_text=f"bottleneck above load {share:g}", annotation_position="top left",
                  annotation_font={"size": 10, "color": _THRESHOLD_COLOR})
    _mark_reconfigurations(fig, recs, top)
    return _layout(fig, "Load per operator (×: observed bottleneck, ○: predicted)", "load (busy share of the bound)")


def overhead_figure(records: Any) -> go.Figure:
    """Milliseconds per batch spent reading the stages (``operators_s``) and deciding (``tuner_s``),
    stacked bars over the batch id; reconfigurations marked as in :func:`parallelism_figure`.
    """
    recs = _records(records)
    series = {"reading the stages": "operators_s", "tuner deciding": "tuner_s"}
    if not operator_keys(recs) and not any(_number(r.get(f)) is not None for r in recs for f in series.values()):
        return _empty()
    fig = go.Figure()
    totals: dict[int, float] = {}
    for name, field in series.items():
        pts = [(int(r["batch_id"]), _number(r.get(field))) for r in recs]
        pts = [(b, round(1000 * v, 3)) for b, v in pts if v is not None]
        if not pts:
            continue
        for b, v in pts:
            totals[b] = totals.get(b, 0.0) + v
        fig.add_trace(go.Bar(x=[b for b, _ in pts], y=[v for _, v in pts], name=name,
                             hovertemplate=f"{name}: %{{y:.3g}} ms<extra>batch %{{x}}</extra>"))
    fig.update_layout(barmode="stack")
    _mark_reconfigurations(fig, recs, max(totals.values(), default=0.0))
    return _layout(fig, "Tuning overhead per batch", "ms")


def tuner_figures(records: Any, threshold: float | None = None) -> dict[str, go.Figure]:
    """The tuner panel's figures: ``parallelism``, ``bottlenecks`` and ``overhead``.

    >>> list(tuner_figures([]))
    ['parallelism', 'bottlenecks', 'overhead']
    """
    recs = _records(records)
    return {"parallelism": parallelism_figure(recs), "bottlenecks": bottleneck_figure(recs, threshold),
            "overhead": overhead_figure(recs)}
