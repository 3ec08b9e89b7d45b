"""The spec checker finds the law a broken spec breaks, with its smallest counterexample; the
equivalence checker accepts exactly the reorderings of independent items (DiffStream's relation)."""

from __future__ import annotations

import itertools
import math
import random

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmstream_kit.exceptions import ConfigError, SpecError
from lmstream_kit.flumina import (
    Dependence,
    Event,
    Matcher,
    Samples,
    assert_equivalent,
    bag,
    check_spec,
    define_spec,
    run_sequential,
    same_key,
    sequence,
    value_barrier_spec,
)
from lmstream_kit.flumina.check import forks

DEPS = {"read": ["x", "y", "read"]}


def counter(fork=lambda s, t1, t2: (s, 0), join=lambda a, b: a + b):
    """Counts x and y events; read outputs the count.  x, y independent; read depends on all."""
    def update(s, e):
        return (s, [("read", e.ts, s)]) if e.tag == "read" else (s + 1, [])
    return define_spec("counter", tags=["x", "y", "read"], depends=DEPS, init=lambda: 0, update=update,
                       fork=fork, join=join)


def max_per_day():
    """The maximum of all sensors, output and reset at each end of day; fork copies (max is idempotent)."""
    def update(s, e):
        if e.tag == "end":
            return None, [("end", e.ts, s)]
        return (e.payload if s is None else max(s, e.payload)), []

    def join(a, b):
        return b if a is None else a if b is None else max(a, b)
    return define_spec("max_per_day", tags=["t1", "t2", "t3", "end"], depends={"end": ["t1", "t2", "t3", "end"]},
                       init=lambda: None, update=update, fork=lambda s, t1, t2: (s, s), join=join)


def digits():
    """value barrier with ``s * 10 + value``: its a-updates do not commute, yet the a-tags are independent."""
    def update(s, e):
        return (0, [("b", e.ts, s)]) if e.tag == "b" else (s * 10 + e.payload, [])
    return define_spec("digits", tags=["a0", "a1", "b"], depends={"b": ["a0", "a1", "b"]}, init=lambda: 0,
                       update=update, fork=lambda s, t1, t2: (s, 0), join=lambda a, b: a + b)


COUNTS = [Event("x", 1), Event("y", 2), Event("x", 3), Event("read", 4), Event("y", 5)]
DIGITS = [Event("a0", 1, 1), Event("a1", 2, 2), Event("a0", 3, 3), Event("b", 4)]


def histories(tags, barrier):
    """Lists of events over ``tags`` (payloads -5..9) and ``barrier`` events, timestamps in order."""
    event = st.one_of(st.tuples(st.sampled_from(tags), st.integers(-5, 9)), st.just((barrier, None)))
    return st.lists(event, max_size=8).map(lambda evs: [Event(t, i, p) for i, (t, p) in enumerate(evs)])


# -- good specs -----------------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(histories(["a0", "a1", "a2"], "b"))
def test_value_barrier_holds_every_law_on_random_histories(history):
    report = check_spec(value_barrier_spec(3), history)
    assert report.ok, str(report)
    assert report.laws["C2"].cases >= 12  # the 12 ordered pairs of disjoint a-tag sets, on each state


def test_max_per_day_and_counter_hold_every_law():
    readings = [Event("t1", 1, 20), Event("t2", 2, 25), Event("t3", 3, 18), Event("end", 4), Event("t2", 5, -3)]
    for spec, samples in ((max_per_day(), readings), (counter(), COUNTS)):
        report = check_spec(spec, samples)
        assert report.ok and [r.holds for r in report.laws.values()] == [True] * 3, str(report)
        report.raise_if_failed()
    assert str(check_spec(counter(), COUNTS)) == "counter: C1 holds (30 cases), C2 holds (10 cases), C3 holds (40 cases)"


def test_states_come_from_init_the_given_states_and_every_prefix_of_a_history():
    events, states = Samples(states=[7], histories=[[Event("x", 2), Event("read", 3), Event("y", 1)]]).resolve(counter())
    assert states == [0, 7, 1, 2] and len(events) == 3  # y (ts 1) runs first: 1, 2, then read keeps 2


