"""SparkEngine: the one object the run loop, bench and notebooks use to reach Spark.

It owns the session, one streaming query at a time (start, restart, stop), the
progress listener, the foreachBatch sink and the batch's session (confs, plan).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
import threading
import time
from pathlib import Path
from typing import Any

from ..exceptions import EngineError, one_line

__all__ = ["EngineBatch", "SparkEngine"]


class EngineBatch:
    """One micro-batch inside foreachBatch: write its result, place its confs, read its plan."""

    def __init__(self, engine: SparkEngine, batch_df, batch_id: int) -> None:
        self.engine = engine
        self.batch_id = int(batch_id)
        self._df = batch_df

    @property
    def session(self):
        """The query's cloned session (the same clone for every batch of one query run)."""
        return self._df.sparkSession

    def write(self, output_dir: Path | None, finish: Callable | None = None) -> int:
        """Run the batch's query once and write its result; the output row count (-1 for noop)."""
        from .stream import write_output

        if self.engine._result_schema is None:  # once per query start: what a new batch function is checked against
            self.engine._result_schema = self._df.schema
        return write_output(finish(self._df) if finish else self._df, output_dir, self.batch_id)

    def run_program(self, program: Callable, output_dir: Path | None) -> tuple[int, dict]:
        """Run a workload's ``program(batch_df, batch_id) -> (table, fields)`` on this batch and write
        the table as its output; the output rows and the program's record fields."""
        table, fields = program(self._df, self.batch_id)
        return self.write_table(table, output_dir), dict(fields)

    def write_table(self, table, output_dir: Path | None) -> int:
        """Write a result computed outside Spark (a pyarrow Table) as this batch's output; its rows."""
        from .stream import write_table

        return write_table(table, output_dir, self.batch_id)

    def cores(self) -> int:
        """The task slots the application has now (Spark's default parallelism: the cores of its
        executors, or N of ``local[N]``)."""
        return int(self.session.sparkContext.defaultParallelism)

    def stages(self, timeout: float = 1.0) -> list[dict]:
        """The Spark stages this batch's jobs ran, with their metrics (:mod:`~lmstream_kit.engine.stages`).

        Call it after the batch's work: it waits up to ``timeout`` s for Spark's status store to
        see the jobs finish.
        """
        from .stages import run_id_of_batch, stage_reader_for

        run_id = run_id_of_batch(self.session)
        if not run_id:
            return []
        return stage_reader_for(self.session).batch_stages(run_id, self.batch_id, timeout=timeout)

    def apply_confs(self, confs: Mapping[str, str], applied: Mapping[str, str]) -> dict:
        """Set the confs that differ from ``applied`` on the batch's session; the confs now in force."""
        from .rapids import apply_confs

        return apply_confs(self.session, dict(confs), dict(applied))


