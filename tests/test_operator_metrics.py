"""Operator-level metrics (lmstream_kit.tune.operators, lmstream_kit.engine.stages): each batch's Spark
stages with their tasks, records and useful time, from Spark's own status store; decisions on seeded
stage dicts, and a real stream whose first stage reads exactly the rows the kit admitted."""

from __future__ import annotations

import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.tune import OperatorMetrics, operator_samples


def _stage(**kw):
    base = {"job": 0, "position": 0, "stageId": 3, "status": "COMPLETE", "numTasks": 2, "executorRunTime": 1000,
            "executorCpuTime": 800_000_000, "inputRecords": 10_000, "shuffleReadRecords": 0, "outputRecords": 0,
            "shuffleWriteRecords": 50, "shuffleFetchWaitTime": 0, "shuffleWriteTime": 0,
            "submissionTime": "2026-11-23T10:00:00.000GMT", "completionTime": "2026-11-23T10:00:00.750GMT"}
    return {**base, **kw}


def test_useful_time_leaves_out_waiting_for_shuffle_input_and_output():
    s, = operator_samples([_stage(executorRunTime=1000, shuffleFetchWaitTime=200, shuffleWriteTime=300_000_000)],
                          budget_s=2.0)
    assert (s.run_s, s.useful_s) == (1.0, 0.5)
    assert s.true_rate == 20_000.0  # 10,000 records over 0.5 useful task-seconds
    assert s.load == 0.125 and not s.bottleneck  # one task busy 0.25 s of a 2 s budget
    assert (s.records_in, s.records_out, s.wall_s, s.cpu_s) == (10_000, 50, 0.75, 0.8)


def test_a_stage_busy_above_the_share_of_the_budget_is_a_bottleneck():
    stages = [_stage(position=0, executorRunTime=3000), _stage(position=1, stageId=4, executorRunTime=1000,
                                                                inputRecords=0, shuffleReadRecords=50)]
    first, second = operator_samples(stages, budget_s=2.0)
    assert (first.key, first.load, first.bottleneck) == ("j0.s0", 0.75, True)
    assert (second.key, second.load, second.bottleneck) == ("j0.s1", 0.25, False)
    assert [s.bottleneck for s in operator_samples(stages, budget_s=2.0, busy_share=0.8)] == [False, False]


def test_skipped_stages_and_unknown_budgets():
    stages = [_stage(status="SKIPPED", numTasks=0), _stage(job=1, executorRunTime=0, submissionTime=None)]
    s, = operator_samples(stages, budget_s=None)
    assert (s.key, s.load, s.bottleneck, s.true_rate, s.wall_s) == ("j1.s0", None, False, None, None)


def test_the_plugin_validates_its_parameter_and_adds_nothing_without_an_engine():
    with pytest.raises(ConfigError, match=r"^operators.busy_share must be <= 1, got 1.5$"):
        OperatorMetrics().set_param("busy_share", 1.5)
    m = OperatorMetrics()
    m.before_batch(type("Ctx", (), {"engine": None})())
    assert m.after_batch(object()) is None


@pytest.mark.spark
def test_a_stream_records_the_stages_spark_ran_for_each_batch(spark, tmp_path):
    from lmstream_kit.live import LiveStream

    s = LiveStream("LR2S", policy="lmstream", rate=2000, speedup=4, duration_s=12, trigger_s=1,
                   run_dir=tmp_path / "run", spark=spark, controllers=(OperatorMetrics(),))
    s.start()
    try:
        s.wait(until=lambda st: st.feed_finished(), timeout=180)
    finally:
        s.stop()
    data = [r for r in s.records if r["rows"]]
    assert data and all(r.get("operators") for r in data)
    for r in data:
        ops = {o["key"]: o for o in r["operators"]}
        # LR2S: the source stage (aggregating before the shuffle), then the stateful aggregation after it
        assert list(ops) == ["j0.s0", "j0.s1"]
        assert ops["j0.s0"]["records_in"] == r["rows"]  # Spark's own count of what the kit admitted
        assert ops["j0.s1"]["records_in"] == ops["j0.s0"]["records_out"]  # the shuffle, both sides
        assert all(o["tasks"] >= 1 and o["useful_s"] <= o["run_s"] for o in ops.values())
    written = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert '"operators": [{"key": "j0.s0"' in written


