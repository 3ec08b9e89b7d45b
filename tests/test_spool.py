"""Tests for lmstream_kit.feed.spool (no Spark)."""

from __future__ import annotations

import json
import os
import threading
import time

import pyarrow as pa
import pytest

from lmstream_kit.exceptions import SpoolError
from lmstream_kit.feed.spool import DatasetInfo, Spool, read_dataset_files

SCHEMA = pa.schema(
    [pa.field("k", pa.int32(), nullable=False), pa.field("v", pa.float64()), pa.field("s", pa.string())],
    metadata={"origin": "test"},
)


def rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "k": pa.array(range(start, start + n), pa.int32()),
            "v": pa.array([i * 0.5 for i in range(start, start + n)], pa.float64()),
            "s": pa.array([f"r{i}" for i in range(start, start + n)], pa.string()),
        }
    )


@pytest.fixture
def spool(tmp_path):
    return Spool(tmp_path / "sp", schema=SCHEMA, durable=False)


def test_append_read_round_trip_exact_schema(spool):
    infos = [spool.append(rows(0, 3), source="generator"), spool.append(rows(3, 2))]
    assert [i.seq for i in infos] == [0, 1]
    assert [i.rows for i in infos] == [3, 2]
    assert infos[0].path == "data/000000000000.arrow"
    assert infos[1].path == "data/000000000001.arrow"
    assert infos[0].source == "generator" and infos[1].source == ""
    assert infos[0].nbytes == os.path.getsize(os.path.join(spool.root, infos[0].path))
    assert infos[0].arrival <= infos[1].arrival <= time.time()

    table = spool.read_table()
    assert table.schema.equals(SCHEMA, check_metadata=True)
    assert table.column("k").to_pylist() == [0, 1, 2, 3, 4]
    assert table.column("s").to_pylist() == ["r0", "r1", "r2", "r3", "r4"]
    for batch in spool.read_batches(0, 2):
        assert batch.schema.equals(SCHEMA, check_metadata=True)
    assert spool.read_table(1, 2).column("k").to_pylist() == [3, 4]
    assert [b.num_rows for b in spool.read_batches(infos[1:])] == [2]
    assert spool.end_seq == 2
    assert spool.total_rows() == 5
    assert spool.total_rows(1) == 2
    assert spool.total_rows(0, 1) == 3
    assert spool.datasets(1) == [infos[1]]


def test_append_casts_reorders_and_accepts_batches(spool):
    t = pa.table({"s": ["a"], "extra": [1], "v": pa.array([1], pa.int64()), "k": pa.array([7], pa.int64())})
    spool.append(t)
    spool.append(rows(10, 2).to_batches()[0])
    spool.append(rows(20, 2).to_batches())
    out = spool.read_table()
    assert out.schema.equals(SCHEMA, check_metadata=True)
    assert out.column("k").to_pylist() == [7, 10, 11, 20, 21]
    assert out.column("v").to_pylist() == [1.0, 5.0, 5.5, 10.0, 10.5]


def test_append_missing_column_names_it(spool):
    with pytest.raises(SpoolError, match=r"missing column\(s\) 'v', 's'"):
        spool.append(pa.table({"k": pa.array([1], pa.int32())}))
    with pytest.raises(SpoolError, match="does not fit the schema"):
        spool.append(pa.table({"k": pa.array([None], pa.int32()), "v": [1.0], "s": ["x"]}))
    assert spool.end_seq == 0


def test_dataset_info_json_round_trip():
    info = DatasetInfo(seq=4, arrival=12.5, rows=3, nbytes=99, path="data/000000000004.arrow", source="a.csv")
    assert DatasetInfo.from_json(json.loads(json.dumps(info.to_json()))) == info


def test_reader_tails_only_complete_lines(tmp_path, spool):
    reader = Spool(spool.uri, create=False)
    assert reader.end_seq == 0
    spool.append(rows(0, 1))
    spool.append(rows(1, 1))
    new = reader.refresh()
    assert [i.seq for i in new] == [0, 1]
    assert reader.refresh() == []
    # Simulate a writer caught mid-line: half of the next entry, no newline.
    line = json.dumps(DatasetInfo(2, 1.0, 1, 10, "data/000000000002.arrow").to_json())
    index = os.path.join(spool.root, "index.jsonl")
    with open(index, "a") as f:
        f.write(line[:20])
    assert reader.refresh() == []
    assert reader.end_seq == 2
    with open(index, "a") as f:
        f.write(line[20:] + "\n")
    assert [i.seq for i in reader.refresh()] == [2]
    assert reader.end_seq == 3


def test_crash_repair_truncates_partial_line_and_continues(tmp_path):
    loc = tmp_path / "sp"
    w = Spool(loc, schema=SCHEMA, durable=False)
    w.append(rows(0, 2))
    w.append(rows(2, 2))
    w.close()
    index = loc / "index.jsonl"
    good = index.read_bytes()
    with open(index, "ab") as f:
        f.write(b'{"seq":2,"arrival":1.0,"ro')  # torn line of a crashed writer
    (loc / "data" / "000000000002.arrow").write_bytes(b"orphan, never indexed")

    reader = Spool(loc, create=False)
    assert reader.end_seq == 2

    w2 = Spool(loc, schema=SCHEMA, durable=False)
    assert index.read_bytes() == good  # torn tail cut off
    info = w2.append(rows(4, 3))
    assert info.seq == 2
    assert w2.read_table().column("k").to_pylist() == [0, 1, 2, 3, 4, 5, 6]
    assert [i.seq for i in reader.refresh()] == [2]
    assert reader.read_table(2).column("k").to_pylist() == [4, 5, 6]
    lines = index.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(x)["seq"] == i for i, x in enumerate(lines[:-1]))


