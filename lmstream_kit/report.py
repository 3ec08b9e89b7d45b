"""Figures, tables and reports for a benchmark sweep (the paper's Section V).

Everything here is a pure function of the benchmark's data frames, which
``lmstream_kit.bench`` produces:

``results``
    one row per sweep cell (query x policy x traffic x rate) and repetition;
``batches``
    one row per data micro-batch of every cell;
``capacity``
    one row per capacity-search probe (``None`` or empty when the search was skipped);
``meta``
    a dict describing the run (command, machine, versions, time compression, sweep).

The figures follow the LMStream paper: Fig. 1 (the fixed trigger's latency
grows), Fig. 6 (average latency), Fig. 7 (throughput), Figs. 8 and 9 (maximum
latency and batch size over time for a sliding and a tumbling query) and
Table IV (time shares).  :func:`claims` sets the paper's four headline claims
beside ours.  :func:`build_report` assembles a self-contained HTML page
(plotly.js embedded once) and :func:`reproduction_markdown` the Markdown for
``docs/reproduction.md``; the only I/O is :func:`write_report`.

Every function tolerates missing policies, queries, traffic kinds, columns and
NaN values: figures become ``None`` (or a figure saying "no data"), tables
come back empty, and claims that cannot be measured say what the sweep lacks.

The paper's "Baseline" (Spark with a 10 s processing-time trigger) is our
``fixed`` policy; ``asap`` admits everything whenever the engine is idle.

Example
-------
>>> import pandas as pd
>>> results = pd.DataFrame({
...     "query": ["LR1S", "LR1S"], "window_kind": ["sliding"] * 2,
...     "policy": ["lmstream", "fixed"], "traffic": ["constant"] * 2, "rep": [0, 0],
...     "rate": [1000.0] * 2, "avg_latency_s": [0.3, 1.0], "throughput_rows_s": [5000.0, 4000.0],
... })
>>> c = claims(results)
>>> c.loc[0, "ours"], c.loc[0, "where"], bool(c.loc[0, "agrees"])
('70.0% lower', 'LR1S (constant)', True)
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

__all__ = [
    "build_report",
    "capacity_table",
    "claims",
    "cpu_table",
    "fig_avg_latency",
    "fig_batch_timeline",
    "fig_capacity",
    "fig_fixed_latency_growth",
    "fig_throughput",
    "pick_timeline_queries",
    "reproduction_markdown",
    "time_shares",
    "write_report",
]

#: policies and traffic kinds in the order figures and tables show them (others follow)
POLICY_ORDER = ("lmstream", "fixed", "asap")
TRAFFIC_ORDER = ("constant", "random")
POLICY_COLORS = {"lmstream": "#1f77b4", "fixed": "#d62728", "asap": "#7f7f7f"}

#: Table IV: the five time components (results column -> label)
TIME_COMPONENTS = {
    "buffering_s": "buffering",
    "decision_s": "decision",
    "mapping_s": "device mapping",
    "processing_s": "processing",
    "optimizer_s": "blocked on optimizer",
}
#: the components LMStream adds to the plain micro-batch model (the paper's gray rows)
OVERHEAD_COMPONENTS = ("decision", "device mapping", "blocked on optimizer")

#: a capacity probe (and claim 3) passes when this share of batches met the bound
PASS_SHARE = 0.95

#: the paper's headline numbers (abstract, Section V-B and Table IV)
PAPER_LATENCY_REDUCTION = 0.707  # LR1T
PAPER_THROUGHPUT_RATIO = 1.74  # LR1S
PAPER_OVERHEAD_LIMIT = 0.01

#: the queries the paper uses for Fig. 8 (sliding) and Fig. 9 (tumbling)
PAPER_TIMELINE_QUERIES = {"sliding": "LR1S", "tumbling": "LR1T"}

CAPTIONS = {
    "fig1": (
        "Paper Fig. 1 — under the fixed trigger (the paper's throughput-oriented Baseline) the "
        "maximum latency per micro-batch grows over time, and so does the batch size; dashed lines "
        "are each query's latency bound."
    ),
    "fig6": (
        "Paper Fig. 6 — average end-to-end latency per query and policy (mean over repetitions; "
        "error bars: standard deviation), one panel per traffic kind."
    ),
    "fig7": (
        "Paper Fig. 7 — throughput (rows per second of processing) per query and policy "
        "(mean over repetitions; error bars: standard deviation), one panel per traffic kind."
    ),
    "fig8": (
        "Paper Fig. 8 — sliding window: (a) maximum latency per micro-batch with the bound "
        "(the slide), (b) rows per micro-batch, per policy."
    ),
    "fig9": (
        "Paper Fig. 9 — tumbling window: (a) maximum latency per micro-batch with the bound "
        "(the range), (b) rows per micro-batch, per policy."
    ),
    "capacity": (
        "Capacity (not in the paper) — the highest offered rate (rows per simulated second) at "
        f"which at least {PASS_SHARE:.0%} of micro-batches met the latency bound, per query and policy."
    ),
    "table4": (
        "Paper Table IV — share of each time component in their sum under the lmstream policy "
        "(percent, summed over repetitions and traffic). Device mapping and optimizer blocking stay 0 "
        "until the GPU device mapper exists."
    ),
    "cpu": (
        "CPU seconds per million rows at the same offered load (mean over repetitions), split into "
        "the Spark JVM, the Python workers and the kit; vs_asap is the ratio to the asap policy."
    ),
    "claims": "The paper's headline claims beside this sweep's numbers.",
    "results": "Every sweep cell and repetition, as measured.",
}


# ---------------------------------------------------------------------------------------------
# small helpers


def _empty(df: pd.DataFrame | None) -> bool:
    return df is None or not isinstance(df, pd.DataFrame) or df.empty


def _ordered(values: Iterable[Any], preferred: Sequence[Any] = ()) -> list:
    """Unique non-null values: the ``preferred`` ones first (in that order), then the rest as met."""
    seen: list = []
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)) or v in seen:
            continue
        seen.append(v)
    return [p for p in preferred if p in seen] + [v for v in seen if v not in preferred]


def _policies(df: pd.DataFrame) -> list:
    return _ordered(df["policy"], POLICY_ORDER) if "policy" in df else []


def _traffics(df: pd.DataFrame) -> list:
    return _ordered(df["traffic"], TRAFFIC_ORDER) if "traffic" in df else []


def _label(value: Any) -> str:
    """Text for a plotly label, shown literally.

    Plotly reads labels as pseudo-HTML: a query named ``<b>`` would turn the rest of
    the label bold.  Entities such as ``&lt;`` are displayed as the character.
    """
    return html.escape(str(value), quote=False)


def _num(value: Any) -> float:
    """``value`` as a float, NaN for anything missing or non-numeric."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def _finite(value: Any) -> bool:
    return math.isfinite(_num(value))


