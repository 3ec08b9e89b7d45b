"""A full disk holds admission (nothing lost) and the feed waits, without Spark."""

from __future__ import annotations

import errno
from types import SimpleNamespace as NS

import pyarrow as pa

from lmstream_kit.diskguard import DiskGuard, is_disk_full
from lmstream_kit.exceptions import SpoolError
from lmstream_kit.feed.spool import Spool
from lmstream_kit.feed.traffic import ConstantTraffic, FeedGenerator
from lmstream_kit.policies import AdmitAll
from lmstream_kit.protocol import BatchController, ChangeLog
from lmstream_kit.runloop import BatchSettings, RunLoop


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_the_guard_reads_free_space_at_most_every_interval_and_counts_each_hold_once(tmp_path):
    run, spool = tmp_path / "run", tmp_path / "spool"
    run.mkdir(), spool.mkdir()
    free = {str(run): 10, str(spool): 500}
    reads = []

    def free_bytes(path):
        reads.append(path)
        return free[path]

    clock = Clock()
    g = DiskGuard(min_free_bytes=100, paths=[run, spool], free_bytes=free_bytes, check_every_s=1.0, clock=clock)
    assert g.admission_held() == f"disk full: 10 B free on {run} (admission waits for 100 B; nothing is lost)"
    clock.t = 0.5
    free[str(run)] = 1000
    assert g.admission_held() is not None and len(reads) == 2  # not read again within the interval
    clock.t = 1.0
    assert g.admission_held() is None and g.holds == 1
    free[str(spool)] = 50
    clock.t = 2.0
    assert f"50 B free on {spool}" in g.admission_held() and g.holds == 2
    assert g.after_batch(NS()) == {"disk_free_bytes": 50}


def test_a_directory_not_made_yet_is_measured_on_its_parents_disk(tmp_path):
    seen = []
    g = DiskGuard(min_free_bytes=1, paths=[tmp_path / "a" / "b"], free_bytes=lambda p: seen.append(p) or 5)
    assert g.admission_held() is None and seen == [str(tmp_path)]


def test_a_held_loop_admits_nothing_until_the_guard_lets_go(tmp_path):
    log = ChangeLog()
    gate = AdmitAll("asap")
    gate.bind_changelog(log)
    loop = RunLoop(gate, BatchController(), log, settings=lambda: BatchSettings("TOY", "asap", 5.0, 2.5, None))
    loop.spool = NS(datasets=lambda start, end=None: [NS(seq=i, arrival=1.0, rows=1, nbytes=1)
                                                        for i in range(start, 4)])
    free = {str(tmp_path): 0}
    guard = loop.add_controller(DiskGuard(min_free_bytes=10, paths=[tmp_path], free_bytes=free.get,
                                          check_every_s=0.0))
    assert loop.on_latest(0) == 0 and loop.held.startswith(f"disk full: 0 B free on {tmp_path}")
    free[str(tmp_path)] = 10
    assert loop.on_latest(0) == 4 and loop.held is None and guard.holds == 1


def test_disk_full_is_told_apart_from_other_errors():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as exc:
            raise SpoolError("cannot append to spool at /x: No space left on device") from exc
    except SpoolError as outer:
        assert is_disk_full(outer)
    assert is_disk_full(OSError("[Errno 28] No space left on device"))
    assert not is_disk_full(SpoolError("schema mismatch"))


def test_the_generator_waits_on_a_full_disk_and_then_writes_the_same_second(tmp_path):
    spool = Spool(tmp_path / "spool", schema=pa.schema([("s", pa.int64()), ("v", pa.float64())]), durable=False)
    real_append = spool.append
    fails = [2]

    def append(table, **kw):
        if kw.get("second") == 1 and fails[0]:
            fails[0] -= 1
            raise SpoolError("cannot append to spool: No space left on device")
        return real_append(table, **kw)

    spool.append = append

    def rows(second, n, rng):
        return pa.table({"s": pa.array([second] * n, pa.int64()), "v": pa.array(rng.random(n))})

    gen = FeedGenerator(spool, ConstantTraffic(3), rows, speedup=1000.0, duration_s=3, seed=7)
    blocked = []
    gen._stop.wait = lambda s: blocked.append(gen.blocked) or False  # no real sleep
    gen.run_until_done()
    assert len(blocked) == 2 and blocked[0].startswith("feed waits: cannot append to spool")
    assert gen.blocked is None and gen.error is None
    assert [i.second for i in spool.datasets()] == [0, 1, 2]
    again = Spool(tmp_path / "again", schema=spool.schema, durable=False)
    FeedGenerator(again, ConstantTraffic(3), rows, speedup=1000.0, duration_s=3, seed=7).run_until_done()
    assert spool.read_table().equals(again.read_table()), "the second written late holds the same rows"
