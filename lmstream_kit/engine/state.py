"""A streaming query's state-store partitions: read from its checkpoint, changed offline (Spark 4.2+).

The checkpoint fixes how many partitions a query's stateful operators keep their state in: the
``spark.sql.shuffle.partitions`` that its offset log recorded when the query first ran.  Spark
4.2 added an offline repartition (``spark._streamingCheckpointManager.repartition``: private,
experimental, Classic only).  It runs on a *stopped* query, rewrites the state into the new
number of partitions and commits that as one extra batch that reads no input; the next start of
the query goes on from it.  It only rewrites RocksDB state (Spark refuses the default
HDFS-backed store), and it refuses a checkpoint whose last batch did not commit.

:func:`repartition_unsupported` says, in one line, why a checkpoint cannot be repartitioned
here, before anything is stopped; :func:`repartition_state` runs the repartition.  The stop and
the restart around it are the stream's (``LiveStream.set_state_partitions``).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from ..exceptions import ConfigError, EngineError, one_line
from ..stream_config import STATE_STORES, check_state_store

__all__ = ["PROVIDER_CONF", "ROCKSDB_PROVIDER", "STATE_STORES", "checkpoint_conf", "recover_unfinished_repartition",
           "collect_heap", "release_state_stores", "repartition_state", "repartition_unsupported", "state_partitions",
           "state_store_confs", "unfinished_repartition"]

#: the SQL conf that picks the state store provider when a query first starts
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
#: RocksDB's state store provider: the one Spark's offline repartition rewrites
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_SHUFFLE_CONF = "spark.sql.shuffle.partitions"
#: RocksDB copies its files with Hadoop's checksummed local file system, which the kit's sessions
#: replace by the raw one for file:// (faster checkpoints): a RocksDB query gets it back, uncached
_ROCKSDB_CONFS = {PROVIDER_CONF: ROCKSDB_PROVIDER, "fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem",
                  "fs.file.impl.disable.cache": "true"}


def state_store_confs(state_store: str = "default", state_partitions: int | None = None) -> dict[str, str]:
    """The SQL confs a query's first start needs for ``state_store`` and ``state_partitions``.

    >>> state_store_confs("rocksdb", 4)[PROVIDER_CONF] == ROCKSDB_PROVIDER
    True
    >>> state_store_confs("default", 4)
    {'spark.sql.shuffle.partitions': '4'}
    >>> state_store_confs("lsm")
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: state_store must be 'default' or 'rocksdb', got 'lsm'
    """
    check_state_store(state_store)
    confs = dict(_ROCKSDB_CONFS) if state_store == "rocksdb" else {}
    if state_partitions is not None:
        if isinstance(state_partitions, bool) or not isinstance(state_partitions, int) or state_partitions < 1:
            raise ConfigError(f"state_partitions must be an integer >= 1, got {state_partitions!r}")
        confs[_SHUFFLE_CONF] = str(state_partitions)
    return confs


def release_state_stores(spark: Any) -> bool:
    """Unload the state stores this JVM holds, once none of ``spark``'s streaming queries runs;
    returns whether it did.

    A stopped query's stores stay loaded, with their last versions' state in memory, until Spark's
    maintenance task finds them inactive (every ``spark.sql.streaming.stateStore.maintenanceInterval``,
    60 s).  In local mode they are in the driver's heap, beside the next query's: after LR1T at
    28,000 rows/s stopped, 1,058 MiB of the old generation stayed live, and 57 MiB once maintenance
    had run (2-core VM, 4 GiB heap); bench probes started within seconds of each other ran on a heap
    already 2.1-2.5 GB full and failed on collections.  The next start of a query loads its state
    from its checkpoint, as it does anyway (a store belongs to one run of its query).  On a cluster
    the stores are the executors' and this releases nothing there.
    """
    try:
        if spark.streams.active:
            return False
        store = getattr(getattr(spark.sparkContext._jvm.org.apache.spark.sql.execution.streaming.state,
                                "StateStore$"), "MODULE$")
        store.unloadAll()
        return True
    except Exception:  # noqa: BLE001 - a JVM gone, or a Spark without the call: Spark's maintenance does it
        return False


def collect_heap(spark: Any) -> None:
    """Release the state stores (:func:`release_state_stores`) and collect the driver's whole heap
    (what remains in it is in the next batch's progress: :mod:`.listener`).

    The bench runs this before every run, so that a run's heap holds neither the state nor the
    garbage of the runs before it: without it, LR1T's capacity probes started with 0.2-2.9 GB of
    the old generation in use depending on what had run before, and a probe that started near full
    stopped for a full collection early.
    """
    release_state_stores(spark)
    try:
        spark.sparkContext._jvm.java.lang.System.gc()
    except Exception:  # noqa: BLE001 - a JVM gone: the run that follows says so
        pass


def _last_batch(directory: Path) -> Path | None:
    ids = [int(p.name) for p in directory.iterdir() if p.name.isdigit()] if directory.is_dir() else []
    return directory / str(max(ids)) if ids else None


def checkpoint_conf(checkpoint: str | Path, batch: int | None = None) -> dict[str, str]:
    """The SQL confs the checkpoint's offset-log entry of ``batch`` (default: the newest) pins; {} if none."""
    offsets = Path(checkpoint) / "offsets"
    last = _last_batch(offsets) if batch is None else offsets / str(batch)
    if last is None or not last.is_file():
        return {}
    try:
        meta = json.loads(last.read_text().splitlines()[1])
    except (OSError, IndexError, json.JSONDecodeError):
        return {}
    conf = meta.get("conf") if isinstance(meta, dict) else None
    return {str(k): str(v) for k, v in conf.items()} if isinstance(conf, dict) else {}


def _committed(checkpoint: Path) -> int | None:
    last = _last_batch(checkpoint / "commits")
    return int(last.name) if last is not None else None


def state_partitions(checkpoint: str | Path) -> int | None:
    """How many partitions the checkpoint's last committed batch keeps its state in; None without state."""
    checkpoint = Path(checkpoint)
    committed = _committed(checkpoint)
    if committed is None or not (checkpoint / "state").is_dir():
        return None
    value = checkpoint_conf(checkpoint, committed).get(_SHUFFLE_CONF)
    return int(value) if value is not None and value.isdigit() else None


def _rollback(checkpoint: Path, batch: int) -> None:
    """Remove what an unfinished repartition wrote as ``batch``: its offset-log entry and its state files.

    Spark refuses to start a query whose newest offset-log entry is an unfinished repartition; with
    it gone, the query starts again from the last committed batch, as before the repartition.  A
    state store keeps batch ``b``'s state as version ``b + 1`` (``<version>.zip``, ``.changelog``,
    ``.delta``, ``.snapshot``); partition directories left empty (new partitions) go too.
    """
    for name in (str(batch), f".{batch}.crc"):
        (checkpoint / "offsets" / name).unlink(missing_ok=True)
    state = checkpoint / "state"
    if not state.is_dir():
        return
    version = batch + 1
    for pattern in (f"{version}.*", f".{version}.*"):
        for path in state.rglob(pattern):
            if path.is_file():
                path.unlink()
    for operator in state.iterdir():
        for part in (operator.iterdir() if operator.is_dir() else ()):
            if part.is_dir() and part.name.isdigit() and not any(p.is_file() for p in part.rglob("*")):
                shutil.rmtree(part, ignore_errors=True)


def unfinished_repartition(checkpoint: str | Path) -> int | None:
    """The batch of a state repartition that did not finish (a crash, or Spark's failure), else None.

    Spark writes a repartition as a new offset-log entry that reads no input and differs from the
    last committed batch only in its shuffle partitions, and commits it when the state is
    rewritten.  An uncommitted newest entry with other partitions is such a batch (a data batch
    never changes them), and Spark refuses to start the query until it is resolved.
    """
    checkpoint = Path(checkpoint)
    committed = _committed(checkpoint)
    newest = _last_batch(checkpoint / "offsets")
    if committed is None or newest is None or int(newest.name) != committed + 1:
        return None
    now = checkpoint_conf(checkpoint, committed).get(_SHUFFLE_CONF)
    then = checkpoint_conf(checkpoint, committed + 1).get(_SHUFFLE_CONF)
    return committed + 1 if now is not None and then is not None and now != then else None


def recover_unfinished_repartition(checkpoint: str | Path) -> dict[str, Any] | None:
    """Roll back a state repartition that did not finish (:func:`unfinished_repartition`), so that the
    query starts again from its last committed batch, state partitions unchanged; what it did, or None."""
    checkpoint = Path(checkpoint)
    batch = unfinished_repartition(checkpoint)
    if batch is None:
        return None
    wanted = checkpoint_conf(checkpoint, batch).get(_SHUFFLE_CONF)
    _rollback(checkpoint, batch)
    return {"batch": batch, "requested": int(wanted) if wanted else None, "kept": state_partitions(checkpoint)}


def _version(text: str) -> tuple[int, int]:
    parts = (text.split(".") + ["0", "0"])[:2]
    return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in parts)  # type: ignore[return-value]


