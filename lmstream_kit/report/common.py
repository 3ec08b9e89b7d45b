"""Constants and tiny data-frame helpers shared by the report's figures, tables, claims and pages.

Policy and traffic orders and colours, the Table IV time components, the pass share, the captions.

>>> _ordered(["fixed", "mine", None, "lmstream", "fixed"], POLICY_ORDER)
['lmstream', 'fixed', 'mine']
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

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
