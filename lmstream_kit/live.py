"""LiveStream: the object a notebook or the CLI holds while a stream runs.

It wires the parts together::

    feed (generator or directory ingest) --> spool --> lmstream source (Spark)
                                              ^             |  latestOffset: admit or hold?
                                              |             v
                            admission gate <-- channel <-- source runner process
                                  ^
    foreachBatch sink --> metrics.jsonl, gate.observe(...)      listener --> spark_progress.jsonl

The gate is the LMStream :class:`~lmstream_kit.controller.AdmissionController`
or a baseline (:mod:`lmstream_kit.policies`).  Its parameters can be changed
while the stream runs; a change applies from the next admission and is
recorded in that batch's metrics record (``changes``).
"""

from __future__ import annotations

import dataclasses
import math
import platform
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

from . import __version__
from .controller import BatchObservation, Decision
from .exceptions import ConfigError, EngineError
from .feed.spool import Spool
from .feed.traffic import FeedGenerator, Traffic, traffic_from_spec
from .metrics import (
    METRICS_FILE,
    PROGRESS_FILE,
    JsonlWriter,
    batch_record,
    load_metrics,
    read_run_info,
    summarize,
    write_run_info,
)
from .devices import DeviceMode, PlanCache, check_device_mode, resolve_device_mode
from .mapper import DeviceMapper, DevicePlan
from .policies import get_policy
from .workloads import Workload, get_workload

BatchCallback = Callable[[dict], None]


@dataclass
class _Admission:
    start: int
    end: int
    admitted_at: float
    decision: Optional[Decision]
    reason: str = ""  # the decision's reason, or "drain" / "replay" without one
    polls: int = 0
    decision_s: float = 0.0
    changes: list = field(default_factory=list)
    placement: Optional[dict] = None  # rapids: the plan applied when the batch was admitted
    policy: Optional[str] = None  # the policy that admitted it


def _positive(name: str, value, *, allow_none: bool = False):
    if value is None and allow_none:
        return None
    try:
        ok = float(value) > 0 and math.isfinite(float(value))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ConfigError(f"{name} must be > 0, got {value}")
    return float(value)


