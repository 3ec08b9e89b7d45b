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


def test_parquet_bad_values_are_rejected_row_by_row(env):
    inbox, spool, _ = env
    # A text column where int32 is wanted: numbers written as text convert (trimmed, like CSV
    # cells), "fast" and the empty string do not; the other rows of the file are kept.
    pq.write_table(pa.table({"time": ["x", "7", " 8 ", "fast", ""], "vehicle": [1, 2, 3, 4, 5],
                             "speed": [1, 2, 3, 4, 5], "highway": [0] * 5, "lane": [1] * 5,
                             "direction": [0] * 5, "segment": [0] * 5, "position": [0] * 5}),
                   inbox / "a.parquet")
    # int64 values too large for int32, a null in a required column, a value outside the checks.
    pq.write_table(pa.table({"time": pa.array([2, 2, 2, 2], pa.int64()), "vehicle": [10, 11, 12, 13],
                             "speed": pa.array([50, 101, None, 40], pa.int64()), "highway": [0] * 4,
                             "lane": [1] * 4, "direction": [0] * 4, "segment": [0] * 4,
                             "position": pa.array([0, 1, 2, 3_000_000_000], pa.int64())}),
                   inbox / "b.parquet")
    age(inbox / "a.parquet", 20)
    age(inbox / "b.parquet", 10)
    ing = make(env)
    rep = ing.scan_once()
    assert (rep.files, rep.datasets, rep.rows_ok, rep.rows_bad) == (2, 2, 3, 6)
    assert [(i.source, i.rows) for i in spool.datasets()] == [("a.parquet", 2), ("b.parquet", 1)]
    table = spool.read_table()
    assert table.column("vehicle").to_pylist() == [2, 3, 10]
    assert table.column("time").to_pylist() == [7, 8, 2]
    dl = dead_letters(ing)
    assert [(d["file"], d["line"], d["reason"]) for d in dl] == [
        ("a.parquet", 0, "column 'time': value 'x' is not int32"),
        ("a.parquet", 3, "column 'time': value 'fast' is not int32"),
        ("a.parquet", 4, "column 'time': value is empty"),
        ("b.parquet", 1, "column 'speed': value 101 is outside [0, 100]"),
        ("b.parquet", 2, "column 'speed': value is missing"),
        ("b.parquet", 3, "column 'position': value 3000000000 is not int32"),
    ]
    # The record is the row as the file held it, so the bad value shows.
    assert dl[1]["record"] == {"time": "fast", "vehicle": 4, "speed": 4, "highway": 0, "lane": 1,
                               "direction": 0, "segment": 0, "position": 0}
    assert dl[5]["record"]["position"] == 3_000_000_000
    assert [(e["file"], e["rows_ok"], e["rows_bad"]) for e in ing.manifest()] == [
        ("a.parquet", 2, 3), ("b.parquet", 1, 3)]


def test_parquet_large_file_keeps_its_good_rows_without_a_per_row_loop(env, monkeypatch):
    from lmstream_kit.feed import validate

    inbox, spool, _ = env
    n = 200_307
    bad = list(range(5, n, 11_130))  # 18 rows
    too_big, fast = set(bad), set(bad[:6])
    position = pa.array([3_000_000_000 if i in too_big else i % 5280 for i in range(n)], pa.int64())
    speed = pa.array(["fast" if i in fast else str(i % 100) for i in range(n)])
    cols = {c: pa.array([0] * n, pa.int32()) for c in LR_SCHEMA.names}
    cols.update(vehicle=pa.array(range(n), pa.int32()), position=position, speed=speed)
    pq.write_table(pa.table(cols), inbox / "big.parquet")
    age(inbox / "big.parquet")
    casts = []
    real_cast = validate._cast
    monkeypatch.setattr(validate, "_cast", lambda v, t: casts.append(len(v)) or real_cast(v, t))
    ing = make(env)
    rep = ing.scan_once()
    assert (rep.rows_ok, rep.rows_bad) == (n - 18, 18)
    vehicles = spool.read_table().column("vehicle").to_pylist()
    assert len(vehicles) == n - 18 and not set(bad) & set(vehicles)
    dl = dead_letters(ing)
    assert [d["line"] for d in dl] == bad
    assert dl[0]["reason"] == ("column 'speed': value 'fast' is not int32; "
                               "column 'position': value 3000000000 is not int32")
    assert dl[-1]["reason"] == "column 'position': value 3000000000 is not int32"
    # Vectorised: the int64 column is checked by one round trip, the text column by halving
    # around its one distinct bad value; nowhere near one cast per row.
    assert len(casts) < 100, len(casts)


