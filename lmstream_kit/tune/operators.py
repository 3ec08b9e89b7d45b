"""Operator-level metrics of a micro-batch: each Spark stage's parallelism, records, useful time and load.

On Spark the unit of parallelism is the *stage*: the operators between two shuffles run fused in
one task per partition, so they share a parallelism (the stage's task count) and one tuner knob
(the source's input partitions for the first stage, the shuffle partitions after a shuffle).  An
*operator* here is therefore a stage, keyed by where it sits in the batch (``j<job>.s<position>``:
the job's index in the batch and the stage's index in the job, upstream first), which stays the
same from batch to batch of one query.

From Spark's numbers (:mod:`lmstream_kit.engine.stages`, the REST API's field names):

* ``useful_s``: the tasks' run time minus the time they waited for shuffle input and spent writing
  shuffle output (DS2's *useful time*, which leaves out waiting for input and output);
* ``true_rate``: records in (read from the source or the shuffle) per useful second of one task,
  DS2's *true processing rate* per instance;
* ``load``: the busy time of one task, ``useful_s / tasks``, over the batch's budget (its latency
  bound, else its interval): above 1 the stage cannot keep up at this parallelism, whatever the
  rest of the batch does;
* ``bottleneck``: ``load`` above ``busy_share`` (default 0.7, the Flink autoscaler's target
  utilisation).

>>> stage = {"job": 0, "position": 1, "stageId": 7, "status": "COMPLETE", "numTasks": 4,
...          "executorRunTime": 2000, "executorCpuTime": 1_500_000_000, "inputRecords": 0,
...          "shuffleReadRecords": 40_000, "outputRecords": 10, "shuffleWriteRecords": 0,
...          "shuffleFetchWaitTime": 400, "shuffleWriteTime": 0,
...          "submissionTime": "2026-11-23T10:00:00.000GMT", "completionTime": "2026-11-23T10:00:01.000GMT"}
>>> s = operator_samples([stage], budget_s=1.0)[0]
>>> s.key, s.tasks, s.records_in, s.useful_s, s.true_rate, s.load, s.bottleneck, s.wall_s
('j0.s1', 4, 40000, 1.6, 25000.0, 0.4, False, 1.0)
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from ..protocol import BatchContext, BatchController, Param

__all__ = ["OperatorMetrics", "OperatorSample", "operator_samples"]


@dataclass(frozen=True)
class OperatorSample:
    """One stage of one micro-batch (see the module)."""

    key: str
    job: int
    position: int
    stage_id: int
    status: str
    tasks: int
    records_in: int
    records_out: int
    run_s: float
    cpu_s: float
    useful_s: float
    wall_s: float | None
    true_rate: float | None
    load: float | None
    bottleneck: bool

    def to_dict(self) -> dict:
        """The record's form: rounded, JSON-ready."""
        out = asdict(self)
        for k in ("run_s", "cpu_s", "useful_s", "wall_s", "load"):
            if out[k] is not None:
                out[k] = round(out[k], 4)
        if out["true_rate"] is not None:
            out["true_rate"] = round(out["true_rate"], 1)
        return out


def _time(value: Any) -> float | None:
    """The REST API's ``2026-11-23T10:00:00.000GMT`` (or epoch ms) as epoch seconds."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) / 1000.0
    text = str(value).replace("GMT", "+0000")
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
    except ValueError:
        return None


def operator_samples(stages: Iterable[Mapping[str, Any]], *, budget_s: float | None,
                     busy_share: float = 0.7) -> list[OperatorSample]:
    """The batch's stages (:meth:`lmstream_kit.engine.stages.StageReader.batch_stages` dicts) as samples.

    Skipped stages (their shuffle output reused) ran no task and are left out.
    """
    out = []
    for st in stages:
        tasks = int(st.get("numTasks") or 0)
        if str(st.get("status")) == "SKIPPED" or tasks <= 0:
            continue
        run_s = float(st.get("executorRunTime") or 0) / 1000.0
        waiting = float(st.get("shuffleFetchWaitTime") or 0) / 1000.0 + float(st.get("shuffleWriteTime") or 0) / 1e9
        useful = max(run_s - waiting, 0.0)
        records_in = int(st.get("inputRecords") or 0) + int(st.get("shuffleReadRecords") or 0)
        records_out = int(st.get("outputRecords") or 0) + int(st.get("shuffleWriteRecords") or 0)
        begin, end = _time(st.get("submissionTime")), _time(st.get("completionTime"))
        wall = end - begin if begin is not None and end is not None else None
        rate = records_in / useful if useful > 0 and records_in > 0 else None
        load = useful / tasks / budget_s if budget_s and budget_s > 0 and math.isfinite(budget_s) else None
        out.append(OperatorSample(
            key=f"j{int(st.get('job', 0))}.s{int(st.get('position', 0))}", job=int(st.get("job", 0)),
            position=int(st.get("position", 0)), stage_id=int(st.get("stageId", -1)), status=str(st.get("status")),
            tasks=tasks, records_in=records_in, records_out=records_out, run_s=run_s,
            cpu_s=float(st.get("executorCpuTime") or 0) / 1e9, useful_s=useful, wall_s=wall, true_rate=rate,
            load=load, bottleneck=load is not None and load > busy_share,
        ))
    return out


class OperatorMetrics(BatchController):
    """Adds each batch's stages to its record (``operators``), read from Spark after the batch ran.

    Plug it into a stream (``stream.add_controller(OperatorMetrics())``).  The batch's engine handle
    must offer ``stages(timeout)`` (:class:`lmstream_kit.engine.adapter.EngineBatch` does); in the
    digital twin, or in tests without an engine, it adds nothing.

    Parameters
    ----------
    busy_share : float
        A stage whose one task is busy for more than this share of the batch's budget (its latency
        bound) is labelled a bottleneck.
    """

    prefix = "operators"
    PARAMS = (Param("busy_share", float, low=0, high=1, low_open=True, label="bottleneck above load",
                    doc="a stage busy for more than this share of the batch's budget is a bottleneck"),)
    FIELDS = {
        "operators": "the batch's Spark stages: key (j<job>.s<position>), tasks, records in/out, run, CPU and "
                     "useful seconds, wall seconds, true rate (records per useful task-second), load (one task's "
                     "busy seconds over the batch's bound), bottleneck",
        "operators_s": "seconds spent reading the stages from Spark's status store",
    }

    def __init__(self, *, busy_share: float = 0.7, timeout_s: float = 1.0) -> None:
        super().__init__()
        self.busy_share = self.param("busy_share").validate(busy_share)
        self.timeout_s = float(timeout_s)
        self._engine: Any = None
        self.last: list[OperatorSample] = []

    def before_batch(self, ctx: BatchContext) -> Mapping[str, Any] | None:
        self._engine = ctx.engine if hasattr(ctx.engine, "stages") else None
        return None

    def after_batch(self, record: Any) -> Mapping[str, Any] | None:
        engine, self._engine = self._engine, None
        if engine is None:
            return None
        t0 = time.perf_counter()
        try:
            stages = engine.stages(timeout=self.timeout_s)
        except Exception:  # noqa: BLE001  (metrics must never fail a batch)
            return None
        budget = record.bound_s if record.bound_s else record.processing_s
        self.last = operator_samples(stages, budget_s=budget, busy_share=self.busy_share)
        return {"operators": [s.to_dict() for s in self.last], "operators_s": round(time.perf_counter() - t0, 4)}
