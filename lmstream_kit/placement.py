"""Device placement as a per-batch controller: map each batch's operators, then carry the plan out.

How the plan is carried out is a registered strategy (``advisory``, ``rapids``,
``twin``; :mod:`lmstream_kit.devices` says which runs); the mapper and the
optional inflection optimizer are its tunables.  No pyspark here: the run loop
hands in the engine's batch handle.
"""

from __future__ import annotations

import math
import os
import pickle
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from .devices import DeviceMode, PlanCache
from .exceptions import ConfigError
from .mapper import DeviceMapper, DevicePlan
from .protocol import BatchContext, BatchController, Control, Param
from .record import batch_bytes
from .registry import Registry
from .units import format_bytes

__all__ = ["CONTROL_PARAMS", "STRATEGIES", "TWIN_STATE_DIR", "WORKLOAD_STATE_DIR", "Placement", "PlacementStrategy"]

TWIN_STATE_DIR = "twin_state"
#: where a workload with its own batch program keeps its state, in the run directory
WORKLOAD_STATE_DIR = "workload_state"
_INFLECTION_EXP = (10, 28)  # the slider's range, log2 bytes: 1 KiB .. 256 MiB (widened to the optimizer's bounds)
_INFLECTION = Param("inflection_point", float, low=0, low_open=True, log_scale=True, unit="bytes", step=0.25,
                    label="inflection point", doc="Partition size (bytes) from which operators prefer the GPU.")
_OPTIMIZER = Param("optimizer", str, choices=("tuning", "frozen"), label="optimizer",
                   doc="Whether the online optimizer re-tunes the inflection point after each batch.")
#: the parameters :meth:`Placement.controls` declares
CONTROL_PARAMS = (_INFLECTION, _OPTIMIZER)


class PlacementStrategy:
    """How a device plan is carried out. Subclasses override what differs from advisory."""

    name: ClassVar[str] = "advisory"
    #: the query's window cannot change while the stream runs
    fixed_window: ClassVar[bool] = False

    def __init__(self, placement: Placement) -> None:
        self.placement = placement
        self.program = None  # the workload's own batch program, when it has one

    def start(self, run_dir: Path, committed: int | None) -> None:
        workload = self.placement.workload
        if workload is not None and workload.batch_program is not None:
            self.program = workload.batch_program(Path(run_dir) / WORKLOAD_STATE_DIR)

    def query_workload(self, workload):
        """The workload Spark runs (the twin runs a pass-through query instead)."""
        return workload

    def dag(self, batch):
        """The batch's operator DAG, the cache hit, and the seconds spent planning."""
        p = self.placement
        return p.plan_cache.get(p.plan_key(), p.engine.streaming_plan)

    def at_admission(self, nbytes: int, batch_index: int) -> dict | None:
        return None

    def restarted(self) -> None:
        """The query restarted on a fresh clone of its session."""
        return None

    def apply(self, placed: dict, batch) -> None:
        """Carry out ``placed["plan"]`` for the batch that runs now (advisory: nothing)."""
        return

    def run(self, ctx: BatchContext, plan: DevicePlan | None, output_dir) -> tuple[int, dict]:
        """Run the batch; its output rows and record fields."""
        if self.program is not None:
            return ctx.engine.run_program(self.program, output_dir)
        return ctx.engine.write(output_dir, self.placement.workload.finish_batch), {}


class _Rapids(PlacementStrategy):
    name = "rapids"

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement)
        self.applied: dict = {}

    def _confs(self, plan: DevicePlan, apply: Callable[[dict, dict], dict]) -> dict:
        from .rapids import conf_diff, rapids_confs

        confs = rapids_confs(plan)
        changed = conf_diff(self.applied, confs.confs).changed
        self.applied = apply(confs.confs, self.applied)
        return {"rapids_confs_set": len(changed), "rapids_conflicts": len(confs.conflicts) or None}

    def at_admission(self, nbytes: int, batch_index: int) -> dict | None:
        """Spark plans the batch right after this admission, so its confs go on now."""
        p = self.placement
        dag = p.plan_cache.peek(p.plan_key())
        if dag is None or p.engine is None or not p.engine.has_batch_session():
            return None  # the first data batch: no DAG yet; it is placed when it runs
        t0 = time.perf_counter()
        placed = p.map(dag, nbytes, batch_index)
        placed.update(self._confs(placed["plan"], p.engine.apply_session_confs))
        placed["map_s"] = time.perf_counter() - t0 - placed["optimizer_s"]
        placed["applied"] = True
        return placed

    def apply(self, placed: dict, batch) -> None:
        # the batch is planned already: these confs are in force from the next batch
        placed.update(self._confs(placed["plan"], batch.apply_confs))
        placed["applied"] = False

    def restarted(self) -> None:
        """The restarted query runs on a fresh clone of the session: no confs yet."""
        self.applied = {}


