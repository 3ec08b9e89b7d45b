"""A Flumina spec as a workload of the kit: generated events, admitted by every policy, each micro-batch
run on Spark in fork/join passes; the outputs equal the sequential run over everything ingested, also
across a restart of the stream."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.feed.spool import Spool
from lmstream_kit.flumina import EXAMPLES, Event, run_sequential
from lmstream_kit.workloads.flumina import flumina_workload


def _outputs(run):
    files = sorted((run / "output").glob("part-*.parquet"))
    return [out for f in files for out in pq.read_table(f).column("output").to_pylist()]


def _sequential(run, example, parts):
    rows = Spool(run / "spool", create=False).read_table().to_pandas().sort_values(["ts", "seq"])
    events = [Event(t, ts, None if p != p else (int(p) if example != "max_temperature" else p))
              for t, ts, p in zip(rows["tag"], rows["ts"], rows["payload"])]
    return run_sequential(EXAMPLES.get(example).spec(parts), events), len(rows)


def _stream(spark, run, workload, *, policy="lmstream", rate=1000, duration_s=8):
    """Run ``workload`` until its generated traffic has been fed and processed; the stream."""
    from lmstream_kit.live import LiveStream

    s = LiveStream(workload, policy=policy, traffic="constant", rate=rate, speedup=4, duration_s=duration_s,
                   trigger_s=1, run_dir=run, spark=spark)
    s.start()
    try:
        s.wait(until=lambda st: st.feed_finished(), timeout=180)
    finally:
        s.stop()
    return s


def test_the_workload_generates_the_examples_events():
    w = flumina_workload("fraud_detection", parallelism=2, sync_every=50)
    table = w.make_rows(7, 1000, np.random.default_rng(1))
    assert table.schema == w.schema and table.num_rows == 1000
    tags = table.column("tag").to_pylist()
    assert set(tags) == {"tx0", "tx1", "refresh"} and 5 <= tags.count("refresh") <= 40
    assert table.column("seq").to_pylist() == list(range(70_000_000, 70_001_000))
    with pytest.raises(ConfigError, match=r"^unknown Flumina workload example 'page_views' \(known: value_barrier, "):
        flumina_workload("page_views")
    with pytest.raises(ConfigError, match=r"^parallelism must be an integer >= 1, got 0$"):
        flumina_workload(parallelism=0)


@pytest.mark.spark
@pytest.mark.parametrize("policy", ["lmstream", "fixed", "asap"])
def test_fraud_detection_runs_under_every_policy_and_equals_the_sequential_run(spark, tmp_path, policy):
    run = tmp_path / policy
    s = _stream(spark, run, flumina_workload("fraud_detection", parallelism=2, sync_every=300, bound_s=4.0),
                policy=policy, rate=1500, duration_s=16)
    (state, outputs), ingested = _sequential(run, "fraud_detection", 2)
    assert ingested == 16 * 1500 == sum(r["rows"] for r in s.records)
    assert _outputs(run) == [repr(o) for o in outputs] and len(outputs) > 20
    data = [r for r in s.records if r["rows"]]
    assert all(r["flumina_passes"] == (2 if r["flumina_epochs"] > 1 else 1) for r in data)
    assert sum(r["flumina_epochs"] - 1 for r in data) == len(outputs)
    written = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["flumina_passes"] for m in written if m.get("rows")] == [r["flumina_passes"] for r in data]


@pytest.mark.spark
def test_a_restarted_stream_continues_from_the_workers_states(spark, tmp_path):
    run = tmp_path / "vb"
    for _ in range(2):  # the second stream resumes the first's run directory
        _stream(spark, run, flumina_workload("value_barrier", parallelism=2, sync_every=400, bound_s=4.0))
    (state, outputs), ingested = _sequential(run, "value_barrier", 2)
    assert ingested == 16 * 1000
    assert _outputs(run) == [repr(o) for o in outputs]
    kept = sorted(p.name for p in (run / "workload_state").iterdir())
    assert kept[-1] == "flumina_plan.json" and len(kept) == 3 and all(k.endswith(".pkl") for k in kept[:2])
