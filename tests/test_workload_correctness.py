"""Streamed window results equal a batch computation of the same query over the same rows."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.feed.spool import Spool
from lmstream_kit.journal import Journal
from lmstream_kit.live import LiveStream
from lmstream_kit.workloads import get_workload
from lmstream_kit.workloads.linear_road import make_position_reports

pytestmark = pytest.mark.spark


def sliding_windows(frame: pd.DataFrame, range_s: int, slide_s: int) -> pd.DataFrame:
    """Each row once per sliding window [start, start + range) that contains its time."""
    parts = []
    first = (frame["time"] // slide_s) * slide_s
    for k in range(range_s // slide_s):
        start = first - k * slide_s
        parts.append(frame.assign(window_start=start, window_end=start + range_s))
    out = pd.concat(parts, ignore_index=True)
    return out[out["window_start"] > out["time"] - range_s]


def streamed(run: Path, **timestamp_columns: str) -> pd.DataFrame:
    """The run's output; ``name=column`` adds ``name`` as epoch seconds of a timestamp column."""
    files = sorted((run / "output").glob("part-*.parquet"))
    df = pa.concat_tables([pq.read_table(f) for f in files]).to_pandas()
    for name, column in timestamp_columns.items():
        df[name] = (df[column] - pd.Timestamp(0, tz="UTC")).dt.total_seconds().astype("int64")
    return df


def run_to_end(workload, run: Path, spark, *, inspect=None, midway=None, **kw) -> pd.DataFrame:
    """Stream all generated traffic through ``workload``; return the rows the feed held.

    ``midway(stream)``, if given, is called once the stream started; ``inspect(stream)`` once the
    feed has finished, before the stop.
    """
    s = LiveStream(workload, policy="lmstream", speedup=10, run_dir=run, spark=spark, **kw)
    s.start()
    if midway is not None:
        midway(s)
    s.wait(until=lambda st: st.feed_finished(), timeout=180)
    if inspect is not None:
        inspect(s)
    s.stop()
    return Spool(run / "spool", create=False).read_table().to_pandas()


def last_watermark(run: Path, lateness_s: int) -> int:
    """The watermark (epoch seconds) in force in the run's last data batch.

    Spark computes a batch's watermark from the rows of the batches before it,
    so windows that end before it are closed (and emitted) by the end of the run.
    """
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = max((r for r in records if r["rows"] > 0), key=lambda r: r["batch_id"])
    before = Spool(run / "spool", create=False).read_table(0, last["start_seq"])
    return int(pc.max(before["time"]).as_py()) - lateness_s


def assert_same_multiset(got: pd.DataFrame, expected: pd.DataFrame, columns: list) -> None:
    """``got`` holds exactly the rows of ``expected`` (on ``columns``), each as often."""
    counts = got[columns].astype("int64").value_counts()
    want = expected[columns].astype("int64").value_counts()
    diff = counts.sub(want, fill_value=0)
    assert (diff == 0).all(), f"streamed minus expected count per row:\n{diff[diff != 0].head(10)}"


def window_pairs(rows: pd.DataFrame, range_s: int, slide_s: int) -> pd.DataFrame:
    """LR1 in pandas: per window, each report L once per report A of its vehicle (L's columns)."""
    windowed = sliding_windows(rows, range_s, slide_s)
    a_side = windowed[["window_start", "window_end", "vehicle"]]
    return windowed.merge(a_side, on=["window_start", "window_end", "vehicle"])


def count_sources(sources: list):
    """An ``inspect`` for run_to_end: records how many sources Spark planned."""

    def inspect(stream) -> None:
        sources.append(len(stream.query.lastProgress["sources"]))

    return inspect


def assert_same_windows(got, expected, *, keys, count, value, closed_before, at_least):
    """Streamed rows equal the batch rows, once each, and every closed window is there."""
    assert not got.duplicated(keys).any(), "each window emitted once"
    merged = got.merge(expected, on=keys, how="left", suffixes=("", "_batch"), indicator=True)
    assert (merged["_merge"] == "both").all(), "every streamed row exists in the batch result"
    assert (merged[count] == merged[count + "_batch"]).all()
    assert merged[value].to_numpy() == pytest.approx(merged[value + "_batch"].to_numpy(), rel=1e-12)
    want = expected[expected["window_end"] <= closed_before]
    assert len(want) > at_least
    both = want.merge(got, on=keys, how="left", indicator=True)
    assert (both["_merge"] == "both").all(), both[both["_merge"] != "both"].head()