class _Twin(PlacementStrategy):
    name = "twin"
    fixed_window = True

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement)
        self.executor = None
        self.run_dir: Path | None = None

    def start(self, run_dir: Path, committed: int | None) -> None:
        from .twin import TwinExecutor, twin_program

        p = self.placement
        self.run_dir = Path(run_dir)
        self.executor = TwinExecutor(twin_program(p.workload.name), gpu_backend=p.mode.gpu_backend)
        saved = _load_twin_state(self.run_dir, committed)
        if saved is not None:
            self.executor.load_state(saved)

    def query_workload(self, workload):
        import dataclasses

        # Spark runs the stream (offsets, checkpoint, admission); the twin runs the query
        return dataclasses.replace(workload, build_query=lambda stream: stream, output_mode="append",
                                   finish_batch=None)

    def dag(self, batch):
        return self.executor.program.dag, True, 0.0

    def run(self, ctx: BatchContext, plan: DevicePlan | None, output_dir) -> tuple[int, dict]:
        p = self.placement
        span = ctx.admission.get("span")
        if span and span[1] > span[0]:
            table = p.read_span(span[0], span[1])
        else:
            table = p.workload.schema.empty_table()
        result = self.executor.process(table, ctx.batch_id, plan)
        out_rows = ctx.engine.write_table(result.table, output_dir)
        if span:
            _save_twin_state(self.run_dir, span[1], self.executor.state_dict())
        return out_rows, {
            "twin_s": float(sum(result.op_seconds.values()) + result.transition_seconds),
            "twin_transition_s": float(result.transition_seconds),
            "twin_transitions": int(result.transitions),
            "twin_late_rows": int(result.dropped_late),
            "twin_backend": p.mode.gpu_backend,
        }


STRATEGIES: Registry[type] = Registry("device mode")
for _cls in (PlacementStrategy, _Rapids, _Twin):
    STRATEGIES.register(_cls.name, _cls)


