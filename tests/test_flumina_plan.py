"""Flumina plans, the parallel semantics (segments, run_plan) and the merge of input streams."""

from __future__ import annotations

import doctest
import importlib
import json

import numpy as np
import pytest
from flumina_strategies import assert_same_up_to_dependence, event_lists, interleavings, plans
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.flumina import (
    Event,
    Heartbeat,
    InputStream,
    Merger,
    define_spec,
    fork_states,
    greedy_plan,
    join_states,
    merge_streams,
    run_leaf,
    run_plan,
    run_sequential,
    segments,
    sequential_plan,
    user_plan,
    value_barrier_spec,
)
from lmstream_kit.flumina.plan import random_plan
from lmstream_kit.plots import plan_tree_figure

VB2, VB3, VB4 = value_barrier_spec(2), value_barrier_spec(3), value_barrier_spec(4)
DEEP = {"tags": ["b"], "children": [{"children": [{"tags": ["a0"]}, {"tags": ["a1"]}]}, {"tags": ["a2"]}]}


@pytest.mark.parametrize("module", ["flumina.plan", "flumina.run", "flumina.streams", "flumina.examples",
                                    "plots.flumina"])
def test_the_docstring_examples_hold(module):
    mod = importlib.import_module(f"lmstream_kit.{module}")
    assert doctest.testmod(mod).failed == 0


# -- plans ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("spec", "parallelism", "text"), [
    (VB2, 1, "w0 [a0, a1, b] 2001 ev/s"),
    (VB2, 2, "w0 [b] 1 ev/s\n  w1 [a0] 1000 ev/s\n  w2 [a1] 1000 ev/s"),
    (VB2, 4, "w0 [b] 1 ev/s\n  w1 [a0] 1000 ev/s\n  w2 [a1] 1000 ev/s"),
    (VB4, 1, "w0 [a0, a1, a2, a3, b] 4001 ev/s"),
    (VB4, 2, "w0 [b] 1 ev/s\n  w1 [a0, a2] 2000 ev/s\n  w2 [a1, a3] 2000 ev/s"),
    (VB4, 4, "w0 [b] 1 ev/s\n  w1 [a0] 1000 ev/s\n  w2 [a1] 1000 ev/s\n  w3 [a2] 1000 ev/s\n  w4 [a3] 1000 ev/s"),
])
def test_the_greedy_plan_of_value_barrier_puts_b_on_the_root_and_a_streams_on_leaves(spec, parallelism, text):
    plan = greedy_plan(spec, parallelism)
    assert str(plan) == text
    assert len(plan.workers) == min(parallelism, len(spec.tags) - 1)


def test_the_greedy_plan_balances_uneven_rates_on_the_least_loaded_leaf():
    plan = greedy_plan(VB4, 2, rates={"a0": 3000, "a1": 2000, "a2": 1500})
    # leaves a0 (3000) and a1 (2000); a2 joins a1 (3500), then a3 the now lighter a0 (4000)
    assert str(plan) == "w0 [b] 1 ev/s\n  w1 [a0, a3] 4000 ev/s\n  w2 [a1, a2] 3500 ev/s"
    assert plan.load == {"w0": 1.0, "w1": 4000.0, "w2": 3500.0}


def test_the_greedy_plan_lifts_the_connecting_tag_of_a_chain_and_keeps_independent_tags_apart():
    chain = define_spec("chain", tags=["x", "y", "z"], depends={"y": ["x", "z"]}, init=int,
                        update=lambda s, e: (s, []), fork=lambda s, a, b: (s, s), join=max)
    assert str(greedy_plan(chain, 2)) == "w0 [y] 1 ev/s\n  w1 [x] 1 ev/s\n  w2 [z] 1 ev/s"
    free = define_spec("free", tags=["p", "q", "r"], depends={"p": ["p"]}, init=int,
                       update=lambda s, e: (s, []), fork=lambda s, a, b: (s, s), join=max)
    assert str(greedy_plan(free, 3)) == "w0 [] 0 ev/s\n  w1 [p] 1 ev/s\n  w2 [q] 1 ev/s\n  w3 [r] 1 ev/s"
    clique = define_spec("clique", tags=["u", "v"], depends={"u": ["v"]}, init=int,
                         update=lambda s, e: (s, []), fork=lambda s, a, b: (s, s), join=max)
    assert str(greedy_plan(clique, 4)) == "w0 [u, v] 2 ev/s"