def test_cm2s_matches_a_batch_computation_for_every_closed_window(spark, tmp_path):
    run = tmp_path / "cm2s"
    rows = run_to_end("CM2S", run, spark, traffic="constant", rate=300, duration_s=150, seed=5)
    sched = rows[rows["event_type"] == 1]
    keys = ["window_start", "window_end", "job_id"]
    expected = (
        sliding_windows(sched, 60, 5)
        .groupby(keys)
        .agg(avgCpu=("cpu", "mean"), tasks=("cpu", "size"))
        .reset_index()
    )
    got = streamed(run, window_start="window_start", window_end="window_end")
    assert_same_windows(
        got, expected, keys=keys, count="tasks", value="avgCpu",
        # the watermark in force in the last data batch (under load the batches grow, and it lags more)
        closed_before=last_watermark(run, lateness_s=5) - 1,
        at_least=100,
    )


def test_lr2s_matches_a_batch_computation_for_every_closed_window(spark, tmp_path):
    run = tmp_path / "lr2s"
    rows = run_to_end("LR2S", run, spark, traffic="random", rate=500, duration_s=120, seed=11)
    keys = ["window_end", "highway", "direction", "segment"]
    per_window = (
        sliding_windows(rows, 30, 10)
        .groupby(keys)
        .agg(avgSpeed=("speed", "mean"), reports=("speed", "size"))
        .reset_index()
    )
    expected = per_window[per_window["avgSpeed"] < 40.0]  # HAVING avgSpeed < 40
    got = streamed(run, window_end="timestamp")
    assert_same_windows(
        got, expected, keys=keys, count="reports", value="avgSpeed",
        closed_before=last_watermark(run, lateness_s=5) - 1,  # the watermark in force in the last data batch
        at_least=50,
    )


def spark_at_least(spark, major: int, minor: int) -> bool:
    return tuple(int(p) for p in spark.version.split(".")[:2]) >= (major, minor)


def test_lr2s_state_repartitioned_live_keeps_every_window(spark, tmp_path):
    """Stop, Spark's offline state repartition, restart (4.2+): every window as a batch computation."""
    if not spark_at_least(spark, 4, 2):
        pytest.skip(f"Spark {spark.version} has no offline state repartition (the 4.3 line runs this test)")
    run = tmp_path / "lr2s-repartition"

    def repartition(s) -> None:
        s.wait(batches=3, timeout=120)
        assert s.state_partitions() == 3
        s.set_state_partitions(5)
        assert s.state_partitions() == 5 and s.is_active

    # 240 s of traffic (24 wall s): on a loaded CI machine a restart took most of a 120 s feed's 12 wall
    # seconds, the backlog came in one batch after it, and its watermark closed only the first windows
    rows = run_to_end("LR2S", run, spark, midway=repartition, traffic="random", rate=500, duration_s=240,
                      seed=11, state_store="rocksdb", state_partitions=3)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    changes = [c for r in records for c in (r.get("changes") or []) if c["param"] == "state_partitions"]
    assert [(c["old"], c["value"], c["restart"]) for c in changes] == [(3, 5, True)]
    assert 0 < changes[0]["repartition_s"] <= changes[0]["restart_s"]
    [txn] = Journal(run).transactions()  # one transaction, committed with the first batch after the restart
    assert (txn["op"], txn["state"], txn["old"], txn["value"]) == ("state_partitions", "committed", 3, 5)
    assert txn["repartition_s"] == changes[0]["repartition_s"]
    assert txn["batch_id"] == next(r["batch_id"] for r in records if r.get("changes"))
    data = sorted((r for r in records if r["rows"] > 0), key=lambda r: r["batch_id"])
    assert [r["start_seq"] for r in data[1:]] == [r["end_seq"] for r in data[:-1]], "every dataset once"
    assert sum(r["rows"] for r in data) == len(rows)
    keys = ["window_end", "highway", "direction", "segment"]
    per_window = (sliding_windows(rows, 30, 10).groupby(keys)
                  .agg(avgSpeed=("speed", "mean"), reports=("speed", "size")).reset_index())
    assert_same_windows(
        streamed(run, window_end="timestamp"), per_window[per_window["avgSpeed"] < 40.0], keys=keys,
        count="reports", value="avgSpeed", closed_before=last_watermark(run, lateness_s=5) - 1, at_least=50,
    )


