"""Micro-batch by micro-batch (lmstream_kit.flumina.batches): any cut into batches equals the sequential
run, a replayed batch gives the same outputs, and snapshots carry the states across a restart."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flumina_strategies import assert_same_up_to_dependence, plans
from lmstream_kit.exceptions import ConfigError
from lmstream_kit.flumina import EXAMPLES, Event, greedy_plan, ordered, run_sequential, sequential_plan
from lmstream_kit.flumina.batches import PLAN_FILE, BatchRunner
from lmstream_kit.flumina.speculate import in_process_workers
from lmstream_kit.flumina.spec import value_barrier_spec


def in_batches(events, cuts):
    """``events`` in sequential order, cut before each position in ``cuts``."""
    events = ordered(events)
    bounds = [0, *sorted({c % (len(events) + 1) for c in cuts}), len(events)]
    return [events[a:b] for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("example", EXAMPLES.names())
@settings(max_examples=40, deadline=None)
@given(data=st.data(), cuts=st.lists(st.integers(0, 10_000), max_size=6), seed=st.integers(0, 50))
def test_any_cut_into_micro_batches_equals_the_sequential_run(example, data, cuts, seed):
    ex = EXAMPLES.get(example)
    spec = ex.spec(3)
    events = ex.events(120, 3, seed)
    runner = BatchRunner(spec, data.draw(plans(spec)))
    got = []
    for batch_id, batch in enumerate(in_batches(events, cuts)):
        got += runner.run(batch_id, batch)
    state, outputs = run_sequential(spec, events)
    assert runner.state() == state
    _, pairs = _sequential_pairs(spec, events)
    assert_same_up_to_dependence(spec.dependence, got, pairs)
    assert [o for _, o in pairs] == outputs


def _sequential_pairs(spec, events):
    state, pairs = spec.init(), []
    for e in ordered(events):
        state, out = spec.update(state, e)
        pairs += [(e, o) for o in out]
    return state, pairs


def test_a_replayed_batch_gives_the_same_outputs_and_states():
    spec = value_barrier_spec(2)
    runner = BatchRunner(spec, greedy_plan(spec, 2))
    runner.run(0, [Event("a0", 1, 5), Event("a1", 2, 7)])
    batch1 = [Event("a0", 3, 1), Event("b", 4), Event("a1", 5, 2)]
    first = runner.run(1, batch1)
    after = runner.worker_states
    assert runner.run(1, batch1) == first and runner.worker_states == after
    assert [o for _, o in first] == [("b", 4, 13)] and runner.state() == 2
    with pytest.raises(ConfigError, match=r"^batch 0 is older than the last batch run \(1\): only the last"):
        runner.run(0, [])


def test_snapshots_carry_the_states_across_a_restart(tmp_path):
    spec = EXAMPLES.get("fraud_detection").spec(2)
    events = ordered(EXAMPLES.get("fraud_detection").events(300, 2, 7))
    batches = [events[:100], events[100:200], events[200:]]
    plan = greedy_plan(spec, 2)
    straight = BatchRunner(spec, plan, snapshots=tmp_path / "state")
    outs = [straight.run(i, b) for i, b in enumerate(batches)]
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["1.pkl", "2.pkl"]  # the last two

    restarted = BatchRunner(spec, plan, snapshots=tmp_path / "state").resume(committed=1)
    assert restarted.run(2, batches[2]) == outs[2] and restarted.state() == straight.state()
    assert straight.state() == run_sequential(spec, events)[0]
    with pytest.raises(ConfigError, match=r"^no Flumina state saved after batch 0 in "):
        BatchRunner(spec, plan, snapshots=tmp_path / "state").resume(committed=0)
    # a restart on another plan joins the saved states under the old plan and forks them under the new
    for other in (sequential_plan(spec), greedy_plan(spec, 3)):
        again = BatchRunner(spec, other, snapshots=tmp_path / "state").resume(committed=1)
        assert sorted(again.worker_states) == [w.name for w in other.workers]
        assert again.run(2, batches[2]) == outs[2] and again.state() == straight.state()
    # a snapshot whose plan does not fit the spec (3 shards' tags, a 2-shard spec) names the batch
    wider = EXAMPLES.get("fraud_detection").spec(3)
    BatchRunner(wider, greedy_plan(wider, 3), snapshots=tmp_path / "wide").run(0, [])
    (tmp_path / "wide" / "0.pkl").rename(tmp_path / "state" / "5.pkl")
    with pytest.raises(ConfigError, match=r"^the state saved after batch 5 belongs to a plan that does not fit "
                                          r"spec fraud_detection: "):
        BatchRunner(spec, plan, snapshots=tmp_path / "state").restore()


@pytest.mark.parametrize("example", EXAMPLES.names())
@settings(max_examples=30, deadline=None)
@given(data=st.data(), cuts=st.lists(st.integers(0, 10_000), min_size=1, max_size=5), seed=st.integers(0, 50))
def test_replanning_between_batches_equals_the_sequential_run(example, data, cuts, seed):
    """Scale up and down between micro-batches (fork and join of the workers' states): same result."""
    ex = EXAMPLES.get(example)
    spec = ex.spec(3)
    events = ex.events(120, 3, seed)
    runner = BatchRunner(spec, data.draw(plans(spec)))
    got = []
    for batch_id, batch in enumerate(in_batches(events, cuts)):
        runner.replan(data.draw(plans(spec)))
        got += runner.run(batch_id, batch)
    assert runner.state() == run_sequential(spec, events)[0]
    assert [o for _, o in got if o is not None] and sorted(map(repr, got)) == sorted(
        map(repr, _sequential_pairs(spec, events)[1]))


def test_replan_writes_the_plan_and_a_replay_runs_on_the_new_plan(tmp_path):
    spec = value_barrier_spec(2)
    runner = BatchRunner(spec, greedy_plan(spec, 2), snapshots=tmp_path).restore()
    assert json.loads((tmp_path / PLAN_FILE).read_text())["children"][0]["tags"] == ["a0"]
    batch = [Event("a0", 1, 5), Event("b", 2), Event("a1", 3, 7)]
    first = runner.run(0, batch)
    runner.replan(sequential_plan(spec))
    assert json.loads((tmp_path / PLAN_FILE).read_text())["children"] == []
    assert runner.run(0, batch) == first and runner.worker_states == {"w0": 7}  # replayed on one worker
    with pytest.raises(ConfigError, match=r"^plan for value_barrier does not cover the tags of spec value_barrier"):
        runner.replan(greedy_plan(value_barrier_spec(3), 2))


def test_an_engine_gets_whole_passes_each_worker_all_of_its_events():
    spec = value_barrier_spec(2)
    events = [Event("a0", 1, 1), Event("a1", 2, 1), Event("a0", 3, 1), Event("b", 4), Event("a1", 5, 1)]
    passes = []
    engine = in_process_workers(events)

    def recording(spec_, plan_, tasks):
        passes.append([(t.worker, t.start) for t in tasks])
        return engine(spec_, plan_, tasks)

    runner = BatchRunner(spec, greedy_plan(spec, 2))
    assert [o for _, o in runner.run(0, map_workers=recording)] == [("b", 4, 3)]
    assert passes == [[("w1", 0), ("w2", 0)]] and (runner.last.passes, runner.last.epochs) == (1, 2)


def test_restore_continues_from_the_newest_snapshot_and_replays_it(tmp_path):
    spec = EXAMPLES.get("fraud_detection").spec(2)
    events = ordered(EXAMPLES.get("fraud_detection").events(400, 2, 8))
    batches = [events[:100], events[100:200], events[200:300], events[300:]]
    plan = greedy_plan(spec, 2)
    straight = BatchRunner(spec, plan, snapshots=tmp_path / "state")
    outs = [straight.run(i, b) for i, b in enumerate(batches[:3])]

    # the query stopped after batch 2 ran but before Spark committed it: Spark replays batch 2
    replayed = BatchRunner(spec, plan, snapshots=tmp_path / "state").restore()
    assert replayed.last_batch == 2 and replayed.run(2, batches[2]) == outs[2]
    # or it had committed batch 2: the next batch continues after it
    resumed = BatchRunner(spec, plan, snapshots=tmp_path / "state").restore()
    assert resumed.run(3, batches[3]) == straight.run(3, batches[3]) and resumed.state() == straight.state()
    assert straight.state() == run_sequential(spec, events)[0]
    assert BatchRunner(spec, plan, snapshots=tmp_path / "empty").restore().last_batch is None
    with pytest.raises(ConfigError, match=r"^batch 0 is older than the last batch run \(3\)"):
        BatchRunner(spec, plan, snapshots=tmp_path / "state").restore().run(0, [])
