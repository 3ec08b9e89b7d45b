"""Figures of a benchmark sweep: the paper's Figs. 1, 6, 7, 8 and 9, the capacity bars and the share
of micro-batches within the bound; pure, the frames of :mod:`lmstream_kit.bench` in, a figure out."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from .frames import (
    POLICY_COLORS,
    _capacity_policies,
    _empty,
    _finite,
    _mean_over_reps,
    _num,
    _ordered,
    _policies,
    _traffics,
    capacity_brackets,
)

__all__ = [
    "fig_avg_latency",
    "fig_batch_timeline",
    "fig_capacity",
    "fig_fixed_latency_growth",
    "fig_row_cost",
    "fig_throughput",
    "pick_timeline_queries",
    "within_bound_figure",
]

#: the bar colour of a policy without one in POLICY_COLORS (a plug-in's), in :func:`within_bound_figure`
_OTHER_POLICY_COLOR = "#BAB0AC"

#: the queries the paper uses for Fig. 8 (sliding) and Fig. 9 (tumbling)
PAPER_TIMELINE_QUERIES = {"sliding": "LR1S", "tumbling": "LR1T"}

# ---------------------------------------------------------------------------------------------
# helpers


def _label(value: Any) -> str:
    """Text for a plotly label, shown literally.

    Plotly reads labels as pseudo-HTML: a query named ``<b>`` would turn the rest of
    the label bold.  Entities such as ``&lt;`` are displayed as the character.
    """
    return html.escape(str(value), quote=False)


def _pick_traffic(available: Sequence[Any], preferred: Sequence[str]) -> Any:

    ordered = _ordered(available, preferred)
    return ordered[0] if ordered else None


def _first_rep(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of repetition 0 (or the lowest repetition present)."""
    if "rep" not in df.columns or df.empty:
        return df
    reps = pd.to_numeric(df["rep"], errors="coerce")
    if (reps == 0).any():
        return df[reps == 0]
    if reps.notna().any():
        return df[reps == reps.min()]
    return df


def _time_axis(df: pd.DataFrame) -> pd.Series:
    return df["t_s"] if "t_s" in df.columns else df.get("batch_id", pd.Series(range(len(df))))


