"""Bench result frames as the figures and tables read them: orders, colours, means, capacities.

>>> _ordered(["fixed", "mine", None, "lmstream", "fixed"], POLICY_ORDER)
['lmstream', 'fixed', 'mine']
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

#: policies and traffic kinds in the order figures and tables show them (others follow)
POLICY_ORDER = ("lmstream", "fixed", "asap")
TRAFFIC_ORDER = ("constant", "random")
POLICY_COLORS = {"lmstream": "#1f77b4", "fixed": "#d62728", "asap": "#7f7f7f"}

#: a capacity probe (and claim 3) passes when this share of batches met the bound
PASS_SHARE = 0.95


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


def _capacity_policies(capacity: pd.DataFrame | None) -> list:
    present = _policies(capacity) if not _empty(capacity) else []
    return list(POLICY_ORDER) + [p for p in present if p not in POLICY_ORDER]


def capacity_brackets(capacity: pd.DataFrame | None) -> pd.DataFrame:
    """Each (query, policy)'s capacity search result: its bracket, status and how it was measured.

    ``capacity`` has one row per probe run (``capacity.parquet``).  A rate passed
    when every run at it passed (``passed``; without that column, ``within_bound``
    >= 0.95).  Rows of a bench that records the search (``status``, ``lo``, ``hi``
    columns) are read as it left them, after its last run.  Older rows are
    derived: ``hi`` is the lowest failed rate, ``lo`` the highest passed rate
    below it, and the status ``none-passed`` when no rate passed, else
    ``not-converged`` (their search ran each rate once, which cannot bracket).

    Returns
    -------
    DataFrame
        One row per (query, policy), queries as met, policies in
        :data:`POLICY_ORDER`: ``query``, ``policy``, ``lo`` (highest rate
        passed, rows per simulated second; NaN: none), ``hi`` (lowest rate
        failed; NaN: none), ``status`` (``bracketed``, ``open``,
        ``not-converged`` or ``none-passed``), ``probes`` (runs), ``reps`` (the
        fewest runs at a bound), ``duration_s`` (simulated seconds of a probe;
        NaN when not recorded), ``text`` (the bracket in words) and ``note``.
        Empty when the search was skipped.

    Examples
    --------
    >>> cap = pd.DataFrame({"query": ["Q"] * 3, "policy": ["lmstream"] * 3,
    ...                     "rate": [1000.0, 2000.0, 1414.0], "passed": [True, False, True]})
    >>> row = capacity_brackets(cap).iloc[0]
    >>> float(row["lo"]), float(row["hi"]), row["status"], int(row["probes"]), row["text"]
    (1414.0, 2000.0, 'not-converged', 3, '1,414–2,000 (not converged, 1 rep)')
    """
    columns = ["query", "policy", "lo", "hi", "status", "probes", "reps", "duration_s", "text", "note"]
    if _empty(capacity) or not {"query", "policy", "rate"} <= set(capacity.columns):
        return pd.DataFrame(columns=columns)
    frame = capacity.copy()
    if "passed" in frame.columns:
        passed = frame["passed"].map(lambda v: bool(v) if isinstance(v, (bool, np.bool_)) else v is True)
    else:
        passed = pd.to_numeric(frame.get("within_bound"), errors="coerce") >= PASS_SHARE
    frame["_passed"] = passed.astype(bool)
    frame["_rate"] = pd.to_numeric(frame["rate"], errors="coerce")
    recorded = "status" in frame.columns
    rows = []
    for query in _ordered(frame["query"]):
        for policy in _ordered(frame.loc[frame["query"] == query, "policy"], POLICY_ORDER):
            sub = frame[(frame["query"] == query) & (frame["policy"] == policy)]
            runs = sub[sub["_rate"].map(_finite)]
            verdict = runs.groupby("_rate")["_passed"].all()  # one failed run fails the rate
            count = runs.groupby("_rate").size()
            if recorded:  # the search's state after its last run
                last = sub.sort_values("probe", kind="stable").iloc[-1] if "probe" in sub else sub.iloc[-1]
                lo, hi, status = _num(last.get("lo")), _num(last.get("hi")), str(last["status"])
            else:
                failed = [rate for rate, ok in verdict.items() if not ok]
                hi = min(failed) if failed else math.nan
                below = [rate for rate, ok in verdict.items() if ok and not rate >= hi]
                lo = max(below) if below else math.nan
                status = "none-passed" if len(runs) and not verdict.any() else "not-converged"
            bounds = [count.get(b, 0) for b in (lo, hi) if _finite(b)]
            reps = int(min(bounds)) if bounds else 0
            duration = _num(runs["duration_s"].iloc[0]) if "duration_s" in runs and len(runs) else math.nan
            notes = []
            if not recorded:
                notes.append("1 run per rate: a bench from before repeated probes" if count.le(1).all()
                             else "status derived from the probes (no search recorded)")
            notes.append(_coarse_note(policy, runs, hi))
            notes.append(_error_note(policy, runs))
            notes.append(_machines_note(policy, runs))
            note = "; ".join(n for n in notes if n)
            rows.append({"query": query, "policy": policy, "lo": lo, "hi": hi, "status": status,
                         "probes": int(len(runs)), "reps": reps, "duration_s": duration,
                         "text": _bracket_text(lo, hi, status, reps, len(runs)), "note": note})
    return pd.DataFrame(rows, columns=columns)


def _coarse_note(policy: str, runs: pd.DataFrame, hi: float) -> str:
    """Where a bracket's failing rate was one batch's doing: a run at it that caught up failed with a
    single batch over the bound (a run of under 20 batches, where one batch is over 5%).

    >>> runs = pd.DataFrame({"_rate": [800.0, 800.0], "_passed": [False, True], "batches": [7, 6],
    ...                      "within_bound": [6 / 7, 1.0], "caught_up": [True, True]})
    >>> _coarse_note("lmstream", runs, 800.0)
    'lmstream at 800: a failed run had 1 of its 7 batches over the bound'
    >>> _coarse_note("lmstream", runs.assign(within_bound=[5 / 7, 1.0]), 800.0)
    ''
    """
    needed = {"batches", "within_bound"}
    if not _finite(hi) or not needed <= set(runs.columns):
        return ""
    failed = runs[(runs["_rate"] == hi) & ~runs["_passed"]]
    if "caught_up" in failed:
        failed = failed[failed["caught_up"].map(lambda v: v is True or v is np.True_)]
    batches = pd.to_numeric(failed["batches"], errors="coerce")
    late = ((1.0 - pd.to_numeric(failed["within_bound"], errors="coerce")) * batches).round()
    single = batches[(late == 1) & (batches > 0)]
    if single.empty:
        return ""
    return f"{policy} at {hi:,.0f}: a failed run had 1 of its {int(single.min())} batches over the bound"


def _error_note(policy: str, runs: pd.DataFrame) -> str:
    """The runs whose session failed with them (``error``: Spark's JVM exited, out of heap), in words.

    >>> runs = pd.DataFrame({"_rate": [32000.0, 64000.0], "error": [None, "Spark's JVM exited (pid 7)"]})
    >>> _error_note("asap", runs)
    "asap at 64,000: Spark's JVM exited (pid 7)"
    """
    if "error" not in runs:
        return ""
    failed = runs[runs["error"].map(lambda e: isinstance(e, str) and bool(e))]
    return "; ".join(f"{policy} at {rate:,.0f}: {error}" for rate, error in zip(failed["_rate"], failed["error"]))


def _machines_note(policy: str, runs: pd.DataFrame) -> str:
    """Where a search's runs ran on more than one machine (``boot``: a bench resumed on another VM, or after
    a reboot), whose speeds may differ: its bracket mixes them.

    >>> runs = pd.DataFrame({"_rate": [1000.0, 2000.0, 1414.0], "boot": ["a1b2c3d4", "a1b2c3d4", "e5f6a7b8"]})
    >>> _machines_note("asap", runs)
    'asap: its runs were on 2 machines (a resumed search), whose speeds may differ'
    >>> _machines_note("asap", runs.assign(boot=["a1b2c3d4", "a1b2c3d4", None]))
    ''
    """
    if "boot" not in runs:
        return ""
    machines = {b for b in runs["boot"] if isinstance(b, str) and b}
    if len(machines) < 2:
        return ""
    return f"{policy}: its runs were on {len(machines)} machines (a resumed search), whose speeds may differ"


def _bracket_text(lo: float, hi: float, status: str, reps: int, probes: int) -> str:
    """A capacity bracket in words: both bounds when known, and why one is missing.

    >>> _bracket_text(1414.0, 1500.0, "bracketed", 2, 9)
    '1,414–1,500 (bracketed, 2 reps)'
    >>> _bracket_text(64000.0, math.nan, "open", 2, 8)
    '≥ 64,000 (open: no rate up to the max failed, 2 reps)'
    """
    n = f"{reps} rep{'' if reps == 1 else 's'}"
    has_lo, has_hi = _finite(lo), _finite(hi)
    if probes == 0:
        return "no probe (the budget ran out first)"
    if status == "open":
        return f"≥ {lo:,.0f} (open: no rate up to the max failed, {n})"
    if status == "none-passed":
        return f"< {hi:,.0f} (none passed, {n})"
    if has_lo and has_hi:
        return f"{lo:,.0f}–{hi:,.0f} ({status.replace('-', ' ')}, {n})"
    if has_lo:
        return f"≥ {lo:,.0f} (not converged: no rate failed yet, {n})"
    return f"< {hi:,.0f} (not converged: no rate passed yet, {n})"


def _ratio_range(a: Any, b: Any) -> tuple[float, float]:
    """The range of capacity ``a`` over capacity ``b`` their brackets allow: (low, high).

    A capacity is at least its ``lo`` and below its ``hi``, so the ratio lies in
    ``lo_a / hi_b .. hi_a / lo_b``; a missing bound makes that end 0 or infinity.

    >>> _ratio_range({"lo": 2000.0, "hi": 2200.0}, {"lo": 1000.0, "hi": 1100.0})
    (1.8181818181818181, 2.2)
    >>> _ratio_range({"lo": 4000.0, "hi": math.nan}, {"lo": 1000.0, "hi": 1414.0})
    (2.828854314002829, inf)
    """
    low = a["lo"] / b["hi"] if _finite(a["lo"]) and _finite(b["hi"]) else 0.0
    high = a["hi"] / b["lo"] if _finite(a["hi"]) and _finite(b["lo"]) and b["lo"] > 0 else math.inf
    return low, high


def _ratio_text(low: float, high: float) -> str:
    """A ratio range in words: ``1.82–2.20×``, ``≥ 2.83×``, ``≤ 0.50×`` or "–" (unknown)."""
    if low > 0 and math.isfinite(high):
        return f"{low:.2f}–{high:.2f}×"
    if low > 0:
        return f"≥ {low:.2f}×"
    if math.isfinite(high):
        return f"≤ {high:.2f}×"
    return "–"


def capacity_table(capacity: pd.DataFrame | None) -> pd.DataFrame:
    """The capacity search summarised: one row per query (wide layout), brackets in words.

    Returns
    -------
    DataFrame
        One row per query with, for each of lmstream, fixed, asap (always) and any
        other probed policy, ``capacity_<policy>`` (its bracket in rows per
        simulated second with status and repetitions, e.g. "1,414–1,500
        (bracketed, 2 reps)"; "–" when not probed) and ``probes_<policy>``
        (runs), then the ranges of the ratios ``lmstream/fixed`` and
        ``lmstream/asap`` the brackets allow (``lo_a / hi_b`` to ``hi_a / lo_b``;
        "–" when unknown) and ``note``.  Empty when the search was skipped.
        :func:`capacity_brackets` has the numbers.

    Examples
    --------
    >>> cap = pd.DataFrame({"query": ["Q"] * 3, "policy": ["lmstream", "lmstream", "fixed"],
    ...                     "rate": [100.0, 200.0, 50.0], "passed": [True, False, True]})
    >>> row = capacity_table(cap).iloc[0]
    >>> row["capacity_lmstream"], int(row["probes_lmstream"]), row["lmstream/fixed"]
    ('100–200 (not converged, 1 rep)', 2, '≤ 4.00×')
    """
    policies = _capacity_policies(capacity)
    columns = (
        ["query"] + [f"capacity_{p}" for p in policies] + [f"probes_{p}" for p in policies]
        + ["lmstream/fixed", "lmstream/asap"]
    )
    brackets = capacity_brackets(capacity)
    if brackets.empty:
        return pd.DataFrame(columns=columns + ["note"])
    table = pd.DataFrame({"query": _ordered(brackets["query"])})
    by = {(r["query"], r["policy"]): r for r in brackets.to_dict("records")}
    for policy in policies:
        table[f"capacity_{policy}"] = [by[(q, policy)]["text"] if (q, policy) in by else "–"
                                       for q in table["query"]]
        table[f"probes_{policy}"] = [by[(q, policy)]["probes"] if (q, policy) in by else 0
                                     for q in table["query"]]
    for other in ("fixed", "asap"):
        table[f"lmstream/{other}"] = [
            _ratio_text(*_ratio_range(by[(q, "lmstream")], by[(q, other)]))
            if (q, "lmstream") in by and (q, other) in by else "–"
            for q in table["query"]
        ]
    table["note"] = [
        "; ".join(dict.fromkeys(part for n in brackets.loc[brackets["query"] == q, "note"] if n
                                for part in n.split("; ")))
        for q in table["query"]
    ]
    return table[columns + ["note"]]
