"""The parallelism tuner on seeded inputs: DS2's rule, the learned (monotone) predictor, cooldown,
no scale-down while behind, recommend mode and pins; exact decisions, no Spark."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.protocol import ChangeLog
from lmstream_kit.tune.operators import OperatorSample
from lmstream_kit.tune.predictor import BottleneckModel, Transition, embed, transitions
from lmstream_kit.tune.tuner import SOURCE_STAGE, ParallelismTuner

OVERHEAD = 0.2  # seconds of work each task adds (the ground truth of these tests)
SHARE = 0.7


def stage(key, p, work, *, position=0, budget=1.0, rows=10_000):
    """A stage at parallelism ``p`` whose work is ``work`` task-seconds plus a per-task overhead."""
    useful = OVERHEAD * p + work
    load = useful / p / budget
    return OperatorSample(key, 0, position, position, "COMPLETE", p, rows, rows // 10, useful, useful, useful,
                          useful / p, rows / useful, load, load > SHARE)


def batch(p_source, work, p_after=2, work_after=0.1):
    return [stage(SOURCE_STAGE, p_source, work), stage("j0.s1", p_after, work_after, position=1)]


def ground_truth_transitions():
    """Transitions of other runs of this DAG: every (p, p') on a grid of work levels."""
    out = []
    for work, p, p_next in itertools.product(np.arange(0.2, 6.0, 0.1), range(1, 11), range(1, 11)):
        now, later = batch(p, work), batch(p_next, work)
        out += transitions([(now, 10_000, 1.0), (later, 10_000, 1.0)])
    return out


def tuner(**kw):
    t = ParallelismTuner(**kw)
    t.bind_changelog(ChangeLog())
    return t


def test_ds2_takes_two_steps_where_a_per_task_overhead_hides_from_its_rule():
    t = tuner(policy="ds2", partitions=1, cooldown=0)
    # 2.8 s of work at p=1: useful 3.0 task-s, ceil(3.0 / 0.7) = 5, but at 5 the load is 0.2 + 2.8/5 = 0.76
    fields = t.observe(batch(1, 2.8), rows=10_000, budget_s=1.0, behind=True)
    assert fields["tuner_proposal"] == {SOURCE_STAGE: 5, "j0.s1": 1} and t.partitions == 5
    assert fields["tuner_reason"][SOURCE_STAGE] == "apply: 1 -> 5"
    assert fields["tuner_reason"]["j0.s1"].startswith("fixed: a shuffle after the source")
    t.observe(batch(5, 2.8), rows=10_000, budget_s=1.0, behind=True)
    assert t.partitions == 6  # ceil(3.8 / 0.7); at 6 the load is 0.667
    t.observe(batch(6, 2.8), rows=10_000, budget_s=1.0, behind=False)
    assert t.partitions == 6
    assert [c.value for c in t.changelog.take()] == [5, 6]


def test_the_pretrained_model_goes_to_the_smallest_parallelism_without_a_bottleneck_in_one_step():
    t = tuner(policy="learned", partitions=1, cooldown=0, pretrain=ground_truth_transitions())
    fields = t.observe(batch(1, 2.8), rows=10_000, budget_s=1.0, behind=True)
    assert fields["tuner_model"] == "learned: 4000 pre-training transitions, 0 of this run"
    assert t.partitions == 6  # 0.2 + 2.8/6 = 0.667 <= 0.7, and at 5 it is 0.76
    # lighter work: 0.2 + 0.9/2 = 0.65 at 2, 0.5 at 3, and 0.2 + 0.9/1 > 0.7 at 1: without a margin it scales
    # down to 2; with a wide margin (hysteresis: below 0.5 - 0.4) only to 3, which the model is surer of
    exact = tuner(policy="learned", partitions=6, cooldown=0, margin=0.0, pretrain=ground_truth_transitions())
    exact.observe(batch(6, 0.9), rows=10_000, budget_s=1.0, behind=False)
    careful = tuner(policy="learned", partitions=6, cooldown=0, margin=0.4, pretrain=ground_truth_transitions())
    careful.observe(batch(6, 0.9), rows=10_000, budget_s=1.0, behind=False)
    assert (exact.partitions, careful.partitions) == (2, 3)


def test_cooldown_and_no_scale_down_while_behind():
    t = tuner(policy="ds2", partitions=1, cooldown=2)
    t.observe(batch(1, 2.8), rows=10_000, budget_s=1.0, behind=True)  # -> 5
    f = t.observe(batch(5, 2.8), rows=10_000, budget_s=1.0, behind=True)
    assert t.partitions == 5 and f["tuner_reason"][SOURCE_STAGE] == "hold: cooldown (1 of 2 batches since the last change)"
    f = t.observe(batch(5, 0.5), rows=10_000, budget_s=1.0, behind=True)  # less work, but behind: hold
    assert t.partitions == 5
    assert f["tuner_reason"][SOURCE_STAGE] == "hold: the stream is behind its bound, no scale-down while catching up"
    t.observe(batch(5, 0.5), rows=10_000, budget_s=1.0, behind=False)
    assert t.partitions == 3  # ceil(1.5 / 0.7)


def test_recommend_mode_proposes_and_changes_nothing_and_pins_hold():
    t = tuner(policy="ds2", mode="recommend", partitions=2, cooldown=0)
    f = t.observe(batch(2, 2.0), rows=10_000, budget_s=1.0, behind=True)
    assert f["tuner_proposal"][SOURCE_STAGE] == 4 and t.partitions == 2 and t.changelog.take() == []
    t.set_param("mode", "apply")
    t.pin(SOURCE_STAGE, 5)
    assert t.partitions == 5
    f = t.observe(batch(5, 2.0), rows=10_000, budget_s=1.0, behind=True)
    assert f["tuner_reason"][SOURCE_STAGE] == "pinned" and t.partitions == 5
    t.release(SOURCE_STAGE)
    t.observe(batch(5, 1.0), rows=10_000, budget_s=1.0, behind=False)
    assert t.partitions == 3  # ceil(2.0 / 0.7)
    assert [(c.param, c.value) for c in t.changelog.take()] == [
        ("tuner.mode", "apply"), ("tuner.pin.j0.s0", 5), ("tuner.partitions", 5), ("tuner.pin.j0.s0", None),
        ("tuner.partitions", 3)]


def test_frozen_mode_and_bad_parameters():
    t = tuner(mode="frozen")
    assert t.observe(batch(2, 2.0), rows=10_000, budget_s=1.0, behind=True) == {"tuner_policy": "learned",
                                                                              "tuner_model": "frozen"}
    with pytest.raises(ConfigError, match=r"^tuner.high must not be below tuner.low \(1\), got 0$|must be >= 1"):
        t.set_param("high", 0)
    t.set_param("low", 3)
    with pytest.raises(ConfigError, match=r"^tuner.high must not be below tuner.low \(3\), got 2$"):
        t.set_param("high", 2)
    with pytest.raises(ConfigError, match=r"^policy must be 'learned' or 'ds2', got 'dhalion'$"):
        ParallelismTuner(policy="dhalion")
    with pytest.raises(ConfigError, match=r"^tuner.mode must be one of 'apply', 'recommend', 'frozen', got 'auto'$"):
        t.set_param("mode", "auto")


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(20, 120))
def test_the_predictor_is_monotone_in_parallelism_whatever_it_learned(seed, n):
    """More parallelism never makes an operator more of a bottleneck: for random training data,
    random operators and every p' from 1 to 64, the probability does not increase."""
    rng = np.random.default_rng(seed)
    rows = [Transition("j0.s0", int(rng.integers(1, 17)), int(rng.integers(1, 17)), float(rng.uniform(0.01, 8)),
                       float(rng.uniform(0.5, 3)), tuple(rng.normal(size=6)), bool(rng.integers(2)))
            for _ in range(n)]
    model = BottleneckModel(seed=seed).fit(own=rows)
    if not model.ready:
        return
    for _ in range(5):
        args = (int(rng.integers(1, 17)), float(rng.uniform(0.01, 8)), float(rng.uniform(0.5, 3)),
                tuple(rng.normal(size=6)))
        probs = [model.probability(p, *args) for p in range(1, 65)]
        assert all(b <= a + 1e-12 for a, b in zip(probs, probs[1:]))