def test_a_float_spec_passes_with_a_tolerance_and_fails_with_exact_equality():
    spec = define_spec("fsum", tags=["p", "q"], depends={}, init=lambda: 0.0, update=lambda s, e: (s + e.payload, []),
                       fork=lambda s, t1, t2: (s, 0.0), join=lambda a, b: a + b)
    samples = Samples(events=[Event("p", 1, 0.1), Event("q", 2, 0.2)], states=[0.7])
    assert not check_spec(spec, samples).holds("C1")  # (0.7 + 0.1) + 0.2 != (0.7 + 0.2) + 0.1
    assert check_spec(spec, samples, equal=math.isclose).ok


# -- broken specs: the right law, the smallest counterexample -------------------------------------------------
def test_a_non_commutative_update_marked_independent_fails_c1_with_two_events():
    report = check_spec(digits(), DIGITS)
    assert not report.holds("C1") and report.holds("C2")
    assert str(report.laws["C1"].counterexample) == (
        "C1 fails: two events of independent tags do not commute (a non-commutative update marked independent)\n"
        "  state: s = 0\n"
        "  e1 = Event(tag='a0', ts=1, payload=1), e2 = Event(tag='a1', ts=2, payload=2)\n"
        "  upd(upd(s, e1), e2) -> state 12, outputs []\n"
        "  upd(upd(s, e2), e1) -> state 21, outputs []")
    with pytest.raises(SpecError, match=r"^spec digits: C1 fails: two events of independent tags"):
        report.raise_if_failed()


def test_a_join_that_loses_data_fails_c3_at_the_initial_state():
    report = check_spec(counter(join=lambda a, b: a), COUNTS)
    assert [r.holds for r in report.laws.values()] == [True, True, False]
    assert str(report.failures[0]) == (
        "C3 fails: an update does not distribute over join for an event of one side (a join that loses data, "
        "or a fork that gives a side the wrong part)\n"
        "  state: s = 0\n"
        "  fork:  pred1 = {'x'}, pred2 = {'y'} -> s1 = 0, s2 = 0\n"
        "  e = Event(tag='y', ts=2, payload=None)\n"
        "  upd(join(s1, s2), e) -> state 1, outputs []\n"
        "  join(s1, upd(s2, e)) -> state 0, outputs []")


def test_a_fork_that_duplicates_fails_c2_at_the_smallest_nonzero_state():
    report = check_spec(counter(fork=lambda s, t1, t2: (s, s)), COUNTS)
    assert [r.holds for r in report.laws.values()] == [True, False, True]
    assert str(report.failures[0]) == (
        "C2 fails: join(fork(s, pred1, pred2)) != s (a fork that duplicates or a join that loses data)\n"
        "  state: s = 1\n"
        "  fork:  pred1 = {'x'}, pred2 = {'y'} -> s1 = 1, s2 = 1\n"
        "  join(s1, s2) -> 2\n"
        "  s            -> 1")


def test_a_failure_found_among_random_cases_is_shrunk_to_the_smallest_state_and_events():
    rng = random.Random(3)
    history = [Event(rng.choice(["a0", "a1"]), i, rng.randint(0, 9)) for i in range(40)]
    report = check_spec(digits(), history, max_examples=20, seed=1)  # 41 states x ~700 pairs: sampled
    found = report.laws["C1"].counterexample
    assert report.laws["C1"].cases == 20
    assert found.state == 0 and sorted(e.payload for e in found.events) == [0, 1]