def _no_data_figure(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=_label(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=_label(title), xaxis_visible=False, yaxis_visible=False, height=300)
    return fig


def _bound_value(df: pd.DataFrame) -> float:
    if "bound_s" not in df.columns:
        return math.nan
    bounds = pd.to_numeric(df["bound_s"], errors="coerce").dropna()
    return float(bounds.median()) if len(bounds) else math.nan


# ---------------------------------------------------------------------------------------------
# figures


def fig_fixed_latency_growth(batches: pd.DataFrame, meta: Mapping | None = None,
                             compare: str | None = None) -> go.Figure | None:
    """Fig. 1: maximum latency per micro-batch over time under the ``fixed`` policy.

    One line per query (constant traffic and repetition 0 preferred), each with its
    latency bound as a dashed line of the same colour; a second panel shows the rows
    per micro-batch, which grow with the latency in the paper's figure.

    Parameters
    ----------
    batches : DataFrame
        The per-batch frame (``query``, ``policy``, ``traffic``, ``rep``, ``t_s``,
        ``max_latency_s``, ``rows``, ``bound_s``).
    meta : dict, optional
        Run description; its ``speedup`` goes into the title.
    compare : str, optional
        Another policy whose batches of the same query and traffic are drawn as dotted lines
        (``"lmstream"`` on overload cells: bounded where the fixed trigger's latency grows).

    Returns
    -------
    plotly.graph_objects.Figure or None
        ``None`` when the sweep has no ``fixed`` batches.
    """

    if _empty(batches) or "policy" not in batches or "max_latency_s" not in batches:
        return None
    fixed = batches[batches["policy"] == "fixed"]
    if fixed.empty:
        return None
    queries = _ordered(fixed["query"]) if "query" in fixed else [None]
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        row_heights=[0.65, 0.35],
        subplot_titles=("(a) maximum latency per micro-batch", "(b) rows per micro-batch"),
    )
    palette = qualitative.Plotly
    for i, query in enumerate(queries):
        sub = fixed if query is None else fixed[fixed["query"] == query]
        if "traffic" in sub.columns:
            traffic = _pick_traffic(sub["traffic"], ("constant", "random"))
            if traffic is not None:
                sub = sub[sub["traffic"] == traffic]
        sub = _first_rep(sub)
        x = _time_axis(sub)
        sub = sub.assign(_x=pd.to_numeric(x, errors="coerce")).sort_values("_x")
        name = _label(query if query is not None else "fixed")
        color = palette[i % len(palette)]
        fig.add_trace(
            go.Scatter(
                x=sub["_x"], y=sub["max_latency_s"], mode="lines+markers", name=name,
                legendgroup=name, line={"color": color},
            ),
            row=1, col=1,
        )
        bound = _bound_value(sub)
        if math.isfinite(bound) and sub["_x"].notna().any():
            fig.add_trace(
                go.Scatter(
                    x=[sub["_x"].min(), sub["_x"].max()], y=[bound, bound], mode="lines",
                    name=f"{name} bound", legendgroup=name,
                    line={"color": color, "dash": "dash"},
                ),
                row=1, col=1,
            )
        if "rows" in sub.columns:
            fig.add_trace(
                go.Scatter(
                    x=sub["_x"], y=sub["rows"], mode="lines", name=f"{name} rows", legendgroup=name,
                    line={"color": color}, showlegend=False,
                ),
                row=2, col=1,
            )
        other = batches[(batches["policy"] == compare)] if compare else batches.iloc[0:0]
        if query is not None and "query" in other:
            other = other[other["query"] == query]
        if "traffic" in sub.columns and len(sub) and "traffic" in other:
            other = other[other["traffic"] == sub["traffic"].iloc[0]]
        if len(other):
            other = _first_rep(other)
            other = other.assign(_x=pd.to_numeric(_time_axis(other), errors="coerce")).sort_values("_x")
            label = f"{name} {compare}"
            fig.add_trace(
                go.Scatter(x=other["_x"], y=other["max_latency_s"], mode="lines", name=label, legendgroup=label,
                           line={"color": color, "dash": "dot"}),
                row=1, col=1,
            )
            if "rows" in other.columns:
                fig.add_trace(
                    go.Scatter(x=other["_x"], y=other["rows"], mode="lines", name=f"{label} rows",
                               legendgroup=label, line={"color": color, "dash": "dot"}, showlegend=False),
                    row=2, col=1,
                )
    speedup = _num((meta or {}).get("speedup"))
    title = "Fixed trigger: maximum latency per micro-batch over time"
    if math.isfinite(speedup):
        title += f" (time compressed {speedup:g}×)"
    fig.update_layout(title=title, height=560)
    fig.update_yaxes(title_text="max latency (wall s)", row=1, col=1)
    fig.update_yaxes(title_text="rows", row=2, col=1)
    fig.update_xaxes(title_text="time since first arrival (wall s)", row=2, col=1)
    return fig


