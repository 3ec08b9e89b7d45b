"""`--input DIR`: the user's own files through the directory-ingest adapter, on real Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lmstream_kit.live import LiveStream
from lmstream_kit.metrics import read_jsonl, read_run_info

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[1]
HEADER = "time,vehicle,speed,highway,lane,direction,segment,position"


def write_csv(path: Path, lines: list[str]) -> None:
    tmp = path.with_name("." + path.name)  # land atomically, as a copy tool would
    tmp.write_text(HEADER + "\n" + "\n".join(lines) + "\n")
    tmp.rename(path)


def test_every_well_formed_row_of_landed_files_is_processed_once(spark, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    sample = (REPO / "data" / "linear_road_sample.csv").read_text().splitlines()[1:]
    write_csv(landing / "a.csv", sample[:100])
    write_csv(landing / "b.csv", sample[100:180] + ["5,1,abc,0,1,0,3,100", "5,2,55,0,9,0,3,100", "5,3,55,0"])
    (landing / "c.jsonl").write_text(
        "\n".join(json.dumps(dict(zip(HEADER.split(","), map(int, line.split(","))))) for line in sample[180:250])
        + "\n{\"time\": 9, \"vehicle\": 1}\n"
    )
    run = tmp_path / "run"
    s = LiveStream("PASSTHROUGH", policy="lmstream", input_dir=landing, run_dir=run, spark=spark, speedup=5)
    s.start()
    s.wait(rows=250, timeout=120)
    write_csv(landing / "d.csv", sample[250:300])  # lands while the stream runs
    s.wait(rows=300, timeout=120)
    s.stop()

    files = sorted((run / "output").glob("part-*.parquet"))
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    got = sorted(tuple(r[c] for c in HEADER.split(",")) for r in rows)
    want = sorted(tuple(map(int, line.split(","))) for line in sample[:300])
    assert got == want, "each well-formed row exactly once, no malformed row"

    dead = read_jsonl(run / "dead_letter.jsonl")
    reasons = sorted(d["reason"] for d in dead)
    assert len(dead) == 4
    assert any("'abc'" in r and "speed" in r for r in reasons)
    assert any("lane" in r and "9" in r for r in reasons)
    assert {d["file"] for d in dead} == {"b.csv", "c.jsonl"}

    info = read_run_info(run)
    assert info["total_rows"] == 300 and info["rows_rejected"] == 4
    assert info["traffic"] == "input-dir"
