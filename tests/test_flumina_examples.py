"""The Flumina examples: exact results on small inputs, seeded generators, greedy plans, and the
property that every plan and every interleaving of the input streams gives the sequential result."""

from __future__ import annotations

import math

import pytest
from flumina_strategies import assert_same_up_to_dependence, event_lists, interleavings, plans
from hypothesis import given, settings
from hypothesis import strategies as st

from lmstream_kit.exceptions import UnknownNameError
from lmstream_kit.flumina import (
    EXAMPLES,
    Event,
    greedy_plan,
    merge_streams,
    ordered,
    run_leaf,
    run_plan,
    run_sequential,
    user_plan,
)
from lmstream_kit.flumina.examples import (
    fraud_detection_events,
    fraud_detection_spec,
    max_temperature_spec,
    outlier_detection_spec,
    page_view_spec,
    value_barrier_events,
)

E = Event
NAMES = ["fraud_detection", "max_temperature", "outlier_detection", "page_view", "value_barrier"]
SYNC = {"fraud_detection": "refresh", "max_temperature": "end_of_day", "outlier_detection": "retrain",
        "page_view": "update", "value_barrier": "b"}


def test_every_example_is_registered_and_an_unknown_name_lists_them():
    assert EXAMPLES.names() == NAMES
    with pytest.raises(UnknownNameError, match="unknown flumina example 'fraud'; known: fraud_detection, "):
        EXAMPLES.get("fraud")


def test_max_temperature_reports_the_days_maximum_and_none_for_a_day_without_readings():
    spec = max_temperature_spec(2)
    events = [E("t0", 1, 20.5), E("t1", 2, 23.0), E("t0", 3, 21.0), E("end_of_day", 4), E("end_of_day", 5),
              E("t1", 6, -3.0), E("end_of_day", 7)]
    assert run_sequential(spec, events) == (-math.inf, [("end_of_day", 4, 23.0), ("end_of_day", 5, None),
                                                        ("end_of_day", 7, -3.0)])


def test_fraud_detection_flags_amounts_above_the_model_of_the_last_refresh():
    spec = fraud_detection_spec(2)
    events = [E("tx0", 1, 100), E("tx1", 2, 300), E("refresh", 3), E("tx0", 4, 1000), E("tx1", 5, 250),
              E("refresh", 6)]
    state, outputs = run_sequential(spec, events)
    # mean 200, std 100: threshold 500; then 1000 is flagged; mean 412.5, std sqrt(120468.75)
    assert outputs == [("refresh", 3, 0, 500.0), ("refresh", 6, 1, 412.5 + 3 * math.sqrt(120468.75))]
    assert state["shards"] == {0: (2, 1100, 1010000, 0), 1: (2, 550, 152500, 0)}


def test_page_views_join_the_table_value_current_at_their_time():
    spec = page_view_spec(2)
    events = [E("view0", 1, 2), E("update", 2, (2, 7)), E("view1", 3, 2), E("view0", 4, 1), E("update", 5, (2, 8)),
              E("view0", 6, 2)]
    state, outputs = run_sequential(spec, events)
    assert outputs == [("view", 1, 2, None), ("view", 3, 2, 7), ("view", 4, 1, None), ("view", 6, 2, 8)]
    assert state == {"table": {2: 8}, "counts": {0: {None: 2, 8: 1}, 1: {7: 1}}}


def test_outliers_are_points_with_too_few_reference_neighbours():
    spec = outlier_detection_spec(2, window=3)
    events = [E("x0", 1, 0.0), E("x1", 2, 1.0), E("x0", 3, 0.5), E("retrain", 4), E("x1", 5, 0.2), E("x0", 6, 9.0),
              E("retrain", 7)]
    state, outputs = run_sequential(spec, events)
    assert outputs == [("retrain", 4, 3), ("outlier", 6, 0, 9.0), ("retrain", 7, 2)]
    assert state == {"ref": (0.5, 0.2, 9.0), "new": {}}


def test_the_generators_are_seeded():
    assert value_barrier_events(5, seed=1) == value_barrier_events(5, seed=1) != value_barrier_events(5, seed=2)
    assert fraud_detection_events(6, shards=2, refresh_every=4, seed=3) == [
        E("refresh", 0), E("refresh", 1), E("tx1", 2, 3125), E("tx1", 3, 651), E("refresh", 4), E("tx0", 5, 6159)]


@pytest.mark.parametrize(("name", "outputs", "first"), [
    ("fraud_detection", 83, ("refresh", 9, 0, 20112.113573444163)),
    ("max_temperature", 83, ("end_of_day", 9, 26.7)),
    ("outlier_detection", 156, ("retrain", 27, 27)),
    ("page_view", 1786, ("view", 0, 3, None)),
    ("value_barrier", 93, ("b", 3, 198)),
])
def test_each_example_on_a_seeded_sequence_gives_the_same_result_on_greedy_and_deep_plans(name, outputs, first):
    example = EXAMPLES.get(name)
    spec, events = example.spec(3), example.events(2000, 3, 7)
    state, want = run_sequential(spec, events)
    assert len(want) == outputs and want[0] == first
    sync = SYNC[name]
    shards = sorted(spec.tags - {sync})
    deep = user_plan(spec, {"tags": [sync], "children": [
        {"children": [{"tags": [shards[0]]}, {"tags": [shards[1]]}]}, {"tags": [shards[2]]}]})
    want_tagged = run_leaf(spec, spec.init(), ordered(events))[1]
    for plan in (greedy_plan(spec, 2), greedy_plan(spec, 4), deep):
        got_state, got = run_plan(spec, plan, events)
        assert got_state == state
        assert_same_up_to_dependence(spec.dependence, got, want_tagged)


@pytest.mark.parametrize("name", NAMES)
def test_the_greedy_plan_puts_the_synchronising_tag_on_the_root(name):
    spec = EXAMPLES.get(name).spec(3)
    plan = greedy_plan(spec, 2)
    sync = SYNC[name]
    assert plan.root.tags == {sync} and [sorted(w.tags) for w in plan.workers] == [
        sorted(t for t in spec.tags if t.endswith(("0", "2"))), sorted(t for t in spec.tags if t.endswith("1"))]


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_every_plan_and_interleaving_gives_the_sequential_result(name, data):
    spec = EXAMPLES.get(name).spec(data.draw(st.integers(1, 3)))
    plan = data.draw(plans(spec))
    events = data.draw(event_lists(spec, name))
    streams, arrivals, reference = data.draw(interleavings(spec, events))
    merged = merge_streams(spec.dependence, streams, arrivals)
    state, outputs = run_plan(spec, plan, merged)
    want_state, want = run_leaf(spec, spec.init(), reference)
    assert state == want_state
    assert_same_up_to_dependence(spec.dependence, outputs, want)
    assert run_sequential(spec, merged)[0] == want_state  # the merged order is a sequential order too
