"""Twin programs: the shared parts of every workload's per-batch query as Spark-named operators.

:class:`TwinProgram`, the operators and :func:`windowed_aggregate` live here; each query's program sits
beside its Spark query in its workload module (``Workload.twin``), where :func:`twin_program` finds it.

>>> program = twin_program("CM2S")
>>> program.workload, len(program.ops), program.ops[-1].exec_name, program.stores["agg"]["job_id"]
('CM2S', 11, 'MicroBatchScanExec', 'int64')

Spark's plan
------------
A :class:`TwinProgram` mirrors the physical plan Spark runs for one micro-batch
of a workload (checked against ``plan_dag`` on real Spark in
``tests/test_twin_spark.py``): its operators carry Spark's exec names, so
``program.dag`` is a :class:`~lmstream_kit.mapper.PlanDag` that the
:class:`~lmstream_kit.mapper.DeviceMapper` places like Spark's own plan.  Two
things of Spark's plan are left out, because the twin runs one partition in one
process: the ``ShuffleExchangeExec`` in front of the stateful operators, and the
merging ``HashAggregateExec`` right after it (its input keys are unique here).

Operators whose exec has no Table II class -- ``EventTimeWatermarkExec``,
``StateStoreRestoreExec``, ``StateStoreSaveExec`` and
``StreamingSymmetricHashJoinExec`` -- stay on the CPU whatever the plan says,
as in Spark (the RAPIDS plugin has no streaming state operators either); the
state they keep between batches lives on the host, in pandas.

Windowed aggregations (:func:`windowed_aggregate`: LR2S, CM1S, CM1T, CM2S), root first::

    [SortExec]                   CM1: window_end, totalCpu desc, category (its finish_batch)
    [ProjectExec]                LR2S: window.end AS timestamp, ...
    [FilterExec]                 LR2S: HAVING avgSpeed < 40
    HashAggregateExec            final: sum / count -> avg, output columns
    StateStoreSaveExec           drop late groups, upsert, evict (= emit) closed windows
    HashAggregateExec            merge this batch's partial aggregates with the stored ones
    StateStoreRestoreExec        stored partial aggregates of this batch's keys
    HashAggregateExec            partial: sum / count per window and key
    ExpandExec | ProjectExec     sliding windows (range / slide copies) | tumbling window
    FilterExec                   isnotnull(ts)
    EventTimeWatermarkExec       max event time of the batch (for the next watermark)
    ProjectExec                  ts = timestamp_seconds(time), needed columns
    [FilterExec]                 CM2S: event_type = 1 (Spark pushes it below the watermark)
    MicroBatchScanExec           the batch's Arrow table, in the operator's backend

LR1S / LR1T are a stream-stream inner self-join; their operator tree is in
:mod:`lmstream_kit.workloads.lr1`.

Event time is handled in whole seconds (``int64``) inside the frames; the
executor turns second columns into Spark's ``timestamp[us, tz=UTC]`` when it
writes the result.

Spark semantics the operators follow (append mode, Spark 4.1 and later; read
from Spark's source and checked against it)
-----------------------------------------------------------------------------
* The watermark of batch N is computed when batch N-1 has run: the largest
  event time that batch N-1's ``EventTimeWatermarkExec`` saw, minus the
  lateness, if larger than the watermark before (it never decreases; it starts
  at 0).  A batch without rows leaves it unchanged.  The maximum is taken over
  the rows *reaching* the watermark operator: in CM2S the optimiser pushes
  ``event_type = 1`` below it, so other events never move the watermark.
* Late rows are dropped against the watermark of the *previous* batch (Spark's
  ``WatermarkPropagator``: ``getInputWatermarkForLateEvents(batch) =
  watermark(batch - 1)``), state is evicted against the current one.  The
  comparison is on the window: a (row, window) pair is late when
  ``window.end <= watermark``, so a row older than the watermark still counts
  in the sliding windows that are still open.
* Aggregations emit a window once, in the first batch whose (eviction)
  watermark is ``>= window.end``, with everything that arrived for it; an
  empty batch (Spark's no-data batch, run when the watermark moved) emits what
  closed.  The kit disables no-data batches by default, so there a window
  closes in the next data batch.
* The self-join emits a pair of reports in the batch in which the later of the
  two arrives: new x (stored + new) and stored x new, per (window, vehicle);
  reports are stored until the watermark passes their window's end.  Both join
  sides read the same rows, so one buffer holds both sides' state.

Output order: CM1S/CM1T order each batch (their ``finish_batch``); for the
others Spark's order is unspecified and the twin emits evicted windows sorted
by their keys, and join pairs in a deterministic order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any

import pyarrow as pa

from ..exceptions import ConfigError
from ..mapper import Operator, PlanDag, exec_class, unmapped_reason

__all__ = [
    "TIMESTAMP",
    "TS",
    "WINDOW",
    "BatchContext",
    "OpFn",
    "TwinOp",
    "TwinProgram",
    "chain",
    "event_time_watermark",
    "filter_equals",
    "filter_less",
    "filter_not_null",
    "merge_aggregate",
    "partial_aggregate",
    "project",
    "project_ts",
    "scan",
    "sliding_windows",
    "sort",
    "state_restore",
    "state_save",
    "timestamp_schema",
    "tumbling_window",
    "twin_program",
    "windowed_aggregate",
]

WINDOW = ("window_start", "window_end")
TS = "ts"


@dataclass
class BatchContext:
    """What an operator may read and write while one micro-batch runs.

    ``state`` holds the host frames of each state store as they were before the
    batch (read only); stateful operators put the new ones in ``new_state``, and
    the executor keeps them only when the whole batch succeeded.
    """

    batch_id: int
    input: pa.Table
    late_watermark: int
    eviction_watermark: int
    state: Mapping[str, Any]
    new_state: dict = field(default_factory=dict)
    event_time_max: dict = field(default_factory=dict)
    dropped_late: int = 0
    op_id: int = -1


#: ``run(backend, inputs, ctx) -> frame``
OpFn = Callable[[Any, list, BatchContext], Any]


@dataclass(frozen=True)
class TwinOp:
    """One operator: Spark's exec name, its children and what it does."""

    id: int
    exec_name: str
    children: tuple[int, ...]
    run: OpFn
    detail: str = ""

    @property
    def op_class(self) -> str | None:
        """Table II class (None: the operator stays on the CPU)."""
        return exec_class(self.exec_name)

    @property
    def cpu_only(self) -> bool:
        return self.op_class is None


