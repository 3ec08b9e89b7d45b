"""Starting, feeding and stopping the streaming query (the Spark side of LiveStream)."""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional

from ..exceptions import EngineError, one_line
from .source import SOURCE_NAME

#: Spark's bound on a query's stop: how long ``query.stop()`` waits for the batch in flight (Spark's
#: default, 0, waits for ever).
STOP_TIMEOUT_CONF = "spark.sql.streaming.stopTimeout"
#: The bound :func:`stop_query` gives a stop where the query's session sets none.  A capacity
#: probe whose JVM was collecting its heap over and over (LR1T, asap, 45,255 rows/s on the 2-core VM)
#: took 18 minutes to stop without one; Spark ends the query anyway once that batch returns.
STOP_TIMEOUT_S = 60.0
#: How long Spark waits before it asks the source again after a trigger found nothing to run (Spark's
#: default 10 ms; read once, when the query starts).  An admission gate that holds data back is asked
#: that often: the stream's polling interval (:func:`polling_confs`).
POLLING_DELAY_CONF = "spark.sql.streaming.pollingDelay"


def polling_confs(poll_s: float | None) -> dict[str, str]:
    """The start confs under which Spark asks the source every ``poll_s`` wall seconds while nothing
    is admitted (at least every millisecond); none for ``None`` (Spark's default).

    >>> polling_confs(0.05), polling_confs(0.0001), polling_confs(None)
    ({'spark.sql.streaming.pollingDelay': '50ms'}, {'spark.sql.streaming.pollingDelay': '1ms'}, {})
    """
    if poll_s is None:
        return {}
    return {POLLING_DELAY_CONF: f"{max(1, round(poll_s * 1000))}ms"}


def start_query(
    spark,
    *,
    workload,
    source_options: dict,
    trigger_s: float,
    on_batch: Callable,
    checkpoint: Path,
    name: str,
    confs: Optional[dict] = None,
):
    """Start ``workload``'s query over the ``lmstream`` source with a foreachBatch sink.

    ``confs``: SQL confs in force while the query starts (Spark copies the session's confs into
    the query then; those its checkpoint pins, the state store and the shuffle partitions, keep
    the values of the query's first start).  The session's own values are put back after.
    """
    reader = spark.readStream.format(SOURCE_NAME)
    for key, value in source_options.items():
        reader = reader.option(key, str(value))
    stream = reader.load()
    result = workload.build_query(stream)
    writer = (
        result.writeStream.queryName(name)
        .outputMode(workload.output_mode)
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(on_batch)
        .trigger(processingTime=f"{int(round(trigger_s * 1000))} milliseconds")
    )
    from .session import session_confs

    try:
        with session_confs(spark, confs):
            return writer.start()
    except Exception as exc:
        first = one_line(exc)
        raise EngineError(f"could not start query {name}: {first}") from exc


def write_output(batch_df, output_dir: Optional[Path], batch_id: int) -> int:
    """Run the batch's query once and write its result; returns the output row count.

    One Spark action per batch (every action re-reads the source).  The result is
    collected as Arrow and written to ``part-<batch_id>.parquet`` by rename, so a
    batch replayed after a crash overwrites its own file instead of duplicating it.
    With ``output_dir=None`` the result is computed and dropped (Spark's noop sink).
    """
    if output_dir is None:
        batch_df.write.format("noop").mode("overwrite").save()
        return -1
    return write_table(batch_df.toArrow(), output_dir, batch_id)


def write_table(table, output_dir: Optional[Path], batch_id: int) -> int:
    """Write a batch's result (a pyarrow Table) like :func:`write_output`; returns its row count."""
    if output_dir is None:
        return table.num_rows
    if table.num_rows:
        import pyarrow.parquet as pq

        output_dir.mkdir(parents=True, exist_ok=True)
        final = output_dir / f"part-{batch_id:08d}.parquet"
        tmp = output_dir / f".part-{batch_id:08d}.parquet.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, final)
    return table.num_rows


