"""Spool retention on real local Spark: a restart after retention deleted data is still exactly-once."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lmstream_kit.feed.spool import Spool
from lmstream_kit.live import LiveStream
from lmstream_kit.metrics import load_metrics

pytestmark = pytest.mark.spark


def _output(run: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(f) for f in sorted((run / "output").glob("part-*.parquet"))])


def test_a_restart_after_retention_deleted_committed_data_is_exactly_once(spark, tmp_path):
    run = tmp_path / "retained"
    # the most eager retention: every committed dataset goes after the next batch
    kw = dict(policy="lmstream", traffic="constant", rate=300, speedup=10, run_dir=run, spark=spark,
              retention={"max_age_s": 0.0, "keep_batches": 0,
                         # and the journals: metrics.jsonl rotated every few batches, parts deleted at once
                         "journal_bytes": 4096, "journal_age_s": 0.0})
    first = LiveStream("PASSTHROUGH", **kw).start()
    first.wait(batches=5, timeout=120)
    first.stop(drain=False)  # admitted-but-unprocessed and pending datasets stay behind
    released_first = Spool(run / "spool", create=False).first_seq
    assert released_first > 0, "retention deleted committed data during the first run"

    second = LiveStream("PASSTHROUGH", duration_s=None, **kw).start()
    second.wait(until=lambda st: st.spool.end_seq > released_first + 25 and len(st.records) >= 4, timeout=120)
    second.stop(drain=True)
    spool = Spool(run / "spool", create=False)
    assert spool.first_seq > released_first, "and again after the restart"
    assert len(list((run / "spool" / "data").glob("*.arrow"))) == spool.end_seq - spool.first_seq

    # the index outlives the data: each dataset is one generator second of 300 rows, and the
    # output holds each second's rows once (PASSTHROUGH writes its input as it is)
    want = {info.second: info.rows for info in spool.datasets()}
    out = _output(run)
    got = collections.Counter(out["time"].to_pylist())
    assert dict(got) == want, "no second lost or duplicated across retention and the restart"
    assert len(set(zip(*(out[c].to_pylist() for c in out.column_names)))) == out.num_rows
    fields = [r for r in second.records if r.get("spool_first_seq") is not None]
    assert fields and fields[-1]["spool_bytes"] >= 0

    # the metrics journal was rotated and its old parts deleted, yet run.json's totals count every batch
    released = json.loads((run / "metrics.released.json").read_text())
    assert released["parts"] > 0 and released["batches"] > 0
    info = json.loads((run / "run.json").read_text())
    assert info["rows_processed"] == sum(want.values()) == info["feed_rows"], (info, released)
    kept = load_metrics(run)
    assert len(kept) + released["batches"] == info["batches"], (len(kept), released, info["batches"])