def test_an_update_that_raises_is_a_counterexample_and_bad_samples_are_config_errors():
    spec = define_spec("picky", tags=["x", "y"], depends={}, init=lambda: 0, fork=lambda s, t1, t2: (s, 0),
                       join=lambda a, b: a + b,
                       update=lambda s, e: (s + 1, []) if s < 1 or e.tag == "x" else (1 / 0, []))
    found = check_spec(spec, Samples(events=[Event("x", 1), Event("y", 2)])).laws["C1"].counterexample
    assert str(found).endswith("  upd(upd(s, e1), e2) -> raised ZeroDivisionError: division by zero\n"
                               "  upd(upd(s, e2), e1) -> state 2, outputs []")
    no_pair = define_spec("no_pair", tags=["x", "y"], depends={}, init=lambda: 0, update=lambda s, e: (s + 1, []),
                          fork=lambda s, t1, t2: s, join=lambda a, b: a + b)
    assert str(check_spec(no_pair, [Event("x", 1)]).laws["C2"].counterexample).endswith(
        "  join(s1, s2) -> raised TypeError: cannot unpack non-iterable int object\n  s            -> 0")
    with pytest.raises(ConfigError, match="not an Event with one of its tags"):
        check_spec(spec, [Event("z", 1)])
    with pytest.raises(ConfigError, match="max_examples"):
        check_spec(spec, [], max_examples=0)


# -- equivalence ---------------------------------------------------------------------------------------------
def test_nothing_dependent_is_multiset_equality():
    assert assert_equivalent([1, 2, 2, 3], [2, 3, 1, 2], bag) == 4
    with pytest.raises(AssertionError) as failed:
        assert_equivalent([1, 2, 2], [2, 1, 1], bag)
    assert str(failed.value) == ("not equivalent: left[2] = 2 is unmatched: nothing on the right equals it "
                                 "(missing on the right, or extra on the left); 1 more unmatched (left 0, right 1)")


def test_everything_dependent_is_sequence_equality():
    assert assert_equivalent([1, 2, 3], [1, 2, 3], sequence) == 3
    for left, right in itertools.product(itertools.permutations([1, 2, 2]), repeat=2):
        equal = list(left) == list(right)
        try:
            assert_equivalent(list(left), list(right), sequence)
        except AssertionError:
            assert not equal
        else:
            assert equal


SWAPPED = ("not equivalent: left[0] = ('x', 1) is unmatched: right[1] = ('x', 2) depends on it and comes first "
           "on the right (dependent items in another order, or an item missing or changed)")
MISSING = ("not equivalent: left[1] = ('y', 1) is unmatched: nothing on the right equals it "
           "(missing on the right, or extra on the left)")
EXTRA = ("not equivalent: right[2] = ('y', 2) is unmatched: nothing on the left equals it "
         "(missing on the left, or extra on the right)")


@pytest.mark.parametrize("right, message", [
    ([("y", 1), ("x", 1), ("x", 2)], None),
    ([("y", 1), ("x", 2), ("x", 1)], SWAPPED),
    ([("x", 1), ("x", 2)], MISSING),
    ([("x", 1), ("y", 1), ("y", 2), ("x", 2)], EXTRA),
])
def test_items_with_the_same_key_keep_their_order_and_the_first_unmatched_is_named(right, message):
    left = [("x", 1), ("y", 1), ("x", 2)]
    if message is None:
        assert assert_equivalent(left, right, same_key(lambda item: item[0])) == 3
    else:
        with pytest.raises(AssertionError) as failed:
            assert_equivalent(left, right, same_key(lambda item: item[0]))
        assert str(failed.value) == message


def test_the_online_matcher_fails_at_the_push_that_breaks_the_order_and_stays_failed():
    m = Matcher(same_key(lambda item: item[0]))
    m.push_left(("x", 1))
    m.push_right(("y", 1))
    assert m.pending == {"left": [(0, ("x", 1))], "right": [(0, ("y", 1))]}
    with pytest.raises(AssertionError, match=r"left\[0\] = \('x', 1\) is unmatched: right\[1\] = \('x', 2\)"):
        m.push_right(("x", 2))
    with pytest.raises(AssertionError, match=r"left\[0\]"):
        m.finish()