@dataclass(frozen=True)
class TwinProgram:
    """A workload's per-batch query for the twin executor.

    Attributes
    ----------
    workload : str
        Name of the workload (``"CM1S"``).
    ops : tuple of TwinOp
        Operators, ids in pre-order from the root (0), like ``plan_dag``.
    input_schema, output_schema : pyarrow.Schema
        The spool's schema; the schema of Spark's ``foreachBatch`` output.
    lateness_s : int
        The workload's watermark delay (simulated seconds).
    ordered : bool
        Whether the output rows of a batch are in a defined order (CM1's
        ``finish_batch``); otherwise Spark's order is unspecified.
    stores : mapping
        State store name -> ``{column: dtype}`` of its host frame.
    timestamp_columns : tuple of str
        Output columns held as whole seconds and written as timestamps.
    """

    workload: str
    ops: tuple[TwinOp, ...]
    input_schema: pa.Schema
    output_schema: pa.Schema
    lateness_s: int
    ordered: bool
    stores: Mapping[str, Mapping[str, str]]
    timestamp_columns: tuple[str, ...]
    description: str = ""

    def __post_init__(self) -> None:
        _ = self.dag  # validates ids, children and the single root (ConfigError)

    @cached_property
    def dag(self) -> PlanDag:
        """The operator DAG for the device mapper (exec names only)."""
        return PlanDag(tuple(Operator(op.id, op.exec_name, op.children) for op in self.ops))

    def op(self, op_id: int) -> TwinOp:
        for op in self.ops:
            if op.id == op_id:
                return op
        raise ConfigError(f"{self.workload} twin has no operator {op_id}")

    @property
    def watermark_ops(self) -> tuple[int, ...]:
        return tuple(op.id for op in self.ops if op.exec_name == "EventTimeWatermarkExec")

    def explain(self) -> str:
        """The operator tree, root first, one operator a line.

        >>> print(twin_program("CM1T").explain())  # doctest: +ELLIPSIS
        0 SortExec [window_end ASC, totalCpu DESC, category ASC]
          1 HashAggregateExec [final: totalCpu = sum(cpu), events = count(1)]
        ...
                        10 MicroBatchScanExec [time, scheduling_class, cpu]
        """
        by_id = {op.id: op for op in self.ops}
        lines: list[str] = []

        def visit(op_id: int, depth: int) -> None:
            op = by_id[op_id]
            cpu = f"  (CPU: {unmapped_reason(op.exec_name)})" if op.cpu_only else ""
            lines.append(f"{'  ' * depth}{op.id} {op.exec_name} [{op.detail}]{cpu}")
            for child in op.children:
                visit(child, depth + 1)

        visit(self.dag.root, 0)
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------- operators