def test_the_dag_embedding_propagates_over_the_stage_chain():
    emb = embed(batch(2, 2.0))
    own, mixed = emb[SOURCE_STAGE][:3], emb[SOURCE_STAGE][3:]
    assert own[0] == 1.0 and mixed[0] < 1.0  # the source flag, smoothed with its neighbour's
    assert emb["j0.s1"][3] > 0  # the second stage sees the source through the edge


def test_the_tuner_pretrains_on_the_runs_of_similar_dags_in_the_history(tmp_path):
    """StreamTune's pre-training: of two earlier runs in the store, only the one whose stage DAG is
    within the graph edit distance of this query's feeds the model."""
    from lmstream_kit.record import BatchRecord, Dataset
    from lmstream_kit.tune.history import HistoryWriter, read_history
    from lmstream_kit.tune.pretrain import history_transitions, similar_fingerprints

    def record(batch_id, ops):
        return BatchRecord.from_batch(batch_id=batch_id, policy="fixed", admitted_at=10.0, completed_at=11.0,
                                      bound_s=1.0, workload="Q", datasets=[Dataset(9.0, 10_000, 100_000)],
                                      operators=[o.to_dict() for o in ops])

    def five_stages(p, work):  # another query: a chain of five stages
        return [stage(f"j0.s{i}", p, work, position=i) for i in range(5)]

    with HistoryWriter(tmp_path, "same") as w:
        for i, (p, work) in enumerate([(1, 2.8), (5, 2.8), (6, 2.8), (6, 0.9), (2, 0.9), (1, 0.9)]):
            w.add(record(i, batch(p, work)))
    with HistoryWriter(tmp_path, "other") as w:
        for i, p in enumerate([1, 2, 4]):
            w.add(record(i, five_stages(p, 1.0)))
    table = read_history(tmp_path)
    near = similar_fingerprints(table, batch(2, 1.0))
    assert list(near.values()) == [0.0] and len(set(table.column("fingerprint").to_pylist())) == 2
    assert len(history_transitions(table, near)) == 10  # 5 consecutive pairs, 2 stages each
    t = tuner(policy="learned", partitions=6, cooldown=0, history=tmp_path)
    f = t.observe(batch(6, 0.9), rows=10_000, budget_s=1.0, behind=False)
    assert t.pretrain_dags == near and len(t.pretrain) == 10
    assert f["tuner_model"] == "learned: 10 pre-training transitions of 1 similar DAGs, 0 of this run"