def test_an_item_held_behind_a_dependent_one_is_reported_with_what_holds_it():
    m = Matcher(lambda a, b: {a, b} == {"p", "q"})  # only p and q depend on each other
    for item in ["q", "p"]:
        m.push_left(item)
    m.push_right("r")
    with pytest.raises(AssertionError) as failed:
        m.finish()
    assert str(failed.value) == ("not equivalent: left[0] = 'q' is unmatched: nothing on the right equals it "
                                 "(missing on the right, or extra on the left); 2 more unmatched (left 1, right 1)")


def _equivalent_by_projections(left, right, depends):
    """The reference: same multiset, and the same order of every dependent pair of values (traces)."""
    if sorted(left) != sorted(right):
        return False
    return all([i for i in left if i in (a, b)] == [i for i in right if i in (a, b)]
               for a in set(left) for b in set(left) if a != b and depends(a, b))


def _relation(kind, pairs, group):
    """``(what the Matcher gets, its keyword arguments, the same relation as a function on items)``."""
    if kind == "bag":
        return bag, {}, lambda a, b: False
    if kind == "sequence":
        return sequence, {}, lambda a, b: True
    if kind == "same_key":
        return same_key(group.get), {}, lambda a, b: group[a] == group[b]
    if kind == "tags":
        tags = Dependence([0, 1, 2], lambda s, t: (s, t) in pairs or (t, s) in pairs)
        return tags, {"tag": group.get}, lambda a, b: tags(group[a], group[b])
    return (lambda a, b: (a, b) in pairs or (b, a) in pairs), {}, lambda a, b: (a, b) in pairs or (b, a) in pairs


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from("abcd"), max_size=7), st.data(),
       st.sampled_from(["function", "bag", "sequence", "same_key", "tags"]),
       st.sets(st.tuples(st.sampled_from("abcd"), st.sampled_from("abcd"))) | st.sets(st.tuples(
           st.integers(0, 2), st.integers(0, 2))),
       st.fixed_dictionaries({c: st.integers(0, 2) for c in "abcd"}), st.randoms(use_true_random=False))
def test_the_matcher_agrees_with_the_trace_projection_criterion_in_any_feeding_order(left, data, kind, pairs,
                                                                                     group, rnd):
    right = data.draw(st.permutations(left))  # mostly a reordering; sometimes one item more, less or changed
    right = data.draw(st.sampled_from([right, right[1:], right + ["a"], ["d"] + right[1:]]))
    relation, options, depends = _relation(kind, pairs, group)
    m, feed = Matcher(relation, **options), ["l"] * len(left) + ["r"] * len(right)
    rnd.shuffle(feed)
    items = {"l": iter(left), "r": iter(right)}
    try:
        for side in feed:
            (m.push_left if side == "l" else m.push_right)(next(items[side]))
        m.finish()
        verdict = True
    except AssertionError:
        verdict = False
    assert verdict == _equivalent_by_projections(left, right, depends)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from("kmnp"), st.lists(st.integers(0, 3), min_size=1, max_size=5), min_size=1),
       st.randoms(use_true_random=False))
def test_any_interleaving_of_per_key_sequences_is_equivalent_to_the_original(per_key, rnd):
    original = [(k, i, v) for k, values in per_key.items() for i, v in enumerate(values)]
    queues = {k: [(k, i, v) for i, v in enumerate(values)] for k, values in per_key.items()}
    interleaved = []
    while queues:
        k = rnd.choice(sorted(queues))
        interleaved.append(queues[k].pop(0))
        queues = {k: q for k, q in queues.items() if q}
    assert assert_equivalent(original, interleaved, same_key(lambda item: item[0])) == len(original)


def test_dataframes_compare_row_by_row_and_a_changed_value_is_named():
    left = pd.DataFrame({"sensor": ["t1", "t2", "t1"], "max": [20.0, 5.0, None]})
    right = left.iloc[[1, 0, 2]].reset_index(drop=True)
    assert assert_equivalent(left, right, same_key(lambda row: row["sensor"])) == 3  # NaN rows match too
    right.loc[2, "max"] = 21.0
    with pytest.raises(AssertionError) as failed:
        assert_equivalent(left, right, same_key(lambda row: row["sensor"]))
    assert str(failed.value) == ("not equivalent: left[2] = {'sensor': 't1', 'max': None} is unmatched: "
                                 "right[2] = {'sensor': 't1', 'max': 21.0} depends on it and comes first on the right "
                                 "(dependent items in another order, or an item missing or changed)")
    with pytest.raises(AssertionError, match=r"left\[2\] = \{'sensor': 't1', 'max': None\} is unmatched: nothing on the right equals it"):
        assert_equivalent(left, right, bag)


