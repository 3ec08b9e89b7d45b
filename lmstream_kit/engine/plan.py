"""The operator DAG of a DataFrame's physical plan, taken from Spark itself (py4j).

:func:`plan_dag` walks ``df._jdf.queryExecution().executedPlan()`` and returns a
:class:`~lmstream_kit.mapper.PlanDag` of Spark's exec class names (``HashAggregateExec``,
``ShuffleExchangeExec``, ...), the input of the device mapper.  Wrappers that only
frame other operators are left out, so that the DAG holds the operators a device
plan is about:

* ``WholeStageCodegenExec`` and ``InputAdapter`` (code generation boundaries);
* ``AdaptiveSparkPlanExec`` (adaptive execution's root; its current plan is walked);
* ``ReusedExchangeExec`` is kept (it stands for the reused exchange).

Asking for the executed plan plans the query (no Spark job runs), so callers
should cache the DAG per query shape rather than ask every batch.
"""

from __future__ import annotations

from ..mapper import Operator, PlanDag

#: execs that only wrap others and are skipped in the DAG
WRAPPERS = frozenset({"WholeStageCodegenExec", "InputAdapter", "AdaptiveSparkPlanExec"})


def _children(node) -> list:
    seq = node.children()
    return [seq.apply(i) for i in range(seq.size())]


def _unwrap(node):
    """The first non-wrapper node at or below ``node``."""
    while True:
        name = node.getClass().getSimpleName()
        if name == "AdaptiveSparkPlanExec":
            node = node.executedPlan()
        elif name in WRAPPERS:
            kids = _children(node)
            if len(kids) != 1:
                return node
            node = kids[0]
        else:
            return node


def plan_dag(df) -> PlanDag:
    """The physical plan of ``df`` as a PlanDag of exec class names (root first).

    Operator ids number the plan's nodes in pre-order from the root (0).
    """
    root = _unwrap(df._jdf.queryExecution().executedPlan())
    operators: list[Operator] = []

    def visit(node) -> int:
        op_id = len(operators)
        operators.append(None)  # placeholder keeps pre-order ids
        child_ids = tuple(visit(_unwrap(child)) for child in _children(node))
        operators[op_id] = Operator(op_id, node.getClass().getSimpleName(), child_ids)
        return op_id

    visit(root)
    return PlanDag(tuple(operators))
