"""The operator DAG comes from Spark's own executed plan, and the mapper places it."""

from __future__ import annotations

import pytest

from lmstream_kit.engine.plan import WRAPPERS, plan_dag
from lmstream_kit.mapper import DeviceMapper, exec_class

pytestmark = pytest.mark.spark


def test_aggregation_plan_becomes_a_dag_of_exec_names(spark):
    from pyspark.sql import functions as F

    df = (
        spark.range(1000, numPartitions=2)
        .where(F.col("id") % 3 == 0)
        .groupBy((F.col("id") % 7).alias("k"))
        .agg(F.sum("id").alias("s"))
    )
    dag = plan_dag(df)
    names = [op.exec_name for op in dag.operators]
    assert not set(names) & WRAPPERS
    # partial and final aggregation around one shuffle, the filter under them
    assert names.count("HashAggregateExec") == 2
    assert "ShuffleExchangeExec" in names and "FilterExec" in names
    assert names[0] == "HashAggregateExec"  # the root: the final aggregation
    leaves = [op for op in dag.operators if not op.children]
    assert len(leaves) == 1 and exec_class(leaves[0].exec_name) in (None, "Scan")
    # pre-order ids, each child listed after its parent
    for op in dag.operators:
        assert all(child > op.id for child in op.children)

    small = DeviceMapper().map(dag, partition_bytes=1024)
    large = DeviceMapper().map(dag, partition_bytes=1000 * 150 * 1024)
    classified = [e for e in large.entries if e.op_class is not None]
    assert classified and all(e.device == "GPU" for e in classified)
    assert all(e.device == "CPU" for e in small.entries)


def test_join_plan_has_two_leaves(spark):
    left = spark.range(100).withColumnRenamed("id", "k")
    right = spark.range(100).withColumnRenamed("id", "k")
    dag = plan_dag(left.join(right, "k"))
    assert len([op for op in dag.operators if not op.children]) == 2
    assert any(exec_class(op.exec_name) == "Join" for op in dag.operators)
