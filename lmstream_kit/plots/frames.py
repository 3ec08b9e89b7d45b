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
