"""The calibrated stage-level simulator (lmstream_kit.tune.stagesim): its time model on hand-computed
examples, the oracle against exhaustive search, restarts, rate schedules, stage dicts that
operator_samples reads like Spark's, every registered DAG, the shipped calibration, and the fit."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from lmstream_kit.engine.stages import STAGE_FIELDS
from lmstream_kit.exceptions import ConfigError, UnknownNameError
from lmstream_kit.tune import operator_samples
from lmstream_kit.tune.stagesim import (
    DAGS,
    DEFAULT_CALIBRATION_NAME,
    DagSpec,
    StageSpec,
    batch_seconds,
    build_dags,
    diurnal,
    fit_calibration,
    get_dag,
    load_calibration,
    oracle_parallelism,
    resolve_parallelism,
    simulate_batch,
    simulate_stream,
    stage_time,
    steady,
    step,
)


def _toy() -> DagSpec:
    return DagSpec("toy", (StageSpec("read", 1e-5, 0.01, 0.05, 0.5, "input"),
                           StageSpec("agg", 2e-5, 0.02, 0.05, 0.0, "state")))


def test_the_time_model_on_a_hand_computed_example():
    # read: 4 tasks of 0.01 + 1e-5 * 10,000 = 0.11 s in 2 waves on 2 cores, + 0.05 s = 0.27 s; 20,000 out
    # agg: 2 tasks of 0.02 + 2e-5 * 10,000 = 0.22 s in 1 wave, + 0.05 s = 0.27 s; overhead 0.1 s first
    dag = _toy().with_costs(overhead_s=0.1)
    read, agg = simulate_batch(dag, {"read": 4, "agg": 2}, rows=40_000, cores=2, start_s=10.0, first_stage_id=7)
    assert (read["job"], read["position"], read["stageId"], read["status"]) == (0, 0, 7, "COMPLETE")
    assert (read["numTasks"], read["executorRunTime"], read["executorCpuTime"]) == (4, 440, 440_000_000)
    assert (read["inputRecords"], read["shuffleReadRecords"], read["shuffleWriteRecords"], read["outputRecords"]) == (
        40_000, 0, 20_000, 0)
    assert (read["submissionTime"], read["completionTime"]) == (10_100, 10_370)
    assert (agg["position"], agg["stageId"], agg["numTasks"], agg["executorRunTime"]) == (1, 8, 2, 440)
    assert (agg["inputRecords"], agg["shuffleReadRecords"], agg["outputRecords"]) == (0, 20_000, 0)
    assert (agg["submissionTime"], agg["completionTime"]) == (10_370, 10_640)
    assert batch_seconds(dag, {"read": 4, "agg": 2}, 40_000, cores=2) == pytest.approx(0.64)


def test_tasks_beyond_the_cores_run_in_waves_and_skew_lengthens_the_last():
    spec = StageSpec("s", 1e-5, 0.01, 0.05, 1.0, "input")
    assert [stage_time(spec, p, 40_000, cores=2).waves for p in (1, 2, 3, 4, 5)] == [1, 1, 2, 2, 3]
    five = stage_time(spec, 5, 40_000, cores=2)  # tasks of 0.01 + 0.08 s, three waves
    assert five.wall_s == pytest.approx(0.05 + 3 * 0.09) and five.run_s == pytest.approx(5 * 0.01 + 0.4)
    skewed = stage_time(StageSpec("s", 1e-5, 0.01, 0.05, 1.0, "input", skew=1.0), 5, 40_000, cores=2)
    assert skewed.max_task_s == pytest.approx(0.01 + 0.16) and skewed.wall_s == pytest.approx(0.05 + 2 * 0.09 + 0.17)
    assert skewed.run_s == five.run_s  # skew moves records between tasks, it adds none
    # one task holds every record, whatever the skew
    assert stage_time(StageSpec("s", 1e-5, 0.0, 0.0, 1.0, "input", skew=3.0), 1, 1000, 2).max_task_s == pytest.approx(0.01)


def test_more_parallelism_never_lengthens_a_task_nor_makes_a_stage_more_of_a_bottleneck():
    rng = random.Random(3)
    for _ in range(200):
        spec = StageSpec("s", rng.uniform(0, 1e-4), rng.uniform(0, 0.1), rng.uniform(0, 0.1), 1.0, "input",
                         skew=rng.uniform(0, 2))
        records = rng.randint(0, 10**6)
        tasks = [stage_time(spec, p, records, cores=8).max_task_s for p in range(1, 65)]
        assert all(b <= a + 1e-12 for a, b in itertools.pairwise(tasks))
    # the simulated load (one task's useful seconds over the budget) falls with the stage's own parallelism
    loads = []
    for p in range(1, 65):
        stages = simulate_batch(_toy(), {"read": p, "agg": 2}, rows=400_000, cores=64)
        loads.append(operator_samples(stages, budget_s=1.0)[0].load)
    assert all(b <= a for a, b in itertools.pairwise(loads)) and loads[-1] < loads[0]


def test_without_per_task_costs_more_parallelism_never_lengthens_a_stage_and_with_them_it_is_u_shaped():
    cores = 8
    cheap_tasks = StageSpec("s", 1e-5, 0.0, 0.05, 1.0, "input")
    walls = [stage_time(cheap_tasks, p, 100_000, cores).wall_s for p in range(1, 65)]
    # up to the cores and at whole waves (p = 8, 16, ..., 64) it never grows
    assert all(b <= a for a, b in itertools.pairwise(walls[:cores]))
    whole = walls[cores - 1::cores]
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(whole))
    costly_tasks = StageSpec("s", 1e-6, 0.05, 0.05, 1.0, "input")
    walls = [stage_time(costly_tasks, p, 100_000, cores).wall_s for p in range(1, 65)]
    best = int(np.argmin(walls)) + 1
    assert best == cores  # falls until the cores are full, then each wave adds a per-task cost
    assert walls[0] > walls[best - 1] < walls[-1] and walls[-1] > walls[0]


def _brute_force(dag, rate, cores, bound_s, limit):
    interval = bound_s / 2
    rows = round(rate * interval)
    budget = min(interval, bound_s - interval)
    best = None
    free = [s.name for s in dag.order if s.knob != "fixed"]
    for combo in itertools.product(range(1, limit + 1), repeat=len(free)):
        p = dict(zip(free, combo))
        seconds = batch_seconds(dag, p, rows, cores)
        if seconds <= budget + 1e-12:
            total = sum(resolve_parallelism(dag, p).values())
            if best is None or (total, seconds) < best:
                best = (total, seconds)
    return best


def _coupled() -> DagSpec:
    # a partial aggregation whose output grows with its own parallelism, feeding two stages
    return DagSpec("coupled", (
        StageSpec("partial", 2e-5, 0.01, 0.02, 1.0, "input", groups=5000, kind="partial_agg"),
        StageSpec("state", 1e-4, 0.03, 0.02, 0.5, "state"),
        StageSpec("side", 3e-5, 0.005, 0.02, 0.1, "input", inputs=()),
        StageSpec("sink", 5e-5, 0.01, 0.02, 0.0, "shuffle", inputs=("state", "side")),
        StageSpec("sort", 0.0, 0.001, 0.01, 1.0, "fixed", fixed_tasks=1),
    ), overhead_s=0.05)


@pytest.mark.parametrize("rate,cores", [(20_000, 4), (60_000, 4), (60_000, 8), (150_000, 8), (10**7, 8)])
def test_the_oracle_is_the_smallest_total_of_an_exhaustive_search(rate, cores):
    dag = _coupled()
    found = oracle_parallelism(dag, rate, cores, bound_s=2.0, limit=8)
    brute = _brute_force(dag, rate, cores, 2.0, limit=8)
    if brute is None:
        assert found is None
        return
    assert found is not None and (sum(found.values()), batch_seconds(dag, found, rate, cores)) == pytest.approx(brute)
    # and no random vector that keeps the bound uses less
    rng = random.Random(rate + cores)
    for _ in range(300):
        p = {s.name: rng.randint(1, 8) for s in dag.order if s.knob != "fixed"}
        if batch_seconds(dag, p, rate, cores) <= 1.0:
            assert sum(resolve_parallelism(dag, p).values()) >= sum(found.values())


def test_the_oracle_of_a_shipped_dag_matches_exhaustive_search_and_scales_with_the_rate():
    dag = DAGS["LR2S"]
    totals = []
    for rate in (5_000, 50_000, 200_000):
        found = oracle_parallelism(dag, rate, cores=16, bound_s=4.0, limit=16)
        brute = _brute_force(dag, rate, 16, 4.0, limit=16)
        assert (found is None and brute is None) or sum(found.values()) == brute[0]
        totals.append(None if found is None else sum(found.values()))
    assert totals[0] is not None and totals[0] <= totals[1] and (totals[2] is None or totals[1] <= totals[2])


def test_parallelism_by_name_key_or_knob():
    dag = _coupled()
    p = resolve_parallelism(dag, {"input": 3, "j0.s1": 4, "sink": 2, "side": 5})
    assert p == {"partial": 3, "state": 4, "side": 5, "sink": 2, "sort": 1}
    assert dag.knobs() == {"input": ("partial", "side"), "state": ("state",), "shuffle": ("sink",), "fixed": ("sort",)}
    with pytest.raises(ConfigError, match="fixed parallelism of 1, not 2"):
        resolve_parallelism(dag, {"input": 1, "state": 1, "shuffle": 1, "sort": 2})
    with pytest.raises(ConfigError, match="no parallelism for stage 'sink'"):
        resolve_parallelism(dag, {"input": 1, "state": 1})
    with pytest.raises(ConfigError, match="int >= 1"):
        resolve_parallelism(dag, {"input": 0, "state": 1, "shuffle": 1})
    with pytest.raises(UnknownNameError, match="no stage 'j3.s0'"):
        resolve_parallelism(dag, {"j3.s0": 1})


def test_simulated_stages_read_like_sparks_in_operator_samples():
    dag = _coupled()
    stages = simulate_batch(dag, {"input": 2, "state": 3, "shuffle": 2}, rows=10_000, cores=2)
    assert all(set(s) <= set(STAGE_FIELDS) | {"job", "jobId", "position"} for s in stages)
    samples = {s.key: s for s in operator_samples(stages, budget_s=2.0)}
    assert list(samples) == ["j0.s0", "j0.s1", "j0.s2", "j0.s3", "j0.s4"] == list(dag.keys.values())
    assert [s.tasks for s in samples.values()] == [2, 3, 2, 2, 1]
    partial, state, side, sink, sort = samples.values()
    # 2 tasks of 5,000 records each, keys drawn from 5,000: 5,000 * (1 - 1/e) distinct keys each
    assert (partial.records_in, partial.records_out) == (10_000, round(2 * 5000 * (1 - math.exp(-1))))
    assert (state.records_in, state.records_out, side.records_in, side.records_out) == (6321, 3160, 10_000, 1000)
    assert sink.records_in == 4160 and sort.records_in == 0  # sort is job 0's 5th stage: it reads sink's output
    assert all(s.useful_s == s.run_s and s.wall_s > 0 for s in samples.values())
    assert partial.useful_s == pytest.approx(2 * 0.01 + 2e-5 * 10_000, abs=1e-3)


def test_a_seed_gives_reproducible_noise_and_no_seed_the_exact_model():
    dag = _toy().with_costs(noise=0.2)
    exact = simulate_batch(dag, {"read": 2, "agg": 2}, 50_000, 2)
    assert exact == simulate_batch(dag, {"read": 2, "agg": 2}, 50_000, 2)
    a = simulate_batch(dag, {"read": 2, "agg": 2}, 50_000, 2, seed=1)
    assert a == simulate_batch(dag, {"read": 2, "agg": 2}, 50_000, 2, seed=1)
    assert a != simulate_batch(dag, {"read": 2, "agg": 2}, 50_000, 2, seed=2) and a != exact
    assert simulate_batch(dag, {"read": 2, "agg": 2}, 50_000, 2, seed=1, noise=0.0) == exact


def test_rate_schedules():
    s = steady(1000)
    assert (s(0), s(99.5), s.rows(0, 2.5), s.rows(2.5, 5.0)) == (1000, 1000, 2500, 2500)
    st = step(1000, up_at=10, down_at=20)
    assert (st(9.99), st(10), st(19.99), st(20)) == (1000, 3000, 3000, 1000)
    assert (st.rows(0, 10), st.rows(10, 20), st.rows(20, 30), st.rows(5, 15)) == (10_000, 30_000, 10_000, 20_000)
    d = diurnal(1000, 400, 100)
    assert (d(0), d(25), d(50), d(100)) == pytest.approx((600, 1000, 1400, 600))
    # the trough quarter: 25 s at the mean less 400 * 100 / (2 pi)
    assert d.rows(0, 100) == 100_000 and d.rows(0, 25) == pytest.approx(25_000 - 400 * 100 / (2 * math.pi), abs=1)
    parts = sum(d.rows(t, t + 0.7) for t in np.arange(0, 70, 0.7))  # whole rows never drift
    assert parts == d.rows(0, 70)
    assert d.describe() == {"schedule": "diurnal", "mean": 1000.0, "amplitude": 400.0, "period_s": 100.0}
    with pytest.raises(ConfigError):
        diurnal(1000, 1500, 100)
    with pytest.raises(ConfigError):
        step(1000, up_at=20, down_at=10)
    with pytest.raises(ConfigError):
        steady(0)


def _changes_once(at_batch: int, change: dict):
    def tuner(stages, batch):
        assert stages and batch["rows"] > 0 and batch["bound_s"] == 4.0
        return change if batch["batch_id"] == at_batch else None
    return tuner


def test_a_state_knob_change_costs_a_restart_and_an_input_change_is_free():
    dag, start = _toy(), {"read": 2, "agg": 2}
    kw = {"cores": 4, "bound_s": 4.0, "start_parallelism": start, "restart_s": 30.0, "duration_s": 80.0}
    free = simulate_stream(dag, steady(10_000), _changes_once(3, {"read": 4}), **kw)
    restart = simulate_stream(dag, steady(10_000), _changes_once(3, {"agg": 3}), **kw)
    assert (free.summary["reconfigurations"], free.summary["free_reconfigurations"], free.summary["restarts"]) == (1, 1, 0)
    assert (restart.summary["reconfigurations"], restart.summary["restarts"]) == (1, 1)
    assert restart.summary["restart_downtime_s"] == 30.0 and free.summary["restart_downtime_s"] == 0.0
    b3, b4 = restart.batches[3], restart.batches[4]
    assert b4["t"] == pytest.approx(b3["end"] + 30.0) and b4["restart"] and b4["reconfigured"]
    assert b4["parallelism"] == {"read": 2, "agg": 3} and b4["rows"] > 10 * b3["rows"]  # the rows queued meanwhile
    assert not b4["within_bound"] and restart.summary["violation_s"] > 30.0
    f4 = free.batches[4]
    assert f4["t"] == pytest.approx(10.0) and f4["reconfigured"] and not f4["restart"]  # on the 2 s grid
    assert free.summary["violation_s"] == 0.0 and free.summary["converge_s"] == pytest.approx(10.0)
    assert free.summary["simulated"] is True and free.summary["calibration"] == "hand-set"


def test_a_steady_stream_with_enough_parallelism_keeps_the_bound_and_with_too_little_falls_behind():
    dag = DAGS["CM2S"]
    rate, bound = 1_000_000, 4.0
    need = oracle_parallelism(dag, rate, cores=16, bound_s=bound)
    assert need is not None and sum(need.values()) > 2
    kw = {"cores": 16, "bound_s": bound, "duration_s": 120.0, "restart_s": 10.0, "seed": None}
    ok = simulate_stream(dag, steady(rate), None, start_parallelism=need, **kw)
    assert ok.summary["violation_s"] == 0.0 and ok.summary["reconfigurations"] == 0
    assert all(b["within_bound"] and b["provisioning"] == "ok" for b in ok.batches)
    assert ok.summary["over_provisioned_s"] == 0.0 and ok.summary["under_provisioned_s"] == 0.0
    assert ok.summary["final_total_parallelism"] == ok.summary["oracle_total_parallelism"] == sum(need.values())
    assert all(b["t"] == pytest.approx(2.0 * (i + 1)) for i, b in enumerate(ok.batches))  # on the trigger's grid
    # 3x the rate on the same parallelism: each batch runs longer than the interval, the backlog grows
    slow = simulate_stream(dag, steady(3 * rate), lambda stages, batch: None, start_parallelism=need, **kw)
    assert slow.summary["violation_s"] > 100.0 and slow.summary["under_provisioned_s"] > 100.0
    rows = [b["rows"] for b in slow.batches]
    assert rows[-1] > 3 * rows[1]
    assert slow.batches[-1]["max_latency_s"] > slow.batches[1]["max_latency_s"] > bound
    # and far more than the oracle: over-provisioned
    big = simulate_stream(dag, steady(rate), None, start_parallelism={"input": 16, "state": 16}, **kw)
    assert big.summary["violation_s"] == 0.0 and big.summary["over_provisioned_s"] > 100.0


@pytest.mark.parametrize("name", sorted(DAGS))
def test_every_registered_dag_simulates_and_reads_back_through_operator_samples(name):
    dag = get_dag(name)
    p = {s.name: 4 for s in dag.order if s.knob != "fixed"}
    stages = simulate_batch(dag, p, rows=50_000, cores=8, seed=0)
    samples = operator_samples(stages, budget_s=2.0)
    assert [s.key for s in samples] == list(dag.keys.values())
    for s, spec in zip(samples, dag.order):
        assert s.tasks == (spec.fixed_tasks if spec.knob == "fixed" else 4)
        if not dag.upstream(spec.name):
            assert s.records_in == 50_000
        assert s.run_s >= 0 and s.wall_s > 0
    run = simulate_stream(dag, step(2000, up_at=20, down_at=40), None, cores=8, bound_s=4.0,
                          start_parallelism=p, restart_s=10.0, duration_s=60.0, seed=1, oracle_limit=16)
    assert run.summary["simulated"] is True and run.summary["calibration"].endswith(DEFAULT_CALIBRATION_NAME)
    assert run.summary["batches"] >= 10


def test_at_least_eight_dags_with_six_distinct_shapes():
    assert list(DAGS) == ["LR1S", "LR1T", "LR2S", "CM1S", "CM1T", "CM2S", "Q1", "Q2", "Q3", "Q5", "Q7", "Q8"]

    def shape(dag):
        return tuple(sorted((dag.keys[s.name], tuple(sorted(dag.keys[u] for u in dag.upstream(s.name))))
                            for s in dag.order))
    assert len({shape(d) for d in DAGS.values()}) == 6
    with pytest.raises(UnknownNameError, match="known: LR1S, LR1T"):
        get_dag("Q4")
    assert get_dag("lr2s") is DAGS["LR2S"]


def test_the_shipped_calibration_loads_and_costs_the_dags():
    cal = load_calibration()
    assert cal.source == f"lmstream_kit/resources/{DEFAULT_CALIBRATION_NAME}"
    assert cal.machine["cores"] == 2 and cal.spark
    assert set(cal.workloads) == {"LR1S", "LR1T", "LR2S", "CM1S", "CM1T", "CM2S"}
    for w in cal.workloads.values():
        assert w["overhead_s"] >= 0 and w["noise"] >= 0 and w["batches"] >= 4
        for s in w["stages"].values():
            assert s["per_record_s"] >= 0 and s["per_task_s"] >= 0 and s["per_batch_s"] >= 0
    assert cal.stage("LR2S", "j0.s0")["tasks_seen"] == [1, 2]
    assert build_dags(cal) == DAGS
    lr2s = DAGS["LR2S"]
    assert lr2s.stage("j0.s0").per_record_s == cal.stage("LR2S", "j0.s0")["per_record_s"]
    assert DAGS["Q5"].stage("window_count").per_task_s == cal.stage("CM2S", "j0.s1")["per_task_s"]
    assert DAGS["Q1"].stage("convert").per_record_s == cal.stage("LR1T", "j0.s0")["per_record_s"]
    with pytest.raises(UnknownNameError, match="no stage 'j0.s9' of 'LR2S'"):
        cal.stage("LR2S", "j0.s9")


def test_fitting_simulated_batches_recovers_the_dags_costs():
    dag = _coupled()
    samples = []
    for p in (1, 2):
        for rows in (5_000, 20_000, 40_000, 80_000):
            stages = simulate_batch(dag, {"input": p, "state": p, "shuffle": p}, rows, cores=2)
            samples.append({
                "workload": "coupled", "warm": True, "rows": rows,
                "processing_s": batch_seconds(dag, {"input": p, "state": p, "shuffle": p}, rows, 2),
                "operators": [s.to_dict() for s in operator_samples(stages, budget_s=1.0)],
                "stage_times": [[s["submissionTime"] / 1000, s["completionTime"] / 1000] for s in stages],
            })
    fit = fit_calibration(samples, cores=2)["workloads"]["coupled"]
    for spec, key in zip(dag.order, dag.keys.values()):
        got = fit["stages"][key]
        assert got["per_record_s"] == pytest.approx(spec.per_record_s, rel=0.02, abs=1e-7)
        assert got["per_task_s"] == pytest.approx(spec.per_task_s, abs=2e-3)
        assert got["per_batch_s"] == pytest.approx(spec.per_batch_s, abs=2e-3)
    partial, state = fit["stages"]["j0.s0"], fit["stages"]["j0.s1"]
    assert partial["groups"] == pytest.approx(5000, rel=0.02) and partial["selectivity"] == pytest.approx(1, rel=0.05)
    assert state["groups"] is None and state["selectivity"] == pytest.approx(0.5, rel=1e-3)
    assert fit["overhead_s"] == pytest.approx(0.05, abs=0.01)
    assert fit["batch_mape"] < 0.02