def _fig_policy_bars(results: pd.DataFrame, column: str, ytitle: str, title: str) -> go.Figure:
    """Grouped bars of ``column`` (mean over reps, std as error bars) per query x policy, by traffic."""

    needed = {"query", "policy", column}
    if _empty(results) or not needed <= set(results.columns):
        return _no_data_figure(title, f"no data: the sweep has no {column}")
    agg = _mean_over_reps(results, [column], ("traffic", "query", "policy"))
    agg = agg[agg[column].notna()]
    if agg.empty:
        return _no_data_figure(title, f"no data: every {column} is missing")
    traffics = _traffics(agg) or [None]
    fig = make_subplots(
        rows=1,
        cols=len(traffics),
        shared_yaxes=True,
        horizontal_spacing=0.04,
        subplot_titles=[_label(f"{t} traffic") if t is not None else "" for t in traffics],
    )
    shown: set = set()
    for col, traffic in enumerate(traffics, start=1):
        part = agg if traffic is None else agg[agg["traffic"] == traffic]
        queries = _ordered(part["query"])
        for policy in _policies(part):
            rows = part[part["policy"] == policy].set_index("query").reindex(queries)
            fig.add_trace(
                go.Bar(
                    x=[_label(q) for q in queries],
                    y=rows[column].tolist(),
                    error_y={"type": "data", "array": rows[f"{column}_std"].fillna(0.0).tolist()},
                    name=_label(policy),
                    legendgroup=_label(policy),
                    showlegend=policy not in shown,
                    marker_color=POLICY_COLORS.get(policy),
                ),
                row=1, col=col,
            )
            shown.add(policy)
    fig.update_layout(title=title, barmode="group", height=440)
    fig.update_yaxes(title_text=ytitle, row=1, col=1)
    return fig


def fig_avg_latency(results: pd.DataFrame) -> go.Figure:
    """Fig. 6: mean over repetitions of ``avg_latency_s`` per query and policy.

    Grouped bars, error bars = standard deviation over repetitions (0 with one
    repetition), one column of panels per traffic kind.  A frame without the
    data gives a figure that says so.
    """
    return _fig_policy_bars(results, "avg_latency_s", "average latency (wall s)", "Average latency")


def fig_throughput(results: pd.DataFrame) -> go.Figure:
    """Fig. 7: mean over repetitions of ``throughput_rows_s`` per query and policy.

    Same layout as :func:`fig_avg_latency`.
    """
    return _fig_policy_bars(
        results, "throughput_rows_s", "throughput (rows per processing s)", "Throughput"
    )


def fig_batch_timeline(batches: pd.DataFrame, query: Any) -> go.Figure | None:
    """Figs. 8 and 9: one query's micro-batches over time, one trace per policy.

    Random traffic is preferred (as in the paper), constant otherwise; repetition 0.
    Panel (a) is the maximum latency per micro-batch with the bound as a dashed
    line, panel (b) the rows per micro-batch; the panels share the time axis.

    Returns
    -------
    plotly.graph_objects.Figure or None
        ``None`` when ``batches`` has no micro-batch of ``query``.
    """

    if _empty(batches) or query is None or "query" not in batches or "max_latency_s" not in batches:
        return None
    sub = batches[batches["query"] == query]
    if sub.empty:
        return None
    traffic = None
    if "traffic" in sub.columns:
        traffic = _pick_traffic(sub["traffic"], ("random", "constant"))
        if traffic is not None:
            sub = sub[sub["traffic"] == traffic]
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=("(a) maximum latency per micro-batch", "(b) rows per micro-batch"),
    )
    x_min, x_max = math.inf, -math.inf
    policies = _policies(sub) or [None]
    for policy in policies:
        part = sub if policy is None else sub[sub["policy"] == policy]
        part = _first_rep(part)
        part = part.assign(_x=pd.to_numeric(_time_axis(part), errors="coerce")).sort_values("_x")
        if part["_x"].notna().any():
            x_min, x_max = min(x_min, part["_x"].min()), max(x_max, part["_x"].max())
        name = _label(policy if policy is not None else query)
        color = POLICY_COLORS.get(policy)
        fig.add_trace(
            go.Scatter(
                x=part["_x"], y=part["max_latency_s"], mode="lines+markers", name=name,
                legendgroup=name, line={"color": color},
            ),
            row=1, col=1,
        )
        if "rows" in part.columns:
            fig.add_trace(
                go.Scatter(
                    x=part["_x"], y=part["rows"], mode="lines", name=f"{name} rows", legendgroup=name,
                    line={"color": color}, showlegend=False,
                ),
                row=2, col=1,
            )
    bound = _bound_value(sub)
    if math.isfinite(bound) and math.isfinite(x_min):
        fig.add_trace(
            go.Scatter(
                x=[x_min, x_max], y=[bound, bound], mode="lines", name=f"bound ({bound:.3g} s)",
                line={"color": "black", "dash": "dash"},
            ),
            row=1, col=1,
        )
    kind = ""
    if "window_kind" in sub.columns and sub["window_kind"].notna().any():
        kind = f", {sub['window_kind'].dropna().iloc[0]} window"
    where = f"{traffic} traffic" if traffic is not None else "all traffic"
    fig.update_layout(title=_label(f"{query}{kind}: micro-batches over time ({where})"), height=560)
    fig.update_yaxes(title_text="max latency (wall s)", row=1, col=1)
    fig.update_yaxes(title_text="rows", row=2, col=1)
    fig.update_xaxes(title_text="time since first arrival (wall s)", row=2, col=1)
    return fig


