"""Swapping the per-batch function of a running stream on real Spark: no restart, every row once."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.feed.spool import Spool
from lmstream_kit.journal import Journal
from lmstream_kit.live import LiveStream

pytestmark = pytest.mark.spark


def ended(run, n):
    """Whether the run's journal holds ``n`` transactions that committed or aborted."""
    return lambda _s: sum(t["state"] in ("committed", "aborted") for t in Journal(run).transactions()) >= n


def tagged(df):
    from pyspark.sql import functions as F

    return df.withColumn("tag", F.lit("v2"))


def test_a_batch_function_is_swapped_at_a_batch_boundary_without_a_restart(spark, tmp_path, capfd):
    run = tmp_path / "swap"
    # traffic to spare (400 s of data, 40 s of wall time): the swap is applied at a batch however slow the
    # machine; the stream stops once it committed, and the stop processes what was fed
    s = LiveStream("PASSTHROUGH", policy="lmstream", traffic="constant", rate=400, speedup=10, duration_s=400,
                   run_dir=run, spark=spark).start()
    try:
        s.wait(batches=3, timeout=120)
        query_run = s.query.runId
        s.set_batch_function(tagged, name="tag-v2")
        # a function that does not fit the result is refused in one line; the stream runs on
        with pytest.raises(ConfigError, match=r"^batch function 'broken' refused: .*no_such_column") as err:
            s.set_batch_function(lambda df: df.select("no_such_column"), name="broken")
        assert "\n" not in str(err.value)
        assert "DataFrameQueryContextLogger" not in capfd.readouterr().err, "no JVM stack on the console"
        s.wait(until=ended(run, 2), timeout=120)
        s.wait(batches=len([r for r in s.records if r["rows"] > 0]) + 1, timeout=120)
        assert s.query.runId == query_run, "a swap must not restart the query"
    finally:
        s.stop()
    records = sorted((r for r in s.records if r["rows"] > 0), key=lambda r: r["batch_id"])
    first = next(r["batch_id"] for r in records if r.get("batch_function") == "tag-v2")
    assert first > records[0]["batch_id"]
    assert all(r.get("batch_function") == "tag-v2" for r in records if r["batch_id"] >= first)
    for r in records:  # the batches before the swap have no tag, every one after has it
        table = pq.read_table(run / "output" / f"part-{r['batch_id']:08d}.parquet")
        assert ("tag" in table.column_names) == (r["batch_id"] >= first)
    # every fed row once, across the swap
    out = sum(pq.read_table(run / "output" / f"part-{r['batch_id']:08d}.parquet").num_rows for r in records)
    assert out == Spool(run / "spool", create=False).read_table().num_rows
    txns = Journal(run).transactions()
    assert [(t["op"], t["value"], t["state"]) for t in txns] == [
        ("batch_function", "tag-v2", "committed"), ("batch_function", "broken", "aborted")]
    assert txns[0]["batch_id"] == first and "no_such_column" in txns[1]["reason"]


def test_a_batch_function_that_fails_on_data_is_undone_and_the_batch_runs_under_the_old_one(spark, tmp_path):
    from pyspark.sql import functions as F

    @F.udf("double")
    def kmh(speed):  # fails on the data, not in Spark's analysis
        raise ValueError(f"no conversion for speed {speed}")

    run = tmp_path / "undo"
    s = LiveStream("PASSTHROUGH", policy="lmstream", traffic="constant", rate=400, speedup=10, duration_s=400,
                   run_dir=run, spark=spark).start()
    try:
        s.wait(batches=2, timeout=120)
        s.set_batch_function(tagged, name="tag-v2")
        n = len([r for r in s.records if r["rows"] > 0])
        s.wait(batches=n + 2, timeout=120)
        s.set_batch_function(lambda df: df.withColumn("kmh", kmh("speed")), name="kmh")  # passes the check
        s.wait(until=ended(run, 2), timeout=120)
        s.wait(batches=len([r for r in s.records if r["rows"] > 0]) + 1, timeout=120)
        assert s.is_active
    finally:
        s.stop()
    txns = Journal(run).transactions()
    assert [(t["value"], t["state"]) for t in txns] == [("tag-v2", "committed"), ("kmh", "aborted")]
    assert "batch_id" in txns[1], txns[1]
    assert txns[1]["reason"].startswith(f"batch function 'kmh' failed on batch {txns[1]['batch_id']}, which ran "
                                        "again under 'tag-v2': ") and "no conversion for speed" in txns[1]["reason"]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert {r.get("batch_function") for r in records if r["batch_id"] >= txns[1]["batch_id"]} == {"tag-v2"}
    out = sum(pq.read_table(run / "output" / f"part-{r['batch_id']:08d}.parquet").num_rows
              for r in records if r["rows"] > 0)
    assert out == Spool(run / "spool", create=False).read_table().num_rows  # the failed batch, once