@pytest.mark.parametrize(("parallelism", "rates", "message"), [
    (0, None, "parallelism must be an integer >= 1, got 0"),
    (1.5, None, "parallelism must be an integer >= 1, got 1.5"),
    (2, {"c": 1}, "rates name tag(s) ['c'] that spec value_barrier does not declare"),
])
def test_the_greedy_plan_rejects_bad_parameters(parallelism, rates, message):
    with pytest.raises(ConfigError) as err:
        greedy_plan(VB2, parallelism, rates=rates)
    assert str(err.value) == message


def test_a_sequential_plan_is_one_worker_that_owns_every_tag():
    plan = sequential_plan(VB2)
    assert [w.name for w in plan.workers] == ["w0"] and plan.depth == 1
    assert {plan.owner(t) for t in VB2.tags} == {"w0"}
    assert plan == greedy_plan(VB2, 1)


def test_a_user_plan_knows_its_workers_owners_depth_and_load_and_round_trips_through_a_dict():
    plan = user_plan(VB3, DEEP)
    assert str(plan) == ("w0 [b] 1 ev/s\n  w1 [] 0 ev/s\n    w2 [a0] 1000 ev/s\n    w3 [a1] 1000 ev/s\n"
                         "  w4 [a2] 1000 ev/s")
    assert [w.name for w in plan.workers] == ["w2", "w3", "w4"]
    assert [plan.owner(t) for t in ("a0", "a1", "a2", "b")] == ["w2", "w3", "w4", "w0"]
    assert plan.depth == 3 and plan.parent("w2") == "w1" and plan.leaves_under("w1") == ("w2", "w3")
    assert plan.load == {"w0": 1.0, "w1": 0.0, "w2": 1000.0, "w3": 1000.0, "w4": 1000.0}
    as_dict = plan.to_dict()
    assert as_dict == json.loads(json.dumps(as_dict))
    assert as_dict["children"][0] == {"id": "w1", "tags": [], "rate": 0.0, "children": [
        {"id": "w2", "tags": ["a0"], "rate": 1000.0, "children": []},
        {"id": "w3", "tags": ["a1"], "rate": 1000.0, "children": []}]}
    assert user_plan(VB3, as_dict) == plan
    with pytest.raises(ConfigError, match="no node owns tag 'c'"):
        plan.owner("c")


@pytest.mark.parametrize(("tree", "message"), [
    ({"tags": ["b"], "children": [{"tags": ["a0"]}]},
     "plan for value_barrier: no node owns 'a1'"),
    ({"tags": ["b", "a0"], "children": [{"tags": ["a0"]}, {"tags": ["a1"]}]},
     "plan for value_barrier: tag 'a0' is owned by both w0 and w1"),
    ({"tags": ["b", "c"], "children": [{"tags": ["a0"]}, {"tags": ["a1"]}]},
     "plan for value_barrier: node w0 owns 'c', which is not a tag of the spec"),
    ({"tags": [], "children": [{"tags": ["a0", "b"]}, {"tags": ["a1"]}]},
     ("plan for value_barrier: 'a1' (w2) and 'b' (w1) depend on each other, "
      "but neither node is an ancestor of the other")),
    ({"tags": ["a0"], "children": [{"tags": ["a1"], "children": [{"tags": []}]}, {"tags": ["b"]}]},
     "plan for value_barrier: leaf w2 owns no tags"),
    ({"tags": ["b"], "children": [{"tags": ["a0", "a0"]}, {"tags": ["a1"]}]},
     "plan node root.children[0] lists 'a0' twice"),
    ({"tags": ["b"], "childs": []}, "plan node root has unknown key(s) ['childs']; known: children, tags"),
    ({"tags": "b"}, "plan node root: 'tags' must be a list of tags, got 'b'"),
    ({"tags": ["b"], "children": {"tags": ["a0"]}},
     "plan node root: 'children' must be a list of nodes, got {'tags': ['a0']}"),
    ({"tags": ["b"], "children": [["a0"]]},
     "plan node root.children[0] must be a dict with 'tags' and 'children', got ['a0']"),
])
def test_an_invalid_user_plan_is_rejected_naming_the_offending_tags(tree, message):
    with pytest.raises(ConfigError) as err:
        user_plan(VB2, tree)
    assert str(err.value) == message


