"""Whole micro-batches in passes (lmstream_kit.flumina.speculate): whatever the workers guess at the syncs,
the driver's check makes the result the sequential run's; how many passes each example takes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flumina_strategies import assert_same_up_to_dependence, event_lists, plans
from lmstream_kit.exceptions import ConfigError
from lmstream_kit.flumina import EXAMPLES, Event, greedy_plan, join_states, ordered, run_plan, run_sequential, sequential_plan
from lmstream_kit.flumina.spec import value_barrier_spec
from lmstream_kit.flumina.speculate import (WorkerTask, in_process_workers, resolve, run_batch, run_worker,
                                            same_state, worker_events)


@pytest.mark.parametrize("example", EXAMPLES.names())
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_plans_and_events_give_the_plan_semantics(example, data):
    spec = EXAMPLES.get(example).spec(3)
    plan = data.draw(plans(spec))
    events = data.draw(event_lists(spec, example, max_size=40))
    result = run_batch(spec, plan, events)
    state, pairs = run_plan(spec, plan, events)
    assert join_states(spec, plan, result.states) == state
    assert_same_up_to_dependence(spec.dependence, result.outputs, pairs)
    assert 1 <= result.passes <= result.epochs


@pytest.mark.parametrize("example, passes", [("value_barrier", 1), ("max_temperature", 1), ("page_view", 1),
                                             ("fraud_detection", 2), ("outlier_detection", 3)])
def test_passes_per_example_on_a_long_batch(example, passes):
    ex = EXAMPLES.get(example)
    spec, events = ex.spec(4), ex.events(4000, 4, 11)
    result = run_batch(spec, greedy_plan(spec, 4), events)
    assert result.passes == passes and result.epochs > 100
    assert join_states(spec, greedy_plan(spec, 4), result.states) == run_plan(spec, greedy_plan(spec, 4), events)[0]


class _WrongGuesses:
    """An engine whose workers get hints that are all wrong: the check must still find the truth."""

    def __init__(self, events):
        self.engine = in_process_workers(events)
        self.passes = 0

    def __call__(self, spec, plan, tasks):
        self.passes += 1
        bad = [WorkerTask(t.worker, t.start, t.vector, {k: {w: 10_000 for w in plan.leaves_under(plan.root.name)}
                                                          for k in range(t.start, t.start + 50)}, t.report_syncs)
               for t in tasks]
        return self.engine(spec, plan, bad)


def test_wrong_guesses_cost_passes_never_correctness():
    spec = value_barrier_spec(2)
    events = EXAMPLES.get("value_barrier").events(300, 2, 4)
    engine = _WrongGuesses(events)
    result = run_batch(spec, greedy_plan(spec, 2), map_workers=engine)
    reference = run_batch(spec, greedy_plan(spec, 2), events)
    assert result.outputs == reference.outputs and result.states == reference.states
    # value barrier's forks do not read the guesses, so even wrong ones hold: one pass
    assert engine.passes == reference.passes == 1


def test_a_sync_that_reads_every_worker_is_checked_and_run_again():
    spec = EXAMPLES.get("fraud_detection").spec(2)
    plan = greedy_plan(spec, 2)
    events = [Event("tx0", 1, 100), Event("tx1", 2, 300), Event("refresh", 3), Event("tx0", 4, 900),
              Event("tx1", 5, 50), Event("refresh", 6)]
    inputs = worker_events(plan, events)
    start = {"w1": {"threshold": float("inf"), "shards": {}}, "w2": {"threshold": float("inf"), "shards": {}}}
    reports = {w: run_worker(spec, plan, WorkerTask(w, 0, start, report_syncs=w == "w1"), inputs[w])
               for w in ("w1", "w2")}
    # w1 guessed the threshold from its own shard only: 100 + 3 * 0
    assert reports["w1"].starts[1]["threshold"] == 100.0
    res = resolve(spec, plan, 0, start, reports, reports["w1"].syncs)
    assert (res.valid, res.done) == (1, False) and res.vector["w1"]["threshold"] == 500.0
    assert [o for _, o in res.outputs] == [("refresh", 3, 0, 500.0)]
    result = run_batch(spec, plan, events)
    assert [o for _, o in result.outputs] == run_sequential(spec, events)[1] and result.passes == 2
    assert [o[:3] for _, o in result.outputs] == [("refresh", 3, 0), ("refresh", 6, 1)]  # tx0 900 > 500


def test_errors_name_the_worker_and_the_event():
    spec = value_barrier_spec(2)
    plan = greedy_plan(spec, 2)
    vector = {"w1": 0, "w2": 0}
    with pytest.raises(ConfigError, match=r"^'w9' is not a worker of plan value_barrier$"):
        run_worker(spec, plan, WorkerTask("w9", 0, vector), [])
    with pytest.raises(ConfigError, match=r"^event Event\(tag='a1', ts=1, payload=2\) belongs to worker 'w2', not to 'w1'$"):
        run_worker(spec, plan, WorkerTask("w1", 0, vector), [Event("a1", 1, 2)])
    with pytest.raises(ConfigError, match=r"^spec value_barrier: event Event\(tag='zz', ts=1, payload=None\) has a tag"):
        run_worker(spec, plan, WorkerTask("w1", 0, vector), [Event("zz", 1)])
    with pytest.raises(ConfigError, match=r"^run_batch needs the events or an engine's map_workers$"):
        run_batch(spec, plan)
    with pytest.raises(ConfigError, match=r"^no report from worker\(s\) w2 of plan value_barrier$"):
        run_batch(spec, plan, map_workers=lambda s, p, tasks: {"w1": run_worker(s, p, tasks[0], [])})


def test_the_sequential_plan_is_one_worker_one_pass():
    ex = EXAMPLES.get("fraud_detection")
    spec, events = ex.spec(2), ex.events(500, 2, 2)
    result = run_batch(spec, sequential_plan(spec), events)
    assert (result.passes, result.epochs, result.events) == (1, 1, 500)


def test_states_compare_by_value_or_by_pickle():
    import numpy as np

    assert same_state(np.array([1, 2]), np.array([1, 2])) and not same_state(np.array([1, 2]), np.array([1, 3]))
    assert same_state(ordered([]), [])
