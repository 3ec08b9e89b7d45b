"""Formatting shared by the HTML and Markdown reports: cell formatters and the tables as shown.

Every formatter turns a missing or non-numeric value into "–".

>>> [_fmt_seconds(v) for v in (0.3, 12.5, 12345.6, None)], _fmt_ratio(1.737), _fmt_percent_of_one(0.5)
(['0.300', '12.5', '12,346', '–'], '1.74×', '50.0%')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from .common import TIME_COMPONENTS, _empty, _keys, _mean_over_reps, _num


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
    columns = [c for c in ("claim", "paper", "ours", "where", "measured", "agrees") if c in table.columns]
    return _display(table[columns], {"agrees": _fmt_verdict, "where": lambda w: str(w) if w else "–",
                                     "measured": lambda m: str(m) if m else "–"})


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
    """Runs as counts; the brackets and ratio ranges are words already (:func:`capacity_table`)."""
    return {col: _fmt_count for col in table.columns if col.startswith("probes_")}


def _table4_display(shares: pd.DataFrame) -> pd.DataFrame:
    """Table IV laid out as in the paper: components as rows, queries as columns."""
    shown = _display(shares, _SHARE_FORMATS).set_index("query")
    shown = shown[[*TIME_COMPONENTS.values(), "overhead", "total"]].T
    shown.index.name = "share (%)"
    return shown.reset_index()


def controller_text(meta: Mapping | None) -> str:
    """How the sweep's lmstream controller was set: its rules, and any parameter ``bench --controller`` gave.

    >>> controller_text({"config": {"tumbling_target": "window", "service_model": "bytes", "catch_up": "chunks",
    ...                             "controller": {"quantile": 0.97, "min_margin_s": 0.5}}})
    'tumbling target window, service model bytes, catch-up chunks; quantile=0.97, min_margin_s=0.5'
    >>> controller_text({})
    '–'
    """
    config = (meta or {}).get("config") or {}
    rules = [f"{label} {config[key]}" for key, label in (("tumbling_target", "tumbling target"),
                                                          ("service_model", "service model"),
                                                          ("catch_up", "catch-up")) if config.get(key)]
    extra = ", ".join(f"{k}={v}" for k, v in (config.get("controller") or {}).items())
    return "; ".join(part for part in (", ".join(rules), extra) if part) or "–"


def history_items(meta: Mapping | None) -> list:
    """(label, text) pairs on how a bench came to be, where it did not run in one go: its parts
    (``bench --resume``) and the kit's source commits they ran, the warm-ups, the sessions started
    anew after the driver's JVM exited, the groups of cells re-measured side by side, and the queries
    whose capacity a resume searched again on its own machine.

    >>> meta = {"resumed_at": ["2026-11-28T03:14:17+00:00"], "commits": ["e715ca53234a", "8e62bb970697"],
    ...         "config": {"warmup_s": 20.0, "jvm_warmup_s": 45.0},
    ...         "remeasured": ["LR1S constant r0 at 1000"],
    ...         "capacity_searched_again": ["CM2S (the part of 2026-11-28T03:14:17+00:00): its capacity probes ran on "
    ...                                     "machine 0b99356e; this one is 5f1e2d3c"]}
    >>> for label, text in history_items(meta):
    ...     print(f"{label}: {text}")
    parts: 2 (resumed 2026-11-28T03:14:17+00:00), from the kit's commits e715ca53234a, 8e62bb970697
    warm-ups: 20 simulated s of each query before its first measured run on a JVM; a fresh JVM's first at least 45 wall s
    re-measured side by side: LR1S constant r0 at 1000
    capacity searched again on a resume's machine: CM2S (the part of 2026-11-28T03:14:17+00:00): its capacity probes ran on machine 0b99356e; this one is 5f1e2d3c
    >>> history_items({"config": {"warmup_s": 20.0}})   # a bench from before the warm-ups on every JVM
    [('warm-ups', '20 simulated s of each query before its cells (none before capacity probes)')]
    """
    meta = dict(meta or {})
    config = meta.get("config") or {}
    items = []
    resumed = [str(t) for t in meta.get("resumed_at") or []]
    if resumed:
        commits = [str(c) for c in meta.get("commits") or [] if c]
        items.append(("parts", f"{len(resumed) + 1} (resumed {', '.join(resumed)})"
                      + (f", from the kit's commits {', '.join(dict.fromkeys(commits))}" if commits else "")))
    warmup = _num(config.get("warmup_s"))
    if math.isfinite(warmup):
        first = _num(config.get("jvm_warmup_s"))
        if warmup <= 0:
            text = "none"
        elif "jvm_warmup_s" not in config:  # a bench from before: a warm-up per query before its cells only
            text = f"{warmup:g} simulated s of each query before its cells (none before capacity probes)"
        else:
            text = f"{warmup:g} simulated s of each query before its first measured run on a JVM"
            if math.isfinite(first) and first > 0:
                text += f"; a fresh JVM's first at least {first:g} wall s"
        items.append(("warm-ups", text))
    if meta.get("restarts"):
        items.append(("new sessions", "; ".join(str(r) for r in meta["restarts"])))
    if meta.get("remeasured"):
        items.append(("re-measured side by side", ", ".join(str(g) for g in meta["remeasured"])))
    if meta.get("capacity_searched_again"):
        items.append(("capacity searched again on a resume's machine",
                      "; ".join(str(q) for q in meta["capacity_searched_again"])))
    return items


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
        *([("lmstream controller", ctrl)] if (ctrl := controller_text(meta)) != "–" else []),  # benches that say
        ("traffic", get(meta, "traffic")),
        ("started", get(meta, "started_at")),
        ("finished", get(meta, "finished_at")),
        *history_items(meta),
    ]
