"""Tuners side by side in the calibrated simulator: what ``benchmarks/tuning.py`` and notebook 08 run.

Every number this produces is **simulated** (:mod:`~lmstream_kit.tune.stagesim`).  The pieces:

* :func:`base_rate`: the rate at which the oracle's busiest stage needs about ``target`` tasks, so
  that every DAG is loaded alike;
* :func:`seed_history`: exploration batches of every DAG at random parallelism and rates (seeded),
  as transitions: the seed history the learned tuner pre-trains on;
* :func:`cluster_of`: each DAG's cluster, the DAGs within graph edit distance 2;
* :func:`make_tuner`: a :class:`~lmstream_kit.tune.tuner.ParallelismTuner` as the simulator's tuner
  callback (every stage a knob, restarts priced, ``split_budget``);
* :func:`schedules`: steady, a x3 step up and back down, a diurnal wave;
* :func:`compare`: one DAG, one schedule, one seed, under each tuner, from the same start.
"""

from __future__ import annotations

import time

import numpy as np

from .operators import operator_samples
from .predictor import transitions
from .pretrain import dag_distance, stage_graph
from .stagesim import diurnal, oracle_parallelism, simulate_batch, simulate_stream, steady, step
from .tuner import ParallelismTuner

__all__ = ["TUNERS", "base_rate", "cluster_of", "compare", "make_tuner", "schedules", "seed_history"]

#: the tuners compared: DS2, the learned tuner pre-trained and cold, static peak provisioning, and the
#: learned tuner without its cost model (the bottleneck predictor alone, per stage)
TUNERS = ("ds2", "streamtune", "streamtune-cold", "static-peak", "streamtune-predictor")


def base_rate(dag, *, cores: int, bound_s: float, target: int) -> float:
    """The rate at which the oracle's busiest stage needs about ``target`` tasks (bisection on the rate)."""
    lo, hi = 1.0, 1e9

    def busiest(rate: float) -> int:
        o = oracle_parallelism(dag, rate, cores, bound_s)
        return 10**6 if o is None else max(o.values())

    for _ in range(60):
        mid = (lo * hi) ** 0.5
        if busiest(mid) < target:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1.02:
            break
    return lo


def seed_history(dags: dict, rates: dict, *, cores: int, bound_s: float, seed: int, batches: int = 60) -> dict:
    """``{dag: [Transition]}``: exploration batches of every DAG at random parallelism and rates."""
    rng = np.random.default_rng(seed)
    budget = bound_s / 2
    out = {}
    for name, dag in dags.items():
        knobs = dag.stage_knobs()
        names = {k: n for n, k in dag.keys.items()}
        seq = []
        for _ in range(batches):
            rate = rates[name] * float(rng.uniform(0.3, 3.5))
            rows = int(rate * budget)
            p = {names[k]: int(rng.integers(1, 49)) for k in knobs}
            stages = simulate_batch(dag, p, rows, cores, seed=int(rng.integers(2**31))) if p else []
            seq.append((operator_samples(stages, budget_s=budget), rows, budget))
        out[name] = transitions(seq, split_budget=True)
    return out


def cluster_of(dags: dict, *, cores: int) -> dict:
    """``{dag: [dags within graph edit distance 2]}`` from one simulated batch of each."""
    graphs = {n: stage_graph(operator_samples(simulate_batch(d, {s.name: 1 for s in d.order if s.knob != "fixed"}
                                                             | {s.name: s.fixed_tasks for s in d.order
                                                                if s.knob == "fixed"}, 10_000, cores),
                                              budget_s=1.0))
              for n, d in dags.items()}
    return {a: [b for b in dags if dag_distance(graphs[a], graphs[b]) <= 2.0] for a in dags}


def make_tuner(kind: str, dag, *, pretrain, start: int, cooldown: int, high: int, seed: int, **tuner_kw):
    knobs = dag.stage_knobs()
    policy = "ds2" if kind == "ds2" else "learned"
    tuner = ParallelismTuner(policy=policy, partitions=start, knobs=knobs, allow_restarts=True, cooldown=cooldown,
                             low=1, high=high, pretrain=pretrain if kind in ("streamtune", "streamtune-predictor")
                             else (), refit_every=8, split_budget=True, cost_model=kind != "streamtune-predictor",
                             cores=high, seed=seed, **tuner_kw)
    tuner.applied = {k: start for k in knobs}

    last_cut = [0.0]

    def step_fn(stages, view):
        budget = min(view["batch_interval_s"], view["bound_s"] - view["batch_interval_s"])
        samples = operator_samples(stages, budget_s=budget, busy_share=tuner.busy_share)
        before = dict(tuner.applied)
        span, last_cut[0] = view["t"] - last_cut[0], view["t"]  # the batch's rows arrived over this span
        expected = view["rows"] / span * view["batch_interval_s"] if span > 0 else None
        tuner.observe(samples, rows=int(view["rows"]), budget_s=budget, behind=not view["within_bound"],
                      processing_s=view["processing_s"], expected_rows=expected)
        return {k: v for k, v in tuner.applied.items() if before.get(k) != v} or None

    return step_fn


def schedules(rate: float, duration: float) -> dict:
    return {"steady": steady(rate), "step": step(rate, 3.0, up_at=duration / 3, down_at=2 * duration / 3),
            "diurnal": diurnal(rate * 1.5, rate, duration / 1.5)}



SUMMARY_KEYS = ("reconfigurations", "free_reconfigurations", "restarts", "restart_downtime_s", "violation_s",
                "over_provisioned_s", "under_provisioned_s", "converge_s", "final_total_parallelism",
                "oracle_total_parallelism", "max_latency_s", "batches", "tuner_s_mean")


def compare(dag, schedule, kinds, *, pretrain, cores: int, bound_s: float, duration_s: float, start: int = 2,
            cooldown: int = 3, restart_s: float = 5.0, seed: int = 0, tuner_seed: int | None = None,
            tuner_kw: dict | None = None) -> list[dict]:
    """One row per tuner of ``kinds`` (see :data:`TUNERS`): the stream's summary (simulated).

    ``seed`` seeds the simulator's noise, ``tuner_seed`` (default ``seed``) the learned model;
    ``tuner_kw``: more :class:`~lmstream_kit.tune.tuner.ParallelismTuner` arguments for the learned tuners.
    """
    peak = max(schedule.rate(t) for t in np.linspace(0, duration_s, 721))
    rows = []
    for kind in kinds:
        if kind == "static-peak":
            begin = oracle_parallelism(dag, peak, cores, bound_s) or {
                s.name: (s.fixed_tasks if s.knob == "fixed" else cores) for s in dag.order}
            tuner = None
        else:
            begin = {s.name: (s.fixed_tasks if s.knob == "fixed" else start) for s in dag.order}
            tuner = make_tuner(kind, dag, pretrain=pretrain, start=start, cooldown=cooldown, high=cores,
                               seed=seed if tuner_seed is None else tuner_seed,
                               **((tuner_kw or {}) if kind != "ds2" else {}))
        t0 = time.perf_counter()
        run = simulate_stream(dag, schedule, tuner, cores=cores, bound_s=bound_s, start_parallelism=begin,
                              restart_s=restart_s, duration_s=duration_s, seed=seed)
        s = run.summary
        rows.append({"dag": dag.name, "tuner": kind, "pretrain_transitions": len(pretrain) if kind in ("streamtune", "streamtune-predictor")
                     else 0, "wall_s": round(time.perf_counter() - t0, 3), **{k: s[k] for k in SUMMARY_KEYS},
                     "final_parallelism": s["final_parallelism"], "simulated": True, "calibration": s["calibration"]})
    return rows
