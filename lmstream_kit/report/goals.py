"""The kit's own goals for the admission controller (issue 15), beside what a bench measured.

The paper's claims (:mod:`.paper`) compare LMStream with its baseline; these goals ask more of
the controller on every query: the bound held at the sweep's load and near asap's capacity, a
capacity no lower than asap's, less CPU per row than asap, half the fixed trigger's mean
latency where the slide is shorter than the trigger, and on tumbling windows a result latency
close to asap's at under half its CPU per row.  Each row says what was measured, where it
was worst, whether the goal is met and, where it is not, by how much.  A goal the bench cannot
measure says what it needs.

>>> r = pd.DataFrame({"query": ["Q", "Q"], "policy": ["lmstream", "asap"], "traffic": ["constant"] * 2,
...                   "rate": [1000.0] * 2, "load": ["sweep"] * 2, "within_bound": [0.93, 1.0],
...                   "cpu_s_per_mrows": [40.0, 100.0], "window_kind": ["sliding"] * 2, "slide_s": [5.0] * 2})
>>> g = goals(r, None, trigger_s=10.0).set_index("goal")
>>> g.loc["bound", ["measured", "met", "gap"]].tolist()
['93.0% of batches within the bound at worst, on Q (constant)', False, '2.0 points short on Q (constant)']
>>> g.loc["cpu", ["measured", "met"]].tolist()
["0.40× asap's at worst, on Q", True]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from .common import PASS_SHARE, _empty, _mean_over_reps, _ordered
from .tables import _ratio_range, _ratio_text, capacity_brackets

#: the goals: (key, what, target in words)
GOALS = (
    ("bound", "lmstream's batches within the bound at the sweep's load", "≥ 95% in every cell"),
    ("bound-capacity", "lmstream's batches within the bound at 80% of asap's capacity", "≥ 95% on every query"),
    ("capacity", "lmstream's capacity within the bound against asap's", "≥ 1.0× on every query (bracketed)"),
    ("cpu", "lmstream's CPU seconds per million rows against asap's, same load", "≤ 0.7× on every query, "
            "at every load"),
    ("latency", "lmstream's mean latency against the fixed trigger's, where the slide is below the trigger",
     "≤ 0.5× on every such query"),
    ("window", "lmstream's result latency on tumbling windows (a window's close to its row in the output) "
               "against asap's", "≤ asap's + one lmstream batch's processing, at ≤ 0.5× asap's CPU per row"),
)
#: the shares and ratios the goals ask for
CPU_RATIO, LATENCY_RATIO, CAPACITY_RATIO, WINDOW_CPU_RATIO = 0.7, 0.5, 1.0, 0.5
#: each run's first data batches, which a cold JVM slows, are left out of the cost fit (:func:`bound_floor`)
COLD_BATCHES = 3
#: the load of the cells at a share of asap's capacity (``bench --at-capacity``)
CAPACITY_LOAD = "capacity"


def _by_load(results: pd.DataFrame | None, load: str) -> pd.DataFrame:
    if _empty(results):
        return pd.DataFrame()
    if "load" not in results.columns:
        return results if load == "sweep" else results.iloc[0:0]
    return results[results["load"] == load]


def _bound_goal(cells: pd.DataFrame, where_keys: tuple) -> tuple | None:
    """(measured, where, met, gap) of a within-the-bound goal over lmstream's ``cells``."""
    lm = cells[cells["policy"] == "lmstream"] if not cells.empty and "policy" in cells.columns else cells
    if lm.empty or "within_bound" not in lm.columns:
        return None
    gc = [c for c in ("gc_share",) if c in lm.columns]
    agg = _mean_over_reps(lm, ["within_bound", *gc], where_keys)
    agg = agg[agg["within_bound"].notna()]
    if agg.empty:
        return None
    worst = agg.loc[agg["within_bound"].idxmin()]
    label = _label(worst, where_keys)
    short = agg[agg["within_bound"] < PASS_SHARE]
    gaps = [f"{100 * (PASS_SHARE - row['within_bound']):.1f} points short on {_label(row, where_keys)}"
            + _collector_text(row.get("gc_share"))
            for _, row in short.sort_values("within_bound").iterrows()]
    measured = f"{worst['within_bound']:.1%} of batches within the bound at worst, on {label}"
    return measured, label, bool(short.empty), "; ".join(gaps)


