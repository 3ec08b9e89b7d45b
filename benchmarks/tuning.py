"""Parallelism tuners side by side in the calibrated simulator (SIMULATED numbers): StreamTune-style vs DS2.

    .venv/bin/python benchmarks/tuning.py --out benchmarks/results
    .venv/bin/python benchmarks/tuning.py --dags LR1S,Q7 --schedules step --reps 1   # quick

For each DAG of :data:`lmstream_kit.tune.stagesim.DAGS` (the six workloads and Nexmark-style Q1,
Q2, Q3, Q5, Q7, Q8, costed by the calibration measured on real Spark here), each rate schedule
(steady; a x3 step up and back down; a diurnal wave) and each repetition (a seed of the
simulator's noise), it runs the same stream under every tuner, from the same start (every stage at
``--start`` tasks):

* ``ds2``: DS2's rule (``ParallelismTuner(policy="ds2")``);
* ``streamtune``: the learned, monotone bottleneck predictor, pre-trained on the *seed history*
  (exploration batches of every DAG within graph edit distance 2 of this one, at random
  parallelism and rates; made here, seeded) and fine-tuned on the run;
* ``streamtune-cold``: the same without pre-training (DS2's rule until its model has data);
* ``static-peak``: no tuner, every stage at the oracle's parallelism for the schedule's peak rate.

Every tuner gets the same cooldown, bounds and restart price (a change of a state-store knob stops
the stream for ``--restart`` seconds, measured on the kit: about 1 s plus a 3-5 s first batch).
Each DAG's base rate is chosen so that the oracle needs about ``--target`` tasks on its busiest
stage at the base rate (the step triples it).  Writes ``tuning-sim-<host>-<date>.json`` (every run
and the summary) and ``.csv``, and prints the comparison against DS2 with the issue's goals:
at least 25% fewer reconfigurations, at least 20% lower final total parallelism, no more violation
seconds, and within 10% of the oracle's total.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmstream_kit.bench.outputs import machine_info  # noqa: E402
from lmstream_kit.tune.compare import TUNERS, base_rate, cluster_of, compare, schedules, seed_history  # noqa: E402
from lmstream_kit.tune.stagesim import DAGS  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dags", default=",".join(DAGS))
    ap.add_argument("--schedules", default="steady,step,diurnal")
    ap.add_argument("--tuners", default=",".join(TUNERS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cores", type=int, default=64, help="simulated cores")
    ap.add_argument("--bound", type=float, default=4.0, help="latency bound, s (a batch every half of it)")
    ap.add_argument("--duration", type=float, default=360.0, help="simulated seconds per run")
    ap.add_argument("--target", type=int, default=6, help="the oracle's busiest stage at the base rate")
    ap.add_argument("--start", type=int, default=2, help="every tuner's starting parallelism per stage")
    ap.add_argument("--cooldown", type=int, default=3, help="batches between two changes, for every tuner")
    ap.add_argument("--restart", type=float, default=5.0, help="seconds a state-store knob's change stops the stream")
    ap.add_argument("--headroom", type=float, default=None,
                    help="the learned tuner's cost model fills this share of the budget [default: the tuner's]")
    ap.add_argument("--down-gain", type=float, default=None,
                    help="the learned tuner scales down for at least this share fewer tasks [default: the tuner's]")
    ap.add_argument("--no-forecast", dest="forecast", action="store_false",
                    help="the learned tuner plans for the recent peak only, not its trend")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args(argv)
    from tqdm import tqdm

    dags = {}
    for name in (d.strip() for d in args.dags.split(",") if d.strip()):
        if name not in DAGS:
            print(f"error: unknown DAG {name!r} (use {', '.join(DAGS)})", file=sys.stderr)
            return 2
        dags[name] = DAGS[name]
    kinds = [t.strip() for t in args.tuners.split(",") if t.strip()]
    bad = [k for k in kinds if k not in TUNERS]
    if bad:
        print(f"error: unknown tuner {bad[0]!r} (use {', '.join(TUNERS)})", file=sys.stderr)
        return 2
    names = [s.strip() for s in args.schedules.split(",") if s.strip()]
    rates = {n: base_rate(d, cores=args.cores, bound_s=args.bound, target=args.target) for n, d in DAGS.items()}
    history = seed_history(DAGS, rates, cores=args.cores, bound_s=args.bound, seed=args.seed + 1)
    clusters = cluster_of(DAGS, cores=args.cores)
    tuner_kw = {k: v for k, v in (("headroom", args.headroom), ("down_gain", args.down_gain)) if v is not None}
    if not args.forecast:
        tuner_kw["forecast"] = False
    runs = []
    total = len(dags) * len(names) * args.reps * len(kinds)
    bar = tqdm(total=total, desc="tuning (simulated)", unit="run")
    for name, dag in dags.items():
        pretrain = [t for other in clusters[name] for t in history[other]]
        for sched_name in names:
            sched = schedules(rates[name], args.duration)[sched_name]
            for rep in range(args.reps):
                bar.set_postfix_str(f"{name} {sched_name} rep {rep}")
                rows = compare(dag, sched, kinds, pretrain=pretrain, cores=args.cores, bound_s=args.bound,
                               duration_s=args.duration, start=args.start, cooldown=args.cooldown,
                               restart_s=args.restart, seed=args.seed * 1000 + rep, tuner_seed=args.seed + rep,
                               tuner_kw=tuner_kw)
                runs += [{"schedule": sched_name, "rep": rep, "base_rate": round(rates[name], 1), **r} for r in rows]
                bar.update(len(rows))
    bar.close()

    summary = []
    for kind in kinds:
        mine = [r for r in runs if r["tuner"] == kind]
        summary.append({
            "tuner": kind, "runs": len(mine),
            "reconfigurations": sum(r["reconfigurations"] for r in mine),
            "restarts": sum(r["restarts"] for r in mine),
            "final_total_parallelism": sum(r["final_total_parallelism"] for r in mine),
            "oracle_total_parallelism": sum(r["oracle_total_parallelism"] or 0 for r in mine),
            "violation_s": round(sum(r["violation_s"] for r in mine), 1),
            "over_provisioned_s": round(sum(r["over_provisioned_s"] for r in mine), 1),
            "under_provisioned_s": round(sum(r["under_provisioned_s"] for r in mine), 1),
            "converge_s_median": round(statistics.median(r["converge_s"] for r in mine), 1) if mine else None,
            "tuner_ms_per_batch": round(1000 * statistics.mean(r["tuner_s_mean"] for r in mine), 2) if mine else None,
            "simulated": True,
        })
    by = {s["tuner"]: s for s in summary}
    goals = {}
    if "ds2" in by and "streamtune" in by:
        d, t = by["ds2"], by["streamtune"]
        goals = {
            "fewer_reconfigurations_vs_ds2": round(1 - t["reconfigurations"] / max(1, d["reconfigurations"]), 3),
            "lower_final_parallelism_vs_ds2": round(1 - t["final_total_parallelism"]
                                                    / max(1, d["final_total_parallelism"]), 3),
            "violation_s": {"streamtune": t["violation_s"], "ds2": d["violation_s"]},
            "final_over_oracle": round(t["final_total_parallelism"] / max(1, t["oracle_total_parallelism"]) - 1, 3),
            "goal": "reconfigurations >= 25% fewer, final parallelism >= 20% lower, violation <= ds2's, "
                    "within 10% of the oracle",
        }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    host = socket.gethostname().split(".")[0] or "host"
    meta = {"simulated": True, "machine": machine_info(), "python": platform.python_version(), "argv": sys.argv[1:],
            "cores_simulated": args.cores, "bound_s": args.bound, "duration_s": args.duration,
            "restart_s": args.restart, "start": args.start, "cooldown": args.cooldown, "reps": args.reps,
            "tuner_kw": tuner_kw,
            "base_rates": {n: round(r, 1) for n, r in rates.items()}, "clusters": clusters,
            "calibration": next(iter(DAGS.values())).calibration, "when": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    path = out / f"tuning-sim-{host}-{stamp}.json"
    path.write_text(json.dumps({"meta": meta, "summary": summary, "goals": goals, "runs": runs}, indent=1))
    with open(path.with_suffix(".csv"), "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=[k for k in runs[0] if k != "final_parallelism"])
        writer.writeheader()
        writer.writerows({k: v for k, v in r.items() if k != "final_parallelism"} for r in runs)
    print(f"\nSIMULATED ({args.cores} cores, calibration {meta['calibration']}); {len(dags)} DAGs x {len(names)} "
          f"schedules x {args.reps} reps")
    print(f"{'tuner':16} {'reconf':>7} {'restarts':>8} {'final p':>8} {'oracle p':>8} {'viol s':>8} {'over s':>8} "
          f"{'under s':>8} {'conv s':>7} {'ms/batch':>8}")
    for s in summary:
        print(f"{s['tuner']:16} {s['reconfigurations']:7} {s['restarts']:8} {s['final_total_parallelism']:8} "
              f"{s['oracle_total_parallelism']:8} {s['violation_s']:8} {s['over_provisioned_s']:8} "
              f"{s['under_provisioned_s']:8} {s['converge_s_median']:7} {s['tuner_ms_per_batch']:8}")
    if goals:
        print("against DS2:", json.dumps(goals))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