class LiveStream:
    """Run one workload's streaming query under an admission policy.

    Parameters
    ----------
    workload : str or Workload
        Registered workload name, e.g. ``"LR2S"``, or a Workload object.
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
    read : {"auto", "driver", "executors"}
        Where batches are read from the spool (see :mod:`lmstream_kit.engine.source`):
        ``driver`` avoids a Python task per batch (~0.3-0.5 s here) and suits
        local Spark; ``executors`` scales out.  ``auto``: driver for ``local``
        masters, executors otherwise.

    Examples
    --------
    >>> with LiveStream("LR2S", policy="lmstream", speedup=5) as s:   # doctest: +SKIP
    ...     s.wait(batches=10)
    ...     s.controller.set_slide(1.0)
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
    ) -> None:
        self.workload = workload if isinstance(workload, Workload) else get_workload(workload)
        self.policy = get_policy(policy, trigger_s=trigger_s)
        self.rate = _positive("rate", rate)
        self.speedup = _positive("speedup", speedup)
        self.duration_s = _positive("duration", duration_s, allow_none=True)
        if slide_s is not None and not (isinstance(slide_s, (int, float)) and slide_s >= 0):
            raise ConfigError(f"slide must be >= 0 seconds (0 = tumbling), got {slide_s}")
        self.slide_s = float(self.workload.slide_s if slide_s is None else slide_s)
        if output not in ("parquet", "noop"):
            raise ConfigError(f"output must be 'parquet' or 'noop', got {output!r}")
        self.output = output
        if read not in ("auto", "driver", "executors"):
            raise ConfigError(f"read must be 'auto', 'driver' or 'executors', got {read!r}")
        self.read_mode = read
        self.seed = int(seed)
        self.master = master
        self.partitions = int(partitions)
        self.spark_conf = dict(spark_conf or {})
        self.input_dir = Path(input_dir) if input_dir is not None else None
        if self.input_dir is not None and not self.input_dir.is_dir():
            raise ConfigError(f"input directory {self.input_dir} does not exist")
        if isinstance(traffic, Traffic):
            self.traffic = traffic
        elif self.input_dir is None:
            self.traffic = traffic_from_spec(str(traffic), rate=self.rate, spread=spread, seed=self.seed)
        else:
            self.traffic = None
        self.traffic_spec = traffic if isinstance(traffic, str) else getattr(traffic, "name", "custom")
        if run_dir is None:
            import tempfile

            run_dir = tempfile.mkdtemp(prefix="lmstream-run-")
        self.run_dir = Path(run_dir)
        self.spool_location = str(spool) if spool is not None else str(self.run_dir / "spool")
        self.name = name or f"{self.workload.name}-{self.policy.name}-{uuid.uuid4().hex[:6]}"

        # Spark's first data batch runs on a cold JVM (several times slower than
        # the next ones); by default the controller does not learn from it.
        self._controller_params = {"warmup": 1, **(controller or {})}
        self.gate = self.policy.make_gate(
            slide_s=self.slide_s / self.speedup, controller_params=self._controller_params
        )
        # kept across policy switches, so that lmstream -> fixed -> lmstream keeps what it learned
        self._lm_controller = self.gate if self.policy.uses_controller else None
        self._requested_device_mode = check_device_mode(device_mode)
        self.device_mode: Optional[DeviceMode] = None  # resolved in start()
        self.mapper = mapper if isinstance(mapper, DeviceMapper) else DeviceMapper(**(mapper or {}))
        if optimizer is None:
            optimizer = self.policy.uses_controller
        if optimizer is False:
            self.optimizer = None
        elif optimizer is True or isinstance(optimizer, dict):
            from .optimizer import InflectionOptimizer

            extra = optimizer if isinstance(optimizer, dict) else {}
            params = {"initial": self.mapper.snapshot()["inflection_point"], **extra}
            params.setdefault("target_latency_s", self._optimizer_target())
            self.optimizer = InflectionOptimizer(**params)
        else:
            self.optimizer = optimizer
        self.plan_cache = PlanCache(enabled=plan_cache)
        self._twin = None
        self._stream_session = None
        self._rapids_applied: dict = {}
        self._external_spark = spark
        self.spark = spark
        self.query = None
        self.spool: Optional[Spool] = None
        self.feed = None
        self._channel = None
        self._listener = None
        self._metrics_writer: Optional[JsonlWriter] = None
        self._progress_writer: Optional[JsonlWriter] = None
        self._last_progress_id = -1

        self._lock = threading.RLock()
        self._batch_done = threading.Condition(self._lock)
        self._mode = "run"  # run | drain | hold
        self._admitted_end = 0
        self._completed_end = 0
        self._admissions: dict[int, _Admission] = {}
        self._planned: deque = deque()
        self._in_batch = False
        self._polls = 0
        self._decision_s = 0.0
        self._records: list[dict] = []
        self._callbacks: list[BatchCallback] = []
        self._changes: list[dict] = []
        self._failure: Optional[BaseException] = None
        self._started_at: Optional[float] = None
        self._stopped = False
        self._restart_lock = threading.Lock()  # one live restart of the query at a time
        self._restarting = False
        self._query_kwargs: Optional[dict] = None

    # ------------------------------------------------------------------ properties
    @property
    def controller(self):
        """The AdmissionController (``lmstream`` policy), else None."""
        return self.gate if self.policy.uses_controller else None

    @property
    def target_s(self) -> float:
        """The latency bound in force, wall seconds (NaN for baselines)."""
        return self.gate.target_s if self.controller is not None else math.nan

    @property
    def records(self) -> list[dict]:
        """Copies of the metrics records so far (thread-safe)."""
        with self._lock:
            return list(self._records)

    def metrics(self):
        """The run's metrics as a pandas DataFrame (reads the run directory)."""
        return load_metrics(self.run_dir)

    def summary(self) -> dict:
        bound = self.slide_s / self.speedup if self.slide_s > 0 else None
        return summarize(self.records, bound_s=bound)

    @property
    def is_active(self) -> bool:
        return self.query is not None and self.query.isActive

    @property
    def failure(self) -> Optional[BaseException]:
        return self._failure

    def on_batch(self, callback: BatchCallback) -> None:
        """Call ``callback(record)`` after every micro-batch (from Spark's thread)."""
        with self._lock:
            self._callbacks.append(callback)

    def remove_on_batch(self, callback: BatchCallback) -> None:
        """Stop calling ``callback`` (registered with :meth:`on_batch`); unknown callbacks are ignored."""
        with self._lock:
            self._callbacks = [c for c in self._callbacks if c != callback]

    # ------------------------------------------------------------------ live setters
    def set_target(self, target_s: float) -> None:
        """Change the latency bound (simulated seconds) without touching the query's window.

        Applies from the next admission and is recorded with that batch.  ``0``
        makes the target the running mean of past maximum latencies (the
        tumbling-window rule).
        """
        if self.controller is None:
            raise ConfigError(f"policy {self.policy.name!r} has no latency bound to change")
        if isinstance(target_s, bool) or not isinstance(target_s, (int, float)) or not target_s >= 0:
            raise ConfigError(f"latency target must be >= 0 seconds (0 = running mean), got {target_s!r}")
        self.controller.set_slide(float(target_s) / self.speedup)
        if self.optimizer is not None:
            self.optimizer.set_target_latency(float(target_s) / self.speedup if target_s > 0 else None)

    def set_slide(self, slide_s: float) -> None:
        """Change the window slide (simulated seconds): the query's window and the latency bound.

        The latency bound follows at once (next admission).  The query's window
        can only change by restarting the query: that happens here, at a
        micro-batch boundary, from the query's checkpoint (no row lost or
        processed twice), and is recorded as a ``window_slide_s`` change with
        the first batch of the restarted query.  Windows already open keep the
        rows they hold; new rows go to the windows of the new slide.
        """
        new_workload = self.workload.with_slide(slide_s)
        if new_workload is not self.workload and self._device_mode_name == "twin":
            raise ConfigError(
                f"the twin executor's window is fixed for the run: cannot change the slide to {slide_s:g} s "
                "in twin mode (change the latency target instead)"
            )
        old = self.slide_s
        if self.controller is not None:
            self.set_target(new_workload.slide_s)
        elif self.optimizer is not None:
            self.optimizer.set_target_latency(new_workload.slide_s / self.speedup)
        if new_workload is self.workload:
            return
        self.slide_s = new_workload.slide_s
        self._restart_query(
            {"param": "window_slide_s", "old": old, "value": new_workload.slide_s},
            workload=new_workload,
        )

    def set_policy(self, name: str, *, trigger_s: Optional[float] = None) -> None:
        """Switch the admission policy live (``lmstream``, ``asap`` or ``fixed``).

        A switch that changes Spark's trigger (to or from ``fixed``) restarts
        the query from its checkpoint at a micro-batch boundary; the others take
        effect at the next admission.  The change is recorded with the first
        batch of the new policy.  The LMStream controller keeps what it learned
        across switches.
        """
        policy = get_policy(name, trigger_s=trigger_s)
        old = self.policy
        if policy == old:
            return
        if policy.uses_controller:
            if self._lm_controller is None:
                target = self.slide_s / self.speedup
                self._lm_controller = policy.make_gate(slide_s=target, controller_params=self._controller_params)
            gate = self._lm_controller
        else:
            gate = policy.make_gate(slide_s=0.0)
        change = {"param": "policy", "old": old.name, "value": policy.name}
        if policy.trigger_s != old.trigger_s:
            change["trigger_s"] = policy.trigger_s
            # Spark's trigger changes only with a restart (before start: only the configuration)
            self._restart_query(change, policy=policy, gate=gate)
            return
        with self._lock:
            self.policy, self.gate = policy, gate
            self._changes.append({**change, "at": time.time()})

    def _optimizer_target(self) -> Optional[float]:
        """The optimizer's target latency (wall s): the slide, or None for the tumbling mean."""
        return self.slide_s / self.speedup if self.slide_s > 0 else None

    def set_inflection_point(self, nbytes: float) -> None:
        """Set the inflection point by hand (bytes); it freezes the optimizer until :meth:`release_optimizer`."""
        if self.optimizer is not None:
            self.optimizer.set_inflection_point(nbytes)
        self.mapper.set_inflection_point(nbytes)

    def freeze_optimizer(self) -> None:
        """Keep the current inflection point (the optimizer stops proposing)."""
        if self.optimizer is None:
            raise ConfigError("this stream runs without the inflection-point optimizer")
        self.optimizer.freeze()

    def release_optimizer(self) -> None:
        """Let the optimizer tune the inflection point again."""
        if self.optimizer is None:
            raise ConfigError("this stream runs without the inflection-point optimizer")
        self.optimizer.release()

    def set_rate_scale(self, factor: float) -> None:
        """Scale the offered traffic rate of the running generator."""
        if not isinstance(self.feed, FeedGenerator):
            raise ConfigError("the offered rate can only be changed for generated traffic")
        self.feed.set_rate_scale(factor)
        with self._lock:
            self._changes.append({"param": "rate_scale", "value": float(factor), "at": time.time()})

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "LiveStream":
        """Create the run directory, start Spark, the feed and the query."""
        from .engine.channel import ChannelServer
        from .engine.listener import ProgressListener
        from .engine.session import build_session, spark_version
        from .engine.stream import checkpoint_offsets

        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create run directory {self.run_dir}: {exc.strerror}") from None
        previous = read_run_info(self.run_dir)
        self.spool = Spool(self.spool_location, schema=self.workload.schema)
        checkpoint = self.run_dir / "checkpoint"
        resume, committed = checkpoint_offsets(checkpoint)
        with self._lock:
            self._admitted_end = resume or 0
            self._completed_end = committed or 0
            if resume is not None and resume > (committed or 0):
                # Spark replays this batch first, without asking the source
                self._planned.append((committed or 0, resume))
                self._admissions[resume] = _Admission(
                    committed or 0, resume, time.time(), None, reason="replay"
                )
        self._metrics_writer = JsonlWriter(self.run_dir / METRICS_FILE)
        self._progress_writer = JsonlWriter(self.run_dir / PROGRESS_FILE, durable=False)

        if self.spark is None:
            self.spark = build_session(master=self.master, conf=self.spark_conf)
        else:
            from .engine.session import register_source

            register_source(self.spark)
        self._channel = ChannelServer(self, key_file=self.run_dir / ".channel.key")
        if self.read_mode == "auto":
            master = self.spark.sparkContext.master
            self.read_mode = "driver" if master.startswith("local") else "executors"
        try:
            self.device_mode = self._resolve_device_mode()
            if self.device_mode.mode == "twin":
                self._start_twin(committed)
        except BaseException:
            self._teardown()
            raise
        self._listener = ProgressListener(self._on_progress)
        self.spark.streams.addListener(self._listener)
        self._resumed = resume is not None
        self._started_at = time.time()
        self._write_run_info(
            previous,
            spark_version=spark_version(),
            resumed_from_seq=resume,
            **self.device_mode.to_dict(),
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
            },
            on_batch=self._on_batch,
            checkpoint=checkpoint,
            name=self.name.replace("-", "_"),
        )
        try:
            self.query = self._start_query()
        except BaseException:
            self._teardown()
            raise
        self._listener.query_id = str(self.query.id)
        return self

    def _start_query(self):
        """Start the streaming query with the current workload and policy (from the checkpoint)."""
        from .engine.stream import start_query

        workload = self.workload
        if self._device_mode_name == "twin":
            # Spark runs the stream (offsets, checkpoint, admission); the twin runs the query
            workload = dataclasses.replace(
                workload, build_query=lambda stream: stream, output_mode="append", finish_batch=None
            )
        return start_query(
            self.spark, workload=workload, trigger_s=self.policy.trigger_s / self.speedup, **self._query_kwargs
        )

    def _adopt(self, workload: Optional[Workload], policy, gate) -> None:
        """Take a new workload and/or policy with its gate (call with the lock held)."""
        if workload is not None:
            self.workload = workload
        if policy is not None:
            self.policy, self.gate = policy, gate

    def _restart_query(self, change: dict, *, workload: Optional[Workload] = None, policy=None,
                       gate=None, timeout: float = 120.0) -> None:
        """Restart the query from its checkpoint with a new window and/or trigger.

        Admission is held, the batches already admitted finish and commit, the
        query stops between batches and starts again from the same checkpoint,
        so it continues at the first dataset not yet processed: no row is lost or
        processed twice.  ``change`` is recorded with the first batch admitted
        after the restart.  Before :meth:`start` (or after :meth:`stop`) only the
        configuration changes.
        """
        from .engine.stream import stop_query

        with self._restart_lock:
            if self.query is None or self._stopped:
                with self._lock:
                    self._adopt(workload, policy, gate)
                    self._changes.append({**change, "restart": False, "at": time.time()})
                return
            t0 = time.time()
            with self._lock:
                resume_mode = self._mode
                self._mode = "hold"
                self._restarting = True
            try:
                # the batches admitted before the hold finish and commit
                self.wait(until=lambda s: s._completed_end >= s._admitted_end and not s._in_batch,
                          timeout=timeout)
                stop_query(self.query, is_idle=lambda: not self._in_batch)
                with self._lock:
                    self._adopt(workload, policy, gate)
                    self._planned.clear()
                    # the restarted query runs on a fresh clone of the session: no RAPIDS confs yet
                    self._stream_session = None
                    self._rapids_applied = {}
                self.query = self._start_query()
                if self._listener is not None:
                    self._listener.query_id = str(self.query.id)
                with self._lock:  # admission is still held: the next admitted batch carries it
                    self._changes.append(
                        {**change, "restart": True, "restart_s": round(time.time() - t0, 3), "at": time.time()}
                    )
                info = dict(self._run_info)
                info.update(
                    policy=self.policy.name, trigger_s=self.policy.trigger_s, slide_s=self.slide_s,
                    target_s=self.slide_s / self.speedup if self.slide_s > 0 else None,
                    live_restarts=int(info.get("live_restarts", 0)) + 1,
                )
                self._run_info = info
                write_run_info(self.run_dir, info)
            except BaseException as exc:
                with self._lock:
                    self._failure = self._failure or exc
                raise EngineError(f"restarting stream {self.name} failed: {_one_line(exc)}") from exc
            finally:
                with self._lock:
                    self._restarting = False
                    self._mode = resume_mode if resume_mode != "hold" else "run"
                    self._batch_done.notify_all()

    def _resolve_device_mode(self) -> DeviceMode:
        requested = self._requested_device_mode
        rapids_loaded = False
        if requested in ("auto", "rapids"):
            from .engine.rapids import plugin_loaded

            rapids_loaded = plugin_loaded(self.spark)
        twin_available, cudf_ok, cudf_reason = False, False, ""
        if requested in ("auto", "twin"):
            from .twin import twin_program

            twin_available = twin_program(self.workload.name) is not None
            if twin_available:
                from .twin.backends import cudf_available

                cudf_ok, cudf_reason = cudf_available()
        return resolve_device_mode(
            requested, rapids_loaded=rapids_loaded, twin_available=twin_available,
            cudf_ok=cudf_ok, cudf_reason=cudf_reason, workload=self.workload.name,
        )

    def _start_twin(self, committed: Optional[int]) -> None:
        from .twin import TwinExecutor, twin_program

        self._twin = TwinExecutor(twin_program(self.workload.name), gpu_backend=self.device_mode.gpu_backend)
        saved = _load_twin_state(self.run_dir, committed)
        if saved is not None:
            self._twin.load_state(saved)

    def _start_feed(self) -> None:
        """Start the generator or the ingest adapter, once.

        A fresh query first runs an empty batch 0 (Spark plans it at once), which
        also warms up the JVM; the feed starts when that batch is done, so that
        the first datasets don't wait for Spark's start-up.  A resumed query may
        have nothing to replay, so there the first poll starts the feed.
        """
        with self._lock:
            if self.feed is not None or self._stopped:
                return
            self._create_feed()
            self.feed.start()

    def _create_feed(self) -> None:
        if self.input_dir is not None:
            from .feed.ingest import DirectoryIngest

            self.feed = DirectoryIngest(
                self.input_dir,
                self.spool,
                checks=self.workload.checks,
                dead_letter=self.run_dir / "dead_letter.jsonl",
            )
        else:
            self.feed = FeedGenerator(
                self.spool,
                self.traffic,
                self.workload.make_rows,
                speedup=self.speedup,
                seed=self.seed,
                duration_s=self.duration_s,
                start_second=self._next_generator_second(),
            )

    def _next_generator_second(self) -> int:
        """Continue the simulated clock of a resumed run after its last dataset."""
        column = self.workload.time_column
        if column is None or self.spool.end_seq == 0:
            return 0
        last = self.spool.read_table(self.spool.end_seq - 1, self.spool.end_seq)
        if last.num_rows == 0:
            return 0
        import pyarrow.compute as pc

        return int(pc.max(last[column]).as_py()) + 1

    def _write_run_info(self, previous: dict, **extra) -> None:
        info = {
            "workload": self.workload.name,
            "policy": self.policy.name,
            "trigger_s": self.policy.trigger_s,
            "traffic": self.traffic_spec if self.input_dir is None else "input-dir",
            "input_dir": str(self.input_dir) if self.input_dir else None,
            "spool": self.spool.uri,
            "rate": self.rate,
            "spread": getattr(self.traffic, "std", None),
            "speedup": self.speedup,
            "seed": self.seed,
            "duration_s": self.duration_s,
            "slide_s": self.slide_s,
            "window_range_s": self.workload.window_range_s,
            "target_s": self.slide_s / self.speedup if self.slide_s > 0 else None,
            "master": self.master if self._external_spark is None else self.spark.sparkContext.master,
            "query_name": self.name,
            "read": self.read_mode,
            "kit_version": __version__,
            "python": platform.python_version(),
            "started_at": self._started_at,
            "restarts": int(previous.get("restarts", -1)) + 1,
        }
        info.update(extra)
        self._run_info = info
        write_run_info(self.run_dir, info)

    # ------------------------------------------------------------------ channel handler
    def on_initial(self) -> int:
        with self._lock:
            return self._admitted_end

    def on_latest(self, start: Optional[int]) -> int:
        if self.feed is None and self._resumed:
            self._start_feed()
        with self._lock:
            base = self._admitted_end if start is None else int(start)
            self._admitted_end = base
            if self._mode == "hold":
                return base
            pending = self.spool.datasets(base)
            if not pending:
                return base
            now = time.time()
            t0 = time.perf_counter()
            if self._mode == "drain":
                decision = None
                admit = True
            else:
                decision = self.gate.decide(now, pending)
                admit = decision.admit
            self._decision_s += time.perf_counter() - t0
            self._polls += 1
            if not admit:
                return base
            end = pending[-1].seq + 1
            changes = list(self._changes)
            self._changes.clear()
            pop = getattr(self.gate, "pop_changes", None)
            if pop is not None:
                changes.extend(_change_dicts(pop(), prefix="controller."))
            placement = None
            if self._device_mode_name == "rapids":
                placement = self._place_at_admission(pending)
            self._admissions[end] = _Admission(
                start=base,
                end=end,
                admitted_at=now,
                decision=decision,
                reason=decision.reason if decision is not None else "drain",
                polls=self._polls,
                decision_s=self._decision_s,
                changes=changes,
                placement=placement,
                policy=self.policy.name,
            )
            self._polls, self._decision_s = 0, 0.0
            self._admitted_end = end
            return end

    def on_planned(self, start: int, end: int) -> None:
        with self._lock:
            self._planned.append((start, end))
            if end not in self._admissions and end > start:
                # a batch replayed from the offset log after a restart
                self._admissions[end] = _Admission(start, end, time.time(), None, reason="replay")
            self._admitted_end = max(self._admitted_end, end)

    def on_commit(self, end: int) -> None:
        return None

    # ------------------------------------------------------------------ device placement
    def _plan_key(self):
        return ("spark", self.workload.name, self.workload.slide_s)

    def _next_inflection_point(self, batch_id: int) -> tuple[float, float]:
        """The inflection point for the next batch, and the seconds spent waiting for the optimizer."""
        if self.optimizer is None:
            return self.mapper.snapshot()["inflection_point"], 0.0
        value = self.optimizer.next_inflection_point(batch_id)
        blocked = self.optimizer.pop_blocked_s()
        self.mapper.set_inflection_point(value, record=False)
        return value, blocked

    def _map(self, dag, nbytes: int, batch_id: int) -> dict:
        """Map ``dag`` for a batch of ``nbytes``; the record fields of the placement.

        The caller times the whole placement (``map_s``), which includes more than this.
        """
        inflection_point, blocked = self._next_inflection_point(batch_id)
        partition_bytes = max(1.0, nbytes / max(1, self.partitions))
        plan = self.mapper.map(dag, partition_bytes)
        return {
            "plan": plan,
            "inflection_point": inflection_point,
            "partition_bytes": partition_bytes,
            "optimizer_s": blocked,
        }

    def _apply_rapids(self, plan: DevicePlan, session) -> dict:
        from .engine.rapids import apply_confs
        from .rapids import conf_diff, rapids_confs

        confs = rapids_confs(plan)
        changed = conf_diff(self._rapids_applied, confs.confs).changed
        self._rapids_applied = apply_confs(session, confs.confs, self._rapids_applied)
        return {"rapids_confs_set": len(changed), "rapids_conflicts": len(confs.conflicts) or None}

    def _place_at_admission(self, pending) -> Optional[dict]:
        """RAPIDS: Spark plans the batch right after this admission, so its confs go on now."""
        dag = self.plan_cache.peek(self._plan_key())
        if dag is None or self._stream_session is None:
            return None  # the first data batch: no DAG yet; it is placed when it runs
        nbytes = sum(int(d.nbytes) for d in pending)
        t0 = time.perf_counter()
        placed = self._map(dag, nbytes, len(self._records))
        placed.update(self._apply_rapids(placed["plan"], self._stream_session))
        placed["map_s"] = time.perf_counter() - t0 - placed["optimizer_s"]
        placed["applied"] = True
        return placed

    @property
    def _device_mode_name(self) -> str:
        """The resolved device mode's name (``advisory`` before :meth:`start` resolves it)."""
        return self.device_mode.mode if self.device_mode is not None else "advisory"

    def _place_batch(self, batch_df, batch_id: int, nbytes: int, admission) -> dict:
        """Place this batch's operators; returns the metrics fields (and ``plan``)."""
        mode = self._device_mode_name
        fields: dict[str, Any] = {"device_mode": mode}
        placed = admission.placement if admission is not None else None
        planning_s, hit = 0.0, None
        if placed is None:
            t0 = time.perf_counter()
            if mode == "twin":
                dag, hit = self._twin.program.dag, True
            else:
                from .engine.plan import streaming_plan_dag

                dag, hit, planning_s = self.plan_cache.get(
                    self._plan_key(), lambda: streaming_plan_dag(self.query)
                )
            placed = self._map(dag, nbytes, batch_id)
            if mode == "rapids":
                # the batch is planned already: these confs are in force from the next batch
                placed.update(self._apply_rapids(placed["plan"], batch_df.sparkSession))
                placed["applied"] = False
            placed["map_s"] = time.perf_counter() - t0 - placed["optimizer_s"] - planning_s
        else:
            hit = True
        plan: DevicePlan = placed["plan"]
        fields.update(
            inflection_point=placed["inflection_point"],
            partition_bytes=placed["partition_bytes"],
            device_plan=plan.to_json(),
            gpu_ops=sum(1 for d in plan.devices if d == "GPU"),
            plan_cache="hit" if hit else "miss",
            planning_s=planning_s,
            mapping_s=placed["map_s"] + planning_s,
            optimizer_s=placed["optimizer_s"],
        )
        for key in ("rapids_confs_set", "rapids_conflicts"):
            if key in placed:
                fields[key] = placed[key]
        if mode == "rapids":
            fields["plan_applied"] = bool(placed.get("applied"))
        fields["plan"] = plan
        return fields

    def _run_twin(self, span, batch_id: int, plan: Optional[DevicePlan], output_dir) -> tuple[int, dict]:
        from .engine.stream import write_table

        if span and span[1] > span[0]:
            table = self.spool.read_table(span[0], span[1])
        else:
            table = self.workload.schema.empty_table()
        result = self._twin.process(table, batch_id, plan)
        out_rows = write_table(result.table, output_dir, batch_id)
        if span:
            _save_twin_state(self.run_dir, span[1], self._twin.state_dict())
        return out_rows, {
            "twin_s": float(sum(result.op_seconds.values()) + result.transition_seconds),
            "twin_transition_s": float(result.transition_seconds),
            "twin_transitions": int(result.transitions),
            "twin_late_rows": int(result.dropped_late),
            "twin_backend": self.device_mode.gpu_backend,
        }

    # ------------------------------------------------------------------ Spark callbacks
    def _on_batch(self, batch_df, batch_id: int) -> None:
        from .engine.stream import write_output

        started = time.time()
        with self._lock:
            self._in_batch = True
            span = None
            while self._planned:
                start, end = self._planned.popleft()
                if end > self._completed_end or (start == end == self._completed_end):
                    span = (start, end)
            admission = self._admissions.pop(span[1], None) if span and span[1] > span[0] else None
        twin_fields: dict = {}
        try:
            if self._stream_session is None:
                self._stream_session = batch_df.sparkSession
            datasets = self.spool.datasets(span[0], span[1]) if span else []
            nbytes = sum(int(d.nbytes) for d in datasets)
            if nbytes > 0:
                device = self._place_batch(batch_df, batch_id, nbytes, admission)
            else:  # no data (e.g. Spark's no-data batch that closes windows): nothing to place
                device = {"device_mode": self._device_mode_name}
            plan = device.pop("plan", None)
            output_dir = self.run_dir / "output" if self.output == "parquet" else None
            if self._twin is not None:
                out_rows, twin_fields = self._run_twin(span, batch_id, plan, output_dir)
            else:
                finish = self.workload.finish_batch
                out_rows = write_output(finish(batch_df) if finish else batch_df, output_dir, batch_id)
        except BaseException as exc:
            with self._lock:
                self._in_batch = False
                self._failure = exc
                self._batch_done.notify_all()
            raise  # never swallow: Spark must not commit a failed batch
        completed = time.time()
        admitted_at = admission.admitted_at if admission else started
        decision = admission.decision if admission else None
        extra: dict[str, Any] = {
            "workload": self.workload.name,
            "start_seq": span[0] if span else None,
            "end_seq": span[1] if span else None,
            "batch_started_at": started,
            "foreach_s": completed - started,
            "output_rows": out_rows,
            "decision_s": admission.decision_s if admission else 0.0,
            "polls": admission.polls if admission else 0,
            "decision_reason": admission.reason if admission else None,
            "target_s": decision.target_s if decision else self.target_s,
            "predicted_s": decision.predicted_s if decision else None,
            "margin_s": decision.margin_s if decision else None,
            "estimate_s": decision.estimate_s if decision else None,
        }
        extra.update(device)
        extra.update(twin_fields)
        changes = list(admission.changes) if admission and admission.changes else []
        changes.extend(self.mapper.pop_changes())
        if self.optimizer is not None:
            by_hand = {c["value"] for c in changes if c.get("param") == "mapper.inflection_point"}
            # a value set by hand reaches the optimizer and the mapper: record it once (the mapper's)
            changes.extend(c for c in _change_dicts(self.optimizer.pop_changes())
                           if not (c.get("param") == "inflection_point" and c.get("value") in by_hand))
        extra["changes"] = changes or None
        record = batch_record(
            batch_id=batch_id,
            policy=admission.policy if admission and admission.policy else self.policy.name,
            datasets=datasets,
            admitted_at=admitted_at,
            completed_at=completed,
            extra=extra,
        )
        self._metrics_writer.append(record)
        if self.optimizer is not None and record["rows"] > 0 and "inflection_point" in record:
            from .optimizer import BatchSample

            self.optimizer.observe(
                BatchSample(
                    batch_id=batch_id,
                    inflection_point=record["inflection_point"],
                    rows=record["rows"],
                    nbytes=record["bytes"],
                    throughput_rows_s=record["throughput_rows_s"],
                    max_latency_s=record["max_latency_s"],
                )
            )
        if self.controller is not None and record["rows"] > 0:
            self.controller.observe(
                BatchObservation(
                    rows=record["rows"],
                    nbytes=record["bytes"],
                    processing_s=record["processing_s"],
                    max_latency_s=record["max_latency_s"],
                )
            )
        with self._lock:
            if span:
                self._completed_end = max(self._completed_end, span[1])
            self._records.append(record)
            callbacks = list(self._callbacks)
            self._in_batch = False
            self._batch_done.notify_all()
        if self.feed is None:
            self._start_feed()
        for callback in callbacks:
            try:
                callback(record)
            except Exception:
                pass  # a broken subscriber must not fail the batch

    def _on_progress(self, record: dict) -> None:
        if self._progress_writer is not None:
            self._progress_writer.append(record)
        with self._lock:
            self._last_progress_id = max(self._last_progress_id, int(record["batch_id"]))
            self._batch_done.notify_all()

    def _await_progress(self, timeout: float) -> None:
        """Give Spark's listener bus time to deliver the progress of the last batches."""
        deadline = time.monotonic() + timeout
        with self._lock:
            last = max((int(r["batch_id"]) for r in self._records), default=-1)
            while self._last_progress_id < last and time.monotonic() < deadline:
                self._batch_done.wait(0.05)

    # ------------------------------------------------------------------ waiting
    def _check_health(self) -> None:
        if self._failure is not None:
            raise EngineError(f"stream {self.name} failed: {_one_line(self._failure)}")
        if self.query is not None and not self.query.isActive and not self._stopped and not self._restarting:
            exc = self.query.exception()
            raise EngineError(f"stream {self.name} stopped: {_one_line(exc) if exc else 'no error'}")
        feed_error = getattr(self.feed, "error", None)
        if feed_error is not None:
            raise EngineError(f"feed of {self.name} failed: {_one_line(feed_error)}")

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
            data = [r for r in self._records if r["rows"] > 0]
            if batches is not None and len(data) < batches:
                return False
            if rows is not None and sum(r["rows"] for r in data) < rows:
                return False
            if until is not None and not until(self):
                return False
            return True

        while True:
            self._check_health()
            with self._lock:
                if done():
                    return self
                self._batch_done.wait(0.1)
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"stream {self.name}: condition not reached within {timeout:g} s "
                    f"({len(self._records)} batches so far)"
                )

    def feed_finished(self) -> bool:
        return bool(getattr(self.feed, "finished", False))

    def caught_up(self) -> bool:
        """Whether every dataset in the spool so far has been processed."""
        if self.spool is None:
            return False
        self.spool.refresh()
        with self._lock:
            return self._completed_end >= self.spool.end_seq

    def drain(self, timeout: float = 120.0) -> None:
        """Admit everything the spool holds and wait until it is processed."""
        with self._lock:
            self._mode = "drain"
        self.spool.refresh()
        target = self.spool.end_seq
        self.wait(until=lambda s: s._completed_end >= target, timeout=timeout)

    def stop(self, *, drain: bool = True, timeout: float = 120.0) -> dict:
        """Stop cleanly: stop the feed, optionally process what is pending, stop Spark.

        Returns the run summary.  Nothing ingested is lost either way: rows still
        in the spool are processed by a later run from the same run directory.
        """
        if self._stopped:
            return self.summary()
        if self.feed is not None:
            self.feed.stop()
            if hasattr(self.feed, "scan_once") and drain:
                self.feed.scan_once()  # files that landed since the last poll
        try:
            if drain and self.query is not None and self.query.isActive and self._failure is None:
                self.drain(timeout=timeout)
        finally:
            with self._lock:
                self._mode = "hold"
            self._teardown()
        return self.summary()

    def _teardown(self) -> None:
        from .engine.stream import stop_query

        self._stopped = True
        with self._lock:
            self._mode = "hold"
        if self.feed is not None:
            try:
                self.feed.stop()
            except Exception:
                pass
        if self.query is not None:
            stop_query(self.query, is_idle=lambda: not self._in_batch)
        if self.spark is not None and self._listener is not None:
            self._await_progress(timeout=5.0)
            try:
                self.spark.streams.removeListener(self._listener)
            except Exception:
                pass
        if self._channel is not None:
            self._channel.close()
        if self.optimizer is not None:
            try:
                self.optimizer.close()
            except Exception:
                pass
        stopped_at = time.time()
        if getattr(self, "_run_info", None) is not None:
            info = dict(self._run_info)
            self.spool.refresh()
            data = [r for r in self._records if r["rows"] > 0]
            info.update(
                stopped_at=stopped_at,
                feed_rows=self.spool.total_rows(),
                feed_datasets=self.spool.end_seq,
                rows_processed=sum(r["rows"] for r in data),
                batches=len(self._records),
                total_rows=self.spool.total_rows(0, self._completed_end),
                processed_through_seq=self._completed_end,
            )
            rows_bad = getattr(self.feed, "total_rows_bad", None)
            if rows_bad is not None:
                info["rows_rejected"] = rows_bad
            write_run_info(self.run_dir, info)
        for writer in (self._metrics_writer, self._progress_writer):
            if writer is not None:
                writer.close()
        if self._external_spark is None and self.spark is not None:
            try:
                self.spark.stop()
            except Exception:
                pass
            self.spark = None

    def __enter__(self) -> "LiveStream":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop(drain=exc[0] is None)

    def __repr__(self) -> str:
        state = "running" if self.is_active else ("stopped" if self._stopped else "new")
        return (
            f"<LiveStream {self.workload.name} policy={self.policy.name} {state} "
            f"batches={len(self._records)} run_dir={self.run_dir}>"
        )


