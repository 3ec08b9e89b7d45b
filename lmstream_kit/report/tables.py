"""The bench report's tables: Table IV time shares, CPU per million rows and the capacity search
(its brackets live in :mod:`lmstream_kit.plots.frames`, which the figures share).

Each is a pure function of the benchmark's data frames and comes back empty when the data is missing.

>>> df = pd.DataFrame({"query": ["Q"], "policy": ["lmstream"], "buffering_s": [1.0], "processing_s": [3.0]})
>>> float(time_shares(df).loc[0, "buffering"])
25.0
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..plots.frames import (  # noqa: F401  (the capacity search's summaries, shared with the figures)
    _capacity_policies,
    _ratio_range,
    _ratio_text,
    capacity_brackets,
    capacity_table,
)
from .common import (
    OVERHEAD_COMPONENTS,
    TIME_COMPONENTS,
    _empty,
    _finite,
    _mean_over_reps,
)


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


#: a batch is a spike when its processing time exceeds this multiple of its cell's median
SPIKE_FACTOR = 1.5


def prediction_errors(batches: pd.DataFrame) -> pd.DataFrame:
    """How well the lmstream controller predicted its batches' processing time, per query and traffic.

    ``error = processing_s - predicted_s`` of each lmstream data batch that has a prediction (the
    controller's at admission).  A *spike* is a batch whose processing time exceeds
    ``SPIKE_FACTOR`` times its cell's median.  Empty where the batches carry no prediction (benches
    before the per-batch ``predicted_s``).

    Returns
    -------
    DataFrame
        ``query``, ``traffic``, ``batches``, ``mae_s`` and ``p95_abs_s`` (mean and 95th percentile of
        the absolute error), ``spikes``, ``spike_mae_s`` and ``under_spike_s`` (the spikes' mean
        absolute error, and their mean shortfall: how much longer they took than predicted).

    Examples
    --------
    >>> b = pd.DataFrame({"query": ["Q"] * 4, "traffic": ["constant"] * 4, "policy": ["lmstream"] * 4,
    ...                   "rep": [0] * 4, "processing_s": [1.0, 1.0, 1.0, 3.0], "predicted_s": [1.0, 1.5, 0.5, 1.0]})
    >>> row = prediction_errors(b).iloc[0]
    >>> int(row["batches"]), float(row["mae_s"]), int(row["spikes"]), float(row["spike_mae_s"])
    (4, 0.75, 1, 2.0)
    """
    columns = ["query", "traffic", "batches", "mae_s", "p95_abs_s", "spikes", "spike_mae_s", "under_spike_s"]
    if batches is None or batches.empty or "predicted_s" not in batches:
        return pd.DataFrame(columns=columns)
    data = batches[(batches["policy"] == "lmstream") & batches["predicted_s"].notna()].copy()
    if data.empty:
        return pd.DataFrame(columns=columns)
    keys = ["query", "traffic", "rep"] if "rep" in data else ["query", "traffic"]
    median = data.groupby(keys)["processing_s"].transform("median")
    data["error"] = data["processing_s"] - data["predicted_s"]
    data["spike"] = data["processing_s"] > SPIKE_FACTOR * median
    rows = []
    for (query, traffic), cell in data.groupby(["query", "traffic"], sort=True):
        spikes = cell[cell["spike"]]
        rows.append({
            "query": query, "traffic": traffic, "batches": len(cell),
            "mae_s": float(cell["error"].abs().mean()),
            "p95_abs_s": float(np.percentile(cell["error"].abs(), 95)),
            "spikes": len(spikes),
            "spike_mae_s": float(spikes["error"].abs().mean()) if len(spikes) else float("nan"),
            "under_spike_s": float(spikes["error"].mean()) if len(spikes) else float("nan"),
        })
    return pd.DataFrame(rows, columns=columns)