def test_a_tuner_with_a_state_knob_repartitions_the_state_of_a_live_stream(spark, tmp_path):
    """ParallelismTuner(knobs={stage: "state"}) on a LiveStream: the stream repartitions live (4.2+)."""
    if not spark_at_least(spark, 4, 2):
        pytest.skip(f"Spark {spark.version} has no offline state repartition (the 4.3 line runs this test)")
    from lmstream_kit.tune import ParallelismTuner

    # bounds 3..3: whatever the load, the tuner's first proposal for the stateful stage is 1 -> 3
    tuner = ParallelismTuner(policy="ds2", knobs={"j0.s1": "state"}, allow_restarts=True, low=3, high=3,
                             cooldown=0)
    run = tmp_path / "tuned"
    s = LiveStream("LR2S", policy="lmstream", traffic="constant", rate=300, speedup=10, run_dir=run, spark=spark,
                   state_store="rocksdb", state_partitions=1, controllers=[tuner]).start()
    try:
        s.wait(until=lambda st: st.state_partitions() == 3 and len(st.records) >= 6, timeout=150)
        assert s.is_active
    finally:
        s.stop()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    changes = [c for r in records for c in (r.get("changes") or []) if c["param"] == "state_partitions"]
    assert [(c["old"], c["value"], c["why"]) for c in changes] == [(1, 3, "tuner: j0.s1 1 -> 3")]
    data = sorted((r for r in records if r["rows"] > 0), key=lambda r: r["batch_id"])
    assert [r["start_seq"] for r in data[1:]] == [r["end_seq"] for r in data[:-1]], "every dataset once"


def test_a_repartition_cut_short_is_rolled_back_when_the_run_resumes(spark, tmp_path):
    """What a crash during Spark's repartition leaves (its batch written, not committed; the journal's
    transaction open) is rolled back at the next start: Spark would refuse to start otherwise."""
    if not spark_at_least(spark, 4, 2):
        pytest.skip(f"Spark {spark.version} has no offline state repartition (the 4.3 line runs this test)")
    run = tmp_path / "cut"
    kw = dict(policy="lmstream", traffic="constant", rate=300, speedup=10, run_dir=run, spark=spark,
              state_store="rocksdb", state_partitions=2)
    s = LiveStream("LR2S", duration_s=60, **kw).start()
    s.wait(batches=3, timeout=120)
    s.stop()
    ck = run / "checkpoint"
    last = max(int(p.name) for p in (ck / "commits").iterdir() if p.name.isdigit())
    entry = (ck / "offsets" / str(last)).read_text()
    assert '"spark.sql.shuffle.partitions":"2"' in entry
    (ck / "offsets" / str(last + 1)).write_text(entry.replace('"spark.sql.shuffle.partitions":"2"',
                                                              '"spark.sql.shuffle.partitions":"4"'))
    Journal(run).begin("state_partitions", old=2, value=4)  # requested, then the crash
    s = LiveStream("LR2S", duration_s=60, **kw).start()
    try:
        s.wait(until=lambda st: st.feed_finished(), timeout=120)
        assert s.is_active and s.state_partitions() == 2
    finally:
        s.stop()
    [txn] = Journal(run).transactions()
    assert txn["state"] == "aborted" and txn["recovered"] is True
    assert txn["reason"].startswith(f"the run stopped during the repartition into 4 partitions: batch {last + 1} rolled back")
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    data = sorted((r for r in records if r["rows"] > 0), key=lambda r: r["batch_id"])
    assert [r["start_seq"] for r in data[1:]] == [r["end_seq"] for r in data[:-1]], "every dataset once"
    assert data[0]["start_seq"] == 0 and sum(r["rows"] for r in data) == len(
        Spool(run / "spool", create=False).read_table())


def test_state_repartition_is_refused_where_spark_cannot_do_it(spark, tmp_path):
    """Before 4.2, or with the default state store, a one-line refusal, and the stream runs on."""
    s = LiveStream("LR2S", policy="lmstream", traffic="constant", rate=300, speedup=10,
                   run_dir=tmp_path / "refused", spark=spark).start()
    try:
        s.wait(batches=2, timeout=120)
        before = s.state_partitions()
        want = "RocksDB" if spark_at_least(spark, 4, 2) else "needs Spark 4.2"
        with pytest.raises(ConfigError, match=want) as err:
            s.set_state_partitions(before + 1)
        assert "\n" not in str(err.value) and str(before + 1) in str(err.value)
        n = len(s.records)
        s.wait(batches=n + 1, timeout=120)
        assert s.is_active and s.state_partitions() == before
        s.restart()  # the stop-and-restart baseline: nothing changes, the restart is recorded
        s.wait(batches=len(s.records) + 1, timeout=120)
        assert s.is_active and s.state_partitions() == before
    finally:
        s.stop()
    changes = [c for r in s.records for c in (r.get("changes") or []) if c["param"] in ("restart", "state_partitions")]
    assert [(c["param"], c["old"], c["value"], c["restart"]) for c in changes] == [("restart", 0, 1, True)]


