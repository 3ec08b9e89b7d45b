"""LiveStream: the run loop a notebook or the CLI holds while a stream runs.

feed --> spool --> the engine's source asks ``on_latest``: the gate admits or holds
(:mod:`~lmstream_kit.admission` keeps the offsets); each micro-batch runs the
plugged-in controllers' hooks and writes one :class:`~lmstream_kit.record.BatchRecord`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, Union

from .admission import DRAIN, HOLD, RUN
from .devices import DeviceMode, PlanCache, check_device_mode, device_mode_for
from .engine.adapter import SparkEngine
from .engine.state import state_store_confs
from .exceptions import ConfigError, EngineError, one_line
from .feed.make import make_feed
from .feed.spool import Spool
from .feed.traffic import Traffic
from .journal import Journal, recovery_plan
from .mapper import DeviceMapper
from .metrics import (
    METRICS_FILE,
    PROGRESS_FILE,
    JsonlWriter,
    load_metrics,
    read_journal,
    read_run_info,
    write_run_info,
)
from .placement import Placement
from .stream_controls import StreamControls
from .stream_config import StreamConfig
from .runinfo import final_run_info, recorded_workload, run_info
from .runloop import BatchSettings, RunLoop
from .controller import STREAM_COLD_FRACTION
from .protocol import BatchController, ChangeLog
from .diskguard import DEFAULT_MIN_FREE, DiskGuard
from .retention import make_retention
from .record import controller_target_s, latency_bound, summarize, tumbling_start_s, window_params
from .workloads import Workload

BatchCallback = Callable[[dict], None]

#: where a stop that could not stop its query says so (one line, no traceback)
LOG = logging.getLogger("lmstream_kit.live")


class LiveStream(StreamControls):
    """Run one workload's streaming query under an admission policy, with plug-in controllers.

    Parameters
    ----------
    workload : str or Workload
        Registered workload name, e.g. ``"LR2S"``, your own query's Workload
        (:func:`~lmstream_kit.workloads.define_workload`), or ``"path/to/file.py:NAME"``
        / ``"package.module:NAME"``.
    policy : str
        ``"lmstream"``, ``"fixed"`` or ``"asap"``.
    traffic : str or Traffic
        ``"constant"``, ``"random"``, a CSV trace of rows per second, or a Traffic.
    rate : float
        Rows per (simulated) second, the mean for ``random`` traffic.
    spread : float, optional
        Standard deviation of ``random`` traffic (default 25% of ``rate``).
    speedup : float
        Simulated seconds per wall second.  Windows and the latency bound are in
        simulated seconds; the controller's target in wall seconds is
        ``slide / speedup``.
    duration_s : float, optional
        Simulated seconds of traffic to generate (None: until stopped).
    run_dir : path, optional
        Where the spool, checkpoint, output and metrics go (a temp dir if None).
    input_dir : path, optional
        Read rows from files landing in this directory instead of generating them.
    spool : str or path, optional
        Where the input datasets are kept: a path or a pyarrow filesystem URI
        (``file:///shared/spool``, ``hdfs://...``) that a cluster's executors
        can read.  Default: ``run_dir/spool``.
    master : str
        ``local[N]`` or ``spark://host:port``.
    spark : SparkSession, optional
        Use this session instead of creating one (it is then not stopped).
    trigger_s : float, optional
        Interval of the ``fixed`` policy in simulated seconds (default 10 s);
        Spark's trigger runs every ``trigger_s / speedup`` wall seconds.
    slide_s : float, optional
        Override the workload's slide (simulated seconds; 0 = tumbling target).
    controller : dict, optional
        Extra keyword parameters of the AdmissionController (default
        ``warmup=1``: it does not learn from the first data batch).
    output : {"parquet", "noop"}
        Write each batch's result to ``run_dir/output`` or drop it.
    device_mode : {"auto", "advisory", "rapids", "twin"}
        How the device plan of each micro-batch is carried out (see
        :mod:`lmstream_kit.devices`): RAPIDS confs on the query's session, the
        cudf/pandas twin executor in the driver, or recorded only (advisory).
        ``auto`` picks rapids, then twin on cudf, then advisory.
    mapper : DeviceMapper or dict, optional
        The device mapper (or its keyword parameters); its setters act live.
    optimizer : bool, dict or InflectionOptimizer, optional
        The online inflection-point optimizer (or its keyword parameters);
        ``False`` turns it off.  Default: on for the ``lmstream`` policy.
    plan_cache : bool
        Cache the operator DAG per query shape (default); ``False`` extracts it
        from Spark's plan every batch (for the planning-cost benchmark).
    controllers : sequence of BatchController
        Plug-in per-batch controllers (see :mod:`lmstream_kit.protocol`); more
        can be added while the stream runs with :meth:`add_controller`.
    read : {"auto", "driver", "executors"}
        Where batches are read from the spool (see :mod:`lmstream_kit.engine.source`):
        ``driver`` avoids a Python task per batch (~0.3-0.5 s here) and suits
        local Spark; ``executors`` scales out.  ``auto``: driver for ``local``
        masters, executors otherwise.
    state_store : {"default", "rocksdb"}
        The state store of the query's stateful operators when it first starts
        (the checkpoint keeps it).  ``rocksdb`` lets :meth:`set_state_partitions`
        repartition the state on Spark 4.2+.
    state_partitions : int, optional
        The state-store (shuffle) partitions of the query's first start (default:
        the session's ``spark.sql.shuffle.partitions``); the checkpoint keeps them.
    restore_config : bool
        When the run directory has a journal (a run of it reconfigured live before),
        start with the last committed policy, window slide, latency target and Flumina
        workers instead of the ones given here (``run.json``'s ``restored_config`` says
        what was taken).  Default: the configuration given here; the journal says which
        of its changes the restart dropped.
    kafka : str, optional
        ``kafka://HOST:PORT/TOPIC[?format=json|avro|avro-confluent]``: stream from this topic
        (:mod:`lmstream_kit.feed.kafka`).  With ``traffic``, the kit's generator writes the
        topic (created where missing); with ``traffic=None``, other producers do.
    kafka_partitions : int
        Partitions of a topic the stream creates.
    fail_on_data_loss : bool
        What a batch does when Kafka no longer has records it should read (retention or a
        deletion removed them before the batch read them, e.g. when it is replayed after a long
        stop): fail the stream, with the offsets named (default, like Spark's Kafka source), or
        go on without them, each lost range in ``dead_letter.jsonl``.
    retention : str, dict, SpoolRetention or None
        Spool retention (:mod:`lmstream_kit.retention`), plugged in as a controller.
        ``"default"``: committed spool data older than an hour is deleted, with 100 batches
        always kept behind the committed offset; ingested files gone from the inbox leave the
        manifest; the dead-letter file rotates at 64 MiB and its parts are kept 7 days.  Text
        such as ``"age=2h,size=5GiB,batches=50"``, a dict of SpoolRetention's parameters, or
        None / ``"off"`` to keep everything.  Nothing a restart from the checkpoint reads
        again is ever deleted.
    min_free_disk : int or None
        Bytes of free space below which admission waits (:mod:`lmstream_kit.diskguard`: a full
        disk holds the stream instead of failing it; it goes on when space returns).  None: no guard.

    Examples
    --------
    >>> with LiveStream("LR2S", policy="lmstream", speedup=5) as s:   # doctest: +SKIP
    ...     s.wait(batches=10)
    ...     s.set_target(5.0)
    """

    def __init__(
        self,
        workload: str = "LR2S",
        *,
        policy: str = "lmstream",
        traffic: Union[str, Traffic] = "random",
        rate: float = 1000,
        spread: Optional[float] = None,
        speedup: float = 1.0,
        seed: int = 0,
        duration_s: Optional[float] = None,
        run_dir: Optional[Union[str, Path]] = None,
        input_dir: Optional[Union[str, Path]] = None,
        spool: Optional[Union[str, Path]] = None,
        master: str = "local[2]",
        spark=None,
        trigger_s: Optional[float] = None,
        slide_s: Optional[float] = None,
        controller: Optional[dict] = None,
        output: str = "parquet",
        read: str = "auto",
        partitions: int = 2,
        spark_conf: Optional[dict] = None,
        name: Optional[str] = None,
        device_mode: str = "auto",
        mapper: Union[None, dict, DeviceMapper] = None,
        optimizer: Union[None, bool, dict, Any] = None,
        plan_cache: bool = True,
        controllers: tuple = (),
        state_store: str = "default",
        state_partitions: Optional[int] = None,
        restore_config: bool = False,
        kafka: Optional[str] = None,
        kafka_partitions: int = 2,
        fail_on_data_loss: bool = True,
        retention: Any = "default",
        min_free_disk: Optional[int] = DEFAULT_MIN_FREE,
    ) -> None:
        super().__init__()
        self._restore = bool(restore_config)
        self._query_confs = state_store_confs(state_store, state_partitions)
        config = StreamConfig.build(
            workload, policy=policy, traffic=traffic, rate=rate, spread=spread, speedup=speedup, seed=seed,
            duration_s=duration_s, run_dir=run_dir, input_dir=input_dir, spool=spool, master=master,
            trigger_s=trigger_s, slide_s=slide_s, output=output, read=read, partitions=partitions, name=name,
            kafka=kafka, kafka_partitions=kafka_partitions, fail_on_data_loss=fail_on_data_loss)
        self.engine = SparkEngine(master=master, spark=spark, conf=spark_conf)
        if config.workload.window_from_plan:  # window="infer": Spark's plan of the query tells (opens Spark)
            found = config.workload.with_window(*self.engine.query_window(config.workload))
            config = dataclasses.replace(config, workload=found,
                                         slide_s=found.slide_s if slide_s is None else config.slide_s)
        for f in dataclasses.fields(config):  # the live setters change some of these (slide, policy, ...)
            setattr(self, f.name, getattr(config, f.name))
        self._changelog = ChangeLog()  # the stream's one change log: every controller writes to it
        # Spark's first data batch runs on a cold JVM (several times slower than
        # the next ones); by default the controller does not learn from it.  A
        # tumbling target starts from the window's length (record.tumbling_start_s), and so does a sliding
        # one until a batch was seen (the controller's cold_target_s), at most half the slide (cold_fraction).
        window = self.workload.window_range_s or self.workload.slide_s
        first = tumbling_start_s(window, self.speedup)
        start = {"initial_target_s": first, "cold_target_s": first, "cold_fraction": STREAM_COLD_FRACTION} \
            if window > 0 else {}
        self._controller_params = {"warmup": 1, **start, **window_params(self.workload, self.speedup),
                                   **(controller or {})}
        gate = self.policy.make_gate(slide_s=self.slide_s / self.speedup,
                                     controller_params=self._controller_params)
        gate.bind_changelog(self.changelog)
        # kept across policy switches, so that lmstream -> fixed -> lmstream keeps what it learned
        self._lm_controller = gate if self.policy.uses_controller else None
        self._requested_device_mode = check_device_mode(device_mode)
        mapper = mapper if isinstance(mapper, DeviceMapper) else DeviceMapper(**(mapper or {}))
        self.placement = Placement(mapper, self._make_optimizer(optimizer, mapper),
                                   plan_cache=PlanCache(enabled=plan_cache), partitions=partitions)
        self.placement.bind_changelog(self.changelog)
        self.loop = RunLoop(gate, self.placement, self.changelog, settings=self._batch_settings)
        self.loop.after_batch = self._start_feed  # the feed starts once batch 0 ran (a warm JVM)
        self.loop.collect_heap = getattr(self.engine, "collect_heap", None)  # the controller's idle_collect
        self.spool: Optional[Spool] = None
        self.feed = None
        self._channel = None
        self._metrics_writer: Optional[JsonlWriter] = None
        self._progress_writer: Optional[JsonlWriter] = None
        self.started_at: Optional[float] = None
        self._stopped = False
        self._started = False
        self._restart_lock = threading.Lock()  # one live restart of the query at a time
        self._restarting = False
        self._stopping = False  # stop() began: no live restart may start
        self._query_kwargs: Optional[dict] = None
        self.journal: Optional[Journal] = None  # the run's reconfiguration journal (from start)
        self._run_info: Optional[dict] = None
        for plugin in self.workload.live_objects():  # the live objects the workload comes with
            self.add_controller(plugin)
        self.retention = make_retention(retention)  # housekeeping, before the caller's plug-ins
        if self.retention is not None:
            self.add_controller(self.retention)
        self.disk_guard = None if min_free_disk is None else self.add_controller(DiskGuard(min_free_bytes=min_free_disk))
        for c in controllers:
            self.add_controller(c)

    def _on_progress(self, progress: dict) -> None:
        """Spark's progress of a batch: written as it comes, and given to the controllers."""
        try:
            self._progress_writer.append(progress)
        except OSError:  # a full disk: the progress file is a diagnosis, the batch records are the data
            pass
        self.loop.on_progress(progress)

    def _make_optimizer(self, optimizer, mapper: DeviceMapper):
        if optimizer is None:
            optimizer = self.policy.uses_controller
        if optimizer is False:
            return None
        if optimizer is True or isinstance(optimizer, dict):
            from .optimizer import InflectionOptimizer

            extra = optimizer if isinstance(optimizer, dict) else {}
            params = {"initial": mapper.snapshot()["inflection_point"], **extra}
            params.setdefault("target_latency_s", controller_target_s(self.slide_s, self.speedup))
            return InflectionOptimizer(**params)
        return optimizer

    # ------------------------------------------------------------------ properties
    @property
    def controller(self):
        """The AdmissionController (``lmstream`` policy), else None."""
        return self.gate if self.policy.uses_controller else None

    @property
    def controllers(self) -> list[BatchController]:
        """The per-batch controllers in the run loop: the gate, the placement, then plug-ins."""
        return self.loop.controllers

    def add_controller(self, controller: BatchController) -> BatchController:
        """Plug a per-batch controller into the run loop; its hooks run from the next batch boundary."""
        controller.plugged(self)
        return self.loop.add_controller(controller)

    def record_fields(self) -> dict[str, str]:
        """Every field this stream's records can carry, with what it means (plug-ins' included)."""
        return self.loop.record_fields()

    gate = property(lambda self: self.loop.gate, lambda self, gate: setattr(self.loop, "gate", gate),
                    doc="The admission gate: the AdmissionController, or AdmitAll for the baselines.")
    mapper = property(lambda self: self.placement.mapper, doc="The device mapper.")
    optimizer = property(lambda self: self.placement.optimizer, doc="The inflection optimizer, or None.")
    plan_cache = property(lambda self: self.placement.plan_cache, doc="The per-query-shape DAG cache.")
    spark = property(lambda self: self.engine.spark, doc="The SparkSession (None before start).")
    query = property(lambda self: self.engine.query, doc="The running StreamingQuery.")

    @property
    def device_mode(self) -> Optional[DeviceMode]:
        """The resolved device mode (None before :meth:`start`)."""
        return self.placement.mode if self._started else None

    @property
    def target_s(self) -> float:
        """The controller's latency target in force, wall seconds (NaN for baselines): the bound, or
        before its first observed batch the shorter first target (``cold_target_s``)."""
        return self.gate.target_s if self.controller is not None else math.nan

    @property
    def bound_s(self) -> float:
        """The pass/fail latency bound in wall seconds (:func:`~lmstream_kit.record.latency_bound`)."""
        return latency_bound(self.slide_s, self.workload.window_range_s, self.speedup)

    records = property(lambda self: self.loop.records, doc="Copies of the metrics records so far.")
    callbacks = property(lambda self: self.loop.callbacks, doc="The functions called after every batch.")

    def metrics(self):
        """The run's metrics as a pandas DataFrame (reads the run directory)."""
        return load_metrics(self.run_dir)

    def summary(self) -> dict:
        return summarize(self.records)

    @property
    def is_active(self) -> bool:
        return self.engine.is_active

    @property
    def waiting(self) -> Optional[str]:
        """Why the stream waits now (a full disk holds admission, or the feed), or None."""
        return self.loop.held or getattr(self.feed, "blocked", None)

    @property
    def failure(self) -> Optional[BaseException]:
        return self.loop.failure

    def on_batch(self, callback: BatchCallback) -> None:
        """Call ``callback(record)`` after every micro-batch (from Spark's thread)."""
        self.loop.on_batch(callback)

    def remove_on_batch(self, callback: BatchCallback) -> None:
        """Stop calling ``callback`` (registered with :meth:`on_batch`); unknown callbacks are ignored."""
        self.loop.remove_on_batch(callback)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "LiveStream":
        """Create the run directory, start Spark, the feed and the query.

        A start that fails stops what it started and removes the run directory
        if it created it and the directory holds nothing of value
        (:func:`~lmstream_kit.metrics.remove_unused_run_dir`); a directory that
        existed before is kept as it is.
        """
        from .engine.channel import ChannelServer
        from .metrics import remove_unused_run_dir

        recorded = recorded_workload(self.run_dir)  # before anything is written there
        if recorded is not None and recorded != self.workload.name:
            raise ConfigError(f"run directory {self.run_dir} holds a run of workload {recorded}, not "
                              f"{self.workload.name}: give another run_dir")
        created = not self.run_dir.exists()
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create run directory {self.run_dir}: {exc.strerror}") from None
        try:
            previous = read_run_info(self.run_dir)
            # a start counts before Spark is up: one killed while Spark started is a restart too
            write_run_info(self.run_dir, {**previous, "workload": self.workload.name,
                                          "restarts": int(previous.get("restarts", -1)) + 1,
                                          "starting_at": time.time()})
            if self.kafka is not None:  # an unreachable broker is said now, before Spark starts
                from .feed.kafka import open_topic

                open_topic(self.kafka, create_partitions=self.kafka_partitions if self.traffic is not None else None)
            self.spool = Spool(self.spool_location, schema=self.workload.schema,
                               kafka=None if self.kafka is None else self.kafka.meta)
            self.loop.spool = self.spool
            checkpoint = self.run_dir / "checkpoint"
            self.journal = Journal(self.run_dir)
            rolled_back = self.engine.recover_unfinished_repartition(checkpoint)  # Spark would refuse to start
            resume, committed = self.engine.checkpoint_offsets(checkpoint)
            if committed is not None and committed < self.spool.first_seq:
                raise ConfigError(f"the checkpoint in {checkpoint} resumes at spool dataset {committed}, but the "
                                  f"spool's retention deleted the data before {self.spool.first_seq}: is this "
                                  f"spool shared with another run?")
            with self.loop.lock:
                self.loop.book.resume(resume=resume, committed=committed, now=time.time(),
                                      start=self.spool.first_seq)
            if resume is not None:  # the controllers learn from what the run's newest batches cost
                self.loop.on_resume(read_journal(self.run_dir / METRICS_FILE, tail=self.loop.resume_tail()))
            self._metrics_writer = JsonlWriter(self.run_dir / METRICS_FILE)
            self.loop.sink = self._metrics_writer.append
            self._progress_writer = JsonlWriter(self.run_dir / PROGRESS_FILE, durable=False)
            self.engine.open()
            self._channel = ChannelServer(self, key_file=self.run_dir / ".channel.key")
            if self.read_mode == "auto":
                self.read_mode = "driver" if self.engine.is_local else "executors"
            self.placement.use(device_mode_for(self._requested_device_mode, self.workload.name,
                                               rapids_loaded=lambda: self.engine.rapids_loaded()), self.workload, engine=self.engine,
                               read_span=self.spool.read_table)
            self._started = True
            self.placement.strategy.start(self.run_dir, committed)
            # after a crash: end the journal's open transactions with the configuration now in force
            self._resolve_open_transactions(rolled_back=rolled_back)
            restored = self._restore_config() if self._restore else None
            self.engine.listen(self._on_progress)
            self._resumed = resume is not None
            self.started_at = time.time()
            self._write_run_info(
                previous,
                channel=f"127.0.0.1:{self._channel.port}",  # lmstream-kit reconfigure reaches the stream here
                spark_version=self.engine.spark_version(),
                resumed_from_seq=resume,
                **({"restored_config": restored} if restored is not None else {}),
                **self.placement.mode.to_dict(),
                mapper=self.mapper.snapshot(),
                optimizer=self.optimizer is not None,
                plan_cache=self.plan_cache.enabled,
            )
            self._query_kwargs = dict(
                source_options={
                    "spool": self.spool.uri,
                    "channel": f"127.0.0.1:{self._channel.port}",
                    "channel_key": str(self._channel.key_file),
                    "partitions": self.partitions,
                    "read": self.read_mode,
                    "dead_letter": str(self.run_dir / "dead_letter.jsonl"),
                    "fail_on_data_loss": "true" if self.fail_on_data_loss else "false",
                },
                on_batch=self.loop.run_batch,
                checkpoint=checkpoint,
                name=self.name.replace("-", "_"),
                confs=self._query_confs,
            )
            self._start_query()
        except BaseException:
            try:
                self._teardown()
            except Exception:
                pass  # the start's own error is the one to report
            if created:  # an empty run directory would only show up in `compare` as a run without batches
                remove_unused_run_dir(self.run_dir)
            raise
        return self

    def _resolve_open_transactions(self, *, rolled_back: Optional[dict]) -> None:
        """End the journal's open transactions with the configuration in force (:func:`recovery_plan`):
        the state partitions the checkpoint keeps, and what the plugged controllers have in force."""
        pending = self.journal.open()
        if pending:
            in_force = {}
            for controller in self.controllers:
                in_force.update(getattr(controller, "in_force", dict)())
            self.journal.resolve(recovery_plan(pending, rolled_back=rolled_back, in_force=in_force,
                                               state_partitions=self.engine.state_partitions(self.run_dir / "checkpoint")))

    @property
    def batch_program(self):
        """The workload's own batch program while the stream runs (None: the workload has none)."""
        return getattr(self.placement.strategy, "program", None)

    def _start_query(self) -> None:
        """Start the streaming query with the current workload and policy (from the checkpoint).

        Under a controller (the ``lmstream`` policy) Spark asks the gate every ``poll_interval_s``
        (wall s, like all the controller's times; Spark's polling delay, set at the query's start)
        while it holds data back: the interval the controller adds to its estimate is the one Spark
        keeps."""
        from .engine.stream import polling_confs

        kwargs = dict(self._query_kwargs)
        kwargs["confs"] = {**(kwargs.get("confs") or {}),
                           **polling_confs(getattr(self.controller, "poll_interval_s", None))}
        self.engine.start(workload=self.placement.strategy.query_workload(self.workload),
                          trigger_s=self.policy.trigger_s / self.speedup, **kwargs)

    def _adopt(self, workload: Optional[Workload], policy, gate) -> None:
        """Take a new workload and/or policy with its gate (call with the lock held)."""
        if workload is not None:
            self.workload = workload
            self.placement.workload = workload
        if policy is not None:
            self.policy, self.gate = policy, gate

    def _restart_query(self, param: str, old, value, *, workload: Optional[Workload] = None, policy=None,
                       gate=None, timeout: float = 120.0, between: Optional[Callable[[], dict]] = None,
                       confirm_s: Optional[float] = None, **detail) -> None:
        """Restart the query from its checkpoint with a new window and/or trigger.

        Admission is held, the batches already admitted finish and commit, the
        query stops between batches and starts again from the same checkpoint,
        so it continues at the first dataset not yet processed: no row is lost or
        processed twice.  The change is recorded with the first batch admitted
        after the restart.  Before :meth:`start` (or after :meth:`stop`) only the
        configuration changes.

        ``between`` runs on the stopped query (its checkpoint's last batch
        committed) and returns more detail for the change record.  Where it
        fails, the query starts again unchanged, the change is recorded as
        aborted with the reason, and its error is raised.

        ``confirm_s`` (a new query: :meth:`set_query`) waits up to that long for
        the restarted query's first batch with data.  Where it fails (Spark refuses the new
        query's state, or it fails on data), the query starts again as it was:
        its checkpoint holds the failed batch's offsets, so the old query runs
        that batch, and the change is aborted with Spark's error (raised as a
        ConfigError).  A stream with no data in that time keeps the change
        applied, committed by its first batch.
        """
        with self._restart_lock:
            if self._stopping and not self._stopped:
                raise ConfigError(f"cannot change {param} to {value!r}: stream {self.name} is stopping")
            if self.query is None or self._stopped:
                with self.loop.lock:
                    self._adopt(workload, policy, gate)
                    self.log_change(param, value, old=old, **detail, restart=False)
                return
            t0 = time.time()
            old_workload = self.workload
            commit = None
            txn = self.journal.begin(param, old=old, value=value)
            with self.loop.lock:
                resume_mode = self.loop.book.mode
                self.loop.book.mode = HOLD
                self._restarting = True
            aborted: Optional[BaseException] = None
            try:
                # the batches admitted before the hold finish and commit
                self.wait(until=lambda s: s.loop.book.settled(), timeout=timeout)
                last_batch = max((int(r["batch_id"]) for r in self.records), default=-1)
                self.engine.stop_query(is_idle=lambda: not self.loop.book.in_batch)
                if between is not None:
                    try:
                        detail.update(between() or {})
                    except (ConfigError, EngineError) as exc:
                        aborted = exc  # the query starts again as it was
                if aborted is None:
                    txn.step("prepared", **detail)
                else:
                    txn.abort(one_line(aborted))
                with self.loop.lock:
                    if aborted is None:
                        self._adopt(workload, policy, gate)
                    self.loop.book.forget_planned()
                    self.placement.restarted()
                self._start_query()
                if aborted is None:
                    txn.step("applied")
                    commit = self._commit_when(txn, lambda r: int(r.get("batch_id", -1)) > last_batch)
                with self.loop.lock:  # admission is still held: the next admitted batch carries it
                    if aborted is None:
                        self.log_change(param, value, old=old, **detail, restart=True,
                                        restart_s=round(time.time() - t0, 3))
                    else:
                        # the value stays the old one: passing old= too would make log_change drop it as no change
                        self.log_change(param, old, **detail, restart=True, aborted=one_line(aborted),
                                        requested=value, restart_s=round(time.time() - t0, 3))
                info = dict(self._run_info)
                info.update(
                    policy=self.policy.name, trigger_s=self.policy.trigger_s, slide_s=self.slide_s,
                    target_s=controller_target_s(self.slide_s, self.speedup),
                    live_restarts=int(info.get("live_restarts", 0)) + 1,
                )
                self._run_info = info
                write_run_info(self.run_dir, info)
            except BaseException as exc:
                with self.loop.lock:
                    self.loop.failure = self.loop.failure or exc
                if txn.state not in ("committed", "aborted"):
                    txn.abort(f"restarting the query failed: {one_line(exc)}")
                raise EngineError(f"restarting stream {self.name} failed: {one_line(exc)}") from exc
            finally:
                with self.loop.lock:
                    self._restarting = confirm_s is not None and aborted is None and txn.state == "applied"
                    self.loop.book.mode = resume_mode if resume_mode != HOLD else RUN
                    self.loop.batch_done.notify_all()
            if aborted is not None:
                raise aborted
        if self._restarting:  # a new query: it must run its first batch, or the old one comes back
            self._confirm_restart(txn, commit, last_batch, confirm_s, param, old, value, old_workload)

    def _confirm_restart(self, txn, commit, last_batch: int, timeout: float, param: str, old, value,
                         old_workload: Workload) -> None:
        """Wait for the restarted query's first batch with data; where it fails, restart the old query (see
        :meth:`_restart_query`).  Called with ``_restarting`` set and admission open."""
        error: Optional[str] = None
        try:
            deadline = time.monotonic() + timeout
            with self.loop.lock:
                while time.monotonic() < deadline:
                    # a no-data batch (a watermark's) proves little: wait for one with rows
                    if any(int(r["batch_id"]) > last_batch and r["rows"] > 0 for r in self.loop.records):
                        return
                    if self._stopping:
                        return  # stop() ends the stream either way
                    if self.loop.failure is not None:
                        error = one_line(self.loop.failure)
                        break
                    if not self.engine.is_active:
                        error = self.engine.query_error() or "the query stopped"
                        error = one_line(error)
                        break
                    self.loop.batch_done.wait(0.1)
                else:
                    return  # no data yet: the first batch commits the change
            self.remove_on_batch(commit)
            txn.abort(f"the new query failed its first batch; the old query runs on: {error}")
            t0 = time.time()
            with self._restart_lock:
                self.engine.stop_query(is_idle=lambda: True)  # it failed: nothing is in flight
                # Spark replays the failed batch from its offset log without asking the source, as after a crash
                resume, committed = self.engine.checkpoint_offsets(self.run_dir / "checkpoint")
                with self.loop.lock:
                    self.loop.failure = None
                    self.loop.book.in_batch = False
                    self._adopt(old_workload, None, None)
                    self.loop.book.forget_planned()
                    self.loop.book.resume(resume=resume, committed=committed, now=time.time(), start=self.spool.first_seq)
                    self.placement.restarted()
                self._start_query()
                with self.loop.lock:
                    self.log_change(param, old, restart=True, aborted=error, requested=value,
                                    restart_s=round(time.time() - t0, 3))
        finally:
            with self.loop.lock:
                self._restarting = False
                self.loop.batch_done.notify_all()
        raise ConfigError(f"{param} {value!r} failed its first batch, and the stream runs on with {old!r}: {error}")

    def _commit_when(self, txn, done: Callable[[dict], bool]) -> Callable[[dict], None]:
        """Commit ``txn`` in the journal with the first completed batch whose record makes ``done`` true
        (returns the callback, which :meth:`remove_on_batch` takes back)."""

        def commit(record: dict) -> None:
            if txn.state == "applied" and done(record):
                self.remove_on_batch(commit)
                txn.step("committed", batch_id=int(record["batch_id"]))

        self.on_batch(commit)
        return commit

    def _start_feed(self) -> None:
        """Start the generator or the ingest adapter, once.

        A fresh query first runs an empty batch 0 (Spark plans it at once), which
        also warms up the JVM; the feed starts when that batch is done, so that
        the first datasets don't wait for Spark's start-up.  A resumed query may
        have nothing to replay, so there the first poll starts the feed.
        """
        with self.loop.lock:
            if self.feed is not None or self._stopped:
                return
            self.feed = make_feed(self.workload, self.spool, input_dir=self.input_dir, traffic=self.traffic,
                                  speedup=self.speedup, seed=self.seed, duration_s=self.duration_s,
                                  run_dir=self.run_dir, kafka=self.kafka)
            self.feed.start()

    def _write_run_info(self, previous: dict, **extra) -> None:
        self._run_info = {**run_info(self, previous), **extra}
        write_run_info(self.run_dir, self._run_info)

    # ------------------------------------------------------------------ the source's callbacks
    def on_initial(self) -> int:
        return self.loop.on_initial()

    def on_latest(self, start: Optional[int]) -> int:
        if self.feed is None and self._resumed:
            self._start_feed()  # a resumed query may have nothing to replay: its first poll starts the feed
        return self.loop.on_latest(start)

    def on_planned(self, start: int, end: int, split: bool = True) -> int | None:
        return self.loop.on_planned(start, end, split)

    def on_commit(self, end: int) -> None:
        return None

    def _batch_settings(self) -> BatchSettings:
        return BatchSettings(workload=self.workload.name, policy=self.policy.name, bound_s=self.bound_s,
                             target_s=self.target_s,
                             output_dir=self.run_dir / "output" if self.output == "parquet" else None)

    # ------------------------------------------------------------------ waiting
    def check_health(self) -> None:
        """Raise EngineError if the stream, its query or its feed failed."""
        gone = self.engine.jvm_exited()
        if gone is not None:
            raise EngineError(f"{gone}; the stream stopped, and a restart with the same run directory goes "
                              f"on from its checkpoint")
        if self.loop.failure is not None and not self._restarting:  # a new query's failure may be rolled back
            raise EngineError(f"stream {self.name} failed: {one_line(self.loop.failure)}")
        if self.query is not None and not self.engine.is_active and not self._stopped and not self._restarting:
            error = self.engine.query_error()
            raise EngineError(f"stream {self.name} stopped: {one_line(error) if error else 'no error'}")
        feed_error = getattr(self.feed, "error", None)
        if feed_error is not None:
            raise EngineError(f"feed of {self.name} failed: {one_line(feed_error)}")

    def wait(
        self,
        *,
        batches: Optional[int] = None,
        rows: Optional[int] = None,
        timeout: Optional[float] = None,
        until: Optional[Callable[["LiveStream"], bool]] = None,
    ) -> "LiveStream":
        """Block until ``batches`` data batches / ``rows`` rows are done, or ``until(self)``.

        Raises TimeoutError after ``timeout`` seconds and EngineError if the stream dies.
        """
        deadline = None if timeout is None else time.monotonic() + timeout

        def done() -> bool:
            data = [r for r in self.loop.records if r["rows"] > 0]
            if batches is not None and len(data) < batches:
                return False
            if rows is not None and sum(r["rows"] for r in data) < rows:
                return False
            return until is None or until(self)

        while True:
            self.check_health()
            with self.loop.lock:
                if done():
                    return self
                self.loop.batch_done.wait(0.1)
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"stream {self.name}: condition not reached within {timeout:g} s "
                    f"({len(self.loop.records)} batches so far)"
                )

    def feed_finished(self) -> bool:
        return bool(getattr(self.feed, "finished", False))

    def caught_up(self) -> bool:
        """Whether every dataset in the spool so far has been processed."""
        if self.spool is None:
            return False
        self.spool.refresh()
        with self.loop.lock:
            return self.loop.book.caught_up(self.spool.end_seq)

    def drain(self, timeout: float = 120.0) -> None:
        """Admit everything the spool holds and wait until it is processed."""
        with self.loop.lock:
            self.loop.book.mode = DRAIN
        self.spool.refresh()
        target = self.spool.end_seq
        self.wait(until=lambda s: s.loop.book.caught_up(target), timeout=timeout)

    def stop(self, *, drain: bool = True, timeout: float = 120.0) -> dict:
        """Stop cleanly: stop the feed, optionally process what is pending, stop Spark.

        Returns the run summary.  Nothing ingested is lost either way: rows still
        in the spool are processed by a later run from the same run directory.
        """
        if self._stopped:
            return self.summary()
        with self._restart_lock:  # a live restart under way ends first, and none starts after this
            self._stopping = True
        if self.feed is not None:
            self.feed.stop()
            if hasattr(self.feed, "scan_once") and drain:
                self.feed.scan_once()  # files that landed since the last poll
        try:
            if drain and self.is_active and self.loop.failure is None:
                self.drain(timeout=timeout)
        finally:
            self._teardown()
        return self.summary()

    def _teardown(self) -> None:
        self._stopped = True
        with self.loop.lock:
            self.loop.book.mode = HOLD
        if self.feed is not None:
            try:
                self.feed.stop()
            except Exception:
                pass
        if self.engine.jvm_exited() is None:  # with the JVM gone there is no query to stop
            stuck = self.engine.stop_query(is_idle=lambda: not self.loop.book.in_batch)
            if stuck is None:
                last = max((int(r["batch_id"]) for r in self.records), default=-1)
                # Spark's listener bus delivers it 0.1-0.4 s late, and seconds late on a loaded machine
                self.engine.await_progress(last, timeout=30.0)
            else:  # its batch commits nothing the kit waits for; a restart runs it again from the spool
                LOG.warning("%s: the query did not stop: %s; Spark ends it when that batch returns",
                            self.run_dir.name, stuck)
            self.engine.remove_listener()
        if self._channel is not None:
            self._channel.close()
        for controller in self.controllers:
            try:
                controller.close()
            except Exception:
                pass
        if self._run_info is not None:
            self._write_final_run_info()
        if self.journal is not None:  # a change no batch ran under before the stop
            self._resolve_open_transactions(rolled_back=None)
        for writer in (self._metrics_writer, self._progress_writer, self.journal):
            if writer is not None:
                writer.close()
        self.engine.close()

    def _write_final_run_info(self) -> None:
        write_run_info(self.run_dir, {**self._run_info, **final_run_info(self)})

    def __enter__(self) -> "LiveStream":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop(drain=exc[0] is None)

    def __repr__(self) -> str:
        state = "running" if self.is_active else ("stopped" if self._stopped else "new")
        return (
            f"<LiveStream {self.workload.name} policy={self.policy.name} {state} "
            f"batches={len(self.loop.records)} run_dir={self.run_dir}>"
        )