def test_a_tag_may_depend_on_an_ancestor_deeper_than_its_parent():
    plan = user_plan(VB3, {"tags": ["b"], "children": [{"children": [{"tags": ["a0"]}, {"tags": ["a1"]}]},
                                                       {"tags": ["a2"]}]})
    assert plan.is_ancestor("w0", "w2") and not plan.is_ancestor("w1", "w4")


def _chooser(seed):
    rng = np.random.default_rng(seed)
    return lambda k: int(rng.integers(k))


def test_random_plans_are_valid_and_vary_in_depth_and_fan_out():
    depths, fan_outs = set(), set()
    for seed in range(60):
        plan = random_plan(VB4, _chooser(seed))
        depths.add(plan.depth)
        fan_outs |= {len(n.children) for n in plan.nodes}
    assert depths == {1, 2, 3} and {0, 1, 2, 3} <= fan_outs


def test_the_plan_tree_figure_draws_synchronising_nodes_above_workers():
    fig = plan_tree_figure(user_plan(VB3, DEEP))
    assert fig.layout.title.text == "Plan for value_barrier: 3 workers, depth 3"
    sync, workers = fig.data[1], fig.data[2]
    assert list(sync.text) == ["w0: b", "w1: -"] and list(workers.text) == ["w2: a0", "w3: a1", "w4: a2"]
    assert list(workers.y) == [-2.0, -2.0, -1.0] and list(sync.y) == [0.0, -1.0]


# -- the parallel semantics --------------------------------------------------------------------------
def E(tag, ts, payload=None):
    return Event(tag, ts, payload)


def test_segments_cut_only_the_subtree_of_a_synchronising_event():
    spec = define_spec("two_barriers", tags=["a0", "a1", "a2", "b", "c"],
                       depends={"b": ["a0", "a1", "b"], "c": ["a0", "a1", "a2", "b", "c"]}, init=int,
                       update=lambda s, e: (s, []), fork=lambda s, x, y: (s, 0), join=lambda x, y: x + y)
    plan = user_plan(spec, {"tags": ["c"], "children": [
        {"tags": ["b"], "children": [{"tags": ["a0"]}, {"tags": ["a1"]}]}, {"tags": ["a2"]}]})
    events = [E("a0", 1), E("a2", 2), E("a1", 3), E("b", 4), E("a2", 5), E("a0", 6), E("b", 7),
              E("a1", 8), E("c", 9), E("a2", 10)]
    assert [str(r) for r in segments(plan, events)] == [
        "w2: a0@1 | w3: a1@3 ; w1: b@4",
        "w2: a0@6 ; w1: b@7",
        "w3: a1@8 | w4: a2@2 a2@5 ; w0: c@9",
        "w4: a2@10",
    ]


def test_run_plan_forks_binarily_for_three_children_and_joins_in_reverse():
    calls = []

    def fork(s, t1, t2):
        calls.append(("fork", sorted(t1), sorted(t2)))
        return (s, 0) if "b" in t1 or "b" not in t2 else (0, s)

    def join(x, y):
        calls.append(("join", x, y))
        return x + y

    spec = define_spec("vb3", tags=["a0", "a1", "a2", "b"], depends={"b": ["a0", "a1", "a2", "b"]}, init=int,
                       update=lambda s, e: ((0, [s]) if e.tag == "b" else (s + e.payload, [])), fork=fork, join=join)
    plan = greedy_plan(spec, 3)
    states = fork_states(spec, plan, 10)
    assert states == {"w1": 10, "w2": 0, "w3": 0}
    assert calls == [("fork", ["a0"], ["a1", "a2"]), ("fork", ["a1"], ["a2"])]
    assert join_states(spec, plan, {"w1": 1, "w2": 2, "w3": 3}) == 6
    assert calls[2:] == [("join", 2, 3), ("join", 1, 5)]
    state, outputs = run_plan(spec, plan, [E("a2", 1, 4), E("a0", 2, 1), E("b", 3), E("a1", 4, 2)])
    assert state == 2 and outputs == [(E("b", 3), 5)]


