"""The metrics journals of a run that goes on for days (issue 16): rotated by size, gzipped, deleted
by age with their totals kept, and every reader whole across the parts.  No Spark.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from lmstream_kit.cli import main
from lmstream_kit.controller import AdmissionController
from lmstream_kit.exceptions import ConfigError
from lmstream_kit.metrics import (
    RELEASED_FILE,
    CorruptLineError,
    JsonlWriter,
    has_journal,
    journal_parts,
    load_metrics,
    read_journal,
    read_jsonl,
    read_released,
    write_run_info,
)
from lmstream_kit.protocol import BatchController, ChangeLog
from lmstream_kit.retention import (
    JOURNAL_COMPRESS_AFTER_S,
    SpoolRetention,
    fold_released,
    retention_from_spec,
    rotate_journal,
)
from lmstream_kit.runinfo import processed_totals
from lmstream_kit.runloop import RECORDS_KEPT, RunLoop
from widgets.sources import RecordBuffer, load_run

DAY = 86400.0


def rec(batch_id: int, rows: int = 10, **extra) -> dict:
    """A batch record: batch ``b`` read spool datasets ``b..b+1``."""
    return {"batch_id": batch_id, "rows": rows, "start_seq": batch_id, "end_seq": batch_id + 1,
            "max_latency_s": 1.0, "avg_latency_s": 0.5, "processing_s": 0.1, **extra}


def write(path: Path, records, *, mtime: float | None = None, gz: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in records)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def ids(records) -> list[int]:
    return [r["batch_id"] for r in records]


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# ------------------------------------------------------------------- the writer
def test_the_writer_follows_a_rename_and_a_record_racing_it_stays_in_the_old_part(tmp_path):
    path = tmp_path / "metrics.jsonl"
    w = JsonlWriter(path)
    w.append(rec(0))
    part = tmp_path / "metrics.20260101T000000Z.jsonl"
    os.replace(path, part)
    # the writer looked at the file just before the rename, and writes just after it
    w._moved = lambda: False
    w.append(rec(1))
    del w._moved
    assert ids(read_jsonl(part)) == [0, 1] and not path.exists()
    w.append(rec(2))  # after the rename: a new file
    assert ids(read_jsonl(path)) == [2] and ids(read_jsonl(part)) == [0, 1]
    assert ids(read_journal(path)) == [0, 1, 2]
    w.close()


def test_the_writer_follows_a_replaced_file_and_ends_a_torn_line_it_finds_there(tmp_path):
    path = tmp_path / "metrics.jsonl"
    w = JsonlWriter(path, durable=False)
    w.append(rec(0))
    os.replace(path, tmp_path / "metrics.20260101T000000Z.jsonl")
    path.write_text('{"batch_id": 9, "ro')  # another file there now, which a writer died in
    w.append(rec(1))
    assert ids(read_jsonl(path)) == [1]
    assert path.read_text().startswith('{"batch_id": 9, "ro\n')
    w.close()
    with pytest.raises(ValueError, match="is closed"):
        w.append(rec(2))


# ------------------------------------------------------------------- rotation
def test_rotation_by_size_names_parts_by_time_and_keeps_their_order(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write(path, [rec(0)])
    size = path.stat().st_size
    assert rotate_journal(path, max_bytes=size, max_age_s=None, now=DAY)["rotated"] is False
    assert rotate_journal(path, max_bytes=size - 1, max_age_s=None, now=DAY)["rotated"] is True
    assert names(tmp_path) == ["metrics.19700102T000000Z.jsonl"]
    write(path, [rec(1)])
    assert rotate_journal(path, max_bytes=1, max_age_s=None, now=DAY + 0.5)["rotated"]  # the same second
    write(path, [rec(2)])
    assert rotate_journal(path, max_bytes=1, max_age_s=None, now=DAY - 3600)["rotated"]  # the clock went back
    write(path, [rec(3)])
    assert [p.name for p in journal_parts(path)] == [
        "metrics.19700102T000000Z.jsonl", "metrics.19700102T000000Z-1.jsonl", "metrics.19700102T000000Z-2.jsonl"]
    assert ids(read_journal(path)) == [0, 1, 2, 3]
    assert rotate_journal(tmp_path / "absent.jsonl", max_bytes=1, max_age_s=1.0, now=DAY)["rotated"] is False


def test_a_part_is_gzipped_only_after_the_delay_and_reads_the_same(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write(path, [rec(0), rec(1)], mtime=DAY - 500)  # idle for a while before it is rotated
    assert rotate_journal(path, max_bytes=1, max_age_s=None, now=DAY, compress_after_s=60) == {
        "rotated": True, "compressed": [], "deleted": []}  # not in the sweep that rotated it
    part = tmp_path / "metrics.19700102T000000Z.jsonl"
    assert rotate_journal(path, max_bytes=1, max_age_s=None, now=DAY + 59, compress_after_s=60)["compressed"] == []
    os.utime(part, (DAY + 30, DAY + 30))  # a writer that raced the rename wrote after it: its age starts then
    assert rotate_journal(path, max_bytes=1, max_age_s=None, now=DAY + 80, compress_after_s=60)["compressed"] == []
    assert rotate_journal(path, max_bytes=1, max_age_s=None, now=DAY + 91, compress_after_s=60)["compressed"] == [
        part.name]
    assert names(tmp_path) == ["metrics.19700102T000000Z.jsonl.gz"]  # no plain part, no .tmp left
    gz = tmp_path / "metrics.19700102T000000Z.jsonl.gz"
    assert gz.stat().st_mtime == DAY + 30  # its age goes on from the plain part's
    assert ids(read_jsonl(gz)) == [0, 1] and ids(read_journal(path)) == [0, 1]
    # without compress_after_s (dead letters) nothing is compressed
    write(path, [rec(2)], mtime=0.0)
    assert rotate_journal(path, max_bytes=1, max_age_s=None, now=10 * DAY)["compressed"] == []


def test_parts_older_than_the_age_go_oldest_first_and_their_totals_are_folded(tmp_path):
    path = tmp_path / "metrics.jsonl"
    a = write(tmp_path / "metrics.19700101T000000Z.jsonl", [rec(0, 5), rec(1, 6)], mtime=100.0)
    b = write(tmp_path / "metrics.19700102T000000Z.jsonl.gz", [rec(2, 7)], mtime=DAY + 100, gz=True)
    c = write(tmp_path / "metrics.19700103T000000Z.jsonl", [rec(3, 8)], mtime=2 * DAY + 100)
    write(path, [rec(4, 9)])
    seen = []

    def fold(part):
        seen.append(part.name)
        fold_released(part)

    done = rotate_journal(path, max_bytes=10**9, max_age_s=1.5 * DAY, now=2.7 * DAY, before_delete=fold)
    assert done == {"rotated": False, "compressed": [], "deleted": [a.name, b.name]} and seen == done["deleted"]
    assert journal_parts(path) == [c]
    assert read_released(tmp_path) == {"batches": 3, "rows_processed": 18, "parts": 2, "last_key": [2, 2, 3],
                                       "through_batch_id": 2, "through_part": "19700102T000000Z"}
    assert processed_totals(path) == {"rows_processed": 35, "batches": 5}


def test_a_young_part_stops_deletion_and_a_failing_fold_keeps_the_part(tmp_path):
    path = tmp_path / "metrics.jsonl"
    young = write(tmp_path / "metrics.19700101T000000Z.jsonl", [rec(0)], mtime=10 * DAY)  # written late
    old = write(tmp_path / "metrics.19700102T000000Z.jsonl", [rec(1)], mtime=DAY + 1)
    assert rotate_journal(path, max_bytes=1, max_age_s=DAY, now=5 * DAY)["deleted"] == []
    assert journal_parts(path) == [young, old]
    os.utime(young, (DAY, DAY))

    def broken(part):
        raise OSError("disk on fire")

    with pytest.raises(OSError, match="disk on fire"):
        rotate_journal(path, max_bytes=1, max_age_s=DAY, now=5 * DAY, before_delete=broken)
    assert journal_parts(path) == [young, old]


def test_a_part_folded_whose_deletion_a_crash_stopped_is_counted_once(tmp_path):
    path = tmp_path / "metrics.jsonl"
    a = write(tmp_path / "metrics.19700101T000000Z.jsonl", [rec(0, 5), rec(1, 6)], mtime=0.0)
    write(path, [rec(2, 7)])
    fold_released(a)  # then the process died before it unlinked the part
    assert processed_totals(path) == {"rows_processed": 18, "batches": 3}
    assert rotate_journal(path, max_bytes=10**9, max_age_s=1.0, now=DAY, before_delete=fold_released)[
        "deleted"] == [a.name]
    assert read_released(tmp_path)["batches"] == 2 and read_released(tmp_path)["parts"] == 1
    assert processed_totals(path) == {"rows_processed": 18, "batches": 3}


def test_a_leftover_of_a_compression_a_crash_stopped_is_deleted_with_its_part(tmp_path):
    path = tmp_path / "metrics.jsonl"
    a = write(tmp_path / "metrics.19700101T000000Z.jsonl", [rec(0)], mtime=0.0)
    write(tmp_path / "metrics.19700101T000000Z.jsonl.gz", [rec(0)], mtime=0.0, gz=True)
    (tmp_path / "metrics.19700101T000000Z.jsonl.gz.tmp").write_bytes(b"\x1f\x8b half")
    assert journal_parts(path) == [a] and ids(read_journal(path)) == [0]  # the plain one, once
    assert rotate_journal(path, max_bytes=1, max_age_s=1.0, now=DAY, before_delete=fold_released)["deleted"] == [
        a.name]
    assert names(tmp_path) == [RELEASED_FILE] and read_released(tmp_path)["batches"] == 1


# ------------------------------------------------------------------- reading the parts
def test_read_journal_reads_plain_and_gzipped_parts_in_order_and_the_tail_only_as_far_as_needed(tmp_path):
    path = tmp_path / "metrics.jsonl"
    (tmp_path / "metrics.20260101T000000Z.jsonl").write_text('{"batch_id": 0}\n!corrupt!\n{"batch_id": 1}\n')
    write(tmp_path / "metrics.20260102T000000Z.jsonl.gz", [rec(2), rec(3)], gz=True)
    write(tmp_path / "metrics.20260102T000000Z-1.jsonl", [rec(4), rec(5)])
    write(path, [rec(6)])
    assert ids(read_journal(path, tail=1)) == [6]
    assert ids(read_journal(path, tail=3)) == [4, 5, 6]
    assert ids(read_journal(path, tail=5)) == [2, 3, 4, 5, 6]  # the corrupt oldest part is never opened
    assert read_journal(path, tail=0) == []
    with pytest.raises(CorruptLineError, match=r"metrics\.20260101T000000Z\.jsonl, line 2"):
        read_journal(path)
    with pytest.raises(CorruptLineError, match=r"metrics\.20260101T000000Z\.jsonl, line 2"):
        read_journal(path, tail=6)
    (tmp_path / "metrics.20260101T000000Z.jsonl").write_text('{"batch_id": 0}\n{"batch_id": 1}\n')
    assert ids(read_journal(path)) == list(range(7)) and ids(read_journal(path, tail=100)) == list(range(7))
    for bad in (-1, 2.5, True, "3"):
        with pytest.raises(ConfigError, match=f"tail must be a whole number >= 0, got {bad!r}"):
            read_journal(path, tail=bad)


def test_a_journal_rotated_away_until_its_next_record_is_still_read(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write(tmp_path / "metrics.20260101T000000Z.jsonl", [rec(0), rec(1)])
    assert not path.exists() and has_journal(path) and ids(read_journal(path, tail=1)) == [1]
    assert not has_journal(tmp_path / "spark_progress.jsonl")
    (tmp_path / "notes.txt").write_text("not a run")
    assert not has_journal(tmp_path / "notes.txt" / "metrics.jsonl")
    assert read_journal(tmp_path / "notes.txt" / "metrics.jsonl", tail=3) == []


def test_a_truncated_gzip_part_is_one_error_naming_it(tmp_path):
    gz = write(tmp_path / "metrics.20260101T000000Z.jsonl.gz", [rec(b) for b in range(50)], gz=True)
    gz.write_bytes(gz.read_bytes()[:-20])
    with pytest.raises(CorruptLineError) as info:
        read_journal(tmp_path / "metrics.jsonl")
    assert str(info.value).startswith(f"{gz} is not a whole gzip file") and "\n" not in str(info.value)


def _rotated_run(run: Path) -> Path:
    """A run directory whose journals were rotated: metrics in three parts (one gzipped), and progress."""
    run.mkdir()
    write_run_info(run, {"workload": "PASSTHROUGH", "policy": "lmstream"})
    write(run / "metrics.20260101T000000Z.jsonl.gz", [rec(0), rec(1)], gz=True)
    write(run / "metrics.20260102T000000Z.jsonl", [rec(2), rec(3)])
    write(run / "metrics.jsonl", [rec(4)])
    write(run / "spark_progress.20260101T000000Z.jsonl.gz",
          [{"batch_id": b, "addBatch_ms": 100 + b} for b in range(3)], gz=True)
    write(run / "spark_progress.jsonl", [{"batch_id": b, "addBatch_ms": 100 + b} for b in (3, 4)])
    return run


def test_load_metrics_the_replay_and_compare_read_every_part(tmp_path):
    run = _rotated_run(tmp_path / "run")
    df = load_metrics(run)
    assert list(df["batch_id"]) == [0, 1, 2, 3, 4] and list(df["spark_addBatch_ms"]) == [100, 101, 102, 103, 104]
    buffer = RecordBuffer()
    load_run(run, buffer)
    assert buffer.batch_ids() == [0, 1, 2, 3, 4]
    (run / "metrics.jsonl").unlink()  # rotated, and no batch since
    with CliRunner().isolation() as (stdout, stderr, _):
        code = main(["compare", str(run)])
    out = stdout.getvalue().decode()
    assert code == 0 and "PASSTHROUGH" in out and "skipped" not in stderr.getvalue().decode()
    cells = [c.strip() for c in next(line for line in out.splitlines() if "PASSTHROUGH" in line).split("\u2502")]
    assert cells[4:6] == ["4", "40"]  # batches 0..3, 10 rows each: every part read


# ------------------------------------------------------------------- run.json's totals
def test_processed_totals_are_whole_across_rotation_deletion_and_a_batch_replayed_at_the_boundary(tmp_path):
    path = tmp_path / "metrics.jsonl"
    # batch 2 ran, the driver died before Spark committed it, the part was rotated, batch 2 ran again
    a = write(tmp_path / "metrics.19700101T000000Z.jsonl", [rec(0, 5), rec(1, 6), rec(2, 7)], mtime=0.0)
    b = write(tmp_path / "metrics.19700102T000000Z.jsonl", [rec(2, 7), rec(3, 8), rec(4, 9)], mtime=DAY)
    write(path, [rec(5, 10), rec(5, 10)])
    whole = {"rows_processed": 45, "batches": 6}
    assert processed_totals(path) == whole
    rotate_journal(path, max_bytes=10**9, max_age_s=DAY / 2, now=DAY, before_delete=fold_released)
    assert not a.exists() and b.exists() and read_released(tmp_path)["last_key"] == [2, 2, 3]
    assert processed_totals(path) == whole
    rotate_journal(path, max_bytes=10**9, max_age_s=DAY / 2, now=2 * DAY, before_delete=fold_released)
    assert not b.exists() and read_released(tmp_path)["batches"] == 5  # 2 is not counted twice
    assert processed_totals(path) == whole


def test_processed_totals_reads_again_when_a_part_goes_while_it_reads(tmp_path, monkeypatch):
    from lmstream_kit import runinfo

    path = tmp_path / "metrics.jsonl"
    a = write(tmp_path / "metrics.19700101T000000Z.jsonl", [rec(0, 5), rec(1, 6)], mtime=0.0)
    write(path, [rec(2, 7)])
    real = runinfo.read_released
    calls = []

    def read_then_delete(run_dir):
        released = real(run_dir)
        if not calls:  # retention folds and deletes the part just after its totals were read
            rotate_journal(path, max_bytes=10**9, max_age_s=1.0, now=DAY, before_delete=fold_released)
        calls.append(run_dir)
        return released

    monkeypatch.setattr(runinfo, "read_released", read_then_delete)
    assert processed_totals(path) == {"rows_processed": 18, "batches": 3} and not a.exists()


# ------------------------------------------------------------------- settings
def test_retention_spec_keys_and_defaults_for_the_journals():
    d = retention_from_spec("default")
    assert (d["journal_bytes"], d["journal_age_s"]) == (64 * 2**20, 30 * DAY)
    got = retention_from_spec("journal-size=16MiB, journal-age=2d")
    assert (got["journal_bytes"], got["journal_age_s"]) == (16 * 2**20, 2 * DAY)
    assert retention_from_spec("journal-age=none")["journal_age_s"] is None
    r = SpoolRetention(**retention_from_spec("journal-size=1MiB,journal-age=12h"))
    assert (r.journal_bytes, r.journal_age_s) == (2**20, 43200.0)
    with pytest.raises(ConfigError, match="known: .*journal-size, journal-age$"):
        retention_from_spec("journal-bytes=1")


@pytest.mark.parametrize("make, message", [
    (lambda: retention_from_spec("journal-age=soon"),
     "retention journal-age must be a number of seconds or a duration such as '20 seconds', got 'soon'"),
    (lambda: retention_from_spec("journal-size=lots"),
     "retention journal-size must be a number of bytes or a size such as '512 MiB', got 'lots'"),
    (lambda: retention_from_spec("journal-size=none"),
     "retention journal-size must be a number of bytes or a size such as '512 MiB', got 'none'"),
    (lambda: SpoolRetention(**retention_from_spec("journal-size=0")), "retention.journal_bytes must be >= 1, got 0"),
    (lambda: SpoolRetention(journal_age_s=-1.0), "retention.journal_age_s must be >= 0, got -1.0"),
    (lambda: SpoolRetention().set_param("journal_bytes", 2.5), "retention.journal_bytes must be an integer, got 2.5"),
    (lambda: SpoolRetention().set_param("journal_bytes", None), "retention.journal_bytes must be an integer, got None"),
])
def test_a_bad_journal_setting_is_one_line_naming_the_value(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value) == message or str(info.value).endswith(message)
    assert "\n" not in str(info.value)


def test_journal_settings_are_live_and_logged():
    r = SpoolRetention()
    r.set_param("journal_bytes", 4096)
    r.set_param("journal_age_s", None)
    assert (r.journal_bytes, r.journal_age_s) == (4096, None)
    assert [(c.param, c.old, c.value) for c in r.changelog.take()] == [
        ("retention.journal_bytes", 64 * 2**20, 4096), ("retention.journal_age_s", 30 * DAY, None)]


# ------------------------------------------------------------------- the sweep
class _Host:
    def __init__(self, run_dir, spool=None):
        self.spool, self.run_dir, self.feed = spool, run_dir, None


def test_the_sweep_rotates_compresses_and_deletes_both_journals_and_the_totals_stay_whole(tmp_path):
    run = tmp_path / "run"
    metrics = JsonlWriter(run / "metrics.jsonl")
    progress = JsonlWriter(run / "spark_progress.jsonl", durable=False)
    r = SpoolRetention(journal_bytes=50, journal_age_s=DAY)
    r.plugged(_Host(run))
    r._ensure_thread = lambda: None  # sweeps run here, in the test's thread
    batch = 0
    now = time.time()
    for sweep in range(4):
        for _ in range(3):
            metrics.append(rec(batch, rows=batch + 1))
            progress.append({"batch_id": batch, "addBatch_ms": 100 + batch})
            batch += 1
        done = r.sweep(now=now + 2 * sweep)
        assert done["journal_rotated"] == 2
    assert len(journal_parts(run / "metrics.jsonl")) == 4 and not (run / "metrics.jsonl").exists()
    r.set_param("journal_bytes", 10**6)
    metrics.append(rec(batch, rows=batch + 1))  # the writer starts the journal again
    assert ids(read_journal(run / "metrics.jsonl")) == list(range(13))
    assert r.sweep(now=now + 30)["journal_compressed"] == 0  # too soon: a raced writer may still write
    assert r.sweep(now=now + 10 + JOURNAL_COMPRESS_AFTER_S)["journal_compressed"] == 8
    assert all(p.suffix == ".gz" for p in journal_parts(run / "spark_progress.jsonl"))
    assert list(load_metrics(run)["spark_addBatch_ms"])[:12] == [100 + b for b in range(12)]
    assert processed_totals(run / "metrics.jsonl") == {"rows_processed": sum(range(1, 14)), "batches": 13}
    done = r.sweep(now=now + 2 * DAY)
    assert done["journal_deleted"] == 8 and journal_parts(run / "metrics.jsonl") == []
    assert read_released(run)["parts"] == 4 and read_released(run)["through_batch_id"] == 11
    assert ids(read_journal(run / "metrics.jsonl")) == [12]
    assert processed_totals(run / "metrics.jsonl") == {"rows_processed": sum(range(1, 14)), "batches": 13}
    assert not list(run.glob("spark_progress.*"))  # progress parts go without totals
    status = r.status()
    assert (status["journal_rotations"], status["journal_compressions"], status["journal_deletions"]) == (8, 8, 8)
    assert status["error"] is None
    metrics.close()
    progress.close()


def test_the_sweep_keeps_journal_parts_forever_without_an_age_and_one_failing_journal_leaves_the_other(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write(run / "metrics.jsonl", [rec(0)])
    write(run / "spark_progress.jsonl", [{"batch_id": 0}])
    r = SpoolRetention(journal_bytes=1, journal_age_s=None)
    r.plugged(_Host(run))
    r.sweep(now=time.time())
    assert r.sweep(now=time.time() + 100 * DAY)["journal_deleted"] == 0
    assert len(journal_parts(run / "metrics.jsonl")) == 1
    # a metrics part that cannot be read cannot be folded: it stays, and the progress journal goes on
    r.set_param("journal_age_s", 1.0)
    [part] = journal_parts(run / "metrics.jsonl")
    part.write_bytes(gzip.compress(b'{"batch_id": 0}\n!corrupt!\n{"batch_id": 1}\n'))
    write(run / "spark_progress.jsonl", [{"batch_id": 1}])
    with pytest.raises(CorruptLineError, match="line 2"):
        r.sweep(now=time.time() + 200 * DAY)
    assert journal_parts(run / "metrics.jsonl") == [part]
    assert [p.name for p in journal_parts(run / "spark_progress.jsonl")] != [] and r.journal_deletions == 1
    assert not (run / RELEASED_FILE).exists()


# ------------------------------------------------------------------- a resume reads the newest records
class _Recorder(BatchController):
    resume_records = 1500

    def __init__(self):
        super().__init__()
        self.got = None

    def on_resume(self, records):
        self.got = list(records)


def test_the_resume_tail_covers_every_controller():
    gate = AdmissionController(slide_s=2.0, history=3000)
    loop = RunLoop(gate, BatchController(), ChangeLog(), settings=lambda: None)
    assert loop.resume_tail() == 3000
    loop = RunLoop(AdmissionController(slide_s=2.0), BatchController(), ChangeLog(), settings=lambda: None)
    assert loop.resume_tail() == RECORDS_KEPT
    loop.add_controller(SpoolRetention(keep_batches=4000))
    assert loop.resume_tail() == 4001


class SparkDidNotStart(RuntimeError):
    pass


def test_a_resumed_stream_hands_its_controllers_the_newest_records_without_reading_old_parts(tmp_path, monkeypatch):
    from lmstream_kit.live import LiveStream

    def dies(self):
        raise SparkDidNotStart("no Spark in this test")

    monkeypatch.setattr("lmstream_kit.engine.adapter.SparkEngine.open", dies)
    monkeypatch.setattr("lmstream_kit.engine.adapter.SparkEngine.checkpoint_offsets", lambda self, cp: (3000, 2999))
    monkeypatch.setattr("lmstream_kit.engine.adapter.SparkEngine.recover_unfinished_repartition",
                        lambda self, cp: None)
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.20260101T000000Z.jsonl").write_text('{"batch_id": 0}\n!corrupt!\n{"batch_id": 1}\n')
    write(run / "metrics.20260102T000000Z.jsonl.gz", [rec(b) for b in range(2, 1000)], gz=True)
    write(run / "metrics.20260103T000000Z.jsonl", [rec(b) for b in range(1000, 2000)])
    write(run / "metrics.jsonl", [rec(b) for b in range(2000, 3000)])
    recorder = _Recorder()
    with pytest.raises(SparkDidNotStart):
        LiveStream("LR2S", run_dir=run, optimizer=False, controllers=(recorder,)).start()
    assert ids(recorder.got) == list(range(1500, 3000))


def test_large_parts_are_read_a_record_at_a_time(tmp_path):
    """A restart's tail, a part's fold and run.json's totals never hold a whole 64 MiB part: measured
    with tracemalloc on a part of 20,000 records (about 3 MB of JSON, tens of MB as dicts)."""
    import tracemalloc

    from lmstream_kit.metrics import read_journal, read_jsonl
    from lmstream_kit.retention import fold_released
    from lmstream_kit.runinfo import processed_totals

    part = tmp_path / "metrics.20260101T000000Z.jsonl"
    with open(part, "w") as fh:
        for b in range(20_000):
            fh.write(json.dumps({"batch_id": b, "rows": 3, "start_seq": b, "end_seq": b + 1,
                                 "device_plan": {"entries": [{"id": i, "cost": 0.1 * i} for i in range(8)]}}) + "\n")
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"batch_id": 20_000, "rows": 3, "start_seq": 20_000,
                                                         "end_seq": 20_001}) + "\n")

    def peak(work):
        tracemalloc.start()
        try:
            result = work()
            return result, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    whole, held_all = peak(lambda: len(read_jsonl(part)))
    tail, held_tail = peak(lambda: read_journal(tmp_path / "metrics.jsonl", tail=10))
    totals, held_totals = peak(lambda: processed_totals(tmp_path / "metrics.jsonl"))
    folded, held_fold = peak(lambda: fold_released(part))
    assert whole == 20_000 and [r["batch_id"] for r in tail] == list(range(19_991, 20_001))
    assert totals == {"rows_processed": 60_003, "batches": 20_001} and folded["batches"] == 20_000
    assert held_all > 20 * 2**20, held_all  # the whole part as records
    for held in (held_tail, held_totals, held_fold):  # a dict of keys at most
        assert held < held_all / 5, (held, held_all)
