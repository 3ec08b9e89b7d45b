"""Policies, the metrics record and its loaders, source helpers (no Spark)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace as D

import pyarrow as pa
import pytest

from lmstream_kit.controller import AdmissionController
from lmstream_kit.exceptions import ConfigError, UnknownNameError
from lmstream_kit.metrics import JsonlWriter, batch_record, load_metrics, read_jsonl, summarize
from lmstream_kit.policies import AdmitAll, get_policy


def test_policies_have_the_paper_triggers():
    assert get_policy("lmstream").trigger_s == 0 and get_policy("lmstream").uses_controller
    assert get_policy("asap").trigger_s == 0 and not get_policy("asap").uses_controller
    assert get_policy("fixed").trigger_s == 10.0
    assert get_policy("FIXED", trigger_s=2.5).trigger_s == 2.5


def test_unknown_policy_lists_the_known_ones():
    with pytest.raises(UnknownNameError, match=r"unknown policy 'eager'; known: asap, fixed, lmstream"):
        get_policy("eager")


@pytest.mark.parametrize("bad", [0, -3, float("nan"), float("inf")])
def test_fixed_trigger_must_be_positive(bad):
    with pytest.raises(ConfigError, match="fixed trigger interval must be a finite number > 0 of seconds"):
        get_policy("fixed", trigger_s=bad)


def test_lmstream_gate_is_a_controller_with_the_slide_as_target():
    gate = get_policy("lmstream").make_gate(slide_s=2.5)
    assert isinstance(gate, AdmissionController)
    assert gate.target_s == 2.5


def test_admit_all_admits_everything_pending_and_nothing_when_empty():
    gate = AdmitAll(reason="asap")
    assert not gate.decide(10.0, []).admit
    d = gate.decide(10.0, [D(arrival=7.0, rows=5, nbytes=50), D(arrival=9.0, rows=1, nbytes=10)])
    assert (d.admit, d.reason, d.n_datasets, d.rows, d.nbytes, d.age_s) == (True, "asap", 2, 6, 60, 3.0)


def test_batch_record_definitions():
    r = batch_record(
        batch_id=1, policy="fixed", admitted_at=20.0, completed_at=22.0,
        datasets=[D(arrival=10.0, rows=1, nbytes=100), D(arrival=16.0, rows=3, nbytes=300)],
    )
    assert r["max_latency_s"] == 12.0
    assert r["avg_latency_s"] == (12.0 + 3 * 6.0) / 4
    assert r["buffering_s"] == 10.0 and r["processing_s"] == 2.0
    assert r["throughput_rows_s"] == 2.0 and r["bytes"] == 400 and r["n_datasets"] == 2


def test_empty_batch_record_has_no_latency():
    r = batch_record(batch_id=0, policy="asap", admitted_at=1.0, completed_at=1.5, datasets=[])
    assert r["rows"] == 0 and r["max_latency_s"] is None


def test_metrics_survive_a_torn_last_line_and_join_spark_progress(tmp_path):
    w = JsonlWriter(tmp_path / "metrics.jsonl")
    for i in range(3):
        w.append({"batch_id": i, "rows": 10 * i, "max_latency_s": float(i), "nan": math.nan})
    w.close()
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"batch_id": 3, "ro')  # the driver died mid-write
    (tmp_path / "spark_progress.jsonl").write_text(
        json.dumps({"batch_id": 1, "addBatch_ms": 40}) + "\n" + json.dumps({"batch_id": 2, "addBatch_ms": 50}) + "\n"
    )
    assert [r["batch_id"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 1, 2]
    df = load_metrics(tmp_path)
    assert list(df["batch_id"]) == [0, 1, 2]
    assert df["spark_addBatch_ms"].tolist()[1:] == [40, 50]
    assert df["nan"].isna().all()


def test_summarize_ignores_empty_batches_and_counts_the_bound():
    recs = [
        {"rows": 0, "max_latency_s": None, "avg_latency_s": None, "processing_s": 0.1},
        {"rows": 100, "max_latency_s": 1.0, "avg_latency_s": 0.5, "processing_s": 0.5},
        {"rows": 100, "max_latency_s": 4.0, "avg_latency_s": 2.5, "processing_s": 0.5},
    ]
    s = summarize(recs, bound_s=2.0)
    assert s["batches"] == 2 and s["rows"] == 200
    assert s["max_latency_max_s"] == 4.0 and s["latency_mean_s"] == 1.5
    assert s["throughput_rows_s"] == 200.0 and s["within_bound"] == 0.5


def test_split_range_balances_contiguous_chunks():
    pytest.importorskip("pyspark")
    from lmstream_kit.engine.source import split_range

    assert split_range(0, 0, 2) == []
    assert split_range(3, 4, 2) == [(3, 4)]
    assert split_range(0, 7, 3) == [(0, 3), (3, 5), (5, 7)]


def test_arrow_schema_maps_to_spark_ddl_and_back():
    from lmstream_kit.engine.schema import spark_compatible, spark_ddl

    schema = pa.schema([pa.field("a", pa.int32(), nullable=False), ("b", pa.large_string()), ("t", pa.timestamp("ms"))])
    assert spark_ddl(schema) == "`a` int, `b` string, `t` timestamp"
    s = spark_compatible(schema)
    assert s.field("a").nullable and s.field("b").type == pa.string()
    assert s.field("t").type == pa.timestamp("us", tz="UTC")
    # lists of supported types become arrays (a Flumina page view's payload); other nested types do not
    assert spark_ddl(pa.schema([("x", pa.list_(pa.int8()))])) == "`x` array<tinyint>"
    assert spark_compatible(pa.schema([("x", pa.list_(pa.int64()))])).field("x").type == pa.list_(
        pa.field("element", pa.int64()))
    with pytest.raises(ConfigError, match="column 'x'"):
        spark_ddl(pa.schema([("x", pa.struct([("a", pa.int8())]))]))


def test_checkpoint_offsets_reads_planned_and_committed_feed_offsets(tmp_path):
    from lmstream_kit.engine.stream import checkpoint_offsets

    assert checkpoint_offsets(tmp_path / "none") == (None, None)
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}'
    for batch_id, seq in ((0, 0), (1, 12), (2, 30)):
        (tmp_path / "offsets" / str(batch_id)).write_text(f'v1\n{meta}\n{{"seq":{seq}}}')
    for batch_id in (0, 1):
        (tmp_path / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    # batch 2 was planned (walCommit) but never committed: Spark replays 12..30
    assert checkpoint_offsets(tmp_path) == (30, 12)
