"""Flumina's workers on real Spark: each pass over a micro-batch is one Spark job, a task per worker,
and gives what the run in one process gives; the Spark idioms without Flumina give the same too."""

from __future__ import annotations

import pytest

from lmstream_kit.flumina import EXAMPLES, BatchRunner, greedy_plan, ordered, run_sequential, user_plan

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("example, passes", [("value_barrier", 1), ("fraud_detection", 2), ("max_temperature", 1),
                                             ("page_view", 1), ("outlier_detection", 3)])
def test_each_pass_is_one_spark_job_and_equals_the_sequential_run(spark, example, passes):
    from lmstream_kit.engine.flumina import events_frame, spark_workers
    from lmstream_kit.workloads.flumina import FLUMINA_EXAMPLES

    ex, (_, payload_type, codec) = EXAMPLES.get(example), FLUMINA_EXAMPLES[example]
    spec, events = ex.spec(2), ordered(ex.events(600, 2, 3))
    plan = greedy_plan(spec, 2)
    runner, reference = BatchRunner(spec, plan), BatchRunner(spec, plan)
    jobs = []
    for batch_id, batch in enumerate((events[:250], events[250:])):
        # the second batch keeps the routed events in Spark's memory between its passes
        on_spark = spark_workers(events_frame(spark, batch, payload_type=payload_type, codec=codec), codec=codec,
                                 cache=batch_id == 1)

        def counting(spec_, plan_, tasks):
            jobs.append(len(tasks))
            return on_spark(spec_, plan_, tasks)

        assert runner.run(batch_id, map_workers=counting) == reference.run(batch_id, batch)
        assert runner.last.passes == passes and runner.last.epochs == reference.last.epochs
        on_spark.release()
    assert jobs == [2] * (2 * passes)  # every pass: one job, a task for each of the two workers
    state, outputs = run_sequential(spec, events)
    assert runner.state() == state
    assert [o for _, o in reference.run(2, [])] == [] and runner.worker_states == reference.worker_states


def test_a_deeper_plan_with_more_workers_than_cores(spark):
    from lmstream_kit.engine.flumina import events_frame, spark_workers

    spec = EXAMPLES.get("value_barrier").spec(3)
    plan = user_plan(spec, {"tags": ["b"], "children": [{"tags": ["a0"]}, {"tags": ["a1"]}, {"tags": ["a2"]}]})
    events = ordered(EXAMPLES.get("value_barrier").events(500, 3, 1))
    runner = BatchRunner(spec, plan)
    got = runner.run(0, map_workers=spark_workers(events_frame(spark, events)))
    state, outputs = run_sequential(spec, events)
    assert [o for _, o in got] == outputs and runner.state() == state


@pytest.mark.parametrize("idiom", ["coalesce", "global_key"])
def test_the_spark_idioms_without_flumina_give_the_sequential_run(spark, idiom):
    from lmstream_kit.engine.flumina import events_frame, spark_sequential

    ex = EXAMPLES.get("fraud_detection")
    spec, events = ex.spec(2), ex.events(500, 2, 5)
    assert spark_sequential(events_frame(spark, events), spec, idiom=idiom) == run_sequential(spec, events)


def test_a_failing_update_is_one_line_naming_the_error(spark):
    from lmstream_kit.engine.flumina import events_frame, spark_workers
    from lmstream_kit.exceptions import EngineError
    from lmstream_kit.flumina import Event

    spec = EXAMPLES.get("value_barrier").spec(2)
    frame = events_frame(spark, [Event("a0", 1, 5), Event("zz", 2, 1)])
    with pytest.raises(EngineError, match=r"^Flumina pass on Spark failed: .*ConfigError: spec value_barrier: "
                                          r"event Event\(tag='zz'"):
        BatchRunner(spec, greedy_plan(spec, 2)).run(0, map_workers=spark_workers(frame))


def test_warming_up_for_more_workers_readies_their_partition_keys_and_python_workers(spark):
    from lmstream_kit.engine.flumina import _keys, warm_workers

    _keys.cache_clear()
    seconds = warm_workers(spark, 3)
    assert seconds > 0
    assert _keys.cache_info().currsize == 1  # the keys of 3 partitions, cached for the first pass on 3 workers
