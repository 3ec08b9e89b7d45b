"""lmstream_kit.progress: Spark's progress JSON (captured from PySpark 4.1) -> BatchRecord, exact values.

No Spark here: the progress dicts in tests/data/spark_progress_4.1.json come from real runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.metrics import JsonlWriter, read_jsonl, write_run_info
from lmstream_kit.progress import ATTACHED_FIELDS, DURATION_PARTS, epoch_ms, progress_record, ran_batch
from lmstream_kit.record import FIELD_DOCS, BatchRecord, summarize

PROGRESS = json.loads((Path(__file__).parent / "data" / "spark_progress_4.1.json").read_text())
NOON = 1795435200  # 2026-11-23T12:00:00Z, epoch s


def test_timestamps_are_epoch_milliseconds():
    assert epoch_ms("2026-11-23T12:00:00.000Z") == NOON * 1000
    assert epoch_ms("2026-11-23T12:14:00.383Z") == (NOON + 840) * 1000 + 383


def test_rate_batch_with_event_time_gives_latencies_state_and_spark_durations():
    r = progress_record(PROGRESS["rate_agg_batch_1"], event_time=True, bound_s=5.0)
    assert (r.batch_id, r.policy, r.workload, r.rows, r.bytes, r.n_datasets) == (1, "attached", "rate_agg", 600,
                                                                                   None, None)
    assert r.admitted_at == NOON + 840.383  # the trigger's start
    assert r.completed_at == NOON + 841.423  # start + batchDuration (1040 ms)
    assert (r.processing_s, r.net_processing_s) == (1.04, 1.04)
    assert r.oldest_arrival == NOON + 836.629  # eventTime.min
    assert (r.buffering_s, r.max_latency_s, r.avg_latency_s) == (3.754, 4.794, 3.297)
    assert r.buffering_s + r.processing_s == pytest.approx(r.max_latency_s)
    assert r.throughput_rows_s == 600 / 1.04
    assert (r.bound_s, r.within_bound, r.output_rows, r.decision_reason, r.changes) == (5.0, True, 4, "trigger", None)
    assert r.extra == {
        "spark_addBatch_ms": 916, "spark_commitOffsets_ms": 13, "spark_getBatch_ms": 0, "spark_latestOffset_ms": 0,
        "spark_queryPlanning_ms": 92, "spark_triggerExecution_ms": 1040, "spark_walCommit_ms": 16,
        "input_rate_rows_s": 163.4, "spark_processed_rows_s": 576.9,
        "state_rows": 4, "state_memory_bytes": 1672, "late_rows": 0,
        "watermark": None,  # Spark reports 1970-01-01 until the first watermark
        "event_time_max": NOON + 839.624, "run_id": "f7d78999-51cc-44a4-a6f0-b62f63586f09",
        "source_lag": 0,  # the rate source read up to its latest offset
    }


def test_watermark_once_spark_has_one_and_a_bound_the_batch_misses():
    r = progress_record(PROGRESS["rate_agg_batch_2"], event_time=True, bound_s=2.5)
    assert r.extra["watermark"] == NOON + 837.624
    assert (r.max_latency_s, r.within_bound) == (2.503, False)
    assert (r.extra["state_rows"], r.extra["state_memory_bytes"]) == (4, 2152)


def test_file_source_batch_without_state():
    r = progress_record(PROGRESS["file_batch_1"], event_time=True)
    assert (r.rows, r.output_rows, r.processing_s) == (10, 10, 0.177)
    assert (r.max_latency_s, r.avg_latency_s, r.within_bound) == (9.682, 5.182, None)
    assert r.extra["spark_triggerExecution_ms"] == 176
    assert (r.extra["state_rows"], r.extra["state_memory_bytes"], r.extra["late_rows"]) == (None, None, None)
    assert r.extra["watermark"] == NOON + 839.0


def test_without_event_time_there_is_no_latency():
    r = progress_record(PROGRESS["rate_agg_batch_1"], bound_s=5.0)
    assert (r.oldest_arrival, r.buffering_s, r.max_latency_s, r.avg_latency_s, r.within_bound) == (None,) * 5
    assert r.extra["event_time_max"] is None
    assert r.extra["state_rows"] == 4 and r.processing_s == 1.04
    assert summarize([r.to_dict()])["batches"] == 0  # the summary is of latencies


def test_a_trigger_that_ran_no_batch_is_not_a_batch():
    assert not ran_batch(PROGRESS["no_batch"])
    assert all(ran_batch(PROGRESS[k]) for k in ("rate_agg_batch_1", "rate_agg_batch_2", "file_batch_1"))


def test_sink_without_a_row_count_and_changes_in_the_record():
    change = {"param": "trigger_s", "old": 0.5, "value": 1.0, "restart": True, "at": 1.0}
    no_count = {**PROGRESS["rate_agg_batch_2"], "sink": {"numOutputRows": -1}}
    r = progress_record(no_count, workload="mine", changes=[change])
    assert (r.output_rows, r.workload, r.changes) == (None, "mine", (change,))


def test_records_round_trip_through_metrics_jsonl(tmp_path):
    records = [progress_record(PROGRESS[k], event_time=True, bound_s=3.0)
               for k in ("rate_agg_batch_1", "rate_agg_batch_2")]
    writer = JsonlWriter(tmp_path / "metrics.jsonl", durable=False)
    for r in records:
        writer.append(r.to_dict())
    writer.close()
    back = [BatchRecord.from_dict(d) for d in read_jsonl(tmp_path / "metrics.jsonl")]
    assert back == records


def test_every_added_field_is_documented_and_none_shadows_a_typed_one():
    r = progress_record(PROGRESS["rate_agg_batch_1"], event_time=True)
    assert set(r.extra) == set(ATTACHED_FIELDS)
    assert not set(ATTACHED_FIELDS) & set(FIELD_DOCS)
    assert {f"spark_{p}_ms" for p in DURATION_PARTS} <= set(ATTACHED_FIELDS)


def _run_dir(tmp_path):
    run = tmp_path / "run"
    writer = JsonlWriter(run / "metrics.jsonl", durable=False)
    for k in ("rate_agg_batch_1", "rate_agg_batch_2"):
        writer.append(progress_record(PROGRESS[k], event_time=True, bound_s=3.0, workload="rate_agg").to_dict())
    writer.close()
    write_run_info(run, {"workload": "rate_agg", "policy": "attached"})
    return run


def test_an_attached_run_directory_replays_in_the_dashboard(tmp_path):
    from widgets.dashboard import Dashboard

    with Dashboard(_run_dir(tmp_path)) as dash:
        assert [r["batch_id"] for r in dash.records] == [1, 2]
        snap = dash.snapshot()
        assert list(snap["latency"].data[0].y) == [4.794, 2.503]
        assert list(snap["throughput"].data[0].x) == [1, 2]
        assert "workload rate_agg, policy attached" in repr(dash)


def test_lmstream_kit_compare_reads_an_attached_run_directory(tmp_path):
    from click.testing import CliRunner

    from lmstream_kit.cli import cli

    out = CliRunner().invoke(cli, ["compare", str(_run_dir(tmp_path))], terminal_width=250)
    assert out.exit_code == 0, out.output
    assert "rate_agg" in out.output and "attached" in out.output
    assert "50.0 %" in out.output  # batch 1 within the 3 s bound, batch 2 not


def test_lmstream_kit_attach_is_the_function_however_it_is_imported():
    import lmstream_kit
    from lmstream_kit import attach
    from lmstream_kit.attached import attach as attach_function

    assert attach is lmstream_kit.attach is attach_function
    for call in (attach, lmstream_kit.attach, attach_function):
        with pytest.raises(ConfigError, match="running pyspark StreamingQuery, got int"):
            call(42, event_time="ts")