@pytest.mark.spark
def test_the_input_partitions_knob_sets_the_first_stages_parallelism_from_the_next_batch(spark, tmp_path):
    from lmstream_kit.live import LiveStream
    from lmstream_kit.tune import InputPartitions

    knob = InputPartitions(1)
    # a batch every 4 simulated s (2 wall s) of 1 s datasets: room for 3 partitions in each
    s = LiveStream("LR2S", policy="fixed", rate=2000, speedup=2, duration_s=40, trigger_s=4, read="executors",
                   run_dir=tmp_path / "run", spark=spark, controllers=(knob, OperatorMetrics()))
    s.start()
    try:
        s.wait(batches=3, timeout=120)
        knob.set_param("partitions", 3)
        s.wait(until=lambda st: st.feed_finished(), timeout=180)
    finally:
        s.stop()
    data = [r for r in s.records if r["rows"]]
    tasks = [({o["key"]: o for o in r["operators"]}["j0.s0"]["tasks"], r["input_partitions"], r["n_datasets"])
             for r in data]
    assert all(t == made for t, made, _ in tasks)  # the record says what Spark ran
    # the change is in the record of the first batch it is in force for
    first = next(r["batch_id"] for r in s.records
                 if any(c["param"] == "source.partitions" and c["value"] == 3 for c in r.get("changes") or ()))
    before = [t for (t, _, _), r in zip(tasks, data) if r["batch_id"] < first]
    after = [(t, n) for (t, _, n), r in zip(tasks, data) if r["batch_id"] >= first]
    assert before and set(before) == {1}
    assert after and all(t == min(3, n) for t, n in after) and any(t == 3 for t, _ in after)
    # and a journal transaction, committed by that batch
    from lmstream_kit.journal import Journal

    [txn] = Journal(tmp_path / "run").transactions()
    assert (txn["op"], txn["old"], txn["value"], txn["state"], txn["batch_id"]) == (
        "source_partitions", 1, 3, "committed", first)


@pytest.mark.spark
def test_the_tuner_sets_the_source_partitions_of_a_running_stream(spark, tmp_path):
    """DS2's rule on a real stream: LR2S's source stage is light, so 3 input partitions come down to
    what the rule asks for, applied from a later batch; every record carries the proposal and why."""
    from lmstream_kit.live import LiveStream
    from lmstream_kit.tune import ParallelismTuner

    tuner = ParallelismTuner(policy="ds2", partitions=3, cooldown=1)
    s = LiveStream("LR2S", policy="fixed", rate=2000, speedup=2, duration_s=30, trigger_s=4, read="executors",
                   run_dir=tmp_path / "run", spark=spark, controllers=(tuner,))
    s.start()
    try:
        s.wait(until=lambda st: st.feed_finished(), timeout=180)
    finally:
        s.stop()
    data = [r for r in s.records if r["rows"] and r.get("operators")]
    assert data and all(r["tuner_policy"] == "ds2" and "j0.s0" in r["tuner_proposal"] for r in data)
    tasks = [{o["key"]: o for o in r["operators"]}["j0.s0"]["tasks"] for r in data]
    assert tasks[0] == min(3, data[0]["n_datasets"]) and tasks[-1] < 3  # scaled down while it ran
    assert all(t == r["input_partitions"] for t, r in zip(tasks, data))
    changes = [c for r in s.records for c in r.get("changes") or () if c["param"] == "tuner.partitions"]
    assert changes and changes[0]["old"] == 3 and changes[-1]["value"] == tasks[-1]
    assert all(r["tuner_reason"]["j0.s1"].startswith("fixed: ") for r in data)
    # each of its moves is a journal transaction with its reason
    from lmstream_kit.journal import Journal

    txns = Journal(tmp_path / "run").transactions()
    assert [(t["op"], t["value"]) for t in txns] == [("source_partitions", c["value"]) for c in changes]
    assert all(t["state"] == "committed" and t["why"].startswith("tuner: apply") for t in txns), txns