def _collector_text(share) -> str:
    """`` (the driver's collector took 35% of its processing)``, or "" where the cells do not say."""
    if share is None or not pd.notna(share):
        return ""
    return f" (the driver's collector took {float(share):.0%} of its processing)"


def _probe_collector(capacity: pd.DataFrame | None, query: str, policy: str, rate) -> tuple | None:
    """(collector share, full collections, ran out of heap) over ``policy``'s probes of ``query`` at ``rate``."""
    if _empty(capacity) or rate is None or pd.isna(rate) or "rate" not in capacity.columns:
        return None
    runs = capacity[(capacity["query"] == query) & (capacity["policy"] == policy)
                    & (pd.to_numeric(capacity["rate"], errors="coerce") == float(rate))]
    if runs.empty:
        return None
    share = runs["gc_share"].astype(float).mean() if "gc_share" in runs.columns else float("nan")
    full = runs["full_gcs"].astype(float).sum(min_count=1) if "full_gcs" in runs.columns else float("nan")
    errors = " ".join(str(e) for k in ("error", "retried") if k in runs.columns for e in runs[k].dropna())
    return share, full, "out of memory" in errors


def _probe_batches(capacity: pd.DataFrame | None, query: str, policy: str, rate) -> tuple | None:
    """(mean rows per batch, mean maximum latency, rows per processing second) over ``policy``'s probes
    of ``query`` at ``rate`` that recorded them (:data:`~lmstream_kit.bench.cells.PROBE_SUMMARY`);
    None where none did."""
    from ..bench.cells import PROBE_SUMMARY

    if _empty(capacity) or rate is None or pd.isna(rate) or not {"rate", *PROBE_SUMMARY} <= set(capacity.columns):
        return None
    runs = capacity[(capacity["query"] == query) & (capacity["policy"] == policy)
                    & (pd.to_numeric(capacity["rate"], errors="coerce") == float(rate))]
    means = tuple(float(pd.to_numeric(runs[c], errors="coerce").mean()) for c in PROBE_SUMMARY)
    return None if any(pd.isna(m) for m in means) else means


def _batches_why(capacity: pd.DataFrame | None, query: str, lm: Mapping) -> str:
    """How large and late lmstream's batches were where it failed (its lowest failing rate) and how fast
    they processed their rows, beside asap's at that rate or else at the lowest rate above it that asap
    passed: where larger batches process rows no faster, waiting only spends the bound's slack.

    >>> cap = pd.DataFrame({"query": "Q", "policy": ["lmstream", "asap", "asap"], "rate": [200.0, 150.0, 250.0],
    ...                     "passed": [False, True, True], "mean_rows_per_batch": [9e5, 2e5, 4e5],
    ...                     "mean_max_latency_s": [4.5, 0.7, 1.8], "throughput_rows_s": [4.4e5, 3.7e5, 4.3e5]})
    >>> _batches_why(cap, "Q", {"hi": 200.0})
    "; at 200 rows/s lmstream's batches averaged 900,000 rows, a maximum latency of 4.5 s and 440,000 rows per second of processing, asap's at 250 400,000 rows, 1.8 s and 430,000"
    """
    rate = lm.get("hi")
    mine = _probe_batches(capacity, query, "lmstream", rate)
    if mine is None:
        return ""
    asap = capacity[(capacity["query"] == query) & (capacity["policy"] == "asap")]
    rates = pd.to_numeric(asap["rate"], errors="coerce")
    passed = rates[(rates > float(rate)) & asap["passed"].astype(bool)]
    other = float(rate) if (rates == float(rate)).any() else (float(passed.min()) if len(passed) else None)
    theirs = _probe_batches(capacity, query, "asap", other)
    if theirs is None:
        return ""
    where = "" if other == float(rate) else f" at {other:,.0f}"
    return (f"; at {float(rate):,.0f} rows/s lmstream's batches averaged {_rows_text(mine[0])} rows, a maximum "
            f"latency of {mine[1]:.2g} s and {mine[2]:,.0f} rows per second of processing, asap's{where} "
            f"{_rows_text(theirs[0])} rows, {theirs[1]:.2g} s and {theirs[2]:,.0f}")