def _keys(df: pd.DataFrame, wanted: Sequence[str]) -> list:
    return [k for k in wanted if k in df.columns]


def _mean_over_reps(
    results: pd.DataFrame, value_cols: Sequence[str], keys: Sequence[str]
) -> pd.DataFrame:
    """Mean (and std, count) of ``value_cols`` over repetitions of each cell ``keys``."""
    keys = _keys(results, keys)
    cols = [c for c in value_cols if c in results.columns]
    frame = results[keys + cols].copy()
    for c in cols:
        frame[c] = pd.to_numeric(frame[c], errors="coerce")
    grouped = frame.groupby(keys, dropna=False, sort=False)
    out = grouped[cols].mean()
    std = grouped[cols].std().add_suffix("_std")
    out = out.join(std)
    out["reps"] = grouped.size()
    return out.reset_index()


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


def fig_fixed_latency_growth(batches: pd.DataFrame, meta: Mapping | None = None) -> go.Figure | None:
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
    """Bars of the capacity (highest passing rate) per query and policy.

    A policy that was probed but never passed shows an empty bar labelled
    "none passed".  ``None`` when the capacity search was skipped.
    """
    table = capacity_table(capacity)
    if table.empty:
        return None
    queries = table["query"].tolist()
    fig = go.Figure()
    for policy in _capacity_policies(capacity):
        probes = table[f"probes_{policy}"]
        if not (probes > 0).any():
            continue
        values = table[f"capacity_{policy}"]
        texts = [
            "" if n == 0 else (f"{v:,.0f}" if _finite(v) else "none passed") for v, n in zip(values, probes)
        ]
        fig.add_trace(
            go.Bar(
                x=[_label(q) for q in queries],
                y=values.fillna(0.0).tolist(),
                text=texts,
                textposition="outside",
                name=_label(policy),
                marker_color=POLICY_COLORS.get(policy),
            )
        )
    fig.update_layout(
        title="Capacity: highest offered rate meeting the bound",
        barmode="group",
        height=420,
        yaxis_title="rows per simulated s",
    )
    return fig


# ---------------------------------------------------------------------------------------------
# tables


def time_shares(results: pd.DataFrame, policy: str = "lmstream") -> pd.DataFrame:
    """Table IV: the share of each time component per query, in percent.

    The five components (``buffering_s``, ``decision_s``, ``mapping_s``,
    ``processing_s``, ``optimizer_s``) are summed over the policy's repetitions,
    traffic kinds and rates; a missing component counts as 0 and NaN is skipped.
    Device mapping and optimizer waits happen inside a batch's ``processing_s``,
    so the processing share is ``processing_s`` minus those two.

    Returns
    -------
    DataFrame
        One row per query: ``query``, the five shares ``buffering``, ``decision``,
        ``device mapping``, ``processing``, ``blocked on optimizer`` (percent),
        ``overhead`` (decision + device mapping + blocked on optimizer, the
        paper's gray rows), ``total`` (the five shares' sum: 100, a check) and
        ``total_s`` (the seconds the shares divide).  Shares are NaN when a
        query's total is 0.  Empty when ``policy`` is not in the sweep.

    Examples
    --------
    >>> df = pd.DataFrame({"query": ["Q", "Q"], "policy": ["lmstream"] * 2, "buffering_s": [3.0, 1.0],
    ...                    "decision_s": [0.5, 0.5], "processing_s": [2.0, 3.0]})
    >>> row = time_shares(df).iloc[0]
    >>> [float(row[c]) for c in ("buffering", "decision", "device mapping", "processing", "total")]
    [40.0, 10.0, 0.0, 50.0, 100.0]
    """
    labels = list(TIME_COMPONENTS.values())
    columns = ["query", *labels, "overhead", "total", "total_s"]
    if _empty(results) or not {"query", "policy"} <= set(results.columns):
        return pd.DataFrame(columns=columns)
    sub = results[results["policy"] == policy]
    if sub.empty:
        return pd.DataFrame(columns=columns)
    seconds = pd.DataFrame({"query": sub["query"].to_numpy()})
    for col, label in TIME_COMPONENTS.items():
        if col in sub.columns:
            seconds[label] = pd.to_numeric(sub[col], errors="coerce").to_numpy(dtype=float)
        else:
            seconds[label] = 0.0
    # the stream spends device mapping and optimizer waits inside a batch's processing time
    inside = seconds[TIME_COMPONENTS["mapping_s"]].fillna(0) + seconds[TIME_COMPONENTS["optimizer_s"]].fillna(0)
    proc = TIME_COMPONENTS["processing_s"]
    seconds[proc] = (seconds[proc] - inside).clip(lower=0.0)
    summed = seconds.groupby("query", sort=False, dropna=False)[labels].sum(min_count=0)
    total_s = summed.sum(axis=1)
    shares = summed.div(total_s.where(total_s > 0), axis=0) * 100.0
    shares["overhead"] = shares[list(OVERHEAD_COMPONENTS)].sum(axis=1, min_count=1)
    shares["total"] = shares[labels].sum(axis=1, min_count=1)
    shares["total_s"] = total_s
    return shares.reset_index()[columns]


