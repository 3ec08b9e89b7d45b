"""The stateful operators of a workload's streaming query, read from Spark's analyzed plan.

The query is built over an empty file stream of the workload's schema (nothing runs;
:func:`lmstream_kit.engine.window.analyzed_plan`, which reads windows too), and its analyzed plan is walked for the operators
Spark keeps state for: streaming aggregations, stream-stream joins, deduplications and
``*GroupsWithState`` / ``transformWithState`` operators.  :func:`lmstream_kit.query_rules.forbidden_change`
compares two such lists.
"""

from __future__ import annotations

from ..query_rules import StatefulOp
from .window import _seq, analyzed_plan

__all__ = ["stateful_operators"]

_STATE_NODES = ("FlatMapGroupsWithState", "FlatMapGroupsInPandasWithState", "TransformWithState",
                "TransformWithStateInPySpark", "TransformWithStateInPandas")


def _name(expr) -> str:
    try:
        return str(expr.name())
    except Exception:  # noqa: BLE001  (an expression without a name: its SQL)
        return str(expr.sql())


def _typed(exprs) -> tuple[tuple[str, str], ...]:
    return tuple((_name(e), str(e.dataType().simpleString())) for e in exprs)


def _aggregates(node) -> tuple[str, ...]:
    """``name(buffer types)`` of each aggregate function of an Aggregate: what its state holds per key."""
    out, stack = [], list(reversed(_seq(node.aggregateExpressions())))
    while stack:
        e = stack.pop()
        if e.getClass().getSimpleName() == "AggregateExpression":
            f = e.aggregateFunction()
            buffer = ",".join(str(a.dataType().simpleString()) for a in _seq(f.aggBufferAttributes()))
            out.append(f"{f.prettyName()}({buffer})")
        else:
            stack.extend(reversed(_seq(e.children())))
    return tuple(out)


def _join_keys(node) -> tuple[tuple[str, str], ...]:
    """The equi-join pairs of a join's condition, ``(left=right, type)``."""
    cond = node.condition()
    if cond.isEmpty():
        return ()
    left = {str(a.exprId()) for a in _seq(node.left().output())}
    keys, stack = [], [cond.get()]
    while stack:
        e = stack.pop()
        if e.getClass().getSimpleName() == "EqualTo":
            a, b = e.left(), e.right()
            if b.getClass().getSimpleName() == "AttributeReference" and str(b.exprId()) in left:
                a, b = b, a
            keys.append((f"{_name(a)}={_name(b)}", str(a.dataType().simpleString())))
        else:
            stack.extend(_seq(e.children()))
    return tuple(sorted(keys))


def _operators(plan) -> list[StatefulOp]:
    ops, stack = [], [plan]
    while stack:  # pre-order from the root, children left to right: the order Spark numbers them in
        node = stack.pop()
        kind = node.getClass().getSimpleName()
        if kind == "Aggregate" and node.isStreaming():
            ops.append(StatefulOp("aggregate", _typed(_seq(node.groupingExpressions())), _aggregates(node)))
        elif kind == "Join" and node.left().isStreaming() and node.right().isStreaming():
            sides = tuple(f"{side}: " + ",".join(str(a.dataType().simpleString()) for a in _seq(child.output()))
                          for side, child in (("left", node.left()), ("right", node.right())))
            ops.append(StatefulOp("join", _join_keys(node), (str(node.joinType().toString()), *sides)))
        elif kind in ("Deduplicate", "DeduplicateWithinWatermark") and node.isStreaming():
            ops.append(StatefulOp("deduplicate", _typed(_seq(node.keys())), (kind,)))
        elif kind in _STATE_NODES:
            ops.append(StatefulOp("state", _typed(_seq(node.groupingAttributes())), (kind,)))
        stack.extend(reversed(_seq(node.children())))
    return ops


def stateful_operators(spark, workload) -> list[StatefulOp]:
    """The stateful operators of ``workload``'s query, in Spark's order (ConfigError where it does not build)."""
    return _operators(analyzed_plan(spark, workload, f"the query of {workload.name} does not build on its input schema"))
