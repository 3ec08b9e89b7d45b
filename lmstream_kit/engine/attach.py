"""The Spark side of attaching to a query the kit did not build: its facts, its progress, a restart.

:class:`ProgressWatch` hands every batch's progress (Spark's JSON as a dict) of one
query to a callback: those in ``recentProgress`` first, then the listener's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ..exceptions import ConfigError, EngineError, one_line
from .stream import stop_query

__all__ = ["AttachedBatch", "ProgressWatch", "query_facts", "restart_query", "start_writer", "trigger_spec",
           "watermark_columns"]


def _session_of(query):
    """The SparkSession whose query manager runs ``query`` (listeners are per session)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and active.streams.get(str(query.id)) is not None:
        return active
    return SparkSession(SparkContext._active_spark_context, query._jsq.sparkSession())


def watermark_columns(query) -> list[str] | None:
    """The columns of the query's ``withWatermark`` calls (None when the plan cannot be read)."""
    try:
        stack = [query._jsq.streamingQuery().logicalPlan()]
    except Exception:  # Spark Connect, or a JVM API that moved
        return None
    found = []
    while stack:
        node = stack.pop()
        if node.nodeName() == "EventTimeWatermark":
            found.append(str(node.eventTime().name()))
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return sorted(set(found))


def query_facts(query) -> dict:
    """What run.json says of a running query: id, run id, name, source and sink; ConfigError if stopped."""
    if not query.isActive:
        error = query.exception()
        why = f" (it failed: {one_line(str(error))})" if error else ""
        raise ConfigError(f"query {query.name or query.id} is not running{why}: attach to a running query")
    last = query.lastProgress
    last = dict(last) if last else {}
    return {
        "query_id": str(query.id),
        "run_id": str(query.runId),
        "name": query.name,
        "source": [s.get("description") for s in last.get("sources") or []] or None,
        "sink": (last.get("sink") or {}).get("description"),
    }


class AttachedBatch:
    """The engine handle of one batch of an attached query: what plug-ins read of it after it ran.

    Spark names a streaming batch's jobs by the query run (their job group) and ``batch = N``
    (their description), for any query, so its stages come from the status store as they do for
    the kit's own streams (:mod:`~lmstream_kit.engine.stages`).
    """

    def __init__(self, query, run_id: str, batch_id: int) -> None:
        self.query, self.run_id, self.batch_id = query, str(run_id), int(batch_id)

    def stages(self, timeout: float = 1.0) -> list[dict]:
        """The stages the batch's jobs ran, with their metrics."""
        from .stages import stage_reader_for

        return stage_reader_for(_session_of(self.query)).batch_stages(self.run_id, self.batch_id, timeout=timeout)


class ProgressWatch:
    """Calls ``on_progress(dict)`` with each batch progress of ``query``; :meth:`close` stops it."""

    def __init__(self, query, on_progress: Callable[[dict], None]) -> None:
        from .listener import ProgressListener, progress_dict

        self._spark = _session_of(query)
        self._listener = ProgressListener(on_progress, convert=progress_dict)
        self._listener.query_id = str(query.id)  # the same across restarts from the checkpoint
        self._spark.streams.addListener(self._listener)

    @staticmethod
    def recent(query) -> list[dict]:
        """The progress the query keeps (``recentProgress``, the last 100 by default), oldest first."""
        from .listener import progress_dict

        return [progress_dict(p) for p in query.recentProgress]

    def close(self) -> None:
        try:
            self._spark.streams.removeListener(self._listener)
        except Exception:
            pass


def trigger_spec(trigger_s: float) -> str:
    """Spark's processingTime for ``trigger_s`` seconds.

    >>> trigger_spec(0.5), trigger_spec(0)
    ('500 milliseconds', '0 seconds')
    """
    ms = int(round(trigger_s * 1000))
    return f"{ms} milliseconds" if ms else "0 seconds"


def start_writer(writer, *, trigger_s: float, checkpoint: Path):
    """Start a configured ``DataStreamWriter`` with a processingTime trigger and ``checkpoint``."""
    if not hasattr(writer, "start") or not hasattr(writer, "trigger"):
        raise ConfigError(f"writer must be a DataStreamWriter (df.writeStream...), got {type(writer).__name__}")
    try:
        return writer.option("checkpointLocation", str(checkpoint)).trigger(
            processingTime=trigger_spec(trigger_s)).start()
    except Exception as exc:
        raise EngineError(f"could not start the query: {one_line(exc)}") from exc


def restart_query(query, writer, *, trigger_s: float, checkpoint: Path, timeout_s: float = 10.0):
    """Stop ``query`` between batches, start ``writer`` again from ``checkpoint``; the new query.

    It stops once Spark reports no trigger active, so the batch in flight
    finishes and commits (or after ``timeout_s``: Spark then runs the
    interrupted batch again); the new query continues from the checkpoint.
    """
    stop_query(query, is_idle=lambda: True, timeout_s=timeout_s)
    deadline = time.monotonic() + timeout_s
    while query.isActive and time.monotonic() < deadline:
        time.sleep(0.02)
    return start_writer(writer, trigger_s=trigger_s, checkpoint=checkpoint)