def test_run_plan_returns_outputs_tagged_with_their_events_in_round_order():
    spec = define_spec("echo", tags=["a0", "a1", "b"], depends={"b": ["a0", "a1", "b"]}, init=tuple,
                       update=lambda s, e: (s + (e.ts,), [e.ts]), fork=lambda s, x, y: (s, ()),
                       join=lambda x, y: x + y)
    events = [E("a1", 1), E("a0", 2), E("a1", 3), E("b", 4), E("a0", 5)]
    state, outputs = run_plan(spec, greedy_plan(spec, 2), events)
    assert [(e.tag, o) for e, o in outputs] == [("a0", 2), ("a1", 1), ("a1", 3), ("b", 4), ("a0", 5)]
    assert state == (2, 1, 3, 4, 5)  # the join puts w1's events first: equal to the sequential state up to order
    assert run_leaf(spec, (), events) == ((1, 2, 3, 4, 5), [(e, e.ts) for e in events])


def test_run_plan_rejects_an_unknown_tag_and_a_plan_of_another_spec():
    with pytest.raises(ConfigError, match="event Event\\(tag='c', ts=1, payload=None\\) has a tag"):
        run_plan(VB2, greedy_plan(VB2, 2), [E("c", 1)])
    with pytest.raises(ConfigError, match="plan for value_barrier does not cover the tags of spec value_barrier"):
        run_plan(VB2, greedy_plan(VB3, 2), [])


# -- input streams -------------------------------------------------------------------------------------
STREAMS = [InputStream("a", ["a0", "a1"]), InputStream("b", ["b"])]


def test_a_synchronising_event_waits_until_every_stream_passes_it():
    m = Merger(VB2.dependence, STREAMS)
    assert m.push("b", E("b", 5)) == []                      # stream a might still send an a-event before 5
    assert m.push("a", E("a0", 4, 1)) == [E("a0", 4, 1)]     # stream b is past 4
    assert m.push("a", E("a1", 6, 2)) == [E("b", 5)]         # stream a is past 5
    assert m.pending == (E("a1", 6, 2),)                     # b might still send a b before 6
    assert m.push("b", Heartbeat(6)) == [E("a1", 6, 2)]


def test_on_a_timestamp_tie_the_earlier_stream_goes_first():
    m = Merger(VB2.dependence, STREAMS)                      # stream a before stream b
    assert m.push("b", E("b", 5)) == []
    assert m.push("a", E("a1", 5, 2)) == [E("a1", 5, 2)]     # (5, stream a) comes before (5, stream b)
    assert m.pending == (E("b", 5),)                         # stream a may send another a at 5
    assert m.push("a", Heartbeat(5)) == [E("b", 5)]


def test_a_micro_batch_boundary_is_a_heartbeat_of_every_stream():
    m = Merger(VB2.dependence, STREAMS)
    m.push("a", E("a0", 1, 1))
    m.push("a", E("a1", 3, 1))
    assert m.pending == (E("a0", 1, 1), E("a1", 3, 1))
    assert m.boundary() == [E("a0", 1, 1), E("a1", 3, 1)] and m.pending == ()
    with pytest.raises(ConfigError, match="input stream b: .* breaks its heartbeat at 3"):
        m.push("b", E("b", 2))


@pytest.mark.parametrize(("stream", "item", "message"), [
    ("c", E("b", 1), "unknown input stream 'c'; known: a, b"),
    ("a", E("b", 1), "input stream a does not carry tag 'b' of Event(tag='b', ts=1, payload=None)"),
    ("a", E("a0", 1), "input stream a: Event(tag='a0', ts=1, payload=None) comes after an event at 2"),
    ("a", "x", "input stream a: expected an Event or a Heartbeat, got 'x'"),
])
def test_the_merger_rejects_what_breaks_a_streams_contract(stream, item, message):
    m = Merger(VB2.dependence, STREAMS)
    m.push("a", E("a1", 2))
    with pytest.raises(ConfigError) as err:
        m.push(stream, item)
    assert str(err.value) == message


def test_merge_streams_orders_ties_by_stream_position():
    streams = [InputStream("b", ["b"]), InputStream("a", ["a0", "a1"])]
    arrivals = [("a", E("a0", 2, 1)), ("b", E("b", 2)), ("a", E("a1", 2, 5))]
    assert merge_streams(VB2.dependence, streams, arrivals) == [E("b", 2), E("a0", 2, 1), E("a1", 2, 5)]