def _rows_text(rows: float) -> str:
    return f"{rows / 1e6:.2f} M" if rows >= 1e6 else f"{rows:,.0f}"


def _capacity_why(capacity: pd.DataFrame | None, query: str, lm: Mapping, asap: Mapping) -> str:
    """What the driver's collector did where lmstream failed (its lowest failing rate), beside asap at
    the same rate, or else at asap's highest passing rate: a capacity the heap sets shows there; and
    how large and fast lmstream's batches were there, beside asap's (:func:`_batches_why`)."""
    collector, batches = _collector_why(capacity, query, lm, asap), _batches_why(capacity, query, lm)
    if collector and batches:  # one rate, said once
        batches = "; there" + batches[batches.index(" lmstream's batches"):]
    return collector + batches


def _collector_why(capacity: pd.DataFrame | None, query: str, lm: Mapping, asap: Mapping) -> str:
    got = _probe_collector(capacity, query, "lmstream", lm.get("hi"))
    if got is None or (pd.isna(got[0]) and not got[2]):
        return ""
    share, full, oom = got
    text = f"; at {float(lm['hi']):,.0f} rows/s"
    if pd.notna(share):
        text += f" the driver's collector took {share:.0%} of lmstream's processing"
        if pd.notna(full):
            text += f" ({int(full)} full collection{'s' if int(full) != 1 else ''})"
    if oom:
        text += (" and" if pd.notna(share) else "") + " its driver ran out of heap"
    for rate in (lm.get("hi"), asap.get("lo")):
        other = _probe_collector(capacity, query, "asap", rate)
        if other is not None and pd.notna(other[0]):
            where = "" if rate == lm.get("hi") else f" at {float(rate):,.0f}"
            text += f", {other[0]:.0%} of asap's{where}"
            break
    return text


def _label(row, keys: tuple) -> str:
    query = row["query"]
    rest = [str(row[k]) if k != "rate" else f"{float(row[k]):,.0f} rows/s" for k in keys[1:] if k in row]
    return f"{query} ({', '.join(rest)})" if rest else str(query)


def _per_query_ratio(cells: pd.DataFrame, column: str, a: str, b: str) -> pd.DataFrame:
    """Per query, policy ``a``'s mean ``column`` over ``b``'s (means over traffic and repetitions)."""
    if cells.empty or not {"query", "policy", column} <= set(cells.columns):
        return pd.DataFrame(columns=["query", "ratio"])
    means = _mean_over_reps(cells, [column], ("query", "policy"))
    wide = means.pivot(index="query", columns="policy", values=column)
    if a not in wide.columns or b not in wide.columns:
        return pd.DataFrame(columns=["query", "ratio"])
    ratio = (wide[a] / wide[b]).where(wide[b] > 0)
    out = ratio.dropna().rename("ratio").reset_index()
    order = _ordered(cells["query"])
    return out.set_index("query").loc[[q for q in order if q in set(out["query"])]].reset_index()