def _batch_offset(offsets: Path, batch_id: int) -> Optional[int]:
    """The ``lmstream`` offset (feed seq) recorded for ``batch_id`` in the offset log."""
    try:
        lines = (offsets / str(batch_id)).read_text().splitlines()
    except OSError:
        return None
    # line 0: version, line 1: metadata, then one offset per source
    for line in lines[2:]:
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and "seq" in value:
            return int(value["seq"])
    return None


def _batch_ids(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted((int(p.name) for p in directory.iterdir() if p.name.isdigit()), reverse=True)


def checkpoint_offsets(checkpoint: Path) -> tuple[Optional[int], Optional[int]]:
    """``(planned, committed)`` feed offsets of a checkpoint, None where there are none.

    *planned* is the end of the newest batch in the offset log; *committed* the
    end of the newest batch in the commit log.  Where they differ, Spark replays
    the planned batch on restart without asking the source, so the gate goes on
    from *planned*, and the replayed batch covers ``committed..planned``.
    """
    checkpoint = Path(checkpoint)
    planned = committed = None
    for batch_id in _batch_ids(checkpoint / "offsets"):
        planned = _batch_offset(checkpoint / "offsets", batch_id)
        if planned is not None:
            break
    for batch_id in _batch_ids(checkpoint / "commits"):
        committed = _batch_offset(checkpoint / "offsets", batch_id)
        if committed is not None:
            break
    return planned, committed


def stop_query(query, *, is_idle: Callable[[], bool], timeout_s: float = 60.0,
               stop_timeout_s: float = STOP_TIMEOUT_S) -> Optional[str]:
    """Stop ``query`` without Spark's interruption stack traces.

    Stopping while foreachBatch is inside a Spark action makes Spark print a
    StackOverflowError; so wait until the caller says nothing is in flight
    (admission closed and no foreachBatch running) and Spark reports no active
    trigger, and only then stop.

    Returns None once the query stopped, or why it did not: a batch that outlives the stop's bound
    (``stop_timeout_s``, or the session's own :data:`STOP_TIMEOUT_CONF`) keeps running (a
    foreachBatch function that does not return, a JVM that spends its time collecting a full heap),
    and Spark ends the query when it returns.
    """
    from .session import interrupting, jvm_logs_off

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            active = query.isActive and query.status.get("isTriggerActive", False)
        except Exception:
            active = False
        if is_idle() and not active:
            break
        time.sleep(0.02)
    # a batch still running after the wait is interrupted on purpose: Spark runs it again on
    # restart, and py4j's traceback of its InterruptedException says nothing more; nor do the JVM's
    # errors for its killed tasks (also where a batch started between the wait and the stop)
    with interrupting(), jvm_logs_off(query), _stop_bound(query, stop_timeout_s) as bound:
        try:
            query.stop()
        except Exception as exc:  # noqa: BLE001 - a stop's interruption errors say nothing more
            if "failed to stop within" in str(exc):  # spark.sql.streaming.stopTimeout ran out
                return f"its batch in flight did not stop within {bound} ({STOP_TIMEOUT_CONF})"
    return None


@contextmanager
def _stop_bound(query, stop_timeout_s: float):
    """While ``query`` stops: its session's :data:`STOP_TIMEOUT_CONF` is ``stop_timeout_s`` where the
    session sets none (Spark reads it from the query's session when the stop comes, not at its
    start), and unset after.  Yields the bound in force, as text."""
    bound = f"{int(stop_timeout_s * 1000)}ms"
    try:
        conf = query._jsq.sparkSession().conf()
        own = conf.get(STOP_TIMEOUT_CONF, None)  # null where unset (getOption gives Spark's default, 0)
        if own is not None:
            bound, conf = str(own), None
        else:
            conf.set(STOP_TIMEOUT_CONF, bound)
    except Exception:  # noqa: BLE001 - a session without a JVM side: its stop is Spark's own
        conf = None
    try:
        yield bound
    finally:
        if conf is not None:
            try:
                conf.unset(STOP_TIMEOUT_CONF)
            except Exception:  # noqa: BLE001 - the JVM went away meanwhile
                pass