class SparkEngine:
    """A SparkSession (built here, or the caller's) and the streaming query it runs.

    Parameters
    ----------
    master : str
        ``local[N]`` or ``spark://host:port``; used when ``spark`` is None.
    spark : SparkSession, optional
        Use this session (it is then not stopped by :meth:`close`).
    conf : mapping, optional
        Extra Spark confs for a session built here.
    """

    def __init__(self, *, master: str = "local[2]", spark=None, conf: Mapping[str, str] | None = None,
                 app_name: str = "lmstream_kit") -> None:
        self._requested_master = master
        self._app_name = app_name
        self._conf = dict(conf or {})
        self._external = spark is not None
        self.spark = spark
        self.query = None
        self.stop_failed: str | None = None  # why the last stop of the query did not stop it
        self._listener = None
        self._batch_session = None
        self._result_schema = None  # the schema of the running query's batch results (check_batch_function)
        self._progress_seen = threading.Condition()
        self._last_progress = -1

    # -- the session ---------------------------------------------------------------------------
    def open(self) -> SparkEngine:
        """Start (or adopt) the session and register the kit's source in it."""
        from .session import build_session, register_source

        if self.spark is None:
            self.spark = build_session(master=self._requested_master, conf=self._conf, app_name=self._app_name)
        else:
            register_source(self.spark)
        self._jvm_pid = self.driver_pid()  # to tell a JVM that died from a query that failed
        return self

    def jvm_exited(self) -> str | None:
        """Why Spark's driver JVM is gone (it was killed, or ran out of memory), or None while it runs.

        Asked of the operating system, not of py4j: with the JVM gone, every py4j call fails.  Where
        its exit code is known (:meth:`jvm_exit_code`) the reason says what it means.
        """
        from .session import describe_jvm_exit, process_exited

        pid = getattr(self, "_jvm_pid", None)
        if pid is None or not process_exited(pid):
            return None
        return f"Spark's JVM exited (pid {pid}): {describe_jvm_exit(self.jvm_exit_code())}"

    def jvm_exit_code(self) -> int | None:
        """The exit code of Spark's driver JVM once it exited (negative: the signal that killed it);
        None while it runs, or where the kit did not start it (no process handle)."""
        from .session import gateway_exit_code

        pid = getattr(self, "_jvm_pid", None)
        return None if pid is None else gateway_exit_code(pid)

    def session_lost(self, wait_s: float = 30.0) -> str | None:
        """Why this session can run no more queries, or None while it can.

        Its JVM exited (:meth:`jvm_exited`), or Spark stopped the session's context while the JVM
        still runs: a JVM that calls ``System.exit`` (in local mode, an executor that lost its
        heartbeat to the driver: exit 56) stops the context first, in its shutdown hooks, and
        queries started meanwhile fail on a session that is gone.  Such a JVM is given ``wait_s``
        seconds to exit; one that does not (a context stopped by hand) is killed, where the kit
        started it, so that :meth:`restart` can build a new one.  A caller's session is never
        killed: it is lost only once its JVM exited.
        """
        from .session import context_stopped, kill_jvm

        why = self.jvm_exited()
        if why is not None or self._external or self.spark is None:
            return why
        if not context_stopped(self.spark):
            return None
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            time.sleep(0.2)
            why = self.jvm_exited()
            if why is not None:
                return why
        pid = self._jvm_pid
        kill_jvm(pid)
        return (f"Spark stopped its context and its JVM (pid {pid}) did not exit within {wait_s:g} s: "
                f"killed, for a new session")

    def kill(self) -> int | None:
        """Kill Spark's driver JVM, one the kit started, and return its pid (None: no JVM is known).

        For a JVM that no longer answers (one that collects a full heap over and over): every py4j
        call into it waits until it answers, and fails at once when it is gone.  :meth:`restart`
        then builds a new session.  Safe from another thread.

        Raises
        ------
        EngineError
            Where the session is the caller's: the kit does not kill a JVM it did not start.
        """
        from .session import kill_jvm

        if self._external:
            raise EngineError("the session was given to the kit, which does not kill its JVM")
        pid = self.jvm_pid
        if pid is not None:
            kill_jvm(pid)
        return pid

    @property
    def jvm_pid(self) -> int | None:
        """The pid of Spark's driver JVM as the session opened (known without a call into it)."""
        return getattr(self, "_jvm_pid", None)

    def restart(self) -> str:
        """Replace a session whose JVM exited with a new one, built as the first was; returns why the
        old one went (:meth:`jvm_exited`).

        Raises
        ------
        EngineError
            Where the JVM still runs, or the session was the caller's (the kit cannot rebuild it).
        """
        from .session import forget_exited_session

        why = self.jvm_exited()
        if why is None:
            raise EngineError("Spark's JVM still runs: nothing to restart")
        if self._external:
            raise EngineError(f"{why}; the session was given to the kit, which cannot build it again")
        forget_exited_session(self.spark)
        self.spark = None
        self.query = None
        self._listener = None
        self._batch_session = None
        self.open()
        return why

    @property
    def external(self) -> bool:
        """Whether the session is the caller's (not stopped here)."""
        return self._external

    @property
    def master(self) -> str:
        return self.spark.sparkContext.master if self.spark is not None else self._requested_master

    @property
    def is_local(self) -> bool:
        return self.master.startswith("local")

    def spark_version(self) -> str:
        from .session import spark_version

        return spark_version()

    def java_version(self) -> str | None:
        from .session import java_version

        return java_version(self.spark)

    def driver_pid(self) -> int | None:
        from .procs import driver_jvm_pid

        return driver_jvm_pid(self.spark)

    def rapids_loaded(self) -> bool:
        """Whether the RAPIDS Accelerator plugin is loaded in this session."""
        from .rapids import plugin_loaded

        return plugin_loaded(self.spark)

    # -- the query -----------------------------------------------------------------------------
    def listen(self, on_progress: Callable[[dict], None]) -> None:
        """Send each batch's Spark progress (flattened) of the current query to ``on_progress``, with the
        driver JVM's collection since the previous batch and its heap (:class:`~.listener.JvmMemory`)."""
        from .listener import JvmMemory, ProgressListener

        jvm: JvmMemory | None = None
        try:
            jvm = JvmMemory(self.spark)
            jvm.sample()  # the baseline: the first batch's progress says what it collected
        except Exception:  # noqa: BLE001  (a JVM without the beans: the progress goes on without them)
            jvm = None

        def forward(record: dict) -> None:
            if jvm is not None:
                try:
                    record.update(jvm.sample())
                except Exception:  # noqa: BLE001, S110  (a metrics hiccup must not lose the progress)
                    pass
            on_progress(record)
            with self._progress_seen:
                self._last_progress = max(self._last_progress, int(record["batch_id"]))
                self._progress_seen.notify_all()

        self._listener = ProgressListener(forward)
        self.spark.streams.addListener(self._listener)

    def await_progress(self, batch_id: int, timeout: float) -> bool:
        """Wait until the listener delivered the progress of ``batch_id``; False after ``timeout`` s."""
        if self._listener is None:
            return False
        deadline = time.monotonic() + timeout
        with self._progress_seen:
            while self._last_progress < batch_id:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._progress_seen.wait(left)
        return True

    def start(self, *, workload, trigger_s: float, source_options: Mapping[str, Any],
              on_batch: Callable[[EngineBatch], None], checkpoint: Path, name: str,
              confs: Mapping[str, str] | None = None) -> None:
        """Start ``workload``'s query over the kit's source, with ``on_batch`` as its sink.

        ``confs``: SQL confs for the query's start (:func:`~lmstream_kit.engine.stream.start_query`).
        """
        from .stream import start_query

        def sink(batch_df, batch_id):
            if self._batch_session is None:
                self._batch_session = batch_df.sparkSession
            on_batch(EngineBatch(self, batch_df, batch_id))

        self._batch_session = None
        self._result_schema = None
        self.query = start_query(self.spark, workload=workload, trigger_s=trigger_s,
                                 source_options=dict(source_options), on_batch=sink,
                                 checkpoint=checkpoint, name=name, confs=dict(confs or {}))
        if self._listener is not None:
            self._listener.query_id = str(self.query.id)

    def check_batch_function(self, function: Callable, base: Callable | None = None) -> str | None:
        """Why ``function`` cannot run on this query's batches (one line), None where it can.

        It is applied to an empty DataFrame with the schema of the last batch's result (after the
        workload's own ``base``): Spark's analysis names a missing column or a wrong type, and no
        job runs.  Before the first data batch there is nothing to check against (None).
        """
        schema = self._result_schema
        if schema is None or self._batch_session is None:
            return None
        from pyspark.sql import DataFrame

        import logging

        # PySpark logs every analysis error with its whole JVM stack to stderr: the refusal says it in one line
        quiet = [logging.getLogger(name) for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger")]
        was = [logger.disabled for logger in quiet]
        for logger in quiet:
            logger.disabled = True
        try:
            empty = self._batch_session.createDataFrame([], schema)
            out = function(base(empty) if base is not None else empty)
            if not isinstance(out, DataFrame):
                return f"it returned {type(out).__name__}, not a DataFrame"
            out.schema  # noqa: B018  (analysis)
        except Exception as exc:  # noqa: BLE001  (the user's function: any error refuses it)
            return one_line(exc)
        finally:
            for logger, disabled in zip(quiet, was):
                logger.disabled = disabled
        return None

    def query_change_refused(self, old_workload, new_workload) -> str | None:
        """Why Spark would refuse to restart ``old_workload``'s query as ``new_workload``'s from its
        checkpoint (its stateful operators differ: :func:`lmstream_kit.query_rules.forbidden_change`),
        None where it allows it.  Reads both queries' analyzed plans; no job runs.  A new query that
        does not build raises ConfigError."""
        from ..query_rules import forbidden_change
        from .query_change import stateful_operators

        return forbidden_change(stateful_operators(self.spark, old_workload),
                                stateful_operators(self.spark, new_workload))

    def task_function_unsupported(self, function: Callable) -> str | None:
        """Why Spark's tasks cannot load ``function`` (one line), None where they can.

        One task unpickles it, as a pass of a batch would: a function of a module the executors
        cannot import, or one that does not pickle, is named here rather than failing a batch.
        """
        from .flumina import _task_error

        try:
            self.spark.sparkContext.parallelize([0], 1).map(lambda _: function is not None).collect()
        except Exception as exc:  # noqa: BLE001  (any failure to ship or load it refuses it)
            return _task_error(exc)
        return None

    def has_batch_session(self) -> bool:
        """Whether a batch of the current query ran, so its session can take confs."""
        return self._batch_session is not None

    def apply_session_confs(self, confs: Mapping[str, str], applied: Mapping[str, str]) -> dict:
        """Set confs on the running query's session (between batches); the confs now in force."""
        from .rapids import apply_confs

        return apply_confs(self._batch_session, dict(confs), dict(applied))

    def stop_query(self, *, is_idle: Callable[[], bool]) -> str | None:
        """Stop the query between batches (see :func:`~lmstream_kit.engine.stream.stop_query`); with no
        other query running, its state leaves the heap at once (:func:`~.state.release_state_stores`).

        Returns None, or why the query did not stop (its batch in flight outlived the stop's bound);
        :attr:`stop_failed` keeps that reason: the JVM still runs that batch."""
        from .state import release_state_stores
        from .stream import stop_query

        if self.query is not None:
            self.stop_failed = stop_query(self.query, is_idle=is_idle)
            if self.spark is not None and self.stop_failed is None:
                release_state_stores(self.spark)
        return self.stop_failed

    def collect_heap(self) -> None:
        """Collect the driver JVM's whole heap now (the admission controller's ``idle_collect``, while the
        stream's data waits); the stores of a running query stay (:func:`~.state.collect_heap`)."""
        from .state import collect_heap

        if self.spark is not None:
            collect_heap(self.spark)

    @property
    def is_active(self) -> bool:
        return self.query is not None and self.jvm_exited() is None and self.query.isActive

    def query_error(self) -> str | None:
        """The stopped query's error, as text (None if it stopped without one)."""
        exc = self.query.exception() if self.query is not None else None
        return str(exc) if exc else None

    def streaming_plan(self):
        """The current query's operator DAG (:class:`~lmstream_kit.mapper.PlanDag`)."""
        from .plan import streaming_plan_dag

        return streaming_plan_dag(self.query)

    def query_window(self, workload) -> tuple[float, float]:
        """``(range_s, slide_s)`` of the window in ``workload``'s query plan (opens the session)."""
        from .window import query_window

        if self.spark is None:
            self.open()
        return query_window(self.spark, workload)

    def state_partitions(self, checkpoint: Path) -> int | None:
        """The partitions the checkpoint keeps the query's state in (None without state)."""
        from .state import state_partitions

        return state_partitions(checkpoint)

    def recover_unfinished_repartition(self, checkpoint: Path) -> dict | None:
        """Roll back a state repartition a crash left unfinished (:mod:`~lmstream_kit.engine.state`)."""
        from .state import recover_unfinished_repartition

        return recover_unfinished_repartition(checkpoint)

    def state_repartition_unsupported(self, checkpoint: Path) -> str | None:
        """Why the query's state cannot be repartitioned (:mod:`~lmstream_kit.engine.state`); None: it can."""
        from .state import repartition_unsupported

        if self.spark is None:
            self.open()
        return repartition_unsupported(self.spark, checkpoint)

    def warm_flumina_workers(self, workers: int) -> float:
        """Ready Spark for Flumina passes on ``workers`` (:func:`.flumina.warm_workers`); seconds."""
        from .flumina import warm_workers

        return warm_workers(self.spark, workers)

    def executors_unsupported(self) -> str | None:
        """Why the application's executors cannot be scaled at run time (:mod:`.executors`); None: they can."""
        from ..exceptions import ConfigError
        from .executors import Executors

        if self.spark is None:
            return "the stream is not running"
        try:
            Executors(self.spark)
        except ConfigError as exc:
            return str(exc)
        return None

    def executor_count(self) -> int | None:
        """The application's executors now (None where they cannot be scaled: ``local[N]``)."""
        if self.executors_unsupported() is not None:
            return None
        from .executors import Executors

        return Executors(self.spark).count()

    def scale_executors(self, total: int, timeout_s: float = 60.0) -> dict:
        """Make the application run ``total`` executors (:meth:`.executors.Executors.scale_to`)."""
        from .executors import Executors

        return Executors(self.spark).scale_to(total, timeout_s=timeout_s)

    def repartition_state(self, checkpoint: Path, partitions: int) -> dict:
        """Spark's offline repartition of the stopped query's state (:func:`~lmstream_kit.engine.state.repartition_state`)."""
        from .state import repartition_state

        return repartition_state(self.spark, checkpoint, partitions)

    def checkpoint_offsets(self, checkpoint: Path) -> tuple[int | None, int | None]:
        from .stream import checkpoint_offsets

        return checkpoint_offsets(checkpoint)

    # -- closing -------------------------------------------------------------------------------
    def remove_listener(self) -> None:
        if self.spark is not None and self._listener is not None:
            try:
                self.spark.streams.removeListener(self._listener)
            except Exception:
                pass
            self._listener = None

    def close(self) -> None:
        """Stop the listener, and the session when it was built here."""
        if self.jvm_exited() is not None:  # nothing to stop, and every py4j call would fail
            self.spark = None if not self._external else self.spark
            return
        self.remove_listener()
        if not self._external and self.spark is not None:
            try:
                self.spark.stop()
            except Exception:
                pass
            self.spark = None