def _cpu_ratios(results: pd.DataFrame | None) -> pd.DataFrame:
    """lmstream's CPU per row over asap's per query at every load the bench ran both at (the sweep's,
    an overload's, 80% of asap's capacity): the goal asks it at the same offered load, whichever.
    A cell of another load than the sweep's is labelled with its rate.

    >>> r = pd.DataFrame({"query": ["Q"] * 4, "policy": ["lmstream", "asap"] * 2, "load": ["sweep"] * 2 + ["overload"] * 2,
    ...                   "rate": [1000.0] * 2 + [2000.0] * 2, "cpu_s_per_mrows": [60.0, 100.0, 75.0, 100.0]})
    >>> _cpu_ratios(r)[["query", "ratio"]].values.tolist()
    [['Q', 0.6], ['Q at 2,000 rows/s', 0.75]]
    """
    if _empty(results):
        return pd.DataFrame(columns=["query", "ratio"])
    if "load" not in results.columns:
        ratios = _per_query_ratio(results, "cpu_s_per_mrows", "lmstream", "asap")
        ratios["name"], ratios["load"] = ratios["query"], "sweep"
        return ratios
    parts = []
    loads = ["sweep", *[x for x in dict.fromkeys(results["load"]) if x != "sweep"]]
    for load in loads:
        cells = results[results["load"] == load]
        ratios = _per_query_ratio(cells, "cpu_s_per_mrows", "lmstream", "asap")
        ratios["name"], ratios["load"] = ratios["query"], load
        if load != "sweep" and not ratios.empty:
            rates = cells.groupby("query")["rate"].first() if "rate" in cells.columns else {}
            ratios["query"] = [f"{q} at {float(rates[q]):,.0f} rows/s" if q in rates else f"{q} ({load})"
                               for q in ratios["query"]]
        parts.append(ratios)
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["query", "ratio", "name", "load"])


def bound_floor(batches: pd.DataFrame | None, query: str, load: str, speedup: float, *,
                skip: int = COLD_BATCHES) -> dict | None:
    """The least processing per row against asap's that lmstream's latency bound allows, in one cell pair.

    A batch of ``n`` rows costs about ``a + b * n`` seconds (least squares over both policies'
    batches of ``query`` at ``load``, each run's first ``skip`` data batches left out: a cold JVM's).
    At an offered rate of ``r`` rows per wall second (``rate * speedup``) the oldest row of a batch
    of ``n`` rows waited ``n / r`` before it, so a batch within the bound ``B`` holds at most
    ``n_max = (B - a) / (1 / r + b)`` rows, and no batching rule costs much less per row than
    ``a / n_max + b`` (an estimate: the fit's line, not each batch's time).  asap's batches held
    ``n_asap`` rows on average, at ``a / n_asap + b``.

    Where the line's fixed cost comes out below zero the batches cost the same per row at any size
    (a saturated stream, say): the fit goes through zero, ``a`` is 0 and the floor 1.0, since no
    batching rule has a fixed cost to share.

    Returns ``{"floor": ratio, "a_s", "b_s", "n_max", "n_asap", "n_lmstream", "margin_s", "bound_s"}``
    (``n_lmstream``: lmstream's mean rows a batch; ``margin_s``: its mean margin, NaN where the
    batches do not carry it), or None where the batches do not tell (one policy missing, fewer than 3 batches, no per-row cost to
    fit, or a bound the fixed cost alone overruns).

    >>> rows = [1e4, 2e4, 4e4, 8e4]
    >>> b = pd.DataFrame({"query": "Q", "load": "capacity", "policy": ["asap"] * 4 + ["lmstream"] * 4,
    ...                   "traffic": "constant", "rep": 0, "batch_id": [*range(4)] * 2, "rows": rows * 2,
    ...                   "processing_s": [0.2 + 5e-6 * n for n in rows] * 2, "bound_s": 2.0, "rate": 20000.0})
    >>> f = bound_floor(b, "Q", "capacity", speedup=2.0, skip=0)
    >>> round(f["a_s"], 3), round(f["b_s"] * 1e6, 2), round(f["n_max"]), round(f["floor"], 2)
    (0.2, 5.0, 60000, 0.81)
    >>> b["processing_s"] = [2e-6 * n - 0.01 for n in rows] * 2          # no fixed cost
    >>> f = bound_floor(b, "Q", "capacity", speedup=2.0, skip=0)
    >>> f["a_s"], round(f["b_s"] * 1e6, 2), f["floor"]
    (0.0, 1.82, 1.0)
    """
    need = {"query", "load", "policy", "rows", "processing_s", "bound_s", "rate"}
    if _empty(batches) or not need <= set(batches.columns) or not speedup > 0:
        return None
    cell = batches[(batches["query"] == query) & (batches["load"] == load)
                   & (pd.to_numeric(batches["rows"], errors="coerce") > 0)]
    runs = [k for k in ("policy", "traffic", "rep") if k in cell.columns]
    if skip and not cell.empty:
        order = cell.sort_values("batch_id") if "batch_id" in cell.columns else cell
        cell = order[order.groupby(runs).cumcount() >= skip]
    cell = cell[cell["policy"].isin(("lmstream", "asap"))]
    if cell.empty or set(cell["policy"]) != {"lmstream", "asap"} or len(cell) < 3:
        return None
    n = pd.to_numeric(cell["rows"], errors="coerce").to_numpy(float)
    p = pd.to_numeric(cell["processing_s"], errors="coerce").to_numpy(float)
    ok = np.isfinite(n) & np.isfinite(p)
    if ok.sum() < 3 or np.ptp(n[ok]) == 0:
        return None
    (a, b), *_ = np.linalg.lstsq(np.c_[np.ones(ok.sum()), n[ok]], p[ok], rcond=None)
    if a < 0:  # no fixed cost: the least squares line through zero
        a, b = 0.0, float(n[ok] @ p[ok] / (n[ok] @ n[ok]))
    bound = float(pd.to_numeric(cell["bound_s"], errors="coerce").median())
    rate = float(pd.to_numeric(cell["rate"], errors="coerce").median()) * float(speedup)
    if not (b > 0 and bound > a and rate > 0):
        return None
    n_max = (bound - a) / (1.0 / rate + b)
    n_asap = float(cell.loc[cell["policy"] == "asap", "rows"].mean())
    lm = cell[cell["policy"] == "lmstream"]
    margin = (float(pd.to_numeric(lm["margin_s"], errors="coerce").mean()) if "margin_s" in lm.columns
              else float("nan"))
    floor = (a / n_max + b) / (a / n_asap + b)
    return {"floor": float(floor), "a_s": float(a), "b_s": float(b), "n_max": float(n_max),
            "n_asap": n_asap, "n_lmstream": float(lm["rows"].mean()), "margin_s": margin, "bound_s": bound}