def fig_row_cost(batches: pd.DataFrame) -> go.Figure | None:
    """What a row costs by batch size: each data batch's processing seconds per million rows against its
    rows, one panel per query, one colour per policy, every cell of the sweep (its loads, traffic kinds
    and repetitions) pooled.

    Where the points fall as batches grow, a batch's fixed cost is spread over more rows and batching
    buys speed; where they lie flat, a larger batch processes its rows no faster, and waiting for one
    only spends the bound's slack.  Both axes are logarithmic.

    Returns
    -------
    plotly.graph_objects.Figure or None
        ``None`` when no batch has rows and a processing time.
    """

    need = {"query", "rows", "processing_s"}
    if _empty(batches) or not need <= set(batches.columns):
        return None
    rows = pd.to_numeric(batches["rows"], errors="coerce")
    seconds = pd.to_numeric(batches["processing_s"], errors="coerce")
    data = batches.assign(_rows=rows, _cost=seconds / rows * 1e6)[(rows > 0) & (seconds > 0)]
    if data.empty:
        return None
    queries = _ordered(data["query"])
    cols = min(3, len(queries))
    fig = make_subplots(rows=math.ceil(len(queries) / cols), cols=cols, subplot_titles=[_label(q) for q in queries],
                        horizontal_spacing=0.08, vertical_spacing=0.14)
    policies = _policies(data) or [None]
    for i, query in enumerate(queries):
        sub = data[data["query"] == query]
        for policy in policies:
            part = sub if policy is None else sub[sub["policy"] == policy]
            if part.empty:
                continue
            name = _label(policy if policy is not None else query)
            fig.add_trace(
                go.Scatter(x=part["_rows"], y=part["_cost"], mode="markers", name=name, legendgroup=name,
                           showlegend=i == 0, marker={"color": POLICY_COLORS.get(policy), "size": 5, "opacity": 0.6},
                           hovertemplate="%{x:,.0f} rows: %{y:.3g} s per million rows<extra>" + name + "</extra>"),
                row=i // cols + 1, col=i % cols + 1,
            )
    fig.update_xaxes(type="log", title_text="rows in the batch")
    fig.update_yaxes(type="log", title_text="processing s per M rows")
    fig.update_layout(title="What a row costs by batch size (flat: larger batches buy no speed)",
                      height=320 * math.ceil(len(queries) / cols))
    return fig


def pick_timeline_queries(results: pd.DataFrame) -> dict:
    """The queries for Fig. 8 (sliding) and Fig. 9 (tumbling).

    The paper's LR1S and LR1T when present, else the first query of that window kind.

    Returns
    -------
    dict
        ``{"sliding": query or None, "tumbling": query or None}``

    Examples
    --------
    >>> df = pd.DataFrame({"query": ["CM1T", "LR2S", "LR1S"], "window_kind": ["tumbling", "sliding", "sliding"]})
    >>> pick_timeline_queries(df)
    {'sliding': 'LR1S', 'tumbling': 'CM1T'}
    """

    picked: dict = {"sliding": None, "tumbling": None}
    if _empty(results) or not {"query", "window_kind"} <= set(results.columns):
        return picked
    for kind in picked:
        queries = _ordered(results.loc[results["window_kind"] == kind, "query"])
        if queries:
            preferred = PAPER_TIMELINE_QUERIES[kind]
            picked[kind] = preferred if preferred in queries else queries[0]
    return picked


