"""The tuner's cost model on seeded inputs: the fit recovers known costs, the allocation is the exact
cheapest vector (checked against brute force), walls never rise with parallelism up to the cores,
and the tuner's rules around it (scale down only for a real saving, a restart only where the free
knobs cannot fit the budget).  No Spark."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.protocol import ChangeLog
from lmstream_kit.tune.costmodel import CostModel, StageCost
from lmstream_kit.tune.operators import OperatorSample
from lmstream_kit.tune.tuner import ParallelismTuner


def sample(key, p, records, *, per_task, per_record, position=0, spread=1.0):
    useful = per_task * p + per_record * records
    wall = spread * (per_task + per_record * records / p)
    return OperatorSample(key, 0, position, position, "COMPLETE", p, records, records, useful, useful, useful,
                          wall, records / useful, None, False)


COSTS = {"j0.s0": (0.3, 2e-5), "j0.s1": (0.02, 1e-5), "j0.s2": (0.1, 4e-6)}


def batch(parallelism, rows):
    return [sample(k, parallelism[k], rows, per_task=t, per_record=r, position=i)
            for i, (k, (t, r)) in enumerate(COSTS.items())]


def fitted(overhead=0.25):
    model = CostModel()
    rng = np.random.default_rng(7)
    for _ in range(8):
        p = {k: int(rng.integers(1, 9)) for k in COSTS}
        rows = int(rng.integers(20_000, 200_000))
        stages = batch(p, rows)
        model.observe(stages, processing_s=overhead + sum(s.wall_s for s in stages))
    return model


def test_the_fit_recovers_each_stages_task_and_record_costs_and_the_overhead():
    model = fitted()
    for key, (per_task, per_record) in COSTS.items():
        c = model.stages[key]
        assert c.per_task_s == pytest.approx(per_task, rel=1e-6)
        assert c.per_record_s == pytest.approx(per_record, rel=1e-6)
        assert c.spread == pytest.approx(1.0)
    assert model.overhead_s == pytest.approx(0.25)
    assert model.ready(list(COSTS)) and not model.ready([*COSTS, "j1.s0"])


def test_a_stage_is_not_fitted_before_three_batches():
    model = CostModel()
    for p in (1, 2):
        model.observe(batch({k: p for k in COSTS}, 50_000))
    assert not model.ready(list(COSTS))


def brute_force(model, stages, scale, target, bounds):
    keys = [s.key for s in stages]
    ranges = [range(bounds[k][0], bounds[k][1] + 1) if k in bounds else [s.tasks] for k, s in zip(keys, stages)]
    best = None
    for vec in itertools.product(*ranges):
        p = dict(zip(keys, vec))
        t = model.processing_s(stages, p, rows_scale=scale)
        if t <= target + 1e-12 and (best is None or sum(vec) < best[0] or (sum(vec) == best[0] and t < best[1])):
            best = (sum(vec), t)
    return best


@pytest.mark.parametrize("target,scale", [(1.2, 1.0), (1.6, 1.5), (2.5, 3.0), (1.0, 0.5)])
def test_the_allocation_is_the_cheapest_fitting_vector_found_by_brute_force(target, scale):
    model = fitted()
    stages = batch({"j0.s0": 2, "j0.s1": 3, "j0.s2": 1}, 100_000)
    bounds = {"j0.s0": (1, 12), "j0.s1": (1, 12), "j0.s2": (1, 12)}
    plan = model.allocate(stages, rows_scale=scale, target_s=target, bounds=bounds)
    expect = brute_force(model, stages, scale, target, bounds)
    assert expect is not None and plan.feasible
    assert (plan.total, plan.processing_s) == (expect[0], pytest.approx(expect[1]))
    assert model.processing_s(stages, plan.parallelism, rows_scale=scale) == pytest.approx(plan.processing_s)


def test_a_stage_without_bounds_keeps_its_tasks_and_an_unreachable_target_gives_the_fastest_vector():
    model = fitted()
    stages = batch({"j0.s0": 2, "j0.s1": 3, "j0.s2": 5}, 100_000)
    plan = model.allocate(stages, rows_scale=1.0, target_s=1.0, bounds={"j0.s0": (1, 12)})
    assert plan.parallelism["j0.s1"] == 3 and plan.parallelism["j0.s2"] == 5
    slow = model.allocate(stages, rows_scale=1.0, target_s=0.01, bounds={"j0.s0": (1, 12)})
    assert not slow.feasible
    fastest = min(range(1, 13), key=lambda p: model.processing_s(stages, {"j0.s0": p}))
    assert slow.parallelism["j0.s0"] == fastest
    with pytest.raises(ConfigError, match=r"j0.s0.*\(3, 2\)"):
        model.allocate(stages, rows_scale=1.0, target_s=1.0, bounds={"j0.s0": (3, 2)})


@settings(max_examples=200, deadline=None)
@given(per_task=st.floats(0, 1), per_record=st.floats(0, 1e-3), records=st.integers(0, 10**6),
       cores=st.integers(1, 64), spread=st.floats(0.5, 4))
def test_a_stages_wall_never_rises_with_its_parallelism_up_to_the_cores(per_task, per_record, records, cores, spread):
    c = StageCost("j0.s0", per_task, per_record, spread)
    walls = [c.wall_s(p, records, cores) for p in range(1, cores + 1)]
    assert all(b <= a + 1e-12 for a, b in zip(walls, walls[1:]))


def test_each_wave_beyond_the_cores_pays_the_task_cost_again():
    c = StageCost("j0.s0", per_task_s=0.3, per_record_s=1e-6)
    assert c.wall_s(5, 100_000, 4) == pytest.approx(2 * (0.3 + 0.1 / 5))
    assert c.wall_s(5, 100_000, 4) > c.wall_s(4, 100_000, 4)


# -- the tuner around it ---------------------------------------------------------------------------
def run(tuner, parallelism, rows, *, behind=False, budget=2.0, overhead=0.25):
    stages = batch(parallelism, rows)
    return tuner.observe(stages, rows=rows, budget_s=budget, behind=behind,
                         processing_s=overhead + sum(s.wall_s for s in stages))


def tuner(**kw):
    kw = {"knobs": {k: "shuffle" for k in COSTS}, "cooldown": 0, "high": 16} | kw
    t = ParallelismTuner(**kw)
    t.bind_changelog(ChangeLog())
    return t


def warm(t, rows=100_000):
    rng = np.random.default_rng(3)
    for _ in range(4):  # explore, so the fit can tell tasks from records
        p = {k: int(rng.integers(1, 9)) for k in COSTS}
        run(t, p, int(rows * rng.uniform(0.5, 1.5)))
    for _ in range(4):  # then a steady rate, so that no growth is expected
        run(t, {k: 4 for k in COSTS}, rows)


def test_the_tuner_moves_to_the_cost_models_cheapest_vector_and_then_holds_it():
    t = tuner()
    warm(t)
    now = {"j0.s0": 8, "j0.s1": 8, "j0.s2": 8}
    fields = run(t, now, 100_000)
    target = t.headroom * 2.0
    plan = t.costs.allocate(batch(now, 100_000), rows_scale=t._growth(), target_s=target,
                            bounds={k: (1, 16) for k in COSTS})
    assert fields["tuner_model"].startswith("cost model of 3 stages")
    assert fields["tuner_proposal"] == plan.parallelism and plan.total < 0.85 * 24
    assert all(r.startswith("apply") for r in fields["tuner_reason"].values())
    again = run(t, plan.parallelism, 100_000)
    assert again["tuner_proposal"] == plan.parallelism
    assert all(r.startswith("hold: cost model") for r in again["tuner_reason"].values())


def test_the_tuner_scales_down_only_for_a_saving_of_down_gain_and_never_while_behind():
    t = tuner(down_gain=0.15)
    warm(t)
    plan = t.costs.allocate(batch({k: 4 for k in COSTS}, 100_000), rows_scale=1.0, target_s=t.headroom * 2.0,
                            bounds={k: (1, 16) for k in COSTS})
    near = dict(plan.parallelism)
    near["j0.s2"] += 1  # one task more than needed: less than 15% of the total
    assert 1 < 0.15 * sum(near.values())
    fields = run(t, near, 100_000)
    assert fields["tuner_proposal"] == near
    far = {k: v + 3 for k, v in plan.parallelism.items()}
    assert run(t, far, 100_000, behind=True)["tuner_proposal"] == far
    assert run(t, far, 100_000)["tuner_proposal"] == plan.parallelism


def test_a_state_knob_is_restarted_only_where_the_free_knobs_cannot_fit_the_budget():
    knobs = {"j0.s0": "input", "j0.s1": "shuffle", "j0.s2": "state"}
    t = tuner(knobs=knobs, allow_restarts=True)
    warm(t)
    before = t.restarts  # the exploration restarted too
    fields = run(t, {"j0.s0": 1, "j0.s1": 1, "j0.s2": 2}, 100_000)
    assert fields["tuner_proposal"]["j0.s2"] == 2 and t.restarts == before  # the free stages suffice
    assert fields["tuner_reason"]["j0.s0"].startswith("apply: 1 ->")
    t2 = tuner(knobs=knobs, allow_restarts=True)
    warm(t2)
    before = t2.restarts
    run(t2, {"j0.s0": 1, "j0.s1": 1, "j0.s2": 1}, 300_000)  # s2 alone at one task cannot fit
    assert t2.applied["j0.s2"] > 1 and t2.restarts == before + 1
    t3 = tuner(knobs=knobs, allow_restarts=False)
    warm(t3)
    fields = run(t3, {"j0.s0": 1, "j0.s1": 1, "j0.s2": 1}, 300_000)
    assert fields["tuner_proposal"]["j0.s2"] == 1 and t3.restarts == 0


def test_bad_headroom_or_down_gain_names_the_value():
    with pytest.raises(ConfigError, match="1.5"):
        ParallelismTuner(headroom=1.5)
    with pytest.raises(ConfigError, match="-0.1"):
        ParallelismTuner(down_gain=-0.1)
    with pytest.raises(ConfigError, match="cores must be >= 1, got 0"):
        CostModel(cores=0)


def test_a_batch_that_holds_a_backlog_is_planned_at_the_arrival_rate():
    t = tuner()
    warm(t)
    now = {k: 4 for k in COSTS}
    plan = t.costs.allocate(batch(now, 100_000), rows_scale=1.0, target_s=t.headroom * 2.0,
                            bounds={k: (1, 16) for k in COSTS})
    # after a restart the batch held 3x the rows, but the rows arrive at the old rate
    stages = batch(now, 300_000)
    fields = t.observe(stages, rows=300_000, budget_s=2.0, behind=True, expected_rows=100_000,
                       processing_s=0.25 + sum(s.wall_s for s in stages))
    assert t._growth() == pytest.approx(1 / 3)
    # behind: no stage goes below what it has, and none above the plan for the arrival rate
    assert fields["tuner_proposal"] == {k: max(now[k], plan.parallelism[k]) for k in COSTS}


def test_the_learned_tuner_meets_a_ramp_ahead_and_ds2_at_its_recent_peak():
    for policy, forecast, want in (("learned", True, 200_000 + 20_000 * 3), ("learned", False, 200_000),
                                   ("ds2", True, 200_000)):
        t = tuner(policy=policy, forecast=forecast, cooldown=2)
        for rows in (140_000, 160_000, 180_000, 200_000):  # +20,000 rows a batch
            run(t, {k: 4 for k in COSTS}, rows)
        assert t._growth() * 200_000 == pytest.approx(want), (policy, forecast)


def test_the_cost_model_takes_the_task_slots_from_the_engine_at_every_batch():
    from lmstream_kit.protocol import BatchContext

    class Engine:
        slots = 4

        def cores(self):
            return self.slots

        def stages(self, timeout=1.0):
            return []

    engine = Engine()
    t = tuner()
    t.before_batch(BatchContext(0, 0, 10, (), {}, engine=engine))
    assert t.costs.cores == 4
    engine.slots = 8  # executors added on a cluster
    t.before_batch(BatchContext(1, 0, 10, (), {}, engine=engine))
    assert t.costs.cores == 8
    fixed = tuner(cores=16)
    fixed.before_batch(BatchContext(0, 0, 10, (), {}, engine=engine))
    assert fixed.costs.cores == 16
