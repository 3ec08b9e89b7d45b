"""The twin executor: runs a :class:`~lmstream_kit.twin.program.TwinProgram` batch by batch.

Each operator runs on the backend of the device a
:class:`~lmstream_kit.mapper.DevicePlan` gives it (``"GPU"``: the GPU backend,
``"CPU"``: the CPU backend; operators with no Table II class always on the
CPU).  A frame that crosses from one backend to another goes through Arrow: one
transition.  Reading the batch into a non-host backend (a scan placed on the
GPU) and writing the result from one (a root placed on the GPU) are
transitions too.  The state between batches (stored partial aggregates, join
buffers) stays on the host and is kept only when the whole batch succeeded, so
a batch that raised can be run again.

Watermarks follow Spark's append mode (see :mod:`lmstream_kit.twin.program`):
batch N drops late rows against the watermark batch N-1 used and evicts against
its own, which is the largest event time seen up to batch N-1 minus the
workload's lateness (never decreasing, starting at 0).

Examples
--------
>>> import numpy as np
>>> from lmstream_kit.workloads import get_workload
>>> from lmstream_kit.twin import TwinExecutor, twin_program
>>> wl = get_workload("CM1T")
>>> rows = wl.make_rows(0, 200, np.random.default_rng(1))          # second 0
>>> ex = TwinExecutor(twin_program("CM1T"), gpu_backend="pandas-device")
>>> ex.process(rows, batch_id=0).table.num_rows                     # window [0, 60) still open
0
>>> later = wl.make_rows(70, 200, np.random.default_rng(2))         # second 70: watermark 65 next
>>> ex.process(later, batch_id=1).table.num_rows, ex.watermark
(0, 65)
>>> out = ex.process(wl.schema.empty_table(), batch_id=2)           # a no-data batch closes it
>>> out.table.column_names, out.table.num_rows, out.transitions
(['window_start', 'window_end', 'category', 'totalCpu', 'events'], 4, 0)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..exceptions import ConfigError
from ..mapper import DevicePlan
from .backends import Backend, get_backend, transfer
from .program import BatchContext, TwinProgram, twin_program

__all__ = ["TwinExecutor", "TwinResult", "STATE_FORMAT", "STATE_VERSION"]

CPU, GPU = "CPU", "GPU"
STATE_FORMAT = "lmstream_kit.twin"
STATE_VERSION = 1


@dataclass(frozen=True)
class TwinResult:
    """What one micro-batch produced.

    Attributes
    ----------
    table : pyarrow.Table
        The batch's output rows, in the schema (and, where the workload orders
        its batches, the order) of Spark's ``foreachBatch`` output.
    op_seconds : dict
        Operator id -> seconds it ran (transitions of its inputs not included).
    devices : dict
        Operator id -> ``"CPU"`` or ``"GPU"``, where it actually ran.
    transitions : int
        Host <-> device moves: scans into the GPU backend, frames crossing
        between backends, and the result leaving the GPU backend.
    transition_seconds : float
        Time spent on those moves.
    late_watermark, eviction_watermark : int
        The watermarks (seconds) this batch dropped late rows and evicted state with.
    dropped_late : int
        Rows the stateful operators dropped as late (Spark's ``numRowsDroppedByWatermark``:
        partial aggregates for the aggregations, rows of either side for the join).
    """

    table: pa.Table
    op_seconds: dict[int, float]
    devices: dict[int, str]
    transitions: int
    transition_seconds: float = 0.0
    late_watermark: int = 0
    eviction_watermark: int = 0
    dropped_late: int = 0


@dataclass
class _Watermarks:
    current: int = 0  # the eviction watermark of the next batch
    previous: int = 0  # the eviction watermark of the last batch (late rows of the next one)
    per_operator: dict = field(default_factory=dict)  # watermark op id -> its own watermark


def _empty_frame(dtypes: Mapping[str, str]) -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in dtypes.items()})


class TwinExecutor:
    """Run a workload's per-batch query on pandas / cudf, one micro-batch at a time.

    Parameters
    ----------
    program : TwinProgram or str
        The program, or a workload name that has one.
    gpu_backend : str
        Backend of the operators placed on the GPU: ``"cudf"``, ``"pandas-device"``
        (pandas standing in for a device; transitions round-trip through Arrow)
        or ``"pandas"`` (no device at all: no transitions).
    cpu_backend : str
        Backend of the CPU-side operators and of the state; must be a host
        backend (``"pandas"``).

    Raises
    ------
    ConfigError
        For a workload without a twin, a non-host CPU backend, or ``"cudf"``
        where cudf does not work (the message says why).
    """

    def __init__(self, program, *, gpu_backend: str = "cudf", cpu_backend: str = "pandas") -> None:
        if not isinstance(program, TwinProgram):
            found = twin_program(program)
            if found is None:
                raise ConfigError(f"workload {program!r} has no twin program")
            program = found
        self.program = program
        self.cpu: Backend = get_backend(cpu_backend)
        if not self.cpu.host:
            raise ConfigError(f"the CPU backend must keep frames on the host, {cpu_backend!r} does not")
        self.gpu: Backend = get_backend(gpu_backend)
        self._order = program.dag.topological_order()
        self._by_id = {op.id: op for op in program.ops}
        self._consumers = {op.id: 0 for op in program.ops}
        for op in program.ops:
            for child in op.children:
                self._consumers[child] += 1
        self._reset()

    def _reset(self) -> None:
        self._state: dict[str, pd.DataFrame] = {
            name: _empty_frame(dtypes) for name, dtypes in self.program.stores.items()
        }
        self._wm = _Watermarks()
        self._last_batch_id: Optional[int] = None
        self._batches = 0

    # ------------------------------------------------------------------ read-only properties
    @property
    def watermark(self) -> int:
        """The watermark (seconds) the next batch evicts state with."""
        return self._wm.current

    @property
    def last_batch_id(self) -> Optional[int]:
        return self._last_batch_id

    @property
    def needs_no_data_batch(self) -> bool:
        """Whether Spark would now run a no-data batch (the watermark moved in the last batch).

        With ``spark.sql.streaming.noDataMicroBatches.enabled`` (off in the kit's
        sessions) Spark runs an empty batch when this holds, which emits the
        windows that closed; call :meth:`process` with an empty table to do the same.
        """
        return self._batches > 0 and self._wm.current > self._wm.previous

    def state_rows(self) -> dict[str, int]:
        """Rows held per state store."""
        return {name: len(frame) for name, frame in self._state.items()}

    # ------------------------------------------------------------------ running
    def _devices(self, plan: Optional[DevicePlan]) -> dict[int, str]:
        if plan is None:
            return {op.id: CPU for op in self.program.ops}
        entries = {e.id: e for e in plan.entries}
        mine = {op.id: op.exec_name for op in self.program.ops}
        theirs = {i: e.exec_name for i, e in entries.items()}
        if mine != theirs:
            raise ConfigError(
                f"the device plan does not belong to the {self.program.workload} twin program "
                f"(map program.dag, not Spark's plan): expected {sorted(mine.items())}, "
                f"got {sorted(theirs.items())}"
            )
        devices = {}
        for op in self.program.ops:
            device = entries[op.id].device
            if device not in (CPU, GPU):
                raise ConfigError(f"operator {op.id}: unknown device {device!r}")
            devices[op.id] = CPU if op.cpu_only else device
        return devices

    def _backend(self, device: str) -> Backend:
        return self.gpu if device == GPU else self.cpu

    def process(self, table: pa.Table, batch_id: int, plan: Optional[DevicePlan] = None) -> TwinResult:
        """Run one micro-batch.

        Parameters
        ----------
        table : pyarrow.Table
            The batch's input rows (the admitted span of the spool, in the
            workload's input schema); an empty table for a batch without data.
        batch_id : int
            Spark's batch id; must grow from batch to batch.
        plan : DevicePlan, optional
            The mapper's placement of ``program.dag``; None runs everything on the CPU.

        Returns
        -------
        TwinResult
        """
        batch_id = int(batch_id)
        if self._last_batch_id is not None and batch_id <= self._last_batch_id:
            raise ConfigError(
                f"batch {batch_id} is not after batch {self._last_batch_id} (batch ids grow); to run "
                "a batch again, load the state saved before it first"
            )
        missing = [name for name in self.program.input_schema.names if name not in table.column_names]
        if missing:
            raise ConfigError(f"the {self.program.workload} twin needs input columns {missing}")
        devices = self._devices(plan)
        ctx = BatchContext(
            batch_id=batch_id,
            input=table,
            late_watermark=self._wm.previous,
            eviction_watermark=self._wm.current,
            state=dict(self._state),
        )
        outputs: dict[int, tuple[str, Any]] = {}
        waiting = dict(self._consumers)  # frames are dropped once their last consumer ran
        op_seconds: dict[int, float] = {}
        transitions = 0
        moving = 0.0
        for op_id in self._order:
            op = self._by_id[op_id]
            device = devices[op_id]
            backend = self._backend(device)
            inputs = []
            for child in op.children:
                child_device, frame = outputs[child]
                source = self._backend(child_device)
                if source is not backend:
                    t0 = time.perf_counter()
                    frame = transfer(frame, source, backend)
                    moving += time.perf_counter() - t0
                    transitions += 1
                if not backend.owns(frame):
                    raise RuntimeError(
                        f"operator {op_id} ({op.exec_name}) on {backend.name} got a frame of another backend"
                    )
                inputs.append(frame)
                waiting[child] -= 1
                if not waiting[child]:
                    del outputs[child]
            if not op.children and not backend.host:
                transitions += 1  # the batch is read into device memory
            ctx.op_id = op_id
            t0 = time.perf_counter()
            outputs[op_id] = (device, backend.adopt(op.run(backend, inputs, ctx)))
            op_seconds[op_id] = time.perf_counter() - t0

        root_device, frame = outputs[self.program.dag.root]
        root_backend = self._backend(root_device)
        t0 = time.perf_counter()
        result = root_backend.to_arrow(frame)
        if not root_backend.host:
            transitions += 1
            moving += time.perf_counter() - t0
        out = self._conform(result)

        # the batch went through: keep its state and move the watermarks on
        self._state.update(ctx.new_state)
        self._advance_watermark(ctx.event_time_max)
        self._wm.previous = ctx.eviction_watermark
        self._last_batch_id = batch_id
        self._batches += 1
        return TwinResult(
            table=out,
            op_seconds=op_seconds,
            devices=devices,
            transitions=transitions,
            transition_seconds=moving,
            late_watermark=ctx.late_watermark,
            eviction_watermark=ctx.eviction_watermark,
            dropped_late=ctx.dropped_late,
        )

    def _advance_watermark(self, maxima: Mapping[int, int]) -> None:
        # Spark's WatermarkTracker: per watermark operator the largest (max event time - delay)
        # seen, the global watermark the minimum of those ("min" policy), never moving back
        lateness = self.program.lateness_s
        for op_id, latest in maxima.items():
            candidate = int(latest) - lateness
            previous = self._wm.per_operator.get(op_id)
            if previous is None or candidate > previous:
                self._wm.per_operator[op_id] = candidate
        if self._wm.per_operator:
            self._wm.current = max(self._wm.current, min(self._wm.per_operator.values()))

    def _conform(self, table: pa.Table) -> pa.Table:
        """The root's frame as Spark writes it: names, types, nullability; seconds -> timestamps."""
        schema = self.program.output_schema
        arrays = []
        for f in schema:
            column = table.column(f.name)
            if f.name in self.program.timestamp_columns:
                micros = pc.multiply(column.cast(pa.int64()), pa.scalar(1_000_000, pa.int64()))
                column = micros.cast(f.type)
            else:
                column = column.cast(f.type)
            arrays.append(column)
        return pa.Table.from_arrays(arrays, schema=schema).combine_chunks()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """The state between batches as plain Python (JSON- and pickle-serialisable)."""
        stores = {}
        for name, frame in self._state.items():
            stores[name] = {
                "columns": list(frame.columns),
                "dtypes": [str(frame[c].dtype) for c in frame.columns],
                "data": {c: frame[c].tolist() for c in frame.columns},
            }
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "workload": self.program.workload,
            "last_batch_id": self._last_batch_id,
            "batches": self._batches,
            "watermark_s": self._wm.current,
            "previous_watermark_s": self._wm.previous,
            "operator_watermarks_s": {str(k): v for k, v in self._wm.per_operator.items()},
            "stores": stores,
        }

    def load_state(self, state: Mapping) -> None:
        """Restore what :meth:`state_dict` returned (for a restart from a checkpoint).

        Raises
        ------
        ConfigError
            When ``state`` is not a twin state of this workload and format version.
        """
        try:
            if state.get("format") != STATE_FORMAT or state.get("version") != STATE_VERSION:
                raise ConfigError(
                    f"not a twin state of format {STATE_FORMAT} v{STATE_VERSION}: "
                    f"{state.get('format')!r} v{state.get('version')!r}"
                )
            if state["workload"] != self.program.workload:
                raise ConfigError(
                    f"twin state of workload {state['workload']} cannot be loaded into the "
                    f"{self.program.workload} twin"
                )
            stores = {}
            for name, dtypes in self.program.stores.items():
                saved = state["stores"][name]
                if list(saved["columns"]) != list(dtypes):
                    raise ConfigError(f"twin state store {name!r} has columns {saved['columns']}, "
                                      f"expected {list(dtypes)}")
                stores[name] = pd.DataFrame(
                    {c: pd.Series(saved["data"][c], dtype=dtypes[c]) for c in dtypes}
                )
            wm = _Watermarks(
                current=int(state["watermark_s"]),
                previous=int(state["previous_watermark_s"]),
                per_operator={int(k): int(v) for k, v in state["operator_watermarks_s"].items()},
            )
            last = state["last_batch_id"]
            batches = int(state["batches"])
        except ConfigError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"malformed twin state: {type(exc).__name__}: {exc}") from None
        self._state = stores
        self._wm = wm
        self._last_batch_id = None if last is None else int(last)
        self._batches = batches

    def __repr__(self) -> str:
        rows = ", ".join(f"{k}={v}" for k, v in self.state_rows().items())
        return (
            f"<TwinExecutor {self.program.workload} cpu={self.cpu.name} gpu={self.gpu.name} "
            f"batches={self._batches} watermark={self._wm.current} state: {rows}>"
        )