def cpu_table(results: pd.DataFrame) -> pd.DataFrame:
    """CPU seconds per million rows per query x policy at the same offered load.

    Cells are grouped by ``query``, ``policy``, ``traffic`` and ``rate`` and
    averaged over repetitions.  The JVM / workers / kit breakdown is put in the
    same unit (each part's CPU seconds per million rows of its repetition).

    Returns
    -------
    DataFrame
        ``query``, ``policy``, ``traffic``, ``rate``, ``reps``, ``cpu_s_per_mrows``,
        ``jvm_s_per_mrows``, ``workers_s_per_mrows``, ``kit_s_per_mrows``,
        ``cpu_total_s`` (mean per repetition), ``vs_asap`` (``cpu_s_per_mrows`` over
        asap's at the same query, traffic and rate; NaN without asap) and
        ``cheaper_than_asap`` (nullable boolean: does this policy's batching cost
        less CPU per row than asap's?  NA for asap itself and when asap is absent).
    """
    out_cols = [
        "query", "policy", "traffic", "rate", "reps", "cpu_s_per_mrows", "jvm_s_per_mrows",
        "workers_s_per_mrows", "kit_s_per_mrows", "cpu_total_s", "vs_asap", "cheaper_than_asap",
    ]
    if _empty(results) or not {"query", "policy"} <= set(results.columns):
        return pd.DataFrame(columns=out_cols)
    frame = results.copy()
    for key in ("traffic", "rate"):
        if key not in frame.columns:
            frame[key] = np.nan
    rows = pd.to_numeric(frame.get("rows", pd.Series(np.nan, index=frame.index)), errors="coerce")
    per_mrows = rows.where(rows > 0) / 1e6
    for part in ("jvm", "workers", "kit"):
        col = f"cpu_{part}_s"
        cpu = pd.to_numeric(frame[col], errors="coerce") if col in frame.columns else np.nan
        frame[f"{part}_s_per_mrows"] = cpu / per_mrows
    if "cpu_s_per_mrows" not in frame.columns:
        total = pd.to_numeric(frame.get("cpu_total_s", pd.Series(np.nan, index=frame.index)), errors="coerce")
        frame["cpu_s_per_mrows"] = total / per_mrows
    if "cpu_total_s" not in frame.columns:
        frame["cpu_total_s"] = np.nan
    keys = ["query", "policy", "traffic", "rate"]
    values = ["cpu_s_per_mrows", "jvm_s_per_mrows", "workers_s_per_mrows", "kit_s_per_mrows", "cpu_total_s"]
    agg = _mean_over_reps(frame, values, keys)
    asap = agg.loc[agg["policy"] == "asap", ["query", "traffic", "rate", "cpu_s_per_mrows"]]
    asap = asap.rename(columns={"cpu_s_per_mrows": "_asap"})
    agg = agg.merge(asap, on=["query", "traffic", "rate"], how="left")
    agg["vs_asap"] = agg["cpu_s_per_mrows"] / agg["_asap"].where(agg["_asap"] > 0)
    cheaper = [
        pd.NA if (policy == "asap" or not _finite(ratio)) else bool(ratio < 1.0)
        for policy, ratio in zip(agg["policy"], agg["vs_asap"])
    ]
    agg["cheaper_than_asap"] = pd.array(cheaper, dtype="boolean")
    return agg[out_cols]


def _capacity_policies(capacity: pd.DataFrame | None) -> list:
    present = _policies(capacity) if not _empty(capacity) else []
    return list(POLICY_ORDER) + [p for p in present if p not in POLICY_ORDER]


def capacity_table(capacity: pd.DataFrame | None) -> pd.DataFrame:
    """The capacity search summarised: one row per query (wide layout).

    A probe passed when its ``passed`` flag is true (or, without that column, when
    ``within_bound`` >= 0.95).  A policy's capacity is the highest *passing* rate
    (a higher rate that failed is ignored: the search brackets from both sides).

    Returns
    -------
    DataFrame
        One row per query with, for each of lmstream, fixed, asap (always) and any
        other probed policy, ``capacity_<policy>`` (rows per simulated second; NaN
        when no probe passed or the policy was not probed) and ``probes_<policy>``
        (number of probes), followed by the ratios ``lmstream/fixed`` and
        ``lmstream/asap`` of capacities (NaN when either side is missing), and
        ``note``, which names the capacities the search did not bracket (a lower
        bound when no probe above the highest passing rate failed, within the
        probe budget; "no probe passed" when even the lowest failed).  Empty
        when the search was skipped.

    Examples
    --------
    >>> cap = pd.DataFrame({"query": ["Q"] * 3, "policy": ["lmstream", "lmstream", "fixed"],
    ...                     "rate": [100.0, 200.0, 50.0], "passed": [True, False, True]})
    >>> row = capacity_table(cap).iloc[0]
    >>> float(row["capacity_lmstream"]), int(row["probes_lmstream"]), float(row["lmstream/fixed"])
    (100.0, 2, 2.0)
    """
    policies = _capacity_policies(capacity)
    columns = (
        ["query"] + [f"capacity_{p}" for p in policies] + [f"probes_{p}" for p in policies]
        + ["lmstream/fixed", "lmstream/asap"]
    )
    if _empty(capacity) or not {"query", "policy", "rate"} <= set(capacity.columns):
        return pd.DataFrame(columns=columns + ["note"])
    frame = capacity.copy()
    if "passed" in frame.columns:
        passed = frame["passed"].map(lambda v: bool(v) if isinstance(v, (bool, np.bool_)) else v is True)
    else:
        passed = pd.to_numeric(frame.get("within_bound"), errors="coerce") >= PASS_SHARE
    frame["_passed"] = passed.astype(bool)
    frame["_rate"] = pd.to_numeric(frame["rate"], errors="coerce")
    queries = _ordered(frame["query"])
    table = pd.DataFrame({"query": queries})
    for policy in policies:
        sub = frame[frame["policy"] == policy]
        best = sub[sub["_passed"]].groupby("query", sort=False)["_rate"].max()
        count = sub.groupby("query", sort=False).size()
        table[f"capacity_{policy}"] = table["query"].map(best).astype(float)
        table[f"probes_{policy}"] = table["query"].map(count).fillna(0).astype(int)
    for other in ("fixed", "asap"):
        denom = table[f"capacity_{other}"]
        table[f"lmstream/{other}"] = table["capacity_lmstream"] / denom.where(denom > 0)
    table["note"] = [_capacity_note(frame[frame["query"] == q], policies) for q in table["query"]]
    return table[columns + ["note"]]


