"""Tests for lmstream_kit.feed.ingest (no Spark)."""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lmstream_kit.exceptions import ConfigError, IngestError
from lmstream_kit.feed.ingest import DirectoryIngest, IngestReport
from lmstream_kit.feed.spool import Spool
from lmstream_kit.workloads.linear_road import LR_CHECKS, LR_SCHEMA

HEADER = "time,vehicle,speed,highway,lane,direction,segment,position\n"


def report_row(t, v, speed=50, lane=1, position=15840):
    return dict(time=t, vehicle=v, speed=speed, highway=0, lane=lane, direction=0,
                segment=position // 5280, position=position)


def age(path, seconds_ago=10.0):
    past = time.time() - seconds_ago
    os.utime(path, (past, past))


def dead_letters(ing):
    if not ing.dead_letter.exists():
        return []
    return [json.loads(x) for x in ing.dead_letter.read_text().splitlines()]


@pytest.fixture
def env(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    spool = Spool(tmp_path / "spool", schema=LR_SCHEMA, durable=False)
    return inbox, spool, tmp_path


def make(env, **kw):
    inbox, spool, tmp = env
    kw.setdefault("checks", LR_CHECKS)
    kw.setdefault("dead_letter", tmp / "dead.jsonl")
    return DirectoryIngest(inbox, spool, **kw)


def test_good_csv_jsonl_parquet_one_dataset_each(env):
    inbox, spool, _ = env
    (inbox / "a.csv").write_text(HEADER + "1,10,55,0,2,0,3,15900\n1,11,33,0,1,0,4,21200\n")
    (inbox / "b.jsonl").write_text("\n".join(json.dumps(report_row(2, v)) for v in (20, 21, 22)) + "\n")
    (inbox / "c.json").write_text(json.dumps([report_row(3, 30)]))
    pq.write_table(pa.Table.from_pylist([report_row(4, 40), report_row(4, 41)]), inbox / "d.parquet")
    (inbox / "notes.txt").write_text("ignored: no pattern matches")
    for i, name in enumerate(["a.csv", "b.jsonl", "c.json", "d.parquet"]):
        age(inbox / name, 100 - i)  # mtime order a, b, c, d
    ing = make(env)
    rep = ing.scan_once()
    assert rep == IngestReport(files=4, datasets=4, rows_ok=8, rows_bad=0, deferred=0)
    infos = spool.datasets()
    assert [(i.source, i.rows) for i in infos] == [("a.csv", 2), ("b.jsonl", 3), ("c.json", 1), ("d.parquet", 2)]
    table = spool.read_table()
    assert table.schema.equals(LR_SCHEMA)
    assert table.column("vehicle").to_pylist() == [10, 11, 20, 21, 22, 30, 40, 41]
    assert table.column("speed").to_pylist()[:2] == [55, 33]
    assert dead_letters(ing) == []
    assert ing.files_done == 4 and ing.total_rows_ok == 8 and ing.total_rows_bad == 0


def test_files_processed_in_mtime_then_name_order(env):
    inbox, spool, _ = env
    base = time.time() - 100
    for name, mtime in [("z.csv", base), ("b.csv", base + 30), ("a.csv", base + 30)]:
        (inbox / name).write_text(HEADER + "1,1,50,0,1,0,0,100\n")
        os.utime(inbox / name, (mtime, mtime))
    make(env).scan_once()
    assert [i.source for i in spool.datasets()] == ["z.csv", "a.csv", "b.csv"]


def test_malformed_csv_rows_go_to_dead_letter(env):
    inbox, spool, _ = env
    (inbox / "bad.csv").write_text(
        HEADER
        + "1,1,50,0,1,0,3,15840\n"        # line 2 ok
        + "1,2,abc,0,1,0,3,15840\n"       # line 3 bad int
        + "\n"                            # line 4 blank (skipped)
        + "1,3,150,0,1,0,3,15840\n"       # line 5 speed out of range
        + "1,4,50,0,1\n"                  # line 6 wrong column count
        + " 1 , 5 ,50,0,2,0,3,15840\n"    # line 7 ok (whitespace trimmed)
        + "1,6,,0,1,0,3,15840\n"          # line 8 empty required value
        + "1,7,60,0,1,1,9,3000000000\n"   # line 9 int32 overflow
    )
    age(inbox / "bad.csv")
    ing = make(env)
    rep = ing.scan_once()
    assert (rep.files, rep.datasets, rep.rows_ok, rep.rows_bad) == (1, 1, 2, 5)
    assert spool.read_table().column("vehicle").to_pylist() == [1, 5]
    dl = dead_letters(ing)
    assert [(d["file"], d["line"], d["reason"]) for d in dl] == [
        ("bad.csv", 3, "column 'speed': value 'abc' is not int32"),
        ("bad.csv", 5, "column 'speed': value 150 is outside [0, 100]"),
        ("bad.csv", 6, "expected 8 columns, got 5"),
        ("bad.csv", 8, "column 'speed': value is empty"),
        ("bad.csv", 9, "column 'position': value '3000000000' is not int32"),
    ]
    assert dl[0]["record"] == "1,2,abc,0,1,0,3,15840"
    assert dl[2]["record"] == "1,4,50,0,1"
    assert all(isinstance(d["at"], float) for d in dl)
    entry = ing.manifest()[0]
    assert (entry["file"], entry["seq"], entry["rows_ok"], entry["rows_bad"]) == ("bad.csv", 0, 2, 5)


def test_malformed_jsonl_records(env):
    inbox, spool, _ = env
    lines = [
        json.dumps(report_row(1, 1)),
        "{not json",
        json.dumps(report_row(1, 2, speed="50")),
        json.dumps([1, 2]),
        json.dumps({k: v for k, v in report_row(1, 3).items() if k != "position"}),
        json.dumps(report_row(1, 4, lane=7)),
        json.dumps(report_row(1, 5, speed=41.0)),
    ]
    (inbox / "r.jsonl").write_text("\n".join(lines) + "\n")
    age(inbox / "r.jsonl")
    ing = make(env)
    rep = ing.scan_once()
    assert (rep.rows_ok, rep.rows_bad) == (2, 5)
    assert spool.read_table().column("vehicle").to_pylist() == [1, 5]
    assert spool.read_table().column("speed").to_pylist() == [50, 41]
    assert [(d["line"], d["reason"]) for d in dead_letters(ing)] == [
        (2, "invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        (3, "column 'speed': value '50' is not int32"),
        (4, "record is not a JSON object"),
        (5, "column 'position': value is missing"),
        (6, "column 'lane': value 7 is outside [0, 4]"),
    ]


def test_parquet_schema_mismatch_rejects_whole_file_and_row_checks_apply(env):
    inbox, spool, _ = env
    pq.write_table(pa.table({"time": ["x"], "vehicle": [1], "speed": [1], "highway": [0], "lane": [1],
                             "direction": [0], "segment": [0], "position": [0]}), inbox / "a.parquet")
    pq.write_table(pa.Table.from_pylist([report_row(2, 1), report_row(2, 2, speed=101)]), inbox / "b.parquet")
    age(inbox / "a.parquet", 20)
    age(inbox / "b.parquet", 10)
    ing = make(env)
    rep = ing.scan_once()
    assert (rep.files, rep.datasets, rep.rows_ok, rep.rows_bad) == (2, 1, 1, 2)
    dl = dead_letters(ing)
    assert dl[0]["file"] == "a.parquet" and dl[0]["line"] is None
    assert dl[0]["reason"].startswith("cannot convert to the spool schema: ")
    assert (dl[1]["file"], dl[1]["line"], dl[1]["reason"]) == (
        "b.parquet", 1, "column 'speed': value 101 is outside [0, 100]")
    assert dl[1]["record"]["vehicle"] == 2
    assert spool.datasets()[0].source == "b.parquet"


def test_csv_missing_column_rejects_file(env):
    inbox, spool, _ = env
    (inbox / "x.csv").write_text("time,vehicle\n1,2\n3,4\n")
    age(inbox / "x.csv")
    ing = make(env)
    rep = ing.scan_once()
    assert (rep.files, rep.datasets, rep.rows_ok, rep.rows_bad) == (1, 0, 0, 2)
    (d,) = dead_letters(ing)
    assert d["line"] == 1 and d["record"] == "time,vehicle"
    assert d["reason"].startswith("header lacks column(s) 'speed', 'highway'")
    assert spool.end_seq == 0


def test_exactly_once_across_restart(env):
    inbox, spool, tmp = env
    (inbox / "a.csv").write_text(HEADER + "1,1,50,0,1,0,3,15840\n")
    age(inbox / "a.csv")
    first = make(env)
    assert first.scan_once().files == 1
    assert first.scan_once().files == 0  # same instance: nothing new

    reopened = Spool(tmp / "spool", durable=False)
    second = DirectoryIngest(inbox, reopened, checks=LR_CHECKS, dead_letter=tmp / "dead.jsonl")
    assert second.files_done == 1 and second.total_rows_ok == 1
    (inbox / "b.csv").write_text(HEADER + "2,2,50,0,1,0,3,15840\n")
    age(inbox / "b.csv", 5)
    rep = second.scan_once()
    assert (rep.files, rep.datasets) == (1, 1)
    assert [i.source for i in reopened.datasets()] == ["a.csv", "b.csv"]
    lines = (tmp / "spool" / "ingested.jsonl").read_text().splitlines()
    assert [json.loads(x)["file"] for x in lines] == ["a.csv", "b.csv"]


def test_crash_between_append_and_manifest_is_recovered(env):
    inbox, spool, tmp = env
    (inbox / "a.csv").write_text(HEADER + "1,1,50,0,1,0,3,15840\n")
    age(inbox / "a.csv")
    make(env).scan_once()
    (tmp / "spool" / "ingested.jsonl").write_text('{"file":"a.cs')  # manifest line lost + torn
    again = make(env)
    assert again.scan_once().files == 0
    assert spool.end_seq == 1
    assert again.manifest()[0]["file"] == "a.csv" and again.manifest()[0]["recovered"] is True


def test_file_still_being_written_is_deferred(env):
    inbox, spool, _ = env
    now = [time.time()]
    ing = make(env, settle_s=2.0, clock=lambda: now[0])
    path = inbox / "live.csv"
    path.write_text(HEADER + "1,1,50,0,1,0,3,15840\n")
    os.utime(path, (now[0], now[0]))  # just modified
    rep = ing.scan_once()
    assert (rep.files, rep.deferred) == (0, 1)
    # writer appends more; mtime moves on
    now[0] += 1.5
    with open(path, "a") as f:
        f.write("1,2,50,0,1,0,3,15840\n")
    os.utime(path, (now[0], now[0]))
    now[0] += 1.0
    assert ing.scan_once().deferred == 1  # changed since last scan: settle restarts
    now[0] += 1.5  # 1.5 s since the change was seen: not settled yet
    assert ing.scan_once().deferred == 1
    now[0] += 0.5
    rep = ing.scan_once()
    assert (rep.files, rep.rows_ok, rep.deferred) == (1, 2, 0)
    assert spool.read_table().column("vehicle").to_pylist() == [1, 2]


def test_hidden_empty_and_dead_letter_files_are_skipped(env):
    inbox, spool, _ = env
    (inbox / ".part.csv").write_text(HEADER + "1,1,50,0,1,0,3,15840\n")
    (inbox / "_tmp.csv").write_text(HEADER + "1,1,50,0,1,0,3,15840\n")
    (inbox / "empty.csv").write_text("")
    for p in inbox.iterdir():
        age(p)
    ing = make(env, dead_letter=inbox / "dead.jsonl")
    rep = ing.scan_once()
    assert (rep.files, rep.deferred) == (0, 1)
    assert spool.end_seq == 0


def test_missing_directory_and_bad_checks(env, tmp_path):
    _, spool, _ = env
    with pytest.raises(IngestError, match=f"cannot read ingest directory {tmp_path / 'nowhere'}"):
        DirectoryIngest(tmp_path / "nowhere", spool)
    with pytest.raises(ConfigError, match="check on unknown column 'sped'"):
        make(env, checks={"sped": (0, 1)})
    with pytest.raises(ConfigError, match=r"check for column 'speed' has lo > hi: \(5, 1\)"):
        make(env, checks={"speed": (5, 1)})
    ing = make(env)
    ing.directory.rename(tmp_path / "moved")
    with pytest.raises(IngestError, match="cannot read ingest directory"):
        ing.scan_once()


def test_background_thread_ingests(env):
    inbox, spool, _ = env
    ing = make(env, poll_interval_s=0.02, settle_s=0.0).start()
    try:
        (inbox / "a.csv").write_text(HEADER + "1,1,50,0,1,0,3,15840\n")
        deadline = time.monotonic() + 5
        while ing.files_done < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        ing.stop()
    assert ing.files_done == 1 and spool.end_seq == 1 and ing.error is None
    assert not ing.running


def test_linear_road_sample_file_ingests_cleanly(env):
    inbox, spool, _ = env
    data = open("data/linear_road_sample.csv").read()
    (inbox / "sample.csv").write_text(data)
    age(inbox / "sample.csv")
    rep = make(env).scan_once()
    assert (rep.rows_ok, rep.rows_bad) == (300, 0)