def _floor_note(batches: pd.DataFrame | None, results: pd.DataFrame | None) -> Callable[[Mapping], str]:
    """The CPU goal's note on a query and load it misses: the least the bound allows, where the
    bound, not the controller, keeps lmstream's batches too small to halve the fixed cost."""
    def note(row: Mapping) -> str:
        cells = results[(results["query"] == row["name"])] if not _empty(results) else None
        if cells is None or cells.empty or "speedup" not in cells.columns:
            return ""
        if "load" in cells.columns:
            cells = cells[cells["load"] == row["load"]]
        speedup = pd.to_numeric(cells["speedup"], errors="coerce").median() if not cells.empty else float("nan")
        found = bound_floor(batches, row["name"], row["load"], float(speedup)) if speedup > 0 else None
        if found is None:
            return ""
        if found["floor"] <= CPU_RATIO:
            if not found["n_lmstream"] < found["n_max"]:
                return ""
            margin = (f", with a margin of {found['margin_s']:.2f} s on average" if pd.notna(found["margin_s"])
                      else "")
            return (f"where its {found['bound_s']:.3g} s bound allows about {found['floor']:.2f}× (batches of "
                    f"up to {found['n_max']:,.0f} rows; lmstream's held {found['n_lmstream']:,.0f} on "
                    f"average{margin})")
        if found["a_s"] == 0:
            return (f"where batches cost about {found['b_s'] * 1e6:.3g} µs a row at any size (no fixed cost to "
                    f"share): no batching rule spends less per row than asap at this load")
        return (f"where its {found['bound_s']:.3g} s bound allows about {found['floor']:.2f}× asap's "
                f"processing per row at best (batches cost {found['a_s']:.3g} s + {found['b_s'] * 1e6:.3g} µs a row: "
                f"at most {found['n_max']:,.0f} rows within the bound, asap's {found['n_asap']:,.0f})")
    return note