def _capacity_note(probes: pd.DataFrame, policies: list) -> str:
    """Which capacities the search did not bracket: a lower bound, or below every probe."""
    notes = []
    for policy in policies:
        sub = probes[probes["policy"] == policy]
        if sub.empty:
            continue
        passed = sub.loc[sub["_passed"], "_rate"]
        if passed.empty:
            notes.append(f"{policy} < {sub['_rate'].min():,.0f} (no probe passed)")
        elif not (sub.loc[~sub["_passed"], "_rate"] > passed.max()).any():
            notes.append(f"{policy} ≥ {passed.max():,.0f} (no probe above it failed)")
    return "; ".join(notes)


# ---------------------------------------------------------------------------------------------
# claims


def _policy_ratio(results: pd.DataFrame, column: str) -> pd.DataFrame | None:
    """lmstream's and fixed's mean ``column`` side by side per (query, traffic, rate); None if impossible."""
    if _empty(results) or not {"query", "policy", column} <= set(results.columns):
        return None
    agg = _mean_over_reps(results, [column], ("query", "traffic", "rate", "policy"))
    keys = _keys(agg, ("query", "traffic", "rate"))
    lm = agg.loc[agg["policy"] == "lmstream", keys + [column]]
    fx = agg.loc[agg["policy"] == "fixed", keys + [column]]
    if lm.empty or fx.empty:
        return None
    both = lm.merge(fx, on=keys, suffixes=("_lmstream", "_fixed"))
    both = both[both[f"{column}_lmstream"].notna() & (both[f"{column}_fixed"] > 0)]
    return both if not both.empty else None


def _where(row: Mapping) -> str:
    traffic = row.get("traffic")
    query = row.get("query")
    if traffic is None or (isinstance(traffic, float) and math.isnan(traffic)):
        return str(query)
    return f"{query} ({traffic})"


def _missing_policies(results: pd.DataFrame | None, needed: Sequence[str]) -> str:
    present = set(_policies(results)) if not _empty(results) else set()
    missing = [p for p in needed if p not in present]
    if missing:
        return "not in this sweep: needs the " + " and ".join(missing) + " polic" + (
            "ies" if len(missing) > 1 else "y"
        )
    return "not in this sweep: no cell has both policies at the same query, traffic and rate"


