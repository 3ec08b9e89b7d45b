"""Would another admission rule give lmstream asap's capacity on LR2S?  A SIMULATION calibrated on real probes.

    nice -n 19 .venv/bin/python benchmarks/lr2s_capacity_sim.py                # 20 seeds a rate
    nice -n 19 .venv/bin/python benchmarks/lr2s_capacity_sim.py --seeds 5      # a quick look

In the paper preset's sweep (``benchmarks/results/paper-2026-12-06``, 2-core VM, speedup 2, 5 s bound)
lmstream's capacity within the bound on LR2S was 181,019-197,403 rows/s and asap's 234,753-256,000.  A
row cost about the same in any batch from 300,000 rows on, so lmstream's waiting (batches of 0.9 M rows,
latency 4.1-4.8 s) bought no speed and spent the slack that a slow batch or a full collection needed.
This script replays the **real controller** (:class:`lmstream_kit.controller.AdmissionController`, as a
LiveStream makes it for LR2S, with the preset's ``quantile=0.97, min_margin_s=0.5``) and asap through the
project's simulator (:func:`lmstream_kit.sim.simulate`) on a service time fitted to the committed LR2S
probe journals of that sweep, beside two rules that stop waiting where waiting does not pay:

* ``fixed share e`` (built here around the controller): admit at once where the batch's fixed cost (the
  intercept ``a`` of the controller's own line ``a + b bytes``, at least 1 ms) is at most ``e`` of its
  predicted processing: no wait can make its rows cheaper by more than ``a / (a + b bytes)``;
* ``busy r``: the controller's own ``busy_load=r``: admit at once where the pending batch's predicted
  processing per byte times the bytes arriving per wall second (the processing a second of data costs
  at that batch size) is at least ``r``: near saturation, asap.  (The line's slope alone would understate
  that load where the line's intercept absorbs the dearer rows of small batches.)

Everything it reports about rules is **simulated**; only the column marked "measured" comes from the
probes.  The service-time model, fitted at start and written with the results:

* processing_s = (a + b rows) x ratio, ``a`` and ``b`` least squares on every data batch without a full
  collection (both policies' probes; each run's first data batch left out: a cold start); ``ratio`` a draw
  from the measured ratios (processing over the line) of batches of the same size class (below 300,000
  rows, to 800,000, to 1.2 M, above), which keeps the spread and the dearer rows of the smallest and the
  largest batches;
* a full collection: a batch of ``r`` rows runs one with probability ``1 - exp(-r / R)``, ``R`` the rows
  processed per full collection in the probes, and then takes a drawn measured excess on top (the full
  collection batches' processing over the line).

A rule *passes* a rate in a simulated run as a probe does: at least 95% of its data batches within the
bound, and the run caught up (its last batch admitted within two bounds after the feed ended).  The table
gives, per rate, the share of seeds that passed, and the simulated processing per row (what the rule's
batches cost).  Outputs ``benchmarks/results/lr2s-capacity-sim-<stamp>/results.json`` and ``summary.md``,
and prints the summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import random
import time
from pathlib import Path

import numpy as np
import pandas as pd

from lmstream_kit.controller import AdmissionController
from lmstream_kit.metrics import load_metrics
from lmstream_kit.record import latency_bound, tumbling_start_s, window_params
from lmstream_kit.sim import constant_arrivals, simulate, simulate_asap
from lmstream_kit.workloads import get_workload

ROOT = Path(__file__).resolve().parent
#: that sweep's LR2S probes, set aside (with their journals) when the sweep, resumed on another VM,
#: searched LR2S again there
SWEEP = ROOT / "results" / "paper-2026-12-06" / "runs" / "set-aside-20261207T111905"
SIZE_EDGES = (0, 300_000, 800_000, 1_200_000, math.inf)
SPEEDUP = 2.0
DURATION_S = 120  # simulated seconds, as the probes
RATES = (128_000, 160_000, 181_019, 187_802, 197_403, 215_269, 234_753, 256_000)  # 187,802: 80% of asap's lower bound
#: the rules beside asap: (name, kind, value); kind None is the controller as the preset runs it
RULES = (("lmstream", None, None), ("fixed share 0.1", "share", 0.1), ("fixed share 0.25", "share", 0.25),
         ("busy 0.75", "busy", 0.75), ("busy 0.85", "busy", 0.85), ("busy 0.9", "busy", 0.9))
#: the least intercept taken for a fixed cost (a fit through the origin leaves 1e-17 s)
FIXED_COST_MIN_S = 1e-3


def load_batches(sweep: Path) -> pd.DataFrame:
    frames = []
    # a directory of probe runs, or a bench directory (its runs/)
    for run in sorted(sweep.glob("capacity-LR2S-*")) or sorted((sweep / "runs").glob("capacity-LR2S-*")):
        if run.name.split("-")[2] not in ("lmstream", "asap"):
            continue
        m = load_metrics(run)
        if "rows" not in m:
            continue
        data = m[m["rows"] > 0].iloc[1:].copy()  # the run's first data batch: a cold start
        data["run"] = run.name
        data["policy"] = run.name.split("-")[2]
        frames.append(data)
    out = pd.concat(frames, ignore_index=True)
    full = out["spark_jvm_full_gc_count"] if "spark_jvm_full_gc_count" in out else 0
    out["full_gc"] = pd.to_numeric(full, errors="coerce").fillna(0) > 0
    return out


def fit(batches: pd.DataFrame) -> dict:
    clean = batches[~batches["full_gc"]]
    b, a = np.polyfit(clean["rows"].astype(float), clean["processing_s"].astype(float), 1)
    line = a + b * batches["rows"].astype(float)
    ratio = batches["processing_s"].astype(float) / line
    size = pd.cut(batches["rows"], SIZE_EDGES, right=False, labels=False)
    ratios = {int(k): ratio[(size == k) & ~batches["full_gc"]].tolist() for k in range(len(SIZE_EDGES) - 1)}
    full = batches[batches["full_gc"]]
    excess = (full["processing_s"].astype(float) - (a + b * full["rows"].astype(float))).clip(lower=0).tolist()
    rows_per_full = float(batches["rows"].sum()) / max(len(full), 1)
    bpr = float(batches["bytes"].sum()) / float(batches["rows"].sum())
    return {"a_s": float(a), "b_s_per_row": float(b), "ratios": ratios, "full_excess_s": excess,
            "rows_per_full_gc": rows_per_full, "bytes_per_row": bpr, "batches": int(len(batches)),
            "full_gc_batches": int(len(full))}


class Service:
    """A seeded service time drawn from the fit (one instance per simulated run)."""

    def __init__(self, model: dict, seed: int) -> None:
        self.m, self.rng = model, random.Random(seed)

    def __call__(self, rows: int, nbytes: int) -> float:
        m = self.m
        k = next(i for i in range(len(SIZE_EDGES) - 1) if SIZE_EDGES[i] <= rows < SIZE_EDGES[i + 1])
        pool = m["ratios"][k] or m["ratios"][max(i for i, v in m["ratios"].items() if v)]
        s = (m["a_s"] + m["b_s_per_row"] * rows) * self.rng.choice(pool)
        if m["full_excess_s"] and self.rng.random() < 1.0 - math.exp(-rows / m["rows_per_full_gc"]):
            s += self.rng.choice(m["full_excess_s"])
        return s


def controller(**extra) -> AdmissionController:
    """The controller a LiveStream makes for LR2S under the paper preset (``extra``: more parameters)."""
    w = get_workload("LR2S")
    first = tumbling_start_s(w.window_range_s or w.slide_s, SPEEDUP)
    params = {"warmup": 1, "initial_target_s": first, "cold_target_s": first, **window_params(w, SPEEDUP),
              "quantile": 0.97, "min_margin_s": 0.5, "poll_interval_s": 0.05, **extra}
    return AdmissionController(slide_s=w.slide_s / SPEEDUP, **params)


class FixedShare:
    """The controller, and an admission at once where the batch's fixed cost is at most ``share`` of its
    predicted processing (see the module)."""

    def __init__(self, inner: AdmissionController, share: float) -> None:
        self.inner, self.share = inner, share

    def decide(self, now: float, pending):
        d = self.inner.decide(now, pending)
        line = self.inner.model.line
        if d.admit or not d.n_datasets or line is None or self.inner.model.mode != "ols":
            return d
        a, b = line
        early = a >= FIXED_COST_MIN_S and b > 0 and a <= self.share * (a + b * d.nbytes)
        return dataclasses.replace(d, admit=True, reason="share") if early else d

    def observe(self, obs) -> None:
        self.inner.observe(obs)

    def observe(self, obs) -> None:
        self.inner.observe(obs)


def verdict(batches, bound: float, feed_end: float) -> tuple[bool, float, float]:
    data = [b for b in batches if b.rows > 0]
    within = sum(b.max_latency_s <= bound for b in data) / len(data)
    caught_up = data[-1].admitted_at <= feed_end + 2 * bound
    return within >= 0.95 and caught_up, within, sum(b.max_latency_s for b in data) / len(data)


def measured(sweep: Path) -> dict:
    rows = [json.loads(line) for line in (sweep / "capacity.jsonl").read_text().splitlines()]
    out: dict = {}
    for r in rows:
        if r.get("query") == "LR2S" and r.get("policy") in ("lmstream", "asap"):
            out.setdefault((r["policy"], int(r["rate"])), []).append(bool(r["passed"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--sweep", type=Path, default=SWEEP)
    args = ap.parse_args()
    began = time.monotonic()
    model = fit(load_batches(args.sweep))
    w = get_workload("LR2S")
    bound = latency_bound(w.slide_s, w.window_range_s, SPEEDUP)
    feed_end = (DURATION_S - 1) / SPEEDUP
    table = []
    for rate in RATES:
        arrivals = constant_arrivals(rate, DURATION_S, bytes_per_row=round(model["bytes_per_row"]), speedup=SPEEDUP)
        for rule, kind, value in (("asap", None, None), *RULES):
            runs = []
            for seed in range(args.seeds):
                service = Service(model, seed * 1000 + rate)
                if rule == "asap":
                    batches = simulate_asap(arrivals=arrivals, service_time=service, poll_interval_s=0.05)
                else:
                    gate = (controller() if kind is None else FixedShare(controller(), value) if kind == "share"
                            else controller(busy_load=value))
                    batches = simulate(gate, arrivals=arrivals, service_time=service, poll_interval_s=0.05)
                processing = sum(b.completed_at - b.admitted_at for b in batches)
                runs.append(verdict(batches, bound, feed_end)
                            + (sum(b.rows for b in batches) / len(batches),
                               processing / sum(b.rows for b in batches) * 1e6))
            table.append({"rate": rate, "rule": rule, "passed": sum(r[0] for r in runs) / len(runs),
                          "within": float(np.mean([r[1] for r in runs])),
                          "mean_max_latency_s": float(np.mean([r[2] for r in runs])),
                          "rows_per_batch": float(np.mean([r[3] for r in runs])),
                          "us_per_row": float(np.mean([r[4] for r in runs]))})
            t = table[-1]
            print(f"{rate:>9,} {rule:<18} passed {t['passed']:.0%}  within {t['within']:.1%}  latency "
                  f"{t['mean_max_latency_s']:.2f} s  {t['rows_per_batch']:,.0f} rows a batch  "
                  f"{t['us_per_row']:.2f} µs a row", flush=True)
    real = measured(args.sweep)
    stamp = time.strftime("%Y-%m-%dT%H%M%S")
    out = ROOT / "results" / f"lr2s-capacity-sim-{stamp}"
    out.mkdir(parents=True)
    fitted = {k: v for k, v in model.items() if k not in ("ratios", "full_excess_s")}
    fitted["ratio_batches"] = {str(k): len(v) for k, v in model["ratios"].items()}
    (out / "results.json").write_text(json.dumps({"simulated": table, "model": fitted, "seeds": args.seeds,
                                                  "machine": platform.platform(), "sweep": str(args.sweep)},
                                                 indent=1))
    lines = [f"# LR2S capacity under other admission rules: SIMULATED ({args.seeds} seeds a rate; "
             f"{platform.platform()}, {os.cpu_count()} cores)", "",
             f"Calibrated on {model['batches']} data batches of the LR2S capacity probes in `{args.sweep.name}` "
             f"(measured): a = {model['a_s']:.3f} s, b = {model['b_s_per_row'] * 1e6:.2f} µs a row, a full "
             f"collection every {model['rows_per_full_gc'] / 1e6:.1f} M rows ({model['full_gc_batches']} batches).",
             "", "| rate (rows/s) | rule | simulated: runs passed | within | mean max latency (s) | rows a batch "
             "| µs a row | measured: probes passed |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in table:
        key = ("asap" if r["rule"] == "asap" else "lmstream", r["rate"])
        got = real.get(key) if r["rule"] in ("asap", "lmstream") else None
        lines.append(f"| {r['rate']:,} | {r['rule']} | {r['passed']:.0%} | {r['within']:.1%} | "
                     f"{r['mean_max_latency_s']:.2f} | {r['rows_per_batch']:,.0f} | {r['us_per_row']:.2f} | "
                     f"{'' if not got else f'{sum(got)} of {len(got)}'} |")
    lines += ["", f"({time.monotonic() - began:.0f} s)"]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