def _ratio_goal(ratios: pd.DataFrame, limit: float, against: str, *, at_most: bool,
                why: Callable[[Mapping], str] | None = None) -> tuple | None:
    """(measured, where, met, gap) of a ratio goal; ``why`` adds a note to a missing row's gap."""
    if ratios.empty:
        return None
    worst = ratios.loc[ratios["ratio"].idxmax() if at_most else ratios["ratio"].idxmin()]
    bad = ratios[ratios["ratio"] > limit] if at_most else ratios[ratios["ratio"] < limit]
    gaps = []
    for row in bad.to_dict("records"):
        note = why(row) if why is not None else ""
        gaps.append(f"{row['query']}: {row['ratio']:.2f}× ({row['ratio'] / limit:.2f}× the goal)"
                    + (f", {note}" if note else ""))
    measured = f"{worst['ratio']:.2f}× {against} at worst, on {worst['query']}"
    return measured, str(worst["query"]), bool(bad.empty), "; ".join(gaps)


def _capacity_goal(capacity: pd.DataFrame | None) -> tuple | None:
    brackets = capacity_brackets(capacity)
    if brackets.empty:
        return None
    by = {(r["query"], r["policy"]): r for r in brackets.to_dict("records") if r["probes"] > 0}
    rows = []
    for query in _ordered(brackets["query"]):
        a, b = by.get((query, "lmstream")), by.get((query, "asap"))
        if a is not None and b is not None:
            low, high = _ratio_range(a, b)
            rows.append((query, low, high, a, b))
    if not rows:
        return None
    worst = min(rows, key=lambda r: (r[2], r[1]))  # the smallest ratio the brackets allow first
    query, low, high, a, b = worst
    measured = f"{_ratio_text(low, high)} asap's at worst, on {query} (lmstream {a['text']}, asap {b['text']})"
    met: bool | None = True
    gaps = []
    for q, lo, hi, lm, asap in rows:
        if hi < CAPACITY_RATIO:
            met = False
            gaps.append(f"{q}: at most {hi:.2f}×" + _capacity_why(capacity, q, lm, asap))
        elif lo < CAPACITY_RATIO:
            met = None if met is not False else False
            either = _ratio_text(lo, hi) if lo > 0 or hi != float("inf") else "no bound on the ratio"
            gaps.append(f"{q}: {either}, the brackets allow either")
    return measured, query, met, "; ".join(gaps)


def _window_goal(cells: pd.DataFrame) -> tuple | None:
    """(measured, where, met, gap) of the tumbling-window goal: per tumbling query whose lmstream and
    asap cells have a result latency (a window aggregation: a join's rows leave as they pair, before
    the window closes), lmstream's mean result latency over asap's plus the mean processing time of
    one lmstream batch, and its CPU per row over asap's."""
    need = {"query", "policy", "window_kind", "result_latency_s", "processing_s", "batches", "cpu_s_per_mrows"}
    if cells.empty or not need <= set(cells.columns):
        return None
    tumbling = cells[cells["window_kind"] == "tumbling"].copy()
    tumbling["batch_s"] = (pd.to_numeric(tumbling["processing_s"], errors="coerce")
                           / pd.to_numeric(tumbling["batches"], errors="coerce").where(lambda b: b > 0))
    means = _mean_over_reps(tumbling, ["result_latency_s", "batch_s", "cpu_s_per_mrows"], ("query", "policy"))
    rows = []
    for query in _ordered(tumbling["query"]):
        by = means[means["query"] == query].set_index("policy")
        if not {"lmstream", "asap"} <= set(by.index):
            continue
        lm, asap = by.loc["lmstream"], by.loc["asap"]
        if pd.isna(lm["result_latency_s"]) or pd.isna(asap["result_latency_s"]):
            continue
        over = float(lm["result_latency_s"] - asap["result_latency_s"] - lm["batch_s"])
        cpu = float(lm["cpu_s_per_mrows"] / asap["cpu_s_per_mrows"]) if asap["cpu_s_per_mrows"] > 0 else float("nan")
        rows.append((query, over, cpu, lm, asap))
    if not rows:
        return None
    worst = max(rows, key=lambda r: (r[1], r[2]))
    query, over, cpu, lm, asap = worst
    measured = (f"{lm['result_latency_s']:.2f} s against asap's {asap['result_latency_s']:.2f} s (+ one batch: "
                f"{lm['batch_s']:.2f} s) at {cpu:.2f}× asap's CPU per row, on {query}")
    gaps = []
    for q, o, c, _, _ in rows:
        if o > 0:
            gaps.append(f"{q}: {o:.2f} s over")
        if not c <= WINDOW_CPU_RATIO:
            gaps.append(f"{q}: {c:.2f}× asap's CPU ({c / WINDOW_CPU_RATIO:.2f}× the goal)")
    return measured, query, not gaps, "; ".join(gaps)


