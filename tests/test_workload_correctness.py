"""Streamed window results equal a batch computation of the same query over the same rows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lmstream_kit.feed.spool import Spool
from lmstream_kit.live import LiveStream

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


def run_to_end(workload: str, run: Path, spark, **kw) -> pd.DataFrame:
    """Stream all generated traffic through ``workload``; return the rows the feed held."""
    s = LiveStream(workload, policy="lmstream", speedup=10, run_dir=run, spark=spark, **kw)
    s.start()
    s.wait(until=lambda st: st.feed_finished(), timeout=180)
    s.stop()
    return Spool(run / "spool", create=False).read_table().to_pandas()


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
        closed_before=int(rows["time"].max()) - 5 - 10,  # watermark lag plus two slides
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
        closed_before=int(rows["time"].max()) - 5 - 20,  # watermark lag plus two slides
        at_least=50,
    )
