"""Watch and tune a streaming query started by plain PySpark: records from Spark's progress events.

>>> from lmstream_kit import attach                    # doctest: +SKIP
>>> s = attach(query, event_time="timestamp", bound_s=5)   # doctest: +SKIP
>>> s.wait(batches=5).summary()["max_latency_p95_s"]      # doctest: +SKIP

:func:`start_query` starts a configured ``DataStreamWriter`` itself, so that
:meth:`AttachedStream.set_trigger` can restart it from its checkpoint.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import __version__
from .exceptions import ConfigError, EngineError, one_line
from .metrics import METRICS_FILE, JsonlWriter, write_run_info
from .placement import CONTROL_PARAMS
from .progress import ATTACHED_FIELDS, POLICY, progress_record, ran_batch
from .protocol import BatchContext, BatchController, Control, Param, StreamInfo, Tunable, positive
from .record import FIELD_DOCS, summarize
from .runloop import apply_after_batch
from .stream_controls import StreamControls

__all__ = ["AttachedStream", "attach", "is_streaming_query", "start_query"]

_KIT_SOURCE = ("needs the kit's own source (LiveStream): an attached query reads its own source, "
               "so the kit cannot hold or admit its input")
#: the controls of a LiveStream that an attached query declares, disabled with the reason
_UNAVAILABLE = {
    **{p.name: p for p in StreamControls.PARAMS if p.name in ("policy", "target_s")},
    **{p.name: p for p in CONTROL_PARAMS},
}
NOT_RESTARTABLE = "the kit did not start this query: it cannot restart it (start it with lmstream_kit.attached.start_query)"


def is_streaming_query(obj: Any) -> bool:
    """Whether ``obj`` is a pyspark ``StreamingQuery`` (checked without importing pyspark).

    >>> is_streaming_query(42)
    False
    """
    return any(c.__name__ == "StreamingQuery" and c.__module__.startswith("pyspark.") for c in type(obj).__mro__)


class AttachedStream(Tunable):
    """A running query watched through Spark's progress: records, ``metrics.jsonl``, controls.

    Made by :func:`attach` or :func:`start_query`.  ``records``, ``on_batch``,
    ``controls()`` and ``info()`` are what the Dashboard reads (a
    :class:`~lmstream_kit.protocol.LiveView`).
    """

    PARAMS = (
        Param("trigger_s", float, low=0, restart=True, label="trigger (s)", step=0.25,
              doc="Spark's processingTime trigger in seconds.  A change stops the query between batches "
                  "and starts it again from its checkpoint."),
        Param("bound_s", float, low=0, low_open=True, label="latency bound (s)", step=0.25,
              doc="The bound each record's max_latency_s is judged by (within_bound)."),
    )

    def __init__(self, query, *, event_time: str | None = None, run_dir: str | Path | None = None,
                 bound_s: float | None = None, writer=None, trigger_s: float | None = None,
                 checkpoint: Path | None = None) -> None:
        super().__init__()
        if not is_streaming_query(query):
            raise ConfigError(f"attach needs a running pyspark StreamingQuery, got {type(query).__name__}")
        from .engine.attach import ProgressWatch, query_facts, watermark_columns

        facts = query_facts(query)
        if event_time is not None:
            columns = watermark_columns(query)
            if columns is not None and event_time not in columns:
                raise ConfigError(
                    f"event_time {event_time!r} is not a watermarked column of query {query.name or query.id} "
                    f"(watermarked: {', '.join(columns) or 'none'}): Spark keeps event-time statistics only "
                    "for the column of withWatermark")
        self.bound_s = None if bound_s is None else positive("bound_s", bound_s)
        self.query = query
        self.name = str(query.name or facts["query_id"])
        self.event_time = event_time
        self.trigger_s = trigger_s
        self._writer_config = writer
        self._checkpoint = checkpoint
        self.run_dir = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="lmstream-attach-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._run_id = facts["run_id"]
        self._info = {**facts, "workload": self.name, "policy": POLICY, "event_time": event_time,
                      "bound_s": self.bound_s, "trigger_s": trigger_s, "started_by_kit": writer is not None,
                      "attached_at": time.time(), "kit_version": __version__}
        write_run_info(self.run_dir, self._info)
        self._cond = threading.Condition()
        self._records: list[dict] = []
        self._seen: set[int] = set()
        self._callbacks: list[Callable[[dict], None]] = []
        self._plugins: list[BatchController] = []
        self._writer = JsonlWriter(self.run_dir / METRICS_FILE)
        self._detached = False
        self._watch = ProgressWatch(query, self._take)
        with self._cond:  # the listener's first batches wait here: they come after those Spark kept
            for progress in ProgressWatch.recent(query):
                self._take(progress)

    # ------------------------------------------------------------------ records
    def _take(self, progress: dict) -> None:
        """One batch's progress (Spark's listener thread, or ``recentProgress`` at attach)."""
        if not ran_batch(progress):
            return
        with self._cond:
            batch_id = int(progress["batchId"])
            if self._detached or batch_id in self._seen:
                return
            # a change is in force from the first batch of the query run it was made for
            changes = self.changelog.take() if progress.get("runId") == self._run_id else []
            record = progress_record(progress, event_time=self.event_time is not None, bound_s=self.bound_s,
                                     workload=self.name, changes=[c.to_dict() for c in changes])
            if self._plugins and progress.get("runId"):
                record = self._plug_in(record, str(progress["runId"]))
            self.changelog.stamp(batch_id, changes)
            data = record.to_dict()
            self._seen.add(batch_id)
            self._records.append(data)
            self._writer.append(data)
            if self._info.get("source") is None and progress.get("sources"):
                self._info.update(source=[s.get("description") for s in progress["sources"]],
                                  sink=(progress.get("sink") or {}).get("description"))
                write_run_info(self.run_dir, self._info)
            callbacks = list(self._callbacks)
            self._cond.notify_all()
        for callback in callbacks:
            try:
                callback(dict(data))
            except Exception:  # a view's error must not reach Spark's listener bus
                pass

    def _plug_in(self, record, run_id: str):
        """The plug-ins learn from the batch that ran (its stages read from Spark) and add to its record."""
        from .engine.attach import AttachedBatch

        ctx = BatchContext(record.batch_id, 0, record.rows, (), {},
                           engine=AttachedBatch(self.query, run_id, record.batch_id))
        for plugin in self._plugins:
            try:
                plugin.before_batch(ctx)
            except Exception:  # noqa: BLE001  (its after_batch reports what it could not learn)
                pass
        return apply_after_batch(self._plugins, record)

    def add_controller(self, controller: BatchController) -> BatchController:
        """Plug in a controller that learns from each batch after it ran and adds to its record.

        An attached query reads its own source and the kit runs none of its batches, so only
        what a controller learns afterwards applies: its ``after_batch`` gets each record, with the
        batch's Spark stages readable as in a LiveStream
        (:class:`~lmstream_kit.tune.operators.OperatorMetrics`, or a
        :class:`~lmstream_kit.tune.tuner.ParallelismTuner` in ``mode="recommend"``: it proposes
        each stage's parallelism in the records and sets nothing).  Its parameters share this
        stream's change log.
        """
        if not isinstance(controller, BatchController):
            raise ConfigError(f"add_controller needs a BatchController, got {type(controller).__name__}")
        controller.plugged(self)
        controller.bind_changelog(self.changelog)
        with self._cond:
            self._plugins.append(controller)
        return controller

    def parallelism_unsupported(self, kind: str) -> str | None:
        """An attached query sets no parallelism for a controller (a :class:`~lmstream_kit.protocol.StreamHost`)."""
        return f"setting parallelism {_KIT_SOURCE}"

    def request_state_partitions(self, partitions: int, why: str = "") -> None:
        raise ConfigError(f"cannot set state partitions to {partitions}: setting parallelism {_KIT_SOURCE}")

    @property
    def controllers(self) -> list[BatchController]:
        """The plug-ins added with :meth:`add_controller`."""
        with self._cond:
            return list(self._plugins)

    @property
    def records(self) -> list[dict]:
        """Copies of the records so far, in the order their batches ran."""
        with self._cond:
            return [dict(r) for r in self._records]

    def on_batch(self, callback: Callable[[dict], None]) -> None:
        """Call ``callback(record)`` after every batch (from Spark's listener thread)."""
        with self._cond:
            self._callbacks.append(callback)

    def remove_on_batch(self, callback: Callable[[dict], None]) -> None:
        """Stop calling ``callback``; unknown callbacks are ignored."""
        with self._cond:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def summary(self) -> dict:
        """:func:`~lmstream_kit.record.summarize` of the records (latencies need ``event_time``)."""
        return summarize(self.records)

    def record_fields(self) -> dict[str, str]:
        """Every field the records carry, with what it means."""
        plugged = {k: v for p in self.controllers for k, v in type(p).FIELDS.items()}
        return {**{k: v for k, v in FIELD_DOCS.items() if k != "extra"}, **ATTACHED_FIELDS, **plugged}

    def info(self) -> StreamInfo:
        detail = f"trigger {self.trigger_s:g} s" if self.trigger_s is not None else "attached query"
        return StreamInfo(self.name, POLICY, detail)

    @property
    def is_active(self) -> bool:
        return bool(self.query.isActive)

    def wait(self, *, batches: int | None = None, timeout: float | None = None) -> AttachedStream:
        """Block until ``batches`` batches with rows are recorded; TimeoutError, or EngineError if it stops."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while sum(1 for r in self._records if r["rows"] > 0) < (batches or 0):
                if not self.query.isActive:
                    error = self.query.exception()
                    raise EngineError(f"query {self.name} stopped: {one_line(str(error)) if error else 'no error'}")
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"query {self.name}: {batches} batches not reached within {timeout:g} s "
                                       f"({len(self._records)} batches so far)")
                self._cond.wait(0.1)
        return self

    # ------------------------------------------------------------------ controls
    def disabled_reason(self, name: str) -> str | None:
        if name == "trigger_s" and self._writer_config is None:
            return NOT_RESTARTABLE
        if name == "bound_s" and self.event_time is None:
            return "no event_time column: the records have no latency to judge"
        return None

    def controls(self) -> list[Control]:
        """``trigger_s`` and ``bound_s``, then a LiveStream's controls that need the kit's source (disabled)."""
        return [*super().controls(),
                *(Control(key, p, None, self._unavailable(key), _KIT_SOURCE, "stream") for key, p in _UNAVAILABLE.items())]

    def _unavailable(self, key: str) -> Callable[[Any], None]:
        def setter(value: Any) -> None:
            raise ConfigError(f"{key} {_KIT_SOURCE}")
        return setter

    def set_trigger(self, seconds: float) -> None:
        """Restart the query from its checkpoint with a ``seconds`` processingTime trigger (``start_query`` only)."""
        self.set_param("trigger_s", seconds)

    def set_bound(self, seconds: float) -> None:
        """Judge the records from the next batch on by a latency bound of ``seconds``."""
        self.set_param("bound_s", seconds)

    def _apply_trigger_s(self, seconds: float) -> None:
        from .engine.attach import restart_query

        if self._writer_config is None:
            raise ConfigError(f"cannot set trigger_s to {seconds:g}: {NOT_RESTARTABLE}")
        if self._detached or not self.query.isActive:
            raise ConfigError(f"cannot set trigger_s to {seconds:g}: query {self.name} is not running")
        old, t0 = self.trigger_s, time.time()
        try:
            query = restart_query(self.query, self._writer_config, trigger_s=seconds, checkpoint=self._checkpoint)
        except Exception as exc:
            raise EngineError(f"restarting query {self.name} failed: {one_line(exc)}") from exc
        with self._cond:
            self.query, self.trigger_s, self._run_id = query, seconds, str(query.runId)
            self.log_change("trigger_s", seconds, old=old, restart=True, restart_s=round(time.time() - t0, 3))
            self._info.update(run_id=self._run_id, trigger_s=seconds,
                              restarts=int(self._info.get("restarts", 0)) + 1)
            write_run_info(self.run_dir, self._info)

    # ------------------------------------------------------------------ ending
    def detach(self) -> dict:
        """Stop watching (the query keeps running); write run.json's totals; the summary."""
        with self._cond:
            if self._detached:
                return summarize(self._records)
            self._detached = True
            self._info.update(detached_at=time.time(), batches=len(self._records),
                              rows_processed=sum(r["rows"] for r in self._records))
        self._watch.close()
        self._writer.close()
        write_run_info(self.run_dir, self._info)
        return self.summary()

    def stop(self, timeout: float = 10.0) -> dict:
        """Stop the query between batches, take its last progress, detach; the summary.

        A query that runs batches back to back is never between batches: after
        ``timeout`` s it is stopped anyway, and Spark runs the interrupted batch
        again when the query restarts from its checkpoint.
        """
        from .engine.stream import stop_query

        if not self._detached and self.query.isActive:
            stop_query(self.query, is_idle=lambda: True, timeout_s=timeout)
            last = self.query.lastProgress
            deadline = time.monotonic() + 5.0  # the listener bus delivers it 0.1-0.4 s late
            with self._cond:
                while last and ran_batch(dict(last)) and int(last["batchId"]) not in self._seen:
                    if time.monotonic() > deadline:
                        break
                    self._cond.wait(0.1)
        return self.detach()

    def __repr__(self) -> str:
        state = "detached" if self._detached else ("running" if self.is_active else "stopped")
        return f"<AttachedStream {self.name} {state} batches={len(self._records)} run_dir={self.run_dir}>"


def attach(query, *, event_time: str | None = None, run_dir: str | Path | None = None,
           bound_s: float | None = None) -> AttachedStream:
    """Watch a running ``StreamingQuery``, whatever its source; the batches it kept are recorded too.

    Parameters
    ----------
    query : pyspark.sql.streaming.StreamingQuery
        A running query (ConfigError if it is not one, or stopped).
    event_time : str, optional
        The column of the query's ``withWatermark``: the records get latencies
        (completion minus Spark's event-time statistics of the batch).
    run_dir : path, optional
        Where ``metrics.jsonl`` and ``run.json`` go (a temp dir if None).
    bound_s : float, optional
        The latency bound each record is judged by (``within_bound``).
    """
    return AttachedStream(query, event_time=event_time, run_dir=run_dir, bound_s=bound_s)


def start_query(writer, *, trigger_s: float, checkpoint: str | Path | None = None,
                event_time: str | None = None, run_dir: str | Path | None = None,
                bound_s: float | None = None) -> AttachedStream:
    """Start a configured ``df.writeStream...`` with a ``trigger_s`` trigger, attached and restartable.

    ``checkpoint`` defaults to ``run_dir/checkpoint``.  :meth:`AttachedStream.set_trigger`
    then restarts the query from it with a new trigger.
    """
    from .engine.attach import start_writer

    trigger_s = positive("trigger_s", trigger_s, allow_zero=True)
    run_dir = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="lmstream-attach-"))
    checkpoint = Path(checkpoint) if checkpoint is not None else run_dir / "checkpoint"
    query = start_writer(writer, trigger_s=trigger_s, checkpoint=checkpoint)
    try:
        return AttachedStream(query, event_time=event_time, run_dir=run_dir, bound_s=bound_s, writer=writer,
                              trigger_s=trigger_s, checkpoint=checkpoint)
    except BaseException:
        query.stop()
        raise