def test_split_budget_gives_each_stage_its_share_of_the_batch():
    """Stages of a batch run one after the other: with split_budget a stage gets the share of the budget
    that needs the least total parallelism (in proportion to the root of its work), and DS2's rule uses it."""
    t = tuner(policy="ds2", partitions=1, cooldown=0, knobs={SOURCE_STAGE: "input", "j0.s1": "shuffle"},
              split_budget=True)
    heavy, light = stage(SOURCE_STAGE, 1, 4.0 - OVERHEAD), stage("j0.s1", 1, 1.0 - OVERHEAD, position=1)
    f = t.observe([heavy, light], rows=10_000, budget_s=3.0, behind=False)
    # budgets 2 s and 1 s: ceil(4 / (2 * 0.7)) = 3 and ceil(1 / (1 * 0.7)) = 2
    assert f["tuner_proposal"] == {SOURCE_STAGE: 3, "j0.s1": 2} and t.applied == {SOURCE_STAGE: 3, "j0.s1": 2}
    whole = tuner(policy="ds2", partitions=1, cooldown=0, knobs={SOURCE_STAGE: "input", "j0.s1": "shuffle"})
    assert whole.observe([heavy, light], rows=10_000, budget_s=3.0, behind=False)["tuner_proposal"] == {
        SOURCE_STAGE: 2, "j0.s1": 1}


def test_compare_runs_every_tuner_from_the_same_start_in_the_simulator():
    from lmstream_kit.tune.compare import base_rate, compare, schedules
    from lmstream_kit.tune.stagesim import DAGS

    dag = DAGS["LR2S"]
    rate = base_rate(dag, cores=16, bound_s=4.0, target=4)
    rows = compare(dag, schedules(rate, 60.0)["step"], ("ds2", "static-peak"), pretrain=(), cores=16, bound_s=4.0,
                   duration_s=60.0, seed=1)
    assert [r["tuner"] for r in rows] == ["ds2", "static-peak"] and all(r["simulated"] for r in rows)
    ds2, peak = rows
    assert peak["reconfigurations"] == 0 and ds2["reconfigurations"] > 0 and peak["batches"] > 20
    assert max(peak["final_parallelism"].values()) >= 4  # provisioned for the x3 peak


class Host:
    """A stream the tuner is plugged into (a StreamHost): what it refuses, and the requests it got."""

    def __init__(self, **refuses):
        self.refuses = refuses
        self.requests = []

    def parallelism_unsupported(self, kind):
        return self.refuses.get(kind)

    def request_state_partitions(self, partitions, why=""):
        self.requests.append((partitions, why))


def test_a_state_knob_asks_the_stream_to_repartition_the_state_once_with_the_largest_count():
    t = tuner(policy="ds2", partitions=1, cooldown=0, knobs={"j0.s1": "state"}, allow_restarts=True)
    host = Host()
    t.plugged(host)
    # j0.s1 at 2 with 2.8 s of work: ds2 wants ceil((0.4 + 2.8) / 0.7) = 5
    f = t.observe(batch(1, 0.1, p_after=2, work_after=2.8), rows=10_000, budget_s=1.0, behind=True)
    assert f["tuner_reason"]["j0.s1"] == "apply: 2 -> 5"
    assert host.requests == [(5, "tuner: j0.s1 2 -> 5")] and t.restarts == 1


def test_a_state_knob_the_stream_cannot_set_is_fixed_with_the_streams_reason():
    t = tuner(policy="ds2", partitions=1, cooldown=0, knobs={"j0.s1": "state"}, allow_restarts=True)
    host = Host(state="Spark 4.1.4 has no offline state repartition (it needs Spark 4.2+)")
    t.plugged(host)
    f = t.observe(batch(1, 0.1, p_after=2, work_after=2.8), rows=10_000, budget_s=1.0, behind=True)
    assert f["tuner_reason"]["j0.s1"] == "fixed: Spark 4.1.4 has no offline state repartition (it needs Spark 4.2+)"
    assert host.requests == [] and t.restarts == 0


def test_a_stream_that_sets_no_parallelism_takes_only_a_recommending_tuner():
    host = Host(input="setting parallelism needs the kit's own source")
    with pytest.raises(ConfigError, match=r"^a ParallelismTuner on this stream can only recommend: .*own source\)$"):
        tuner(policy="ds2", mode="apply").plugged(host)
    t = tuner(policy="ds2", mode="recommend")
    t.plugged(host)
    with pytest.raises(ConfigError, match=r"^tuner.mode cannot be 'apply' here: setting parallelism needs"):
        t.set_param("mode", "apply")