def repartition_unsupported(spark: Any, checkpoint: str | Path) -> str | None:
    """Why the query of ``checkpoint`` cannot have its state repartitioned here (None: it can)."""
    version = str(getattr(spark, "version", "") or "")
    if _version(version) < (4, 2):
        return f"Spark {version or '?'} has no offline state repartition (it needs Spark 4.2+)"
    try:
        manager = getattr(spark, "_streamingCheckpointManager", None)
    except Exception:  # noqa: BLE001  (Spark Connect raises on the private attribute)
        manager = None
    if manager is None or not hasattr(manager, "repartition"):
        return "this SparkSession has no streaming checkpoint manager (Spark Classic only, not Spark Connect)"
    if state_partitions(checkpoint) is None:
        return "the query keeps no state yet (its checkpoint has no state after a committed batch)"
    provider = checkpoint_conf(checkpoint, _committed(Path(checkpoint))).get(PROVIDER_CONF, "")
    if provider != ROCKSDB_PROVIDER:
        name = provider.rsplit(".", 1)[-1] or "the default"
        return (f"the query keeps its state in {name} and Spark repartitions only RocksDB state "
                f"(start the stream with state_store='rocksdb')")
    return None


def repartition_state(spark: Any, checkpoint: str | Path, partitions: int) -> dict[str, Any]:
    """Repartition the stopped query's state into ``partitions``; what it did (``old``, ``new``, seconds).

    The query must be stopped with its last batch committed.  Raises ConfigError (one line, before
    touching anything) where it cannot be done here, and EngineError where Spark's repartition
    itself fails.
    """
    reason = repartition_unsupported(spark, checkpoint)
    if reason is not None:
        raise ConfigError(f"cannot repartition the state into {partitions}: {reason}")
    old = state_partitions(checkpoint)
    if partitions == old:
        raise ConfigError(f"the state is already in {partitions} partitions")
    checkpoint = Path(checkpoint)
    committed = _committed(checkpoint)
    if _last_batch(checkpoint / "offsets") != checkpoint / "offsets" / str(committed):
        raise ConfigError(f"cannot repartition the state into {partitions}: the checkpoint's last batch did not "
                          f"commit (last committed: {committed}); start the query to finish it")
    from .session import session_confs

    t0 = time.perf_counter()
    try:
        with session_confs(spark, _ROCKSDB_CONFS):
            spark._streamingCheckpointManager.repartition(str(checkpoint), int(partitions))
    except Exception as exc:  # noqa: BLE001  (Py4J's error, as one line)
        if committed is not None:
            _rollback(checkpoint, committed + 1)
        raise EngineError(f"Spark's state repartition into {partitions} failed (rolled back): {one_line(exc)}") from exc
    return {"old": old, "new": int(partitions), "repartition_s": round(time.perf_counter() - t0, 3)}
