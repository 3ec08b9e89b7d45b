"""The operator DAG of a DataFrame's physical plan, taken from Spark itself (py4j).

:func:`plan_dag` walks ``df._jdf.queryExecution().executedPlan()`` and returns a
:class:`~lmstream_kit.mapper.PlanDag` of Spark's exec class names (``HashAggregateExec``,
``ShuffleExchangeExec``, ...), the input of the device mapper.  Wrappers that only
frame other operators are left out, so that the DAG holds the operators a device
plan is about:

* ``WholeStageCodegenExec`` and ``InputAdapter`` (code generation boundaries);
* ``AdaptiveSparkPlanExec`` (adaptive execution's root; its current plan is walked);
* ``ReusedExchangeExec`` is kept (it stands for the reused exchange);
* row/columnar transitions (``ColumnarToRowExec``, ``RowToColumnarExec`` and
  the RAPIDS ``Gpu...`` transitions and batch coalescers) are left out, and a
  RAPIDS ``GpuXxxExec`` is named by the Spark exec it replaces (``XxxExec``), so
  the DAG of a query has the same shape whichever device ran it.

Asking for the executed plan plans the query (no Spark job runs), so callers
should cache the DAG per query shape rather than ask every batch.
"""

from __future__ import annotations

from ..mapper import Operator, PlanDag

#: execs that only wrap others and are skipped in the DAG
WRAPPERS = frozenset({
    "WholeStageCodegenExec", "InputAdapter", "AdaptiveSparkPlanExec",
    "ColumnarToRowExec", "RowToColumnarExec",
    "GpuColumnarToRowExec", "GpuRowToColumnarExec", "GpuCoalesceBatches", "GpuShuffleCoalesceExec",
})


def exec_name(class_name: str) -> str:
    """Spark's exec name for a plan node class (``GpuHashAggregateExec`` -> ``HashAggregateExec``).

    >>> exec_name("GpuHashAggregateExec"), exec_name("FilterExec")
    ('HashAggregateExec', 'FilterExec')
    """
    if class_name.startswith("Gpu") and len(class_name) > 3 and class_name[3].isupper():
        return class_name[3:]
    return class_name


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

    Operator ids number the plan's nodes in pre-order from the root (0).  Inside
    ``foreachBatch`` the batch DataFrame is only a scan of the already executed
    micro-batch (``RDDScanExec``); use :func:`streaming_plan_dag` there.
    """
    return jvm_plan_dag(df._jdf.queryExecution().executedPlan())


def streaming_plan_dag(query) -> PlanDag:
    """The DAG of the micro-batch a streaming query is running (or ran last).

    Spark plans each micro-batch as an ``IncrementalExecution`` (with the
    streaming state operators) before it hands the result to ``foreachBatch``;
    called from ``foreachBatch`` this is the plan of that batch.  Reading it
    plans nothing: the plan is already there.

    Raises
    ------
    EngineError
        When the query has not planned a batch yet.
    """
    from ..exceptions import EngineError

    execution = query._jsq.streamingQuery().lastExecution()
    if execution is None:
        raise EngineError(f"query {query.name} has not planned a micro-batch yet")
    return jvm_plan_dag(execution.executedPlan())


def jvm_plan_dag(plan) -> PlanDag:
    """A PlanDag from a JVM ``SparkPlan`` object (py4j)."""
    root = _unwrap(plan)
    operators: list[Operator] = []

    def visit(node) -> int:
        op_id = len(operators)
        operators.append(None)  # placeholder keeps pre-order ids
        child_ids = tuple(visit(_unwrap(child)) for child in _children(node))
        operators[op_id] = Operator(op_id, exec_name(node.getClass().getSimpleName()), child_ids)
        return op_id

    visit(root)
    return PlanDag(tuple(operators))
