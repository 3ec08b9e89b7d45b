"""Flumina's workers on real Spark: a round's segments run as Spark tasks and give what the driver gives."""

from __future__ import annotations

import pytest

from lmstream_kit.flumina import EXAMPLES, BatchRunner, greedy_plan, ordered, run_sequential

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("example", ["value_barrier", "fraud_detection", "page_view"])
def test_workers_run_as_spark_tasks_and_equal_the_driver_run(spark, example):
    from lmstream_kit.engine.flumina import spark_segments

    ex = EXAMPLES.get(example)
    spec, events = ex.spec(2), ordered(ex.events(400, 2, 3))
    plan = greedy_plan(spec, 2)
    jobs = []

    def counting(spec_, work):
        jobs.append(len(work))
        return on_spark(spec_, work)

    on_spark = spark_segments(spark)
    runner, reference = BatchRunner(spec, plan, map_segments=counting), BatchRunner(spec, plan)
    for batch_id, batch in enumerate((events[:150], events[150:])):
        assert runner.run(batch_id, batch) == reference.run(batch_id, batch)
    assert runner.worker_states == reference.worker_states
    assert runner.state() == run_sequential(spec, events)[0]
    assert max(jobs) == 2  # rounds with both workers busy went to Spark as two tasks


def test_events_are_read_from_a_micro_batch_dataframe(spark):
    from lmstream_kit.engine.flumina import events_of

    df = spark.createDataFrame([("a0", 1.0, 5), ("b", 2.5, None)], "tag string, ts double, payload long")
    got = events_of(df)
    assert [(e.tag, e.ts) for e in got] == [("a0", 1.0), ("b", 2.5)] and got[0].payload == 5