def test_parquet_that_cannot_be_read_or_converted_is_rejected_whole(env):
    inbox, spool, _ = env
    good = pa.Table.from_pylist([report_row(1, v) for v in range(50)])
    pq.write_table(good, inbox / "whole.parquet")
    data = (inbox / "whole.parquet").read_bytes()
    (inbox / "truncated.parquet").write_bytes(data[: len(data) // 2])
    (inbox / "random.parquet").write_bytes(bytes(range(256)) * 3)
    (inbox / "fake.parquet").write_bytes(b"PAR1" + b"\x07" * 40 + b"PAR1")
    pq.write_table(good.drop_columns(["lane"]), inbox / "missing.parquet")
    pq.write_table(pa.Table.from_arrays(list(good.columns) + [good.column("speed")],
                                        names=good.column_names + ["speed"]), inbox / "twice.parquet")
    pq.write_table(good.set_column(2, "speed", pa.array([[1]] * 50)), inbox / "nested.parquet")
    names = ["truncated", "random", "fake", "missing", "twice", "nested"]
    for k, name in enumerate(names):
        age(inbox / f"{name}.parquet", 100 - k)
    (inbox / "whole.parquet").unlink()
    ing = make(env)
    rep = ing.scan_once()
    assert (rep.files, rep.datasets, rep.rows_ok) == (6, 0, 0)
    dl = dead_letters(ing)
    assert [d["file"] for d in dl] == [f"{n}.parquet" for n in names]
    assert all(d["line"] is None and d["record"] is None for d in dl)
    magic = ("not a readable Parquet file: Parquet magic bytes not found in footer. "
             "Either the file is corrupted or this is not a parquet file.")
    assert dl[0]["reason"] == magic and dl[1]["reason"] == magic
    assert dl[2]["reason"].startswith("not a readable Parquet file: ")
    assert [d["reason"] for d in dl[3:]] == [
        "file lacks column(s) 'lane'",
        "file has column(s) 'speed' more than once",
        "cannot convert to the spool schema: column 'speed' is list<element: int64>, which does not convert to int32",
    ]
    assert [e["rows_bad"] for e in ing.manifest()] == [1, 1, 1, 50, 50, 50]
    assert spool.end_seq == 0


def test_parquet_other_types_convert_like_the_spool_wants(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    schema = pa.schema([pa.field("t", pa.timestamp("us", tz="UTC"), nullable=False),
                        pa.field("kind", pa.string()), pa.field("v", pa.float64())])
    spool = Spool(tmp_path / "spool", schema=schema, durable=False)
    pq.write_table(pa.table({
        "t": pa.array([1_000_001_999, 2_000_000_000, None], pa.timestamp("ns")),  # ns: truncated to us
        "kind": pa.array(["a", "b", "a"]).dictionary_encode(),
        "v": pa.array([1, 2, 3], pa.int16()),
    }), inbox / "a.parquet")
    age(inbox / "a.parquet")
    ing = DirectoryIngest(inbox, spool, dead_letter=tmp_path / "dead.jsonl")
    assert (ing.scan_once().rows_ok, ing.total_rows_bad) == (2, 1)
    table = spool.read_table()
    assert table.column("t").cast(pa.int64()).to_pylist() == [1_000_001, 2_000_000]
    assert table.column("kind").to_pylist() == ["a", "b"] and table.column("v").to_pylist() == [1.0, 2.0]
    assert [(d["line"], d["reason"]) for d in dead_letters(ing)] == [(2, "column 't': value is missing")]


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


def test_files_that_are_not_utf8_text_are_rejected_whole_with_the_byte(env):
    inbox, _, _ = env
    (inbox / "random.csv").write_bytes(b"ti\x9c\x00\xff\r\nq\x81\n" * 3)
    (inbox / "latin1.csv").write_bytes((HEADER + "1,1,50,0,1,0,3,15840\n# caf\xe9\n").encode("latin-1"))
    (inbox / "utf16.csv").write_bytes((HEADER + "1,1,50,0,1,0,3,15840\n").encode("utf-16"))
    (inbox / "utf16le.csv").write_bytes((HEADER + "1,1,50,0,1,0,3,15840\n").encode("utf-16-le"))
    (inbox / "nul.csv").write_bytes((HEADER + "1,1,50,0,1,0,3,15840\n1,\x00,50\n").encode())
    (inbox / "random.jsonl").write_bytes(b'{"a": \xc3\x28}\n')
    (inbox / "utf32.json").write_bytes('[{"time": 1}]'.encode("utf-32"))
    names = ["random.csv", "latin1.csv", "utf16.csv", "utf16le.csv", "nul.csv", "random.jsonl", "utf32.json"]
    for k, name in enumerate(names):
        age(inbox / name, 100 - k)
    ing = make(env)
    rep = ing.scan_once()
    assert (rep.files, rep.datasets, rep.rows_ok) == (7, 0, 0)
    dl = dead_letters(ing)
    assert [(d["file"], d["line"], d["record"], d["reason"]) for d in dl] == [
        ("random.csv", None, None, ("file is not UTF-8 text (byte 0x9c at offset 2, line 1): "
                                    "not a CSV file, or one in another encoding")),
        ("latin1.csv", None, None, ("file is not UTF-8 text (byte 0xe9 at offset 85, line 3): "
                                    "not a CSV file, or one in another encoding")),
        ("utf16.csv", None, None, "file is UTF-16 text (byte order mark ff fe), not UTF-8: save the CSV file as UTF-8"),
        ("utf16le.csv", None, None, "file is not text (NUL byte at offset 1, line 1): not a CSV file"),
        ("nul.csv", None, None, "file is not text (NUL byte at offset 82, line 3): not a CSV file"),
        ("random.jsonl", None, None, ("file is not UTF-8 text (byte 0xc3 at offset 6, line 1): "
                                      "not a JSON file, or one in another encoding")),
        ("utf32.json", None, None, ("file is UTF-32 text (byte order mark ff fe 00 00), not UTF-8: "
                                    "save the JSON file as UTF-8")),
    ]
    # rows_bad counts the non-empty lines a rejected file seems to hold (less a CSV header).
    assert [e["rows_bad"] for e in ing.manifest()] == [5, 2, 2, 2, 2, 1, 1]


def test_utf8_bom_and_crlf_or_cr_line_endings_parse(env):
    inbox, spool, _ = env
    rows = ["1,1,50,0,1,0,3,15840", "1,2,abc,0,1,0,3,15840", "", "1,3,60,0,1,0,3,15840"]
    (inbox / "a.csv").write_bytes(b"\xef\xbb\xbf" + (HEADER.strip() + "\r\n" + "\r\n".join(rows) + "\r\n").encode())
    (inbox / "b.csv").write_bytes((HEADER.strip() + "\r" + "\r".join(rows) + "\r").encode())  # old Mac
    lines = [json.dumps(report_row(2, 4)), "{oops", json.dumps(report_row(2, 5))]
    (inbox / "c.jsonl").write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n")
    for k, name in enumerate(["a.csv", "b.csv", "c.jsonl"]):
        age(inbox / name, 100 - k)
    ing = make(env)
    rep = ing.scan_once()
    assert (rep.files, rep.datasets, rep.rows_ok, rep.rows_bad) == (3, 3, 6, 3)
    assert spool.read_table().column("vehicle").to_pylist() == [1, 3, 1, 3, 4, 5]
    assert [(d["file"], d["line"], d["record"], d["reason"]) for d in dead_letters(ing)] == [
        ("a.csv", 3, "1,2,abc,0,1,0,3,15840", "column 'speed': value 'abc' is not int32"),
        ("b.csv", 3, "1,2,abc,0,1,0,3,15840", "column 'speed': value 'abc' is not int32"),
        ("c.jsonl", 2, "{oops",
         "invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ]


def test_repeated_columns(env):
    inbox, spool, _ = env
    # A spool column named twice in a CSV header: which one holds the value is a guess, so the
    # file is rejected whole; a repeated column the spool does not use is ignored.
    (inbox / "twice.csv").write_text("time,vehicle,speed,highway,lane,direction,segment,position,speed\n"
                                     "1,1,50,0,1,0,3,15840,60\n1,2,50,0,1,0,3,15840,60\n")
    (inbox / "extra.csv").write_text("note," + HEADER.strip() + ",note\na,1,3,50,0,1,0,3,15840,b\n")
    # A JSON record naming a spool column twice is rejected (json.loads would keep the last).
    row = json.dumps(report_row(1, 4))
    (inbox / "c.jsonl").write_text(row + "\n" + row[:-1] + ', "speed": 70, "x": 1, "x": 2}\n')
    for k, name in enumerate(["twice.csv", "extra.csv", "c.jsonl"]):
        age(inbox / name, 100 - k)
    ing = make(env)
    rep = ing.scan_once()
    assert (rep.files, rep.datasets, rep.rows_ok, rep.rows_bad) == (3, 2, 2, 3)
    assert spool.read_table().column("vehicle").to_pylist() == [3, 4]
    dl = dead_letters(ing)
    assert [(d["file"], d["line"], d["reason"]) for d in dl] == [
        ("twice.csv", 1, "header repeats column(s) 'speed'"),
        ("c.jsonl", 2, "column 'speed': given 2 times (50, 70)"),
    ]
    assert dl[0]["record"].endswith(",position,speed")


def test_hostile_values_in_text_files_reject_only_their_row(env):
    inbox, spool, _ = env
    huge = "x" * 3_000_000  # longer than pyarrow's 1 MiB CSV block
    (inbox / "huge.csv").write_text("note," + HEADER.strip() + "\n" + huge + ",1,1,50,0,1,0,3,15840\n"
                                    "ok,1,2,50,0,1,0,3,15840\n")
    deep = "[" * 100_000 + "]" * 100_000  # json.loads raises RecursionError
    lines = [json.dumps(report_row(2, 3)), '{"time": 2, "vehicle": 4, "nest": ' + deep + "}",
             json.dumps({**report_row(2, 5), "note": huge}),
             ('{"time": 2, "vehicle": 6, "speed": 50, "highway": 0, "lane": 1, "direction": 0,'
              ' "segment": 3, "position": 15840, "note": "\\ud800"}'),  # a lone surrogate: fine when unused
             json.dumps({**report_row(2, 7), "speed": 1e300}), json.dumps({**report_row(2, 8), "speed": "NaN"})]
    (inbox / "b.jsonl").write_text("\n".join(lines) + "\n")
    age(inbox / "huge.csv", 20)
    age(inbox / "b.jsonl", 10)
    ing = make(env)
    rep = ing.scan_once()
    assert (rep.files, rep.datasets, rep.rows_ok, rep.rows_bad) == (2, 2, 5, 3)
    assert spool.read_table().column("vehicle").to_pylist() == [1, 2, 3, 5, 6]
    assert [(d["file"], d["line"], d["reason"]) for d in dead_letters(ing)] == [
        ("b.jsonl", 2, "invalid JSON: maximum recursion depth exceeded while decoding a JSON array from a unicode string"),
        ("b.jsonl", 5, "column 'speed': value 1e+300 is not int32"),
        ("b.jsonl", 6, "column 'speed': value 'NaN' is not int32"),
    ]


def test_json_lines_starting_with_an_array_and_broken_arrays(env):
    inbox, spool, _ = env
    # JSON Lines whose first record is an array: still JSON Lines (the first line parses alone).
    (inbox / "a.jsonl").write_text("[1, 2]\n" + json.dumps(report_row(1, 1)) + "\n")
    # One JSON array over several lines, cut short: rejected whole.
    (inbox / "b.json").write_text("[\n" + json.dumps(report_row(1, 2)) + ",\n" + json.dumps(report_row(1, 3)))
    # One JSON array: items are numbered from 0.
    (inbox / "c.json").write_text(json.dumps([report_row(1, 4), 5, report_row(1, 6, lane=9)]))
    for k, name in enumerate(["a.jsonl", "b.json", "c.json"]):
        age(inbox / name, 100 - k)
    ing = make(env)
    rep = ing.scan_once()
    assert (rep.files, rep.datasets, rep.rows_ok, rep.rows_bad) == (3, 2, 2, 4)
    assert spool.read_table().column("vehicle").to_pylist() == [1, 4]
    assert [(d["file"], d["line"], d["reason"]) for d in dead_letters(ing)] == [
        ("a.jsonl", 1, "record is not a JSON object"),
        ("b.json", None, "invalid JSON array: Expecting ',' delimiter: line 3 column 113 (char 228)"),
        ("c.json", 1, "record is not a JSON object"),
        ("c.json", 2, "column 'lane': value 9 is outside [0, 4]"),
    ]


def test_lone_surrogate_in_a_string_column_rejects_the_row(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    spool = Spool(tmp_path / "spool", schema=pa.schema([("name", pa.string())]), durable=False)
    (inbox / "a.jsonl").write_text('{"name": "ok"}\n{"name": "\\ud800x"}\n')
    age(inbox / "a.jsonl")
    ing = DirectoryIngest(inbox, spool, dead_letter=tmp_path / "dead.jsonl")
    assert (ing.scan_once().rows_ok, ing.total_rows_bad) == (1, 1)
    assert [(d["line"], d["reason"]) for d in dead_letters(ing)] == [
        (2, "column 'name': value '\\ud800x' is not valid Unicode text")]


def test_a_reader_bug_rejects_the_file_and_the_ingest_goes_on(env, monkeypatch):
    from lmstream_kit.feed import parse

    inbox, _, _ = env
    real = parse._parse_csv

    def flaky(path, schema, checks):
        if path.name == "a.csv":
            raise KeyError("surprise")
        return real(path, schema, checks)

    monkeypatch.setattr(parse, "_parse_csv", flaky)
    for k, name in enumerate(["a.csv", "b.csv"]):
        (inbox / name).write_text(HEADER + "1,1,50,0,1,0,3,15840\n")
        age(inbox / name, 100 - k)
    ing = make(env)
    rep = ing.scan_once()
    assert (rep.files, rep.datasets, rep.rows_ok, rep.rows_bad) == (2, 1, 1, 1)
    assert [(d["file"], d["reason"]) for d in dead_letters(ing)] == [
        ("a.csv", f"{parse.INTERNAL_ERROR} KeyError: 'surprise'")]


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


def test_file_that_keeps_growing_is_deferred_until_it_settles(env):
    inbox, spool, _ = env
    now = [time.time()]
    ing = make(env, settle_s=2.0, clock=lambda: now[0])
    path = inbox / "live.csv"
    path.write_text(HEADER)
    os.utime(path, (now[0], now[0]))
    for v in range(1, 6):  # a row a second: never 2 s unchanged
        assert ing.scan_once() == IngestReport(deferred=1)
        now[0] += 1.0
        with open(path, "a") as f:
            f.write(f"1,{v},50,0,1,0,3,15840\n")
        os.utime(path, (now[0], now[0]))
    # A writer that puts the old mtime back: the size alone shows the change.
    assert ing.scan_once() == IngestReport(deferred=1)
    st = path.stat()
    with open(path, "a") as f:
        f.write("1,6,50,0,1,0,3,15840\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now[0] += 1.9
    assert ing.scan_once() == IngestReport(deferred=1)  # changed since the last scan: clock restarts
    now[0] += 1.9
    assert ing.scan_once() == IngestReport(deferred=1)  # 1.9 s unchanged
    now[0] += 0.2
    assert ing.scan_once() == IngestReport(files=1, datasets=1, rows_ok=6)
    assert spool.read_table().column("vehicle").to_pylist() == [1, 2, 3, 4, 5, 6]


def test_a_file_landing_again_under_a_handled_name_is_ignored(env):
    # Documented behaviour: a file is identified by its name, so new content renamed over (or
    # appended to) a handled file is never ingested; the dead-letter file says so, once.
    inbox, spool, _ = env
    (inbox / "a.csv").write_text(HEADER + "1,1,50,0,1,0,3,15840\n")
    age(inbox / "a.csv", 20)
    ing = make(env)
    assert ing.scan_once().rows_ok == 1
    (inbox / ".a.csv.part").write_text(HEADER + "2,2,50,0,1,0,3,15840\n2,3,50,0,1,0,3,15840\n")
    os.replace(inbox / ".a.csv.part", inbox / "a.csv")
    age(inbox / "a.csv", 10)
    assert ing.scan_once() == IngestReport()
    assert ing.scan_once() == IngestReport()  # said once
    said = dead_letters(ing)
    assert [(d["file"], d["line"]) for d in said] == [("a.csv", None)]
    assert said[0]["reason"] == ("a file landed again under the name 'a.csv', handled before (dataset 0): a file "
                                 "is known by its name, so it is ignored; land it under a new name")
    again = make(env)  # a restart does not change it (and says it once more)
    assert again.scan_once() == IngestReport()
    assert spool.read_table().column("vehicle").to_pylist() == [1]
    assert [(e["file"], e["rows_ok"]) for e in again.manifest()] == [("a.csv", 1)]
    assert len(dead_letters(again)) == 2


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
