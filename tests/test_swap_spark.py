"""Swapping the per-batch function of a running stream on real Spark: no restart, every row once."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.feed.spool import Spool
from lmstream_kit.journal import Journal
from lmstream_kit.live import LiveStream

pytestmark = pytest.mark.spark


def tagged(df):
    from pyspark.sql import functions as F

    return df.withColumn("tag", F.lit("v2"))


def test_a_batch_function_is_swapped_at_a_batch_boundary_without_a_restart(spark, tmp_path, capfd):
    run = tmp_path / "swap"
    s = LiveStream("PASSTHROUGH", policy="lmstream", traffic="constant", rate=400, speedup=10, duration_s=40,
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
        s.wait(until=lambda st: st.feed_finished(), timeout=120)
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