def claims(results: pd.DataFrame, capacity: pd.DataFrame | None = None) -> pd.DataFrame:
    """The paper's headline claims beside this sweep's numbers.

    1. Average latency down by up to 70.7% vs the 10 s trigger (LR1T).  Ours: the
       largest ``1 - lmstream avg_latency_s / fixed avg_latency_s`` over queries and
       traffic (means over repetitions, same rate).  Agrees when positive.
    2. Throughput up to 1.74x the baseline (LR1S).  Ours: the largest ratio of
       ``throughput_rows_s``.  Agrees when above 1.
       With a non-empty ``capacity``, a row "2b" adds the largest
       ``lmstream/fixed`` capacity ratio (throughput while meeting the bound; not
       measured in the paper), which agrees when above 1.
       With a ``sustained_rows_s`` column, a row "2c" gives the same ratio for
       rows per wall second from first arrival to last result (equal to the
       offered rate for every policy that keeps up; lower for one that falls
       behind), since the paper does not say which of the two it plots.
    3. Maximum latency bounded by the slide (sliding windows).  Ours: the lowest
       ``within_bound`` of lmstream over sliding queries (mean over repetitions) and
       the batch-weighted share over every lmstream cell.  Agrees when the lowest is
       at least 95%.
    4. Overhead below 1% (Table IV).  Ours: the largest share of decision +
       device mapping + optimizer blocking in the five time components, over
       lmstream's queries.  Agrees when below 1%.

    Returns
    -------
    DataFrame
        ``claim``, ``paper``, ``ours`` (text), ``where`` (query and traffic),
        ``agrees`` (bool, or None when the sweep cannot measure it: ``ours`` then
        says what is missing) and ``value`` (the number behind ``ours``: a
        fraction for 1, 3 and 4, a ratio for 2 and 2b; NaN when not measurable).
    """
    rows: list = []

    def add(claim: str, paper: str, ours: str, where: str, agrees: bool | None, value: float) -> None:
        rows.append(
            {"claim": claim, "paper": paper, "ours": ours, "where": where, "agrees": agrees, "value": value}
        )

    # 1. average latency
    claim1 = "1. average latency vs the throughput-oriented baseline (fixed trigger)"
    paper1 = f"down by up to {PAPER_LATENCY_REDUCTION:.1%} (LR1T)"
    both = _policy_ratio(results, "avg_latency_s")
    if both is None:
        add(claim1, paper1, _missing_policies(results, ("lmstream", "fixed")), "", None, math.nan)
    else:
        both = both.assign(_r=1.0 - both["avg_latency_s_lmstream"] / both["avg_latency_s_fixed"])
        best = both.loc[both["_r"].idxmax()]
        r = float(best["_r"])
        ours = f"{r:.1%} lower" if r >= 0 else f"{-r:.1%} higher"
        add(claim1, paper1, ours, _where(best), bool(r > 0), r)

    # 2. throughput
    claim2 = "2. throughput vs the baseline (fixed trigger)"
    paper2 = f"up to {PAPER_THROUGHPUT_RATIO:.2f}× (LR1S)"
    both = _policy_ratio(results, "throughput_rows_s")
    if both is None:
        add(claim2, paper2, _missing_policies(results, ("lmstream", "fixed")), "", None, math.nan)
    else:
        both = both.assign(_r=both["throughput_rows_s_lmstream"] / both["throughput_rows_s_fixed"])
        best = both.loc[both["_r"].idxmax()]
        r = float(best["_r"])
        add(claim2, paper2, f"up to {r:.2f}×", _where(best), bool(r > 1.0), r)

    # 2b. capacity (only when the search ran)
    cap = capacity_table(capacity)
    if not cap.empty:
        claim2b = "2b. highest input rate meeting the bound vs the baseline (capacity search)"
        paper2b = "not measured (implied by 2: ≥ 1×)"
        ratios = cap[["query", "lmstream/fixed"]].dropna()
        if ratios.empty:
            reason = "not in this sweep: needs passing capacity probes for lmstream and fixed"
            add(claim2b, paper2b, reason, "", None, math.nan)
        else:
            best = ratios.loc[ratios["lmstream/fixed"].idxmax()]
            r = float(best["lmstream/fixed"])
            add(claim2b, paper2b, f"up to {r:.2f}×", str(best["query"]), bool(r > 1.0), r)

    # 2c. sustained throughput: rows per wall second, first arrival to last result
    if not _empty(results) and "sustained_rows_s" in results.columns:
        claim2c = "2c. sustained throughput (rows per wall second) vs the baseline (fixed trigger)"
        both = _policy_ratio(results, "sustained_rows_s")
        if both is None:
            add(claim2c, paper2, _missing_policies(results, ("lmstream", "fixed")), "", None, math.nan)
        else:
            both = both.assign(_r=both["sustained_rows_s_lmstream"] / both["sustained_rows_s_fixed"])
            best = both.loc[both["_r"].idxmax()]
            r = float(best["_r"])
            add(claim2c, paper2, f"up to {r:.2f}×", _where(best), bool(r > 1.0), r)

    # 3. bounded latency
    claim3 = "3. maximum latency per micro-batch bounded by the slide (sliding windows)"
    paper3 = "bounded (Figs. 6 and 8a)"
    lm = pd.DataFrame()
    if not _empty(results) and {"policy", "within_bound", "query"} <= set(results.columns):
        lm = results[results["policy"] == "lmstream"]
    sliding = lm[lm["window_kind"] == "sliding"] if "window_kind" in lm.columns else lm.iloc[0:0]
    cells = pd.DataFrame()
    if not sliding.empty:
        cells = _mean_over_reps(sliding, ["within_bound"], ("query", "traffic", "rate"))
        cells = cells[cells["within_bound"].notna()]
    if cells.empty:
        if lm.empty:
            reason = _missing_policies(results, ("lmstream",))
        else:
            reason = "not in this sweep: needs a sliding-window query under lmstream"
        add(claim3, paper3, reason, "", None, math.nan)
    else:
        worst = cells.loc[cells["within_bound"].idxmin()]
        share = float(worst["within_bound"])
        wb = pd.to_numeric(lm["within_bound"], errors="coerce")
        weights = pd.to_numeric(lm["batches"], errors="coerce") if "batches" in lm.columns else None
        ok = wb.notna() & (weights.notna() & (weights > 0) if weights is not None else True)
        if weights is not None and ok.any():
            overall = float((wb[ok] * weights[ok]).sum() / weights[ok].sum())
        else:
            overall = float(wb.mean())
        ours = f"{share:.1%} of batches within the bound at worst; {overall:.1%} over all lmstream cells"
        add(claim3, paper3, ours, _where(worst), bool(share >= PASS_SHARE), share)

    # 4. overhead
    claim4 = "4. overhead of LMStream's mechanisms (decision + device mapping + optimizer blocking)"
    paper4 = f"below {PAPER_OVERHEAD_LIMIT:.0%} in most workloads (Table IV; CM1T 4.2%)"
    shares = time_shares(results, "lmstream")
    shares = shares[shares["overhead"].notna()] if not shares.empty else shares
    if shares.empty:
        if lm.empty:
            reason = _missing_policies(results, ("lmstream",))
        else:
            reason = "not in this sweep: needs the time components (buffering_s ... optimizer_s)"
        add(claim4, paper4, reason, "", None, math.nan)
    else:
        worst = shares.loc[shares["overhead"].astype(float).idxmax()]
        frac = float(worst["overhead"]) / 100.0
        add(claim4, paper4, f"at most {frac:.2%}", str(worst["query"]), bool(frac < PAPER_OVERHEAD_LIMIT), frac)

    out = pd.DataFrame(rows, columns=["claim", "paper", "ours", "where", "agrees", "value"])
    out["agrees"] = out["agrees"].astype(object).where(out["agrees"].notna(), None)
    return out