def goals(results: pd.DataFrame | None, capacity: pd.DataFrame | None = None, *,
          trigger_s: float | None = None, batches: pd.DataFrame | None = None) -> pd.DataFrame:
    """The goals (:data:`GOALS`) beside a bench's results and capacity probes.

    Returns
    -------
    DataFrame
        One row per goal: ``goal`` (key), ``what``, ``target``, ``measured`` (text), ``where``,
        ``met`` (bool, or None where the bench cannot tell: ``measured`` says what is missing, or
        the capacity brackets allow either) and ``gap`` (by how much each failing cell or query
        misses, "" where met).  With ``batches``, a query and load that misses the CPU goal where
        its latency bound allows no better says so (:func:`bound_floor`).
    """
    sweep = _by_load(results, "sweep")
    near = _by_load(results, CAPACITY_LOAD)
    found = {
        "bound": _bound_goal(sweep, ("query", "traffic")),
        "bound-capacity": _bound_goal(near, ("query", "rate")),
        "capacity": _capacity_goal(capacity),
        "cpu": _ratio_goal(_cpu_ratios(results), CPU_RATIO, "asap's", at_most=True,
                           why=_floor_note(batches, results)),
    }
    short = sweep
    if not sweep.empty and trigger_s is not None and {"slide_s", "window_kind"} <= set(sweep.columns):
        slide = pd.to_numeric(sweep["slide_s"], errors="coerce")
        short = sweep[(sweep["window_kind"] == "sliding") & (slide < float(trigger_s))]
    elif trigger_s is None:
        short = sweep.iloc[0:0]
    found["window"] = _window_goal(sweep)
    found["latency"] = _ratio_goal(_per_query_ratio(short, "avg_latency_s", "lmstream", "fixed"), LATENCY_RATIO,
                                   "the fixed trigger's", at_most=True)
    missing = {
        "bound": "not in this bench: needs lmstream cells with a bound",
        "bound-capacity": "not in this bench: needs cells at 80% of asap's capacity (bench --at-capacity 0.8, "
                          "with --capacity)",
        "capacity": "not in this bench: needs the capacity search of lmstream and asap (bench --capacity)",
        "cpu": "not in this bench: needs lmstream and asap cells with CPU measured",
        "latency": "not in this bench: needs lmstream and fixed cells of a sliding query whose slide is below "
                   "the trigger",
        "window": "not in this bench: needs lmstream and asap cells of a tumbling window aggregation with a "
                  "result latency (a join's rows leave as they pair)",
    }
    rows = []
    for key, what, target in GOALS:
        got = found.get(key)
        if got is None:
            rows.append({"goal": key, "what": what, "target": target, "measured": missing[key], "where": "",
                         "met": None, "gap": ""})
        else:
            measured, where, met, gap = got
            rows.append({"goal": key, "what": what, "target": target, "measured": measured, "where": where,
                         "met": met, "gap": gap})
    out = pd.DataFrame(rows, columns=["goal", "what", "target", "measured", "where", "met", "gap"])
    out["met"] = out["met"].astype(object).where(out["met"].notna(), None)
    return out