def _change_dicts(changes, prefix: str = "") -> list[dict]:
    """Recorded changes as flat dicts: ``param``, ``old`` (when known), ``value``, ``at``.

    The controller's :class:`ParamChange` (several parameters at once) becomes one
    dict per parameter, named ``controller.<param>`` like the mapper's ``mapper.<param>``.
    """
    out = []
    for change in changes or []:
        if isinstance(change, dict):
            out.append(change)
        elif hasattr(change, "changes") and hasattr(change, "wall_time"):
            for param, (old, new) in change.changes.items():
                out.append({"param": f"{prefix}{param}", "old": old, "value": new, "at": change.wall_time})
        elif hasattr(change, "to_dict"):
            out.append(change.to_dict())
        else:
            out.append({"change": repr(change)})
    return out


def _one_line(exc: BaseException | str) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


TWIN_STATE_DIR = "twin_state"


def _save_twin_state(run_dir: Path, end_seq: int, state) -> None:
    """Keep the twin's state after the batch that ends at feed seq ``end_seq`` (last three kept)."""
    import os
    import pickle

    directory = Path(run_dir) / TWIN_STATE_DIR
    directory.mkdir(exist_ok=True)
    final = directory / f"{end_seq:012d}.pkl"
    tmp = directory / f".{end_seq:012d}.pkl.tmp"
    with open(tmp, "wb") as fh:
        pickle.dump(state, fh)
    os.replace(tmp, final)
    for old in sorted(directory.glob("*.pkl"))[:-3]:
        old.unlink(missing_ok=True)


def _load_twin_state(run_dir: Path, committed: Optional[int]):
    """The twin's state after the last committed batch, None for a fresh run.

    Raises ConfigError when a resumed run has no state for its committed offset
    (e.g. it was started in another device mode): the twin's windows would be wrong.
    """
    import pickle

    if not committed:
        return None
    path = Path(run_dir) / TWIN_STATE_DIR / f"{committed:012d}.pkl"
    if not path.exists():
        raise ConfigError(
            f"cannot resume {run_dir} in twin mode: no twin state for feed offset {committed} "
            f"(was the run started in another device mode?)"
        )
    with open(path, "rb") as fh:
        return pickle.load(fh)