def test_reopen_continues_seq_and_schema_checks(tmp_path):
    loc = tmp_path / "sp"
    with Spool(loc, schema=SCHEMA, durable=True) as w:
        w.append(rows(0, 1))
    again = Spool(loc, durable=False)  # schema comes from meta.json
    assert again.schema.equals(SCHEMA, check_metadata=True)
    assert again.append(rows(1, 1)).seq == 1
    other = pa.schema([pa.field("k", pa.int64())])
    with pytest.raises(SpoolError, match=f"schema mismatch for spool at {loc}"):
        Spool(loc, schema=other)


def test_new_spool_needs_schema_and_reader_needs_existing(tmp_path):
    with pytest.raises(SpoolError, match="requires a schema"):
        Spool(tmp_path / "new")
    with pytest.raises(SpoolError, match=f"no spool at {tmp_path / 'missing'}"):
        Spool(tmp_path / "missing", create=False)


def test_read_only_spool_refuses_append(spool):
    reader = Spool(spool.uri, create=False)
    with pytest.raises(SpoolError, match="read-only"):
        reader.append(rows(0, 1))


def test_unwritable_location_under_regular_file(tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    loc = blocker / "spool"
    with pytest.raises(SpoolError) as err:
        Spool(loc, schema=SCHEMA)
    msg = str(err.value)
    assert msg.startswith(f"cannot write spool at {loc}: ")
    assert "\n" not in msg
    with pytest.raises(SpoolError, match=f"cannot write spool at {blocker}: "):
        Spool(blocker, schema=SCHEMA)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_location_read_only_dir(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(SpoolError, match=f"cannot write spool at {ro / 'sp'}: "):
            Spool(ro / "sp", schema=SCHEMA)
    finally:
        ro.chmod(0o700)


def test_file_uri_form(tmp_path):
    uri = f"file://{tmp_path}/uri_spool"
    w = Spool(uri, schema=SCHEMA, durable=False)
    assert w.uri == uri
    assert w.root == f"{tmp_path}/uri_spool"
    w.append(rows(0, 2))
    assert os.path.exists(tmp_path / "uri_spool" / "data" / "000000000000.arrow")
    r = Spool(uri, create=False)
    assert r.read_table().column("k").to_pylist() == [0, 1]
    # the plain path and the URI name the same spool
    assert Spool(tmp_path / "uri_spool", create=False).end_seq == 1


def test_uri_of_local_path_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sp = Spool("rel", schema=SCHEMA, durable=False)
    assert sp.uri == str(tmp_path / "rel")


def test_read_dataset_files(spool):
    a = spool.append(rows(0, 2))
    b = spool.append(rows(2, 3))
    batches = list(read_dataset_files(spool.uri, [b.path, a.path]))
    assert [x.num_rows for x in batches] == [3, 2]
    assert all(x.schema.equals(SCHEMA, check_metadata=True) for x in batches)
    assert pa.Table.from_batches(batches).column("k").to_pylist() == [2, 3, 4, 0, 1]
    with pytest.raises(SpoolError, match="000000000009.arrow is missing"):
        list(read_dataset_files(spool.uri, ["data/000000000009.arrow"]))


def test_concurrent_appends_are_contiguous(spool):
    def work(base):
        for i in range(20):
            spool.append(rows(base + i, 1))

    threads = [threading.Thread(target=work, args=(b * 100,)) for b in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    infos = Spool(spool.uri, create=False).datasets()
    assert [i.seq for i in infos] == list(range(80))
    assert sorted(spool.read_table().column("k").to_pylist()) == sorted(
        b * 100 + i for b in range(4) for i in range(20)
    )


def test_append_is_fast(spool):
    t = pa.table(
        {
            "k": pa.array(range(1000), pa.int32()),
            "v": pa.array([0.5] * 1000),
            "s": pa.array(["abc"] * 1000),
        }
    )
    spool.append(t)  # warm up
    n = 50
    t0 = time.perf_counter()
    for _ in range(n):
        spool.append(t)
    per = (time.perf_counter() - t0) / n
    assert per < 0.005, f"append took {per * 1000:.2f} ms"


def test_empty_table_is_a_dataset_with_no_rows(spool):
    info = spool.append(rows(0, 0))
    assert info.rows == 0
    assert spool.read_table().num_rows == 0
    assert spool.read_table().schema.equals(SCHEMA)


def test_the_index_is_parsed_in_blocks_with_lines_across_block_ends(spool, monkeypatch):
    """A long index is read a block at a time: a line cut by a block's end is parsed whole with the next
    block, and a torn last line (a writer mid-append) waits for its end."""
    import lmstream_kit.feed.spool as S

    for i in range(7):
        spool.append(rows(i, 1 + i))
    monkeypatch.setattr(S, "_INDEX_BLOCK", 37)  # shorter than a line: every line crosses block ends
    reader = Spool(spool.root, create=False)
    assert [i.seq for i in reader.datasets()] == list(range(7)) and reader.total_rows() == 28
    index = os.path.join(spool.root, "index.jsonl")
    line = json.dumps({**json.loads(open(index).readline()), "seq": 7, "rows": 5, "path": "data/x.arrow"})
    with open(index, "a") as f:
        f.write(line[:30])  # torn: no newline yet
    assert reader.refresh() == [] and reader.end_seq == 7
    with open(index, "a") as f:
        f.write(line[30:] + "\n")
    assert [i.seq for i in reader.refresh()] == [7] and reader.total_rows() == 33