def test_parallel_value_barrier_outputs_compare_through_the_spec_dependence_by_tag():
    spec = value_barrier_spec(2)
    out = run_sequential(spec, [Event("a0", 1, 5), Event("b", 2), Event("a1", 3, 7), Event("b", 4)])[1]
    assert assert_equivalent(out, list(out), spec.dependence, tag=lambda o: o[0]) == 2
    with pytest.raises(AssertionError, match=r"left\[0\] = \('b', 2, 5\) is unmatched"):
        assert_equivalent(out, out[::-1], spec.dependence, tag=lambda o: o[0])
    with pytest.raises(ConfigError, match="give tag="):
        Matcher(Dependence(["b"], {"b": ["b"]}))
    with pytest.raises(ConfigError, match="must be a function"):
        Matcher("bag")


@pytest.mark.parametrize("module", ["lmstream_kit.flumina.check", "lmstream_kit.flumina.equivalence"])
def test_the_docstring_examples_run(module):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0


def test_key_compares_only_what_must_be_equal():
    left = [{"k": "a", "v": 1, "at": 10.0}, {"k": "a", "v": 2, "at": 11.0}]
    right = [{"k": "a", "v": 1, "at": 12.5}, {"k": "a", "v": 2, "at": 13.0}]
    by_k = same_key(lambda row: row["k"])
    assert assert_equivalent(left, right, by_k, key=lambda row: (row["k"], row["v"])) == 2
    with pytest.raises(AssertionError, match=r"left\[0\] = \{'k': 'a', 'v': 1, 'at': 10.0\} is unmatched"):
        assert_equivalent(left, right, by_k)


def test_a_shuffled_run_of_twenty_thousand_items_matches_item_for_item():
    rng = random.Random(0)
    items = [{"account": rng.randrange(500), "n": i} for i in range(20_000)]
    by_account = {}
    for item in items:
        by_account.setdefault(item["account"], []).append(item)
    interleaved = [item for _, group in sorted(by_account.items(), key=lambda kv: -kv[0]) for item in group]
    shuffled = rng.sample(items, len(items))
    assert assert_equivalent(items, shuffled, bag) == 20_000
    assert assert_equivalent(items, interleaved, same_key(lambda row: row["account"])) == 20_000


def test_forks_are_the_independent_splits_and_many_dependent_tags_do_not_explode():
    assert len(forks(value_barrier_spec(3))) == 12  # 3^3 - 2 * 2^3 + 1 ordered pairs of disjoint non-empty sets
    tags = [f"t{i}" for i in range(40)]
    chain = define_spec("all_dependent", tags=tags, depends={t: tags for t in tags}, init=lambda: 0,
                        update=lambda s, e: (s, []), fork=lambda s, t1, t2: (s, s), join=lambda a, b: a)
    assert forks(chain) == []
    assert len(forks(define_spec("free", tags=tags, depends={}, init=lambda: 0, update=lambda s, e: (s, []),
                                 fork=lambda s, t1, t2: (s, s), join=lambda a, b: a), limit=100)) == 100


def test_the_readmes_flumina_example_runs():
    import contextlib
    import io
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    after = readme[readme.index("<!-- README flumina example"):]
    start = after.index("```python\n") + len("```python\n")
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        exec(after[start:after.index("```\n", start)], {})
    text = shown.getvalue()
    assert "w1 [a0, a2] 2000 ev/s" in text and "\nTrue\n" in text
    assert "digits: C1 FAILS" in text and "e1 = Event(tag='x', ts=1, payload=1)" in text