def scan(columns: Sequence[str]) -> OpFn:
    names = list(columns)

    def run(be, inputs, ctx):
        return be.from_arrow(ctx.input.select(names))

    return run


def filter_equals(column: str, value) -> OpFn:
    def run(be, inputs, ctx):
        frame = inputs[0]
        return frame[frame[column] == value]

    return run


def filter_not_null(columns: Sequence[str]) -> OpFn:
    names = list(columns)

    def run(be, inputs, ctx):
        frame = inputs[0]
        mask = frame[names[0]].notna()
        for name in names[1:]:
            mask = mask & frame[name].notna()
        return frame[mask]

    return run


def filter_less(column: str, bound: float) -> OpFn:
    def run(be, inputs, ctx):
        frame = inputs[0]
        return frame[frame[column] < bound]

    return run


def project_ts(keep: Sequence[str], time_column: str) -> OpFn:
    names = list(keep)

    def run(be, inputs, ctx):
        frame = inputs[0]
        # timestamp_seconds(time), held as whole seconds
        return frame[names].assign(**{TS: frame[time_column].astype("int64")})

    return run


def event_time_watermark() -> OpFn:
    def run(be, inputs, ctx):
        frame = inputs[0]
        if len(frame):
            ctx.event_time_max[ctx.op_id] = int(frame[TS].max())
        return frame

    return run