# ---------------------------------------------------------------------------------------------
# formatting shared by the HTML and Markdown reports


def _fmt_seconds(x: Any) -> str:
    """Three significant digits (``0.300``, ``12.5``), thousands without decimals."""
    v = _num(x)
    if not math.isfinite(v):
        return "–"
    return f"{v:,.0f}" if abs(v) >= 999.5 else f"{v:#.3g}".rstrip(".")


def _fmt_percent_of_one(x: Any) -> str:
    v = _num(x)
    return f"{v * 100:.1f}%" if math.isfinite(v) else "–"


def _fmt_percent(x: Any) -> str:
    v = _num(x)
    return f"{v:.1f}%" if math.isfinite(v) else "–"


def _fmt_count(x: Any) -> str:
    v = _num(x)
    return f"{v:,.0f}" if math.isfinite(v) else "–"


def _fmt_ratio(x: Any) -> str:
    v = _num(x)
    return f"{v:.2f}×" if math.isfinite(v) else "–"


def _fmt_general(x: Any) -> str:
    if x is None or x is pd.NA:
        return "–"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if isinstance(x, (float, np.floating)):
        if math.isnan(x):
            return "–"
        return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"
    return str(x)


def _fmt_bool(x: Any) -> str:
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return "yes" if bool(x) else "no"


def _fmt_verdict(x: Any) -> str:
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return "not measured"
    return "agrees" if bool(x) else "differs"


def _display(df: pd.DataFrame, formats: Mapping[str, Callable[[Any], str]]) -> pd.DataFrame:
    """A copy of ``df`` as strings, each column through its formatter (general otherwise)."""
    out = pd.DataFrame(index=range(len(df)))
    for col in df.columns:
        fmt = formats.get(col, _fmt_general)
        out[str(col)] = [fmt(v) for v in df[col].tolist()]
    return out


def _claims_display(table: pd.DataFrame) -> pd.DataFrame:
    shown = table[["claim", "paper", "ours", "where", "agrees"]]
    return _display(shown, {"agrees": _fmt_verdict, "where": lambda w: str(w) if w else "–"})


_SUMMARY_HEADERS = {
    "window_kind": "window",
    "rate": "rate (rows/sim s)",
    "avg_latency_s": "avg latency (s)",
    "p95_max_latency_s": "p95 max latency (s)",
    "max_latency_s": "max latency (s)",
    "bound_s": "bound (s)",
    "within_bound": "within bound",
    "throughput_rows_s": "throughput (rows/s)",
    "sustained_rows_s": "sustained (rows/s)",
}


def _cell_summary(results: pd.DataFrame) -> pd.DataFrame:
    """Per-query latency and throughput per policy (means over repetitions)."""
    values = [
        "avg_latency_s", "p95_max_latency_s", "max_latency_s", "bound_s", "within_bound",
        "throughput_rows_s", "sustained_rows_s",
    ]
    if _empty(results) or not {"query", "policy"} <= set(results.columns):
        return pd.DataFrame()
    agg = _mean_over_reps(results, values, ("query", "window_kind", "traffic", "rate", "policy"))
    keys = _keys(agg, ("query", "window_kind", "traffic", "rate", "policy"))
    return agg[keys + [v for v in values if v in agg.columns] + ["reps"]]


_SUMMARY_FORMATS: dict = {
    "rate": _fmt_count,
    "avg_latency_s": _fmt_seconds,
    "p95_max_latency_s": _fmt_seconds,
    "max_latency_s": _fmt_seconds,
    "bound_s": _fmt_seconds,
    "within_bound": _fmt_percent_of_one,
    "throughput_rows_s": _fmt_count,
    "sustained_rows_s": _fmt_count,
    "reps": _fmt_count,
}
_SHARE_FORMATS: dict = {
    **{label: _fmt_percent for label in TIME_COMPONENTS.values()},
    "overhead": _fmt_percent,
    "total": _fmt_percent,
    "total_s": _fmt_seconds,
}
_CPU_FORMATS: dict = {
    "rate": _fmt_count,
    "reps": _fmt_count,
    "cpu_s_per_mrows": _fmt_seconds,
    "jvm_s_per_mrows": _fmt_seconds,
    "workers_s_per_mrows": _fmt_seconds,
    "kit_s_per_mrows": _fmt_seconds,
    "cpu_total_s": _fmt_seconds,
    "vs_asap": _fmt_ratio,
    "cheaper_than_asap": _fmt_bool,
}


def _capacity_formats(table: pd.DataFrame) -> dict:
    formats: dict = {}
    for col in table.columns:
        if col.startswith(("capacity_", "probes_")):
            formats[col] = _fmt_count
        elif "/" in col:
            formats[col] = _fmt_ratio
    return formats


def _table4_display(shares: pd.DataFrame) -> pd.DataFrame:
    """Table IV laid out as in the paper: components as rows, queries as columns."""
    shown = _display(shares, _SHARE_FORMATS).set_index("query")
    shown = shown[[*TIME_COMPONENTS.values(), "overhead", "total"]].T
    shown.index.name = "share (%)"
    return shown.reset_index()


