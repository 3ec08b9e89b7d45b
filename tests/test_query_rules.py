"""Which query changes Spark allows on a restart from the checkpoint (lmstream_kit.query_rules): exact refusals."""

from __future__ import annotations

from lmstream_kit.query_rules import StatefulOp, forbidden_change

WINDOW = ("window", "struct<start:timestamp,end:timestamp>")
AGG = StatefulOp("aggregate", (WINDOW, ("segment", "int")), ("avg(double,bigint)", "count(bigint)"))
JOIN = StatefulOp("join", (("vehicle=a_vehicle", "int"),), ("Inner", "left: int,int", "right: int"))
DEDUP = StatefulOp("deduplicate", (("id", "bigint"),), ("Deduplicate",))


def test_the_same_stateful_operators_are_allowed_whatever_is_stateless():
    assert forbidden_change([], []) is None  # a stateless query: projections and filters change freely
    assert forbidden_change([JOIN, AGG], [JOIN, AGG]) is None


def test_adding_removing_or_reordering_stateful_operators_is_refused():
    assert forbidden_change([AGG], [DEDUP, AGG]) == (
        "the query's stateful operators change from [aggregate(window, segment)] to "
        "[deduplicate(id), aggregate(window, segment)]: Spark keeps a state store per operator")
    assert forbidden_change([JOIN, AGG], [AGG, JOIN]).startswith("the query's stateful operators change from "
                                                                  "[join(vehicle=a_vehicle), aggregate(")


def test_keys_and_state_are_compared_per_operator_and_the_operator_is_named():
    renamed = StatefulOp("aggregate", (WINDOW, ("seg", "int")), AGG.state)
    assert forbidden_change([AGG], [renamed]) is None  # Spark's state schema check compares types, not names
    outer = StatefulOp("join", JOIN.keys, ("LeftOuter", *JOIN.state[1:]))
    assert forbidden_change([JOIN, AGG], [outer, AGG]) == (
        "the join (stateful operator 1) keeps other state: (Inner, left: int,int, right: int) -> "
        "(LeftOuter, left: int,int, right: int): the checkpoint's state has the old schema")
    widened = StatefulOp("deduplicate", (("id", "string"),), DEDUP.state)
    assert forbidden_change([DEDUP], [widened]) == (
        "the deduplication keys of the deduplicate change type: id bigint -> string: Spark keeps its state by the "
        "old keys")
    assert forbidden_change([AGG, JOIN], [AGG, StatefulOp("join", (), JOIN.state)]) == (
        "the join keys of the join (stateful operator 2) change from (vehicle=a_vehicle) to (): Spark keeps its "
        "state by the old keys")