class Placement(BatchController):
    """Places every data batch's operators with the mapper, tuned by the optional optimizer.

    :meth:`use` gives it the engine adapter (the running query's operator DAG and
    session confs) and ``read_span(start, end)``, the spool's rows (the twin reads them itself).
    """

    prefix = ""  # its parameters are the mapper's and the optimizer's, logged under their names

    def __init__(self, mapper: DeviceMapper, optimizer=None, *, plan_cache: PlanCache | None = None,
                 partitions: int = 2) -> None:
        super().__init__()
        self.mapper = mapper
        self.optimizer = optimizer
        self.plan_cache = plan_cache or PlanCache()
        self.partitions = int(partitions)
        self.mode = DeviceMode("advisory", None, "not started")
        self.strategy: PlacementStrategy = PlacementStrategy(self)
        self.workload = None
        self.engine = None
        self._batches = 0  # batches completed: the optimizer's index at admission
        self._plan: DevicePlan | None = None  # placed in before_batch, carried out in run_batch
        self.read_span: Callable[[int, int], Any] = lambda start, end: None

    def bind_changelog(self, log) -> None:
        super().bind_changelog(log)
        self.mapper.bind_changelog(log)
        if self.optimizer is not None:
            self.optimizer.bind_changelog(log)

    # -- live parameters: the inflection point and whether the optimizer tunes it ----------------
    def set_inflection_point(self, nbytes: float) -> None:
        """Set the inflection point by hand (bytes); it freezes the optimizer until it is released."""
        if self.optimizer is not None:
            # the mapper records the value set by hand; the optimizer's copy of it is not a second change
            self.optimizer.set_inflection_point(nbytes, record=False)
        self.mapper.set_inflection_point(nbytes)

    def set_optimizer(self, state: str) -> None:
        """``"frozen"`` holds the inflection point, ``"tuning"`` lets the optimizer move it again."""
        if self.optimizer is None:
            raise ConfigError("this stream runs without the inflection-point optimizer")
        _OPTIMIZER.validate(state)
        self.optimizer.freeze() if state == "frozen" else self.optimizer.release()

    def controls(self) -> list[Control]:
        lo, hi = _INFLECTION_EXP
        tip = _INFLECTION.doc
        bounds = self.optimizer.bounds if self.optimizer is not None else None
        if bounds:
            lo, hi = min(lo, math.floor(math.log2(bounds[0]))), max(hi, math.ceil(math.log2(bounds[1])))
            tip += (f" The optimizer accepts {format_bytes(bounds[0])} to {format_bytes(bounds[1])};"
                    " a value set here freezes it until you switch it back to tuning.")
        optimizer = None if self.optimizer is None else ("frozen" if self.optimizer.frozen else "tuning")
        return [
            Control("inflection_point", _INFLECTION, float(self.mapper.inflection_point),
                    self.set_inflection_point, None, "mapper", low=2.0**lo, high=2.0**hi, doc=tip),
            Control("optimizer", _OPTIMIZER, optimizer, self.set_optimizer,
                    None if self.optimizer is not None else "this stream runs without the inflection-point optimizer",
                    "optimizer"),
        ]

    def use(self, mode: DeviceMode, workload, *, engine=None, read_span=None) -> None:
        """Carry plans out as ``mode`` says, for ``workload``, on ``engine``."""
        self.mode = mode
        self.workload = workload
        self.engine = engine
        if read_span is not None:
            self.read_span = read_span
        self.strategy = STRATEGIES.get(mode.mode)(self)

    def plan_key(self):
        return ("spark", self.workload.name, self.workload.slide_s)

    def next_inflection_point(self, batch_index: int) -> tuple[float, float]:
        """The inflection point for the next batch, and the seconds spent waiting for the optimizer."""
        if self.optimizer is None:
            return self.mapper.snapshot()["inflection_point"], 0.0
        value = self.optimizer.next_inflection_point(batch_index)
        blocked = self.optimizer.pop_blocked_s()
        self.mapper.set_inflection_point(value, record=False)
        return value, blocked

    def map(self, dag, nbytes: int, batch_index: int) -> dict:
        """Map ``dag`` for a batch of ``nbytes``; the placement's fields (the caller times it)."""
        inflection_point, blocked = self.next_inflection_point(batch_index)
        partition_bytes = max(1.0, nbytes / max(1, self.partitions))
        plan = self.mapper.map(dag, partition_bytes)
        return {"plan": plan, "inflection_point": inflection_point, "partition_bytes": partition_bytes,
                "optimizer_s": blocked}

    # -- hooks ---------------------------------------------------------------------------------
    def on_admit(self, pending) -> Mapping[str, Any] | None:
        placed = self.strategy.at_admission(batch_bytes(pending), self._batches)
        return {"placement": placed} if placed is not None else None

    def before_batch(self, ctx: BatchContext) -> Mapping[str, Any] | None:
        if ctx.nbytes <= 0:  # no data (e.g. Spark's no-data batch that closes windows): nothing to place
            return {"device_mode": self.mode.mode}
        placed = ctx.admission.get("placement")
        planning_s, hit = 0.0, True
        if placed is None:
            t0 = time.perf_counter()
            dag, hit, planning_s = self.strategy.dag(ctx.engine)
            placed = self.map(dag, ctx.nbytes, ctx.batch_id)
            self.strategy.apply(placed, ctx.engine)
            placed["map_s"] = time.perf_counter() - t0 - placed["optimizer_s"] - planning_s
        plan: DevicePlan = placed["plan"]
        fields: dict[str, Any] = {
            "device_mode": self.mode.mode,
            "inflection_point": placed["inflection_point"],
            "partition_bytes": placed["partition_bytes"],
            "device_plan": plan.to_dict(),
            "gpu_ops": sum(1 for d in plan.devices if d == "GPU"),
            "plan_cache": "hit" if hit else "miss",
            "planning_s": planning_s,
            "mapping_s": placed["map_s"] + planning_s,
            "optimizer_s": placed["optimizer_s"],
        }
        for key in ("rapids_confs_set", "rapids_conflicts"):
            if key in placed:
                fields[key] = placed[key]
        if "applied" in placed:  # a strategy that applies plans says whether it was in force in time
            fields["plan_applied"] = bool(placed["applied"])
        self._plan = plan
        return fields

    def run_batch(self, ctx: BatchContext, output_dir) -> tuple[int, dict]:
        """Run the batch the way the strategy says (Spark, or the twin); output rows and fields."""
        plan, self._plan = self._plan, None
        return self.strategy.run(ctx, plan, output_dir)

    def after_batch(self, record) -> None:
        self._batches += 1
        if self.optimizer is not None and record.rows > 0 and record.inflection_point is not None:
            from .optimizer import BatchSample

            self.optimizer.observe(BatchSample(
                batch_id=record.batch_id, inflection_point=record.inflection_point, rows=record.rows,
                nbytes=record.bytes, throughput_rows_s=record.throughput_rows_s,
                max_latency_s=record.max_latency_s,
            ))

    def restarted(self) -> None:
        """The query restarted (fresh session clone)."""
        self.strategy.restarted()

    def close(self) -> None:
        if self.optimizer is not None:
            try:
                self.optimizer.close()
            except Exception:
                pass


def _save_twin_state(run_dir: Path, end_seq: int, state) -> None:
    """Keep the twin's state after the batch that ends at feed seq ``end_seq`` (last three kept)."""
    directory = Path(run_dir) / TWIN_STATE_DIR
    directory.mkdir(exist_ok=True)
    final = directory / f"{end_seq:012d}.pkl"
    tmp = directory / f".{end_seq:012d}.pkl.tmp"
    with open(tmp, "wb") as fh:
        pickle.dump(state, fh)
    os.replace(tmp, final)
    for old in sorted(directory.glob("*.pkl"))[:-3]:
        old.unlink(missing_ok=True)


def _load_twin_state(run_dir: Path, committed: int | None):
    """The twin's state after the last committed batch, None for a fresh run.

    Raises ConfigError when a resumed run has no state for its committed offset
    (e.g. it was started in another device mode): the twin's windows would be wrong.
    """
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
