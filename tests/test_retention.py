"""Spool retention: the policy's exact decisions, the spool's release, manifest compaction, dead letters."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from lmstream_kit.admission import AdmissionBook
from lmstream_kit.exceptions import ConfigError, SpoolError
from lmstream_kit.feed.ingest import DirectoryIngest
from lmstream_kit.feed.spool import Spool, read_dataset_files
from lmstream_kit.retention import (DEFAULT_RETENTION, SpoolRetention, make_retention, release_point,
                                    retention_from_spec, rotate_dead_letter)

SCHEMA = pa.schema([("x", pa.int64())])


def _spool(tmp_path, n=0, arrival0=1000.0, rows=10):
    sp = Spool(tmp_path / "spool", schema=SCHEMA, durable=False)
    for i in range(n):
        sp.append(pa.table({"x": pa.array(range(i * rows, (i + 1) * rows), pa.int64())}), arrival=arrival0 + i)
    return sp


# ---------------------------------------------------------------- release_point
def test_release_point_by_age_stops_at_the_first_young_dataset():
    arrivals = [0.0, 5.0, 2.0, 30.0, 31.0]  # an out-of-order arrival stops nothing: it is older still
    assert release_point(arrivals, [1] * 5, first_seq=10, floor_seq=15, now=40.0, max_age_s=20.0,
                         max_bytes=None) == 13


def test_release_point_by_size_counts_datasets_past_the_floor():
    # 5 datasets of 100 bytes, limit 250: the 3 oldest would go, but the floor keeps the third
    assert release_point([0.0] * 5, [100] * 5, first_seq=0, floor_seq=2, now=1.0, max_age_s=None,
                         max_bytes=250) == 2
    assert release_point([0.0] * 5, [100] * 5, first_seq=0, floor_seq=5, now=1.0, max_age_s=None,
                         max_bytes=250) == 3


def test_release_point_never_passes_the_floor_even_with_a_zero_limit():
    assert release_point([0.0] * 4, [10] * 4, first_seq=0, floor_seq=1, now=99.0, max_age_s=0.0,
                         max_bytes=0) == 1
    assert release_point([0.0] * 4, [10] * 4, first_seq=3, floor_seq=2, now=99.0, max_age_s=0.0,
                         max_bytes=0) == 3


def test_release_point_without_limits_keeps_everything():
    assert release_point([0.0] * 4, [10] * 4, first_seq=0, floor_seq=4, now=1e9, max_age_s=None,
                         max_bytes=None) == 0


# ---------------------------------------------------------------- Spool.release
def test_release_deletes_data_files_and_keeps_the_index(tmp_path):
    sp = _spool(tmp_path, n=6)
    size = sp.kept_bytes
    per = sp.datasets(0, 1)[0].nbytes
    assert sp.release(4) == (4, 4 * per)
    assert sp.first_seq == 4 and sp.kept_bytes == size - 4 * per
    data = sorted(p.name for p in (tmp_path / "spool" / "data").iterdir())
    assert data == ["000000000004.arrow", "000000000005.arrow"]
    assert sp.end_seq == 6 and sp.total_rows() == 60  # the index is whole: offsets stay valid
    assert sp.read_table(4).column("x").to_pylist() == list(range(40, 60))
    assert sp.release(3) == (0, 0)  # never backwards
    assert json.loads((tmp_path / "spool" / "retained.json").read_text())["first_seq"] == 4


def test_reading_a_released_dataset_says_retention_deleted_it(tmp_path):
    sp = _spool(tmp_path, n=3)
    sp.release(2)
    with pytest.raises(SpoolError, match=r"spool dataset 1 at .* was released by retention \(datasets before 2\)"):
        sp.read_table(1, 2)
    reader = Spool(tmp_path / "spool", create=False)  # another process: the index file has every line
    assert [i.seq for i in reader.datasets()] == [0, 1, 2]
    with pytest.raises(SpoolError, match=r"spool dataset 1 at .* was deleted by the spool's retention "
                                         r"\(datasets before 2 are gone\)"):
        reader.read_table(1, 2)
    with pytest.raises(SpoolError, match="deleted by the spool's retention"):
        list(read_dataset_files(sp.uri, ["data/000000000000.arrow"]))


def test_released_entries_leave_memory_and_totals_stay_whole(tmp_path):
    sp = _spool(tmp_path, n=5)
    sp.release(3)
    assert len(sp._infos) == 2 and [i.seq for i in sp.datasets(3)] == [3, 4]
    assert (sp.end_seq, sp.total_rows(), sp.total_rows(0, 4), sp.total_rows(3)) == (5, 50, 40, 20)
    assert sp.append(pa.table({"x": pa.array([1, 2], pa.int64())})).seq == 5
    assert sp.total_rows() == 52 and len(sp) == 6
    with pytest.raises(SpoolError, match="spool dataset 1 at .* was released by retention"):
        sp.total_rows(1, 4)
    assert sp.datasets(1, 1) == []  # an empty range asks for nothing


def test_release_past_the_end_or_read_only_is_refused(tmp_path):
    sp = _spool(tmp_path, n=2)
    with pytest.raises(SpoolError, match="cannot release spool datasets before 3: .* holds 2"):
        sp.release(3)
    reader = Spool(tmp_path / "spool", create=False)
    with pytest.raises(SpoolError, match="read-only"):
        reader.release(1)


def test_a_reopened_spool_knows_its_mark_and_removes_files_a_crash_left_below_it(tmp_path):
    sp = _spool(tmp_path, n=4)
    sp.close()
    # a release that died after moving its mark and before deleting the files
    (tmp_path / "spool" / "retained.json").write_text(json.dumps({"first_seq": 3, "at": 0}))
    assert Spool(tmp_path / "spool", create=False).first_seq == 3  # readers see the mark, touch nothing
    assert len(list((tmp_path / "spool" / "data").iterdir())) == 4
    again = Spool(tmp_path / "spool", schema=SCHEMA, durable=False)
    assert again.first_seq == 3
    assert sorted(p.name for p in (tmp_path / "spool" / "data").iterdir()) == ["000000000003.arrow"]
    assert again.append(pa.table({"x": pa.array([7], pa.int64())})).seq == 4


# ------------------------------------------------------------------ dead letters
def test_dead_letter_rotates_over_its_size_and_old_parts_go(tmp_path):
    f = tmp_path / "dead_letter.jsonl"
    f.write_text("a" * 99 + "\n")
    assert rotate_dead_letter(f, max_bytes=100, max_age_s=None, now=0.0) == (False, [])
    f.write_text("a" * 100 + "\n")
    assert rotate_dead_letter(f, max_bytes=100, max_age_s=None, now=86400.0) == (True, [])
    f.write_text("b" * 200 + "\n")
    assert rotate_dead_letter(f, max_bytes=100, max_age_s=None, now=86400.0) == (True, [])
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["dead_letter.19700102T000000Z-1.jsonl", "dead_letter.19700102T000000Z.jsonl"]
    old = tmp_path / "dead_letter.19700102T000000Z.jsonl"
    os.utime(old, (1000.0, 1000.0))
    assert rotate_dead_letter(f, max_bytes=100, max_age_s=3600.0, now=time.time()) == (
        False, ["dead_letter.19700102T000000Z.jsonl"])
    assert (tmp_path / "dead_letter.19700102T000000Z-1.jsonl").read_text().startswith("b")


# ---------------------------------------------------------------------- settings
def test_retention_spec_text_and_defaults():
    assert retention_from_spec("default") == dict(DEFAULT_RETENTION)
    got = retention_from_spec("age=2h, size=5GiB, batches=7, dead-letter-size=1MiB, dead-letter-age=none, "
                              "journal-size=8MiB, journal-age=none")
    assert got == {"max_age_s": 7200.0, "max_bytes": 5 * 2**30, "keep_batches": 7,
                   "dead_letter_bytes": 2**20, "dead_letter_age_s": None,
                   "journal_bytes": 8 * 2**20, "journal_age_s": None}
    assert retention_from_spec("age=none")["max_age_s"] is None
    assert retention_from_spec(None) is None and make_retention("off") is None
    assert make_retention({"max_age_s": 5.0}).max_age_s == 5.0


@pytest.mark.parametrize("spec, message", [
    ("age=soon", "retention age must be a number of seconds or a duration such as '20 seconds', got 'soon'"),
    ("size=-1", "retention size must be a number of bytes or a size such as '512 MiB', got '-1'"),
    ("batches=2.5", "retention batches must be a whole number >= 0, got '2.5'"),
    ("age", "retention: 'age' is not key=value in 'age'"),
])
def test_retention_spec_errors_name_the_bad_value(spec, message):
    with pytest.raises(ConfigError) as info:
        retention_from_spec(spec)
    assert message in str(info.value)


def test_retention_params_are_validated_and_logged():
    r = SpoolRetention(keep_batches=3)
    with pytest.raises(ConfigError, match=r"retention.keep_batches must be >= 0, got -1"):
        r.set_param("keep_batches", -1)
    with pytest.raises(ConfigError, match=r"retention.max_age_s must be >= 0, got -5"):
        SpoolRetention(max_age_s=-5)
    r.set_param("max_bytes", 1000)
    r.set_param("keep_batches", 1)
    assert [(c.param, c.old, c.value) for c in r.changelog.take()] == [
        ("retention.max_bytes", None, 1000), ("retention.keep_batches", 3, 1)]


# ----------------------------------------------------------- the live object
class _Host:
    def __init__(self, spool, run_dir, feed=None):
        self.spool, self.run_dir, self.feed = spool, run_dir, feed


def _batches(r, starts):
    for s in starts:
        r.after_batch(SimpleNamespace(start_seq=s))


def test_the_floor_is_keep_batches_behind_the_batch_that_ran_last(tmp_path):
    sp = _spool(tmp_path, n=12, arrival0=0.0)
    r = SpoolRetention(max_age_s=0.0, keep_batches=2, clock=lambda: 100.0)
    r.plugged(_Host(sp, tmp_path))
    r._ensure_thread = lambda: None  # sweeps run here, in the test's thread
    _batches(r, [0, 3])
    assert r.floor is None and r.sweep() == {"datasets": 0, "bytes": 0, "manifest_dropped": 0,
                                             "dead_letter_rotated": False, "journal_rotated": 0,
                                             "journal_compressed": 0, "journal_deleted": 0}
    _batches(r, [5])
    assert r.floor == 0
    _batches(r, [8, 10])
    assert r.floor == 5
    done = r.sweep()
    assert done["datasets"] == 5 and sp.first_seq == 5
    assert r.after_batch(SimpleNamespace(start_seq=11)) == {"spool_bytes": sp.kept_bytes, "spool_first_seq": 5}
    r.set_param("keep_batches", 0)
    _batches(r, [11])
    assert r.floor == 11
    r.sweep()
    assert sp.first_seq == 11 and r.status()["released_datasets"] == 11


def test_a_size_limit_deletes_oldest_first_and_an_age_limit_spares_young_data(tmp_path):
    sp = _spool(tmp_path, n=10, arrival0=0.0)  # arrivals 0..9
    per = sp.datasets(0, 1)[0].nbytes
    r = SpoolRetention(max_age_s=None, max_bytes=4 * per, keep_batches=0, clock=lambda: 100.0)
    r.plugged(_Host(sp, tmp_path))
    r._ensure_thread = lambda: None
    _batches(r, [9])
    r.sweep()
    assert sp.first_seq == 6 and sp.kept_bytes == 4 * per
    r2 = SpoolRetention(max_age_s=50.0, keep_batches=0, clock=lambda: 57.5)
    sp2 = _spool(tmp_path / "b", n=10, arrival0=0.0)
    r2.plugged(_Host(sp2, tmp_path / "b"))
    r2._ensure_thread = lambda: None
    _batches(r2, [10])
    r2.sweep()
    assert sp2.first_seq == 8  # 7.5 s old and younger stay


def test_on_resume_counts_earlier_runs_batches(tmp_path):
    r = SpoolRetention(keep_batches=1)
    r.on_resume([{"start_seq": 0}, {"start_seq": 4}, {"batch_id": 9}])
    r._ensure_thread = lambda: None
    r.after_batch(SimpleNamespace(start_seq=6))
    assert r.floor == 4


def test_a_failing_sweep_is_said_in_status_and_the_thread_goes_on(tmp_path):
    class Broken:
        kafka = None
        first_seq = kept_bytes = 0

        def datasets(self, *a):
            raise SpoolError("disk on fire")

    r = SpoolRetention(keep_batches=0)
    r.plugged(_Host(Broken(), tmp_path))
    r.after_batch(SimpleNamespace(start_seq=3))
    deadline = time.time() + 10
    while r.error is None and time.time() < deadline:
        time.sleep(0.02)
    assert r.error == "disk on fire"
    r.close()
    assert not r._thread.is_alive()


# ------------------------------------------------------------ manifest compaction
def _settled(path: Path, text: str) -> None:
    path.write_text(text)
    os.utime(path, (time.time() - 60, time.time() - 60))


def test_manifest_compaction_drops_files_gone_from_the_inbox_and_keeps_totals(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    sp = Spool(tmp_path / "spool", schema=SCHEMA, durable=False)
    ing = DirectoryIngest(inbox, sp, settle_s=0)
    for i, name in enumerate(["a.csv", "b.csv", "c.csv"]):
        _settled(inbox / name, "x\n" + "\n".join(str(i * 10 + k) for k in range(3)) + "\nbad\n")
    assert ing.scan_once().datasets == 3
    (inbox / "a.csv").unlink()
    (inbox / "b.csv").unlink()
    # b's dataset (seq 1) is not before the spool's first kept one: it stays
    assert ing.compact_manifest(before_seq=1, older_than=time.time() + 1) == 1
    assert sorted(e["file"] for e in ing.manifest()) == ["b.csv", "c.csv"]
    assert (ing.files_done, ing.total_rows_ok, ing.total_rows_bad) == (3, 9, 3)
    lines = (tmp_path / "spool" / "ingested.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == {"compacted": {"files": 1, "rows_ok": 3, "rows_bad": 1, "last_seq": 0}}
    assert ing.compact_manifest(before_seq=3, older_than=0.0) == 0  # handled after the cut-off: kept
    # a restart reads the totals back, and recovers no line for the dropped file's dataset
    again = DirectoryIngest(inbox, sp, settle_s=0)
    assert (again.files_done, again.total_rows_ok, again.total_rows_bad) == (3, 9, 3)
    assert sorted(e["file"] for e in again.manifest()) == ["b.csv", "c.csv"]
    # a file of the same name that lands again is a new file
    _settled(inbox / "a.csv", "x\n100\n")
    assert again.scan_once().rows_ok == 1
    assert sp.read_table(3).column("x").to_pylist() == [100]


def test_recovery_after_a_crash_still_finds_the_last_datasets_line(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    sp = Spool(tmp_path / "spool", schema=SCHEMA, durable=False)
    ing = DirectoryIngest(inbox, sp, settle_s=0)
    _settled(inbox / "a.csv", "x\n1\n")
    ing.scan_once()
    (inbox / "a.csv").unlink()
    ing.compact_manifest(before_seq=1, older_than=time.time() + 1)
    # a crash between the spool append and the manifest line
    sp.append(pa.table({"x": pa.array([2], pa.int64())}), source="b.csv")
    again = DirectoryIngest(inbox, sp, settle_s=0)
    assert [e["file"] for e in again.manifest()] == ["b.csv"] and again.manifest()[0]["recovered"]


# ------------------------------------------------------------- where a query starts
def test_a_fresh_query_starts_at_the_spools_first_kept_dataset():
    book = AdmissionBook()
    book.resume(resume=None, committed=None, start=7)
    assert book.initial_offset() == 7 and book.caught_up(7) and not book.caught_up(8)
    book = AdmissionBook()
    book.resume(resume=12, committed=10, start=7)  # a checkpoint decides where it resumes
    assert (book.admitted_end, book.completed_end) == (12, 10)


def test_housekeeping_is_not_drawn_by_views_but_stays_settable():
    from lmstream_kit.diskguard import DiskGuard

    for obj, name, value in ((SpoolRetention(), "keep_batches", 5), (DiskGuard(), "min_free_bytes", 10)):
        assert obj.controls() == []
        obj.set_param(name, value)
        assert getattr(obj, name) == value


def test_a_writer_that_reopens_a_retained_spool_holds_only_what_was_kept(tmp_path):
    """A restart after weeks parses the index once but keeps in memory only the datasets retention kept;
    the totals stay whole and appends go on at the right sequence number.  A reader keeps every line."""
    sp = _spool(tmp_path, n=6)
    kept_bytes = sp.kept_bytes
    sp.release(4)
    sp.close()
    again = Spool(sp.root, create=True)
    assert (again._base, len(again._infos), again.first_seq) == (4, 2, 4)
    assert (again.end_seq, again.total_rows(), again.total_rows(0, 5), again.total_rows(4)) == (6, 60, 50, 20)
    assert again.kept_bytes == sp.kept_bytes < kept_bytes
    assert [i.seq for i in again.datasets(4)] == [4, 5]
    assert again.append(pa.table({"x": pa.array([1, 2, 3], pa.int64())})).seq == 6
    assert again.total_rows() == 63 and again.total_rows(4) == 23
    with pytest.raises(SpoolError, match="spool dataset 2 at .* was released by retention"):
        again.datasets(2, 5)
    again.close()
    reader = Spool(sp.root, create=False)
    assert [i.seq for i in reader.datasets()] == list(range(7)) and reader.total_rows() == 63


def test_freed_memory_is_given_back_after_a_journal_part_is_gzipped_and_else_once_a_minute(monkeypatch):
    from lmstream_kit import retention

    calls = []
    monkeypatch.setattr(retention, "trim_freed_memory", lambda: calls.append(1) or True)
    r = SpoolRetention()
    r._trimmed_at = 1000.0
    quiet = {"journal_compressed": 0, "journal_deleted": 0, "journal_rotated": 0, "dead_letter_rotated": False}
    assert r.trim_after(quiet, now=1000.0 + retention.TRIM_EVERY_S - 1) is False
    assert r.trim_after({**quiet, "journal_compressed": 1}, now=1000.0 + retention.TRIM_EVERY_S - 1) is True
    assert r.trim_after(quiet, now=1000.0 + retention.TRIM_EVERY_S) is False  # counted from the last trim
    assert r.trim_after(quiet, now=1000.0 + 2 * retention.TRIM_EVERY_S) is True
    assert r.trim_after({**quiet, "dead_letter_rotated": True}, now=1000.0 + 2 * retention.TRIM_EVERY_S) is True
    assert len(calls) == 3 and r.status()["trims"] == 3


def test_trimming_freed_memory_works_on_this_c_library_or_says_it_cannot():
    import ctypes.util

    from lmstream_kit.retention import trim_freed_memory

    has_glibc = bool(ctypes.util.find_library("c")) and hasattr(ctypes.CDLL(ctypes.util.find_library("c")),
                                                                "malloc_trim")
    assert trim_freed_memory() is has_glibc