LR1_COLUMNS = [
    "window_start", "window_end", "time", "vehicle", "speed", "highway", "lane", "direction",
    "segment",
]


@pytest.mark.parametrize(
    ("workload", "slide_s", "rows_per_report", "read"),
    [("LR1S", 5, 6, "executors"), ("LR1T", 30, 1, "driver")],
)
def test_lr1_self_join_pairs_each_report_once_per_window_from_one_source(
    spark, tmp_path, workload, slide_s, rows_per_report, read
):
    run = tmp_path / workload.lower()
    sources: list = []
    rows = run_to_end(
        workload, run, spark, traffic="random", rate=40, duration_s=90, seed=7, read=read,
        inspect=count_sources(sources),
    )
    # both sides of the self-join are one source: one admission, one offset range per batch
    assert sources == [1]
    got = streamed(run, window_start="window_start", window_end="window_end", time="timestamp")
    # a vehicle reports every 30 s, so a report only meets itself in a 30 s window:
    # one output row per window that holds it (and the join emits every pair, even
    # in windows still open when the feed ends)
    assert len(got) == rows_per_report * len(rows)
    assert_same_multiset(got, window_pairs(rows, 30, slide_s), LR1_COLUMNS)


def _vehicles_report_three_times_per_cycle(second, n, rng):
    """Linear Road reports whose vehicle ids are merged by three: 3 reports per vehicle per 30 s."""
    table = make_position_reports(second, n, rng)
    merged = pc.divide(table["vehicle"], 3)
    return table.set_column(table.schema.get_field_index("vehicle"), "vehicle", merged)


def test_lr1s_joins_every_pair_of_a_vehicles_reports_in_a_window(spark, tmp_path):
    dense = dataclasses.replace(
        get_workload("LR1S"), name="LR1S-dense", make_rows=_vehicles_report_three_times_per_cycle
    )
    run = tmp_path / "lr1s-dense"
    rows = run_to_end(dense, run, spark, traffic="constant", rate=12, duration_s=60, seed=3)
    got = streamed(run, window_start="window_start", window_end="window_end", time="timestamp")
    expected = window_pairs(rows, 30, 5)
    # a window inside the fed minute holds 3 reports of each vehicle: 3 pairs per report
    inside = "window_start >= 0 and window_end <= 60"
    assert len(expected.query(inside)) == 3 * len(sliding_windows(rows, 30, 5).query(inside)) > 0
    assert_same_multiset(got, expected, LR1_COLUMNS)


@pytest.mark.parametrize(("workload", "slide_s", "duration_s"), [("CM1S", 10, 120), ("CM1T", 60, 180)])
def test_cm1_matches_a_batch_computation_and_orders_each_batch(
    spark, tmp_path, workload, slide_s, duration_s
):
    run = tmp_path / workload.lower()
    rows = run_to_end(workload, run, spark, traffic="constant", rate=150, duration_s=duration_s, seed=9)
    keys = ["window_start", "window_end", "category"]
    expected = (
        sliding_windows(rows.rename(columns={"scheduling_class": "category"}), 60, slide_s)
        .groupby(keys)
        .agg(totalCpu=("cpu", "sum"), events=("cpu", "size"))
        .reset_index()
    )
    got = streamed(run, window_start="window_start", window_end="window_end")
    watermark = last_watermark(run, lateness_s=5)
    # append mode: only windows the watermark has closed, each once, with its full sum
    assert got["window_end"].max() <= watermark
    assert_same_windows(
        got, expected, keys=keys, count="events", value="totalCpu",
        closed_before=watermark - 1, at_least=7,
    )
    assert got["window_end"].is_monotonic_increasing, "windows close in end order, batch after batch"
    # ORDER BY, per micro-batch: window end, then totalCpu descending (ties: category)
    order = ["window_end", "totalCpu", "category"]
    for path in sorted((run / "output").glob("part-*.parquet")):
        batch = pq.read_table(path).to_pandas()
        ordered = batch.sort_values(order, ascending=[True, False, True], kind="stable")
        assert batch.index.equals(ordered.index), f"{path.name} is not ordered"