def _meta_items(meta: Mapping | None) -> list:
    """(label, text) pairs describing the run, in reading order."""
    meta = dict(meta or {})
    machine = meta.get("machine") or {}
    if not isinstance(machine, Mapping):
        machine = {"cpu": machine}

    def get(mapping: Mapping, key: str) -> str:
        value = mapping.get(key)
        if value is None or value == "":
            return "–"
        if isinstance(value, (list, tuple)):
            return ", ".join(str(v) for v in value) or "–"
        return str(value)

    memory = _num(machine.get("memory_gib"))
    machine_text = "; ".join(
        [
            get(machine, "cpu"),
            f"{get(machine, 'cores')} cores",
            f"{memory:.1f} GiB" if math.isfinite(memory) else "– GiB",
            get(machine, "os"),
        ]
    )
    speedup = _num(meta.get("speedup"))
    if math.isfinite(speedup) and speedup > 0:
        compression = (
            f"{speedup:g}× (one wall second stands for {speedup:g} simulated seconds; latencies and "
            "bounds are in wall seconds, a bound being the slide or range divided by the speedup)"
        )
    else:
        compression = "–"
    versions = (
        f"Python {get(meta, 'python')}, Spark {get(meta, 'spark_version')}, "
        f"Java {get(meta, 'java_version')}, lmstream_kit {get(meta, 'kit_version')}"
    )
    return [
        ("machine", machine_text),
        ("versions", versions),
        ("Spark master", get(meta, "master")),
        ("time compression", compression),
        ("simulated duration per cell", f"{get(meta, 'duration_s')} s"),
        ("repetitions", get(meta, "repeat")),
        ("offered rate", f"{get(meta, 'rate')} rows per simulated s"),
        ("queries", get(meta, "queries")),
        ("policies", get(meta, "policies")),
        ("traffic", get(meta, "traffic")),
        ("started", get(meta, "started_at")),
        ("finished", get(meta, "finished_at")),
    ]