# -- properties ----------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_run_plan_equals_the_sequential_run_on_random_plans_and_interleavings(data):
    spec = data.draw(st.sampled_from([VB2, VB3]))
    plan = data.draw(plans(spec))
    events = data.draw(event_lists(spec, "value_barrier"))
    streams, arrivals, reference = data.draw(interleavings(spec, events))
    merged = merge_streams(spec.dependence, streams, arrivals)
    assert sorted(map(repr, merged)) == sorted(map(repr, events))
    state, outputs = run_plan(spec, plan, merged)
    want_state, want = run_sequential(spec, reference)
    assert state == want_state and [o for _, o in outputs] == want


def _differs(spec, scenario):
    plan, events = scenario
    got_state, got = run_plan(spec, plan, events)
    want_state, want = run_leaf(spec, spec.init(), sorted(events, key=lambda e: e.ts))
    return got_state != want_state or got != want


def _scenarios(spec):
    return st.tuples(plans(spec), event_lists(spec, "value_barrier", max_size=8, max_ts=5))


FIND = settings(max_examples=2000, deadline=None, database=None, derandomize=True)


def test_the_property_holds_for_value_barrier_so_no_counterexample_is_found():
    with pytest.raises(NoSuchExample):
        find(_scenarios(VB2), lambda s: _differs(VB2, s), settings=settings(FIND, max_examples=300))


def test_a_join_that_loses_data_is_caught_with_a_small_counterexample():
    lossy = define_spec("lossy", tags=["a0", "a1", "b"], depends={"b": ["a0", "a1", "b"]}, init=int,
                        update=VB2.update, fork=VB2.fork, join=lambda x, y: x)
    plan, events = find(_scenarios(lossy), lambda s: _differs(lossy, s), settings=FIND)
    # the smallest case: one value on the second worker, which the join drops
    assert len(plan.workers) == 2 and len(events) == 1 and plan.owner(events[0].tag) == plan.workers[1].name
    assert run_plan(lossy, plan, events)[0] == 0 and run_sequential(lossy, events)[0] == events[0].payload == 1


def test_a_fork_that_duplicates_the_state_is_caught_with_a_small_counterexample():
    def update(total, e):  # a running total that b reports without resetting it
        return (total, [total]) if e.tag == "b" else (total + e.payload, [])
    dup = define_spec("duplicating", tags=["a0", "a1", "b"], depends={"b": ["a0", "a1", "b"]}, init=int,
                      update=update, fork=lambda s, x, y: (s, s), join=lambda x, y: x + y)
    plan, events = find(_scenarios(dup), lambda s: _differs(dup, s), settings=FIND)
    assert len(plan.workers) == 2 and sorted(e.tag for e in events) == ["a0", "b"]  # a value, then a fork
    assert run_plan(dup, plan, events)[0] == 2 and run_sequential(dup, events)[0] == 1


def test_an_update_wrongly_marked_independent_is_caught():
    # b is declared independent of a1, so a plan may run b beside a1: b misses a1's values
    wrong = define_spec("wrong_dependence", tags=["a0", "a1", "b"], depends={"b": ["a0", "b"]}, init=int,
                        update=VB2.update, fork=VB2.fork, join=VB2.join)
    plan, events = find(_scenarios(wrong), lambda s: _differs(wrong, s), settings=FIND)
    wa, wb = plan.owner("a1"), plan.owner("b")
    assert not plan.is_ancestor(wa, wb) and not plan.is_ancestor(wb, wa)  # on two branches
    assert {"a1", "b"} <= {e.tag for e in events} and len(events) <= 3
    assert run_plan(wrong, plan, events)[1] != [(e, out) for e, out in run_leaf(wrong, 0, sorted(
        events, key=lambda e: e.ts))[1]]


def test_assert_same_up_to_dependence_fails_on_a_reordered_dependent_pair():
    a, b = (E("a0", 1), 1), (E("b", 2), 2)
    assert_same_up_to_dependence(VB2.dependence, [(E("a0", 1), 1), (E("a1", 2), 2)],
                                 [(E("a1", 2), 2), (E("a0", 1), 1)])
    with pytest.raises(AssertionError, match="different order"):
        assert_same_up_to_dependence(VB2.dependence, [a, b], [b, a])
