"""A checkpoint's state partitions, the repartition guard and the rollback, on checkpoint files (no Spark).

The repartition itself runs on real Spark in tests/test_workload_correctness.py (4.3 line).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmstream_kit.engine.state import (
    PROVIDER_CONF,
    ROCKSDB_PROVIDER,
    _rollback,
    checkpoint_conf,
    repartition_state,
    repartition_unsupported,
    state_partitions,
    state_store_confs,
)
from lmstream_kit.exceptions import ConfigError


def write_batch(checkpoint: Path, batch: int, *, partitions: int, provider: str | None = ROCKSDB_PROVIDER,
                commit: bool = True) -> None:
    conf = {"spark.sql.shuffle.partitions": str(partitions)}
    if provider is not None:
        conf[PROVIDER_CONF] = provider
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": conf}
    (checkpoint / "offsets" / str(batch)).write_text("v1\n" + json.dumps(meta) + '\n{"seq":3}\n')
    if commit:
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


class Session:
    """What the guard reads of a SparkSession: its version and its checkpoint manager."""

    def __init__(self, version: str, manager: bool = True) -> None:
        self.version = version
        if manager:
            self._streamingCheckpointManager = type("Manager", (), {"repartition": lambda *a: None})()


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    ck = tmp_path / "checkpoint"
    write_batch(ck, 0, partitions=3)
    write_batch(ck, 1, partitions=3)
    (ck / "state" / "0" / "0").mkdir(parents=True)
    return ck


def test_state_partitions_are_the_last_committed_batchs(checkpoint):
    assert state_partitions(checkpoint) == 3
    write_batch(checkpoint, 2, partitions=5, commit=False)  # an unfinished repartition's batch
    assert state_partitions(checkpoint) == 3
    assert checkpoint_conf(checkpoint)["spark.sql.shuffle.partitions"] == "5"  # the newest entry


def test_a_checkpoint_without_state_has_no_state_partitions(tmp_path):
    write_batch(tmp_path, 0, partitions=2)
    assert state_partitions(tmp_path) is None
    assert state_partitions(tmp_path / "missing") is None


@pytest.mark.parametrize(("version", "manager", "provider", "want"), [
    ("4.1.4", True, ROCKSDB_PROVIDER, "Spark 4.1.4 has no offline state repartition (it needs Spark 4.2+)"),
    ("4.3.0", False, ROCKSDB_PROVIDER, "Spark Classic only"),
    ("4.3.0", True, None, "keeps its state in the default and Spark repartitions only RocksDB"),
    ("4.3.0", True, "org.x.HDFSBackedStateStoreProvider", "keeps its state in HDFSBackedStateStoreProvider"),
    ("4.3.0", True, ROCKSDB_PROVIDER, None),
    ("4.2.0-preview", True, ROCKSDB_PROVIDER, None),
])
def test_the_guard_names_why_a_repartition_cannot_run(tmp_path, version, manager, provider, want):
    write_batch(tmp_path, 0, partitions=2, provider=provider)
    (tmp_path / "state").mkdir()
    reason = repartition_unsupported(Session(version, manager), tmp_path)
    if want is None:
        assert reason is None
    else:
        assert want in reason


def test_no_state_yet_is_refused(tmp_path):
    write_batch(tmp_path, 0, partitions=2)
    assert "keeps no state yet" in repartition_unsupported(Session("4.3.0"), tmp_path)


def test_repartition_refuses_the_same_count_and_an_uncommitted_last_batch(checkpoint):
    with pytest.raises(ConfigError, match="already in 3 partitions"):
        repartition_state(Session("4.3.0"), checkpoint, 3)
    write_batch(checkpoint, 2, partitions=3, commit=False)
    with pytest.raises(ConfigError, match=r"last batch did not commit \(last committed: 1\)"):
        repartition_state(Session("4.3.0"), checkpoint, 4)


def test_rollback_removes_only_the_unfinished_batch(checkpoint):
    part = checkpoint / "state" / "0" / "0"  # batch b's state is version b + 1: batch 1 committed 2.zip
    for name in ("2.zip", ".2.zip.crc", "3.zip", ".3.zip.crc", "3.changelog", "13.zip"):
        (part / name).write_bytes(b"x")
    new_part = checkpoint / "state" / "0" / "4"  # a partition only the repartition wrote
    (new_part / "SSTs").mkdir(parents=True)
    (new_part / "3.zip").write_bytes(b"x")
    write_batch(checkpoint, 2, partitions=5, commit=False)
    _rollback(checkpoint, 2)
    assert sorted(p.name for p in part.iterdir()) == [".2.zip.crc", "13.zip", "2.zip"]
    assert not new_part.exists()
    assert sorted(p.name for p in (checkpoint / "offsets").iterdir()) == ["0", "1"]
    assert state_partitions(checkpoint) == 3


def test_state_store_confs_validate():
    assert state_store_confs() == {}
    with pytest.raises(ConfigError, match="state_partitions must be an integer >= 1, got 0"):
        state_store_confs("rocksdb", 0)


def test_an_unfinished_repartition_is_found_and_rolled_back(checkpoint):
    from lmstream_kit.engine.state import recover_unfinished_repartition, unfinished_repartition

    assert unfinished_repartition(checkpoint) is None
    write_batch(checkpoint, 2, partitions=3, commit=False)  # a data batch cut short: Spark replays it
    assert unfinished_repartition(checkpoint) is None and recover_unfinished_repartition(checkpoint) is None
    (checkpoint / "offsets" / "2").unlink()
    write_batch(checkpoint, 2, partitions=6, commit=False)  # a repartition that did not finish
    (checkpoint / "state" / "0" / "0" / "3.zip").write_bytes(b"x")  # batch 2's state: version 3
    assert unfinished_repartition(checkpoint) == 2
    assert recover_unfinished_repartition(checkpoint) == {"batch": 2, "requested": 6, "kept": 3}
    assert not (checkpoint / "offsets" / "2").exists() and not (checkpoint / "state" / "0" / "0" / "3.zip").exists()