def fig_capacity(capacity: pd.DataFrame | None) -> go.Figure | None:
    """Bars of each query's and policy's capacity bracket (:func:`.frames.capacity_brackets`).

    A bar reaches the highest rate that passed (``lo``: most of its runs did); its
    whisker reaches the lowest rate that failed (``hi``), so the capacity lies between
    the bar's top and the whisker's end.  No whisker: no rate failed; an empty
    bar: none passed.  Each bar is labelled with its bracket and the hover
    text gives the status, runs and repetitions.  ``None`` when the capacity
    search was skipped.
    """

    brackets = capacity_brackets(capacity)
    if brackets.empty:
        return None
    queries = _ordered(brackets["query"])
    fig = go.Figure()
    for policy in _capacity_policies(capacity):
        by = {r["query"]: r for r in brackets[brackets["policy"] == policy].to_dict("records")}
        if not any(by[q]["probes"] > 0 for q in by):
            continue
        rows = [by.get(q) for q in queries]
        lo = [r["lo"] if r is not None and _finite(r["lo"]) else 0.0 for r in rows]
        whisker = [r["hi"] - low if r is not None and _finite(r["hi"]) else 0.0 for r, low in zip(rows, lo)]
        fig.add_trace(
            go.Bar(
                x=[_label(q) for q in queries],
                y=lo,
                error_y={"type": "data", "symmetric": False, "array": whisker, "arrayminus": [0.0] * len(lo)},
                text=["" if r is None else _label(r["text"].split(" (")[0]) for r in rows],
                hovertext=["" if r is None else _label(r["text"]) + f", {r['probes']} runs" for r in rows],
                textposition="outside",
                name=_label(policy),
                marker_color=POLICY_COLORS.get(policy),
            )
        )
    fig.update_layout(
        title="Capacity: highest offered rate meeting the bound (bar: passed, whisker: failed)",
        barmode="group",
        height=420,
        yaxis_title="rows per simulated s",
    )
    return fig


def within_bound_figure(cells: pd.DataFrame, bound_s: float) -> go.Figure:
    """Bars of the share of data micro-batches within the latency bound, one bar per policy.

    Parameters
    ----------
    cells : DataFrame
        One row per policy (rows of :func:`lmstream_kit.bench.cell_row`), indexed by policy or with a
        ``policy`` column, and ``within_bound``, the share (0 to 1) of data batches within the bound.
    bound_s : float
        The latency bound in wall seconds, shown in the title.

    Returns
    -------
    plotly.graph_objects.Figure
        One ``Bar`` trace: x the policies in row order, y the percentage, each bar in its policy's
        colour (:data:`~lmstream_kit.plots.frames.POLICY_COLORS`; light grey for any other policy) and
        labelled with the rounded percentage.

    Examples
    --------
    >>> cells = pd.DataFrame({"policy": ["fixed", "lmstream"], "within_bound": [0.25, 1.0]})
    >>> fig = within_bound_figure(cells, 2.0)
    >>> bar = fig.data[0]
    >>> bar.x, bar.y, bar.text
    (('fixed', 'lmstream'), (25.0, 100.0), ('25%', '100%'))
    >>> fig.layout.title.text, fig.layout.yaxis.range
    ('Micro-batches within the 2.00 s bound', (0, 110))
    """

    if "policy" in cells.columns:
        cells = cells.set_index("policy")
    policies = list(cells.index)
    shares = cells["within_bound"]
    fig = go.Figure(go.Bar(x=policies, y=list(shares * 100),
                           marker_color=[POLICY_COLORS.get(p, _OTHER_POLICY_COLOR) for p in policies],
                           text=[f"{v:.0%}" for v in shares], textposition="outside"))
    fig.update_layout(title=f"Micro-batches within the {bound_s:.2f} s bound",
                      yaxis_title="% of data batches", yaxis_range=[0, 110], height=360)
    return fig
