"""A full disk on real Spark: admission waits, the feed waits, nothing is lost, it goes on when space returns."""

from __future__ import annotations

import collections
import os
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lmstream_kit.feed.spool import Spool
from lmstream_kit.live import LiveStream

pytestmark = pytest.mark.spark


@pytest.fixture
def small_disk(tmp_path):
    """A 48 MiB tmpfs (root only: where it cannot be mounted the test is skipped, saying why)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _wait(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout} s")
        time.sleep(0.1)


def test_a_full_disk_holds_the_stream_and_it_goes_on_with_nothing_lost(spark, small_disk):
    run = small_disk / "run"
    s = LiveStream("PASSTHROUGH", policy="asap", traffic="constant", rate=300, speedup=10, run_dir=run,
                   spark=spark, min_free_disk=16 * 2**20)
    s.start()
    ballast = small_disk / "ballast"
    try:
        s.wait(batches=3, timeout=120)
        with open(ballast, "wb") as f:  # leave 1 MiB: below the guard's 16 MiB
            f.write(b"\0" * max(0, _free(small_disk) - 2**20))
        _wait(lambda: s.waiting is not None, 10, "hold")
        assert s.waiting.startswith("disk full: ") and "nothing is lost" in s.waiting
        n = len(s.records)
        _wait(lambda: getattr(s.feed, "blocked", None) is not None, 60, "feed wait on the full spool")
        assert "No space left on device" in s.feed.blocked
        s.check_health()  # waiting is not failing
        assert len(s.records) <= n + 1, "no batch was admitted while the disk was full"
        ballast.unlink()
        _wait(lambda: s.waiting is None and len(s.records) >= n + 3, 120, "batches after space returned")
    finally:
        if ballast.exists():
            ballast.unlink()
        s.stop(drain=True)
    assert s.disk_guard.holds >= 1
    spool = Spool(run / "spool", create=False)
    seconds = [i.second for i in spool.datasets()]
    assert seconds == list(range(len(seconds))), "no generated second was lost while the spool was full"
    out = pa.concat_tables([pq.read_table(f) for f in sorted((run / "output").glob("part-*.parquet"))])
    assert dict(collections.Counter(out["time"].to_pylist())) == {i.second: i.rows for i in spool.datasets()}