# ---------------------------------------------------------------------------------------------
# HTML report

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; }
td:first-child, th:first-child { text-align: left; }
table.meta td { text-align: left; }
figure { margin: 1.5em 0; }
figcaption { font-size: 0.9em; color: #444; margin-top: 0.3em; }
p.missing { color: #a33; font-style: italic; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; white-space: pre-wrap; }
.scroll { overflow-x: auto; }
"""


def _html_table(display: pd.DataFrame, css_class: str = "data") -> str:
    if display.empty:
        return '<p class="missing">not in this sweep: no rows</p>'
    return display.to_html(index=False, escape=True, border=0, classes=css_class, na_rep="–")


def _missing_note(text: str) -> str:
    return f'<p class="missing">{html.escape(text)}</p>'


def build_report(
    results: pd.DataFrame,
    batches: pd.DataFrame,
    capacity: pd.DataFrame | None,
    meta: Mapping | None,
) -> str:
    """A complete, self-contained HTML page for the sweep.

    The page has a header (machine, versions, time compression, the command),
    the claims table, Figs. 1, 6, 7, 8, 9 and the capacity figure, each with a
    caption naming the paper's figure (or a "not in this sweep" note when the
    sweep lacks its data), then Table IV, the CPU table, the capacity table and
    every result row.  plotly.js is embedded once, in the page head; every string
    from the data is HTML-escaped (in figure labels too, since plotly reads them
    as pseudo-HTML).  The output depends only on the inputs (figure ids are fixed).
    """
    meta = dict(meta or {})
    results = results if not _empty(results) else pd.DataFrame()
    batches = batches if not _empty(batches) else pd.DataFrame()
    policies = set(_policies(results)) | set(_policies(batches))

    sections: list = []  # (caption key, figure or None, missing note)
    fixed_note = "not in this sweep: needs the fixed policy"
    sections.append(("fig1", fig_fixed_latency_growth(batches, meta), fixed_note))
    bars_note = "" if "fixed" in policies else " (not in this sweep: needs the fixed policy, the paper's Baseline)"
    have_results = not results.empty
    sections.append(("fig6", fig_avg_latency(results) if have_results else None, "not in this sweep: no results"))
    sections.append(("fig7", fig_throughput(results) if have_results else None, "not in this sweep: no results"))
    picked = pick_timeline_queries(results)
    for key, kind in (("fig8", "sliding"), ("fig9", "tumbling")):
        query = picked[kind]
        if query is None:
            sections.append((key, None, f"not in this sweep: needs a {kind}-window query"))
        else:
            note = f"not in this sweep: no per-batch records for {query}"
            sections.append((key, fig_batch_timeline(batches, query), note))
    sections.append(
        ("capacity", fig_capacity(capacity), "not in this sweep: the capacity search was skipped")
    )

    parts: list = []
    n_fig = 0
    for key, fig, missing in sections:
        caption = CAPTIONS[key]
        if key in ("fig6", "fig7"):
            caption += bars_note
        if key in ("fig8", "fig9"):
            query = picked["sliding" if key == "fig8" else "tumbling"]
            if query is not None:
                caption += f" Query: {query}."
        body = ""
        if fig is not None:
            n_fig += 1
            body = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"lmstream-fig-{n_fig}")
        else:
            body = _missing_note(missing)
        parts.append(f"<figure>\n{body}\n<figcaption>{html.escape(caption)}</figcaption>\n</figure>")

    claims_table = claims(results, capacity)
    shares = time_shares(results, "lmstream")
    cpu = cpu_table(results)
    cap = capacity_table(capacity)

    head_js = ""
    if n_fig:
        head_js = (
            '<script type="text/javascript">window.PlotlyConfig = {MathJaxConfig: "local"};</script>\n'
            f'<script type="text/javascript">{get_plotlyjs()}</script>'
        )
    meta_rows = "\n".join(
        f"<tr><th>{html.escape(label)}</th><td>{html.escape(text)}</td></tr>"
        for label, text in _meta_items(meta)
    )
    command = html.escape(str(meta.get("command") or "–"))
    cap_html = (
        _html_table(_display(cap, _capacity_formats(cap)))
        if not cap.empty
        else _missing_note("not in this sweep: the capacity search was skipped")
    )
    results_html = (
        _html_table(_display(results, {}), "data results") if not results.empty
        else _missing_note("not in this sweep: no results")
    )
    cpu_html = (
        _html_table(_display(cpu, _CPU_FORMATS)) if not cpu.empty
        else _missing_note("not in this sweep: no results")
    )
    shares_html = (
        _html_table(_table4_display(shares)) if not shares.empty
        else _missing_note("not in this sweep: needs the lmstream policy")
    )
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>LMStream reproduction report</title>
<style>{_CSS}</style>
{head_js}
</head>
<body>
<h1>LMStream reproduction report</h1>
<p>Spark micro-batch streaming latency and throughput under the lmstream, fixed-trigger and asap policies,
set beside the LMStream paper (Section V). The paper's Baseline is our <code>fixed</code> policy.</p>
<table class="meta">
{meta_rows}
</table>
<p>Command:</p>
<pre><code>{command}</code></pre>
<h2>Claims</h2>
<p>{html.escape(CAPTIONS["claims"])}</p>
{_html_table(_claims_display(claims_table))}
<h2>Figures</h2>
{chr(10).join(parts)}
<h2>Time shares (Table IV)</h2>
<p>{html.escape(CAPTIONS["table4"])}</p>
<div class="scroll">{shares_html}</div>
<h2>CPU per million rows</h2>
<p>{html.escape(CAPTIONS["cpu"])}</p>
<div class="scroll">{cpu_html}</div>
<h2>Capacity</h2>
<p>{html.escape(CAPTIONS["capacity"])}</p>
<div class="scroll">{cap_html}</div>
<h2>All results</h2>
<p>{html.escape(CAPTIONS["results"])}</p>
<div class="scroll">{results_html}</div>
<p><small>Generated by lmstream_kit.report from the sweep's data frames.</small></p>
</body>
</html>
"""
    return page


def write_report(
    path: str | Path,
    results: pd.DataFrame,
    batches: pd.DataFrame,
    capacity: pd.DataFrame | None,
    meta: Mapping | None,
) -> Path:
    """Write :func:`build_report`'s page to ``path`` (parents created); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(build_report(results, batches, capacity, meta), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# Markdown reproduction report


def _md_cell(value: Any) -> str:
    text = html.escape(str(value), quote=False).replace("|", "\\|")
    return " ".join(text.split())


def _md_table(display: pd.DataFrame) -> str:
    if display.empty:
        return "_not in this sweep: no rows_"
    header = "| " + " | ".join(_md_cell(c) for c in display.columns) + " |"
    rule = "|" + "|".join("---" for _ in display.columns) + "|"
    body = ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in display.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def _md_duration(meta: Mapping) -> str:
    try:
        start = datetime.fromisoformat(str(meta.get("started_at")))
        end = datetime.fromisoformat(str(meta.get("finished_at")))
    except ValueError:
        return ""
    seconds = (end - start).total_seconds()
    return f" ({seconds / 60:.1f} min)" if seconds >= 0 else ""


def reproduction_markdown(
    results: pd.DataFrame,
    batches: pd.DataFrame,
    capacity: pd.DataFrame | None,
    meta: Mapping | None,
    notes: str | None = None,
) -> str:
    """Markdown for ``docs/reproduction.md``.

    Sections: how it was generated (the command), the setup (machine, versions,
    time compression), the claims (paper vs ours, agrees/differs), latency and
    throughput per query and policy, Table IV, CPU per million rows, the capacity
    search (when it ran) and, when ``notes`` is given, "Where we differ and why".
    Shares are percentages with one decimal, seconds have 3 significant digits.
    ``batches`` is accepted for symmetry with :func:`build_report`; its content
    is summarised by the results already.
    """
    meta = dict(meta or {})
    results = results if not _empty(results) else pd.DataFrame()
    del batches  # the per-cell results already summarise every batch
    out: list = ["# LMStream reproduction", ""]
    out += [
        (
            "This page compares the LMStream paper's evaluation (Section V) with a sweep run by "
            "`lmstream_kit`. The paper's throughput-oriented Baseline (Spark with a 10 s trigger) is our "
            "`fixed` policy; `asap` admits everything whenever the engine is idle."
        ),
        "",
        "## How it was generated",
        "",
        f"Started {meta.get('started_at', '–')}, finished {meta.get('finished_at', '–')}{_md_duration(meta)}:",
        "",
        "```",
        str(meta.get("command") or "–"),
        "```",
        "",
        "## Setup",
        "",
    ]
    out += [f"- **{label}**: {_md_cell(text)}" for label, text in _meta_items(meta)]
    out += ["", "## Claims", "", _md_table(_claims_display(claims(results, capacity))), ""]

    out += [
        "## Latency and throughput per query",
        "",
        (
            "Means over repetitions. Latencies and bounds in wall seconds; `within_bound` is the share of "
            "micro-batches whose maximum latency met the bound; throughput is rows per second of "
            "processing, sustained is rows per wall second."
        ),
        "",
        _md_table(_display(_cell_summary(results), _SUMMARY_FORMATS).rename(columns=_SUMMARY_HEADERS)),
        "",
        "## Time shares (Table IV)",
        "",
        CAPTIONS["table4"],
        "",
    ]
    shares = time_shares(results, "lmstream")
    out += [
        _md_table(_table4_display(shares)) if not shares.empty else "_not in this sweep: needs the lmstream policy_",
        "",
        "## CPU per million rows",
        "",
        CAPTIONS["cpu"],
        "",
        _md_table(_display(cpu_table(results), _CPU_FORMATS)),
        "",
    ]
    cap = capacity_table(capacity)
    if not cap.empty:
        out += ["## Capacity", "", CAPTIONS["capacity"], "", _md_table(_display(cap, _capacity_formats(cap))), ""]
    if notes:
        out += ["## Where we differ and why", "", notes.strip(), ""]
    return "\n".join(out).rstrip() + "\n"