def tumbling_window(range_s: int, keep: Sequence[str], rename: Mapping[str, str] | None = None) -> OpFn:
    names = list(keep)
    rename = dict(rename or {})

    def run(be, inputs, ctx):
        frame = inputs[0]
        start = (frame[TS] // range_s) * range_s
        out = frame[names].assign(window_start=start, window_end=start + range_s)
        out = out[[*WINDOW, *names]]
        return out.rename(columns=rename) if rename else out

    return run


def sliding_windows(range_s: int, slide_s: int, keep: Sequence[str]) -> OpFn:
    if range_s % slide_s:
        raise ConfigError(
            f"the twin needs a window range that is a multiple of the slide, got {range_s}/{slide_s}"
        )
    names = list(keep)
    copies = range_s // slide_s

    def run(be, inputs, ctx):
        frame = inputs[0]
        last = (frame[TS] // slide_s) * slide_s  # start of the latest window holding ts
        # copy k of every row is in the window starting k slides before the latest one
        starts = be.concat([last - k * slide_s for k in range(copies)])
        rows = be.concat([frame[names]] * copies)
        out = rows.assign(window_start=starts, window_end=starts + range_s)
        return out[[*WINDOW, *names]]

    return run


def project(columns: Sequence[tuple[str, Any]]) -> OpFn:
    """Output columns ``(name, source)``: a column name or ``fn(frame) -> series``."""
    spec = list(columns)

    def run(be, inputs, ctx):
        frame = inputs[0]
        values = {name: (src(frame) if callable(src) else frame[src]) for name, src in spec}
        return frame.assign(**values)[[name for name, _ in spec]]

    return run


def _typed(frame, dtypes: Mapping[str, str]):
    """``frame``'s columns ``dtypes`` in that order and with those types (astype only where needed)."""
    frame = frame[list(dtypes)]
    wrong = {name: dtype for name, dtype in dtypes.items() if str(frame[name].dtype) != dtype}
    return frame.astype(wrong) if wrong else frame


def partial_aggregate(keys: Sequence[str], buffers: Sequence[tuple[str, str | None]],
                      dtypes: Mapping[str, str]) -> OpFn:
    """``buffers``: ``(name, source column)`` summed as float64, or ``(name, None)``: count(1)."""
    group = [*WINDOW, *keys]

    def run(be, inputs, ctx):
        frame = inputs[0]
        values = {
            name: (frame[src].astype("float64") if src is not None else 1) for name, src in buffers
        }
        prepared = frame[group].assign(**values)
        return _typed(prepared.groupby(group, sort=True).sum().reset_index(), dtypes)

    return run


def merge_aggregate(keys: Sequence[str], dtypes: Mapping[str, str]) -> OpFn:
    group = [*WINDOW, *keys]

    def run(be, inputs, ctx):
        return _typed(inputs[0].groupby(group, sort=True).sum().reset_index(), dtypes)

    return run


def state_restore(store: str, keys: Sequence[str]) -> OpFn:
    group = [*WINDOW, *keys]

    def run(be, inputs, ctx):
        partial = inputs[0]
        stored = ctx.state[store]
        # each input key with its stored partial aggregate, if there is one
        found = stored.merge(partial[group], on=group, how="inner")
        return be.concat([partial, found[list(partial.columns)]])

    return run


def state_save(store: str, keys: Sequence[str]) -> OpFn:
    group = [*WINDOW, *keys]

    def run(be, inputs, ctx):
        rows = inputs[0]
        late = rows["window_end"] <= ctx.late_watermark
        ctx.dropped_late += int(late.sum())
        rows = rows[~late]
        updated = be.concat([ctx.state[store], rows]).drop_duplicates(subset=group, keep="last")
        closed = updated["window_end"] <= ctx.eviction_watermark
        ctx.new_state[store] = updated[~closed].reset_index(drop=True)
        return updated[closed].sort_values(group).reset_index(drop=True)

    return run


def sort(by: Sequence[str], ascending: Sequence[bool]) -> OpFn:
    def run(be, inputs, ctx):
        return inputs[0].sort_values(list(by), ascending=list(ascending)).reset_index(drop=True)

    return run


# ----------------------------------------------------------------------------------------- programs


def chain(steps: Sequence[tuple[str, OpFn, str]], first_id: int = 0) -> list[TwinOp]:
    """Operators of a linear chain, root first, ids in pre-order from ``first_id``."""
    ops = []
    for i, (name, run, detail) in enumerate(steps):
        op_id = first_id + i
        children = (op_id + 1,) if i + 1 < len(steps) else ()
        ops.append(TwinOp(op_id, name, children, run, detail))
    return ops


def timestamp_schema(fields: Sequence[tuple[str, pa.DataType, bool]]) -> pa.Schema:
    return pa.schema([pa.field(name, kind, nullable=nullable) for name, kind, nullable in fields])


TIMESTAMP = pa.timestamp("us", tz="UTC")


def windowed_aggregate(
    *,
    workload: str,
    input_schema: pa.Schema,
    lateness_s: int,
    range_s: int,
    slide_s: int,
    keys: Sequence[str],
    key_dtypes: Mapping[str, str],
    buffers: Sequence[tuple[str, str | None]],
    measures: Sequence[str],
    pre_filter: tuple[str, Any] | None,
    final: Sequence[tuple[str, Any]],
    final_detail: str,
    top: Sequence[tuple[str, OpFn, str]],
    output_schema: pa.Schema,
    ordered: bool,
    description: str,
) -> TwinProgram:
    """The program of a windowed aggregation (the tree in the module docstring), root first.

    ``keys`` group each window; ``buffers`` are the partial aggregates (``(name, column)``:
    sum of the column as float64, ``(name, None)``: count(1)); ``final`` the output columns of
    the final aggregate (as in :func:`project`); ``top`` the steps above it, root first;
    ``pre_filter`` an optional ``(column, value)`` equality below the watermark.
    """
    dtypes = {"window_start": "int64", "window_end": "int64", **dict(key_dtypes)}
    for name, src in buffers:
        dtypes[name] = "float64" if src is not None else "int64"
    keep = [*keys, *measures]
    if slide_s:
        window_step = ("ExpandExec", sliding_windows(range_s, slide_s, keep),
                       f"{range_s // slide_s} windows of {range_s} s sliding by {slide_s} s")
    else:
        window_step = ("ProjectExec", tumbling_window(range_s, keep), f"tumbling window of {range_s} s")
    partial_detail = ", ".join(f"partial_{'sum' if s else 'count'}({s or 1})" for _, s in buffers)
    steps = [
        *top,
        ("HashAggregateExec", project(final), f"final: {final_detail}"),
        ("StateStoreSaveExec", state_save("agg", keys), "append: drop late, evict window_end <= watermark"),
        ("HashAggregateExec", merge_aggregate(keys, dtypes), "merge with stored partials"),
        ("StateStoreRestoreExec", state_restore("agg", keys), "stored partials of this batch's keys"),
        ("HashAggregateExec", partial_aggregate(keys, buffers, dtypes), partial_detail),
        window_step,
        ("FilterExec", filter_not_null([TS]), "isnotnull(ts)"),
        ("EventTimeWatermarkExec", event_time_watermark(), f"ts, {lateness_s} seconds"),
        ("ProjectExec", project_ts(keep, "time"), f"{', '.join(keep)}, timestamp_seconds(time) AS ts"),
    ]
    scan_columns = ["time", *keep]
    if pre_filter is not None:
        column, value = pre_filter
        steps.append(("FilterExec", filter_equals(column, value), f"{column} = {value}"))
        scan_columns.append(column)
    steps.append(("MicroBatchScanExec", scan(scan_columns), ", ".join(scan_columns)))
    return TwinProgram(
        workload=workload,
        ops=tuple(chain(steps)),
        input_schema=input_schema,
        output_schema=output_schema,
        lateness_s=int(lateness_s),
        ordered=ordered,
        stores={"agg": dtypes},
        timestamp_columns=tuple(f.name for f in output_schema if f.type == TIMESTAMP),
        description=description,
    )


@cache
def _build(name: str) -> TwinProgram:
    from ..workloads import get_workload

    return get_workload(name).twin()


def twin_program(workload) -> TwinProgram | None:
    """The twin program of a workload (a name or a Workload), or None when it has none.

    The program is the registered workload's :attr:`~lmstream_kit.workloads.base.Workload.twin`,
    built once per name.

    >>> twin_program("cm2s").workload, twin_program("PASSTHROUGH")
    ('CM2S', None)
    """
    from ..workloads import WORKLOADS  # not at import time: the workload modules import this one

    name = str(getattr(workload, "name", workload)).upper()
    if name not in WORKLOADS or WORKLOADS.get(name).twin is None:
        return None
    return _build(name)
