"""A calibrated stage-level simulator of a micro-batch stream, for parallelism up to 64 (simulated numbers).

Every number this module produces is **simulated**, from per-stage costs measured on real Spark
(:func:`load_calibration`; ``benchmarks/calibrate_stages.py`` makes them); summaries say so
(``"simulated": True``) and name the calibration.  Batches come out as the stage dicts Spark's
status store gives (:mod:`lmstream_kit.engine.stages`), so :func:`~.operators.operator_samples` and
any tuner read simulated and real batches the same way.  The model and its limits:
``docs/streamtune.md``, "The simulator (simulated numbers)".

>>> dag = DagSpec("toy", (StageSpec("read", 1e-5, 0.01, 0.05, 0.5, "input"),
...                       StageSpec("agg", 2e-5, 0.02, 0.05, 0.0, "state")))
>>> [(s["numTasks"], s["executorRunTime"], s["completionTime"] - s["submissionTime"])
...  for s in simulate_batch(dag, {"read": 4, "agg": 2}, rows=40_000, cores=2)]
[(4, 440, 270), (2, 440, 270)]
>>> oracle_parallelism(dag, rate=100_000, cores=4, bound_s=2.0)  # a batch a second, processed in one
{'read': 3, 'agg': 2}
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..exceptions import ConfigError, UnknownNameError

__all__ = [
    "CALIBRATION_FORMAT",
    "DAGS",
    "DEFAULT_CALIBRATION",
    "DEFAULT_CALIBRATION_NAME",
    "FREE_KNOBS",
    "KNOBS",
    "MAX_PARALLELISM",
    "Calibration",
    "DagSpec",
    "RateSchedule",
    "StageSpec",
    "StageTime",
    "StreamRun",
    "Tuner",
    "batch_seconds",
    "build_dags",
    "diurnal",
    "fit_calibration",
    "fit_stage_costs",
    "get_dag",
    "load_calibration",
    "oracle_parallelism",
    "resolve_parallelism",
    "simulate_batch",
    "simulate_stream",
    "stage_time",
    "steady",
    "step",
]

#: the parallelism knobs of a stage: free per batch ("input", "shuffle"), a restart ("state"), none ("fixed")
KNOBS = ("input", "shuffle", "state", "fixed")
#: knobs that change between two batches with no restart
FREE_KNOBS = frozenset({"input", "shuffle"})
#: the largest parallelism per stage the oracle searches by default
MAX_PARALLELISM = 64
#: the ``format`` field of a calibration file
CALIBRATION_FORMAT = "lmstream_kit.stage-calibration/1"
#: the shipped calibration (measured on this project's 2-core machine; see docs/streamtune.md)
DEFAULT_CALIBRATION_NAME = "stage-calibration-vm-20261123.json"
DEFAULT_CALIBRATION = resources.files("lmstream_kit") / "resources" / DEFAULT_CALIBRATION_NAME
#: the least spread of a stage's records in (max - min, and max >= 2 min) that fits a per-record cost
_MIN_RECORD_SPREAD = 1000
#: a stage that starts this long before an earlier one ends counts as overlapping it (the store's ms)
_OVERLAP_S = 0.002


# --------------------------------------------------------------------------------------------- model

@dataclass(frozen=True)
class StageSpec:
    """One Spark stage of a micro-batch: its costs, what it does to its records and its knob.

    Parameters
    ----------
    name : str
        Unique in its DAG.
    per_record_s, per_task_s, per_batch_s : float
        Seconds per record in (spread over the tasks), per task (paid by every task: state-store
        load and commit, task launch), and per stage (scheduling; paid once, not per task).
    selectivity : float
        Records out per record in.
    knob : str
        What sets its parallelism (:data:`KNOBS`): ``"input"`` (the source's partitions, free per
        batch), ``"shuffle"`` (stateless shuffle partitions, free per batch), ``"state"`` (state-store
        partitions: a restart), ``"fixed"`` (``fixed_tasks``, never changed).
    skew : float
        The largest task gets ``1 + skew`` times the mean task's records (at most all of them).
    inputs : tuple of str, optional
        The stages it reads (their records out add up).  ``None``: the previous stage of its job, or
        the batch's rows for a job's first stage; ``()``: the batch's rows.
    groups : int, optional
        A partial aggregation's distinct keys: each task writes at most this many records
        (:meth:`records_out`).
    kind : str
        What it does (``scan``, ``partial_agg``, ``state_agg``, ``join``, ``sort``): documentation,
        and which calibrated stage lends its costs to a Nexmark-style DAG.
    cpu_share : float
        CPU time over run time (``executorCpuTime``).
    fixed_tasks : int
        The tasks of a ``"fixed"`` stage.
    """

    name: str
    per_record_s: float
    per_task_s: float
    per_batch_s: float
    selectivity: float
    knob: str
    skew: float = 0.0
    inputs: tuple[str, ...] | None = None
    groups: int | None = None
    kind: str = ""
    cpu_share: float = 1.0
    fixed_tasks: int = 1

    def __post_init__(self) -> None:
        if self.knob not in KNOBS:
            raise ConfigError(f"stage {self.name!r}: knob must be one of {', '.join(KNOBS)}, got {self.knob!r}")
        for attr in ("per_record_s", "per_task_s", "per_batch_s", "selectivity", "skew", "cpu_share"):
            value = getattr(self, attr)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"stage {self.name!r}: {attr} must be a finite number >= 0, got {value!r}")
        if self.groups is not None and self.groups < 1:
            raise ConfigError(f"stage {self.name!r}: groups must be >= 1, got {self.groups}")
        if self.fixed_tasks < 1:
            raise ConfigError(f"stage {self.name!r}: fixed_tasks must be >= 1, got {self.fixed_tasks}")
        if self.inputs is not None:
            object.__setattr__(self, "inputs", tuple(self.inputs))

    def records_out(self, records_in: int, parallelism: int) -> int:
        """Records written from ``records_in`` at this parallelism.

        ``records_in * selectivity``; with ``groups`` (a partial aggregation: each task writes one
        record per distinct key it saw, keys drawn from ``groups``) each task writes
        ``groups * (1 - exp(-selectivity * n / groups))`` of its ``n`` records: about
        ``selectivity * n`` for few records, at most ``groups``.

        >>> StageSpec("agg", 0, 0, 0, 1.0, "input", groups=100).records_out(10_000, 4)
        400
        """
        if self.groups is None:
            return int(round(records_in * self.selectivity))
        per_task = records_in / parallelism
        return int(round(parallelism * self.groups * -math.expm1(-self.selectivity * per_task / self.groups)))


@dataclass(frozen=True)
class DagSpec:
    """A micro-batch's stages, upstream first, in one or more jobs (each a chain unless ``inputs`` say).

    Parameters
    ----------
    name : str
    stages : sequence of StageSpec
    jobs : sequence of sequences of stage names, optional
        The batch's jobs in the order Spark runs them; default one job of all stages in order.  A
        stage's key is ``j<job>.s<position>`` (:mod:`~lmstream_kit.tune.operators`).
    overhead_s : float
        The engine's own seconds per batch (planning, offsets and commit logs), outside the stages.
    noise : float
        The standard deviation of the log of a stage's time over the model's (calibrated), used when
        a seed is given.
    calibration : str
        Where the costs come from (a calibration file, or ``"hand-set"``).
    description : str
    """

    name: str
    stages: tuple[StageSpec, ...]
    jobs: tuple[tuple[str, ...], ...] | None = None
    overhead_s: float = 0.0
    noise: float = 0.0
    calibration: str = "hand-set"
    description: str = ""
    _index: dict = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        stages = tuple(self.stages)
        object.__setattr__(self, "stages", stages)
        names = [s.name for s in stages]
        if len(set(names)) != len(names) or not names:
            raise ConfigError(f"DAG {self.name!r}: stage names must be unique and non-empty, got {names}")
        jobs = (tuple(names),) if self.jobs is None else tuple(tuple(j) for j in self.jobs)
        flat = [n for j in jobs for n in j]
        if sorted(flat) != sorted(names) or any(not j for j in jobs):
            raise ConfigError(f"DAG {self.name!r}: jobs must hold every stage once, got {jobs}")
        object.__setattr__(self, "jobs", jobs)
        by_name = {s.name: s for s in stages}
        order, keys, upstream = [], {}, {}
        for j, job in enumerate(jobs):
            for pos, n in enumerate(job):
                spec = by_name[n]
                ups = spec.inputs if spec.inputs is not None else ((job[pos - 1],) if pos else ())
                for u in ups:
                    if u not in keys:
                        raise ConfigError(f"DAG {self.name!r}: stage {n!r} reads {u!r}, which is not an earlier stage")
                order.append(spec)
                keys[n] = f"j{j}.s{pos}"
                upstream[n] = ups
        consumers = {n: tuple(m for m in flat if n in upstream[m]) for n in flat}
        object.__setattr__(self, "_index", {"order": tuple(order), "keys": keys, "upstream": upstream,
                                            "consumers": consumers, "by_name": by_name,
                                            "by_key": {k: n for n, k in keys.items()}})

    @property
    def order(self) -> tuple[StageSpec, ...]:
        """The stages in the order a batch runs them (jobs in order, each upstream first)."""
        return self._index["order"]

    @property
    def keys(self) -> dict[str, str]:
        """Stage name -> its key ``j<job>.s<position>``."""
        return dict(self._index["keys"])

    def stage(self, name_or_key: str) -> StageSpec:
        """The stage named ``name_or_key`` (a name or a key)."""
        idx = self._index
        name = idx["by_key"].get(name_or_key, name_or_key)
        if name not in idx["by_name"]:
            raise UnknownNameError(f"DAG {self.name!r} has no stage {name_or_key!r}; "
                                   f"known: {', '.join(f'{n} ({k})' for n, k in idx['keys'].items())}")
        return idx["by_name"][name]

    def upstream(self, name: str) -> tuple[str, ...]:
        """The stages ``name`` reads (empty: it reads the batch's rows)."""
        return self._index["upstream"][self.stage(name).name]

    def consumers(self, name: str) -> tuple[str, ...]:
        """The stages that read ``name``'s records out."""
        return self._index["consumers"][self.stage(name).name]

    def knobs(self) -> dict[str, tuple[str, ...]]:
        """Knob -> the stages it sets (on Spark a knob is one value for all of them: see the docs)."""
        out: dict[str, list[str]] = {}
        for s in self.order:
            out.setdefault(s.knob, []).append(s.name)
        return {k: tuple(v) for k, v in out.items()}

    def stage_knobs(self) -> dict[str, str]:
        """Stage key -> its knob, for every stage a tuner may set (``ParallelismTuner(knobs=...)``).

        >>> DagSpec("d", (StageSpec("a", 0, 0, 0, 1, "input"), StageSpec("b", 0, 0, 0, 1, "state"),
        ...               StageSpec("c", 0, 0, 0, 1, "fixed"))).stage_knobs()
        {'j0.s0': 'input', 'j0.s1': 'state'}
        """
        return {self._index["keys"][s.name]: s.knob for s in self.order if s.knob != "fixed"}

    def records_in(self, parallelism: Mapping[str, int], rows: int) -> dict[str, int]:
        """Each stage's records in for a batch of ``rows`` at the given (resolved) parallelism."""
        out, records = {}, {}
        for s in self.order:
            ups = self._index["upstream"][s.name]
            r = int(rows) if not ups else sum(out[u] for u in ups)
            records[s.name] = r
            out[s.name] = s.records_out(r, parallelism[s.name])
        return records

    def with_costs(self, **changes: Any) -> DagSpec:
        """A copy with DagSpec fields changed (``overhead_s``, ``noise``, ``stages``...)."""
        return replace(self, **changes)


class StageTime(NamedTuple):
    """One stage's deterministic times: the mean and largest task, the stage's wall and summed run time."""

    task_s: float
    max_task_s: float
    waves: int
    wall_s: float
    run_s: float


def stage_time(spec: StageSpec, parallelism: int, records_in: int, cores: int) -> StageTime:
    """The model: a task takes ``per_task_s + per_record_s * records_in / p`` (the largest one
    ``1 + skew`` times the records, at most all of them); the tasks run in ``ceil(p / cores)`` waves;
    the stage takes ``per_batch_s`` plus its waves, the last one as long as the largest task.

    >>> stage_time(StageSpec("s", 1e-5, 0.01, 0.05, 1.0, "input", skew=0.5), 4, 40_000, cores=2)
    StageTime(task_s=0.11, max_task_s=0.16, waves=2, wall_s=0.32, run_s=0.44)
    """
    p = int(parallelism)
    if p < 1 or cores < 1:
        raise ConfigError(f"stage {spec.name!r}: parallelism and cores must be >= 1, got {p} and {cores}")
    share = records_in / p
    task = spec.per_task_s + spec.per_record_s * share
    largest = spec.per_task_s + spec.per_record_s * min(float(records_in), share * (1.0 + spec.skew))
    waves = -(-p // int(cores))
    wall = spec.per_batch_s + (waves - 1) * task + largest
    run = p * spec.per_task_s + spec.per_record_s * records_in
    return StageTime(round(task, 12), round(largest, 12), waves, round(wall, 12), round(run, 12))


def resolve_parallelism(dag: DagSpec, parallelism: Mapping[str, int],
                        base: Mapping[str, int] | None = None) -> dict[str, int]:
    """Stage name -> parallelism, from keys that are stage names, stage keys (``j0.s1``) or knob names.

    A knob name sets every stage of that knob; a stage's name or key overrides it.  Stages not
    named take ``base`` (a resolved mapping); without it, every stage must be named.  A ``"fixed"``
    stage always runs its ``fixed_tasks`` (naming another value raises ConfigError).
    """
    out = dict(base) if base is not None else {}
    knob_values, stage_values = {}, {}
    for k, v in (parallelism or {}).items():
        if k in KNOBS and k not in dag._index["by_name"]:
            knob_values[k] = v
        else:
            stage_values[dag.stage(k).name] = v
    for s in dag.order:
        if s.knob in knob_values:
            out[s.name] = knob_values[s.knob]
        if s.name in stage_values:
            out[s.name] = stage_values[s.name]
        if s.knob == "fixed":
            if out.get(s.name, s.fixed_tasks) != s.fixed_tasks:
                raise ConfigError(f"stage {s.name!r} of {dag.name!r} has a fixed parallelism of {s.fixed_tasks}, "
                                  f"not {out[s.name]}")
            out[s.name] = s.fixed_tasks
        if s.name not in out:
            raise ConfigError(f"no parallelism for stage {s.name!r} ({dag.keys[s.name]}) of {dag.name!r}")
        value = out[s.name]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigError(f"stage {s.name!r}: parallelism must be an int >= 1, got {value!r}")
        out[s.name] = int(value)
    return {s.name: out[s.name] for s in dag.order}


def _rng(seed: Any) -> np.random.Generator | None:
    if seed is None:
        return None
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _run_batch(dag: DagSpec, p: Mapping[str, int], rows: int, cores: int, rng: np.random.Generator | None,
               noise: float, start_s: float, first_stage_id: int) -> tuple[list[dict], float]:
    """The batch's stage dicts and its processing seconds (overhead first, then the stages in turn)."""
    records = dag.records_in(p, rows)
    clock = start_s + dag.overhead_s
    stages = []
    idx = dag._index
    for i, s in enumerate(dag.order):
        r_in = records[s.name]
        t = stage_time(s, p[s.name], r_in, cores)
        factor = float(rng.lognormal(-noise * noise / 2, noise)) if rng is not None and noise > 0 else 1.0
        wall = s.per_batch_s + (t.wall_s - s.per_batch_s) * factor
        run = t.run_s * factor
        r_out = s.records_out(r_in, p[s.name])
        reads_batch = not idx["upstream"][s.name]
        writes_shuffle = bool(idx["consumers"][s.name])
        job, pos = (int(x[1:]) for x in idx["keys"][s.name].split("."))
        run_ms = int(round(run * 1000))
        stages.append({
            "job": job, "jobId": job, "position": pos, "stageId": first_stage_id + i, "attemptId": 0,
            "status": "COMPLETE", "numTasks": p[s.name], "numCompleteTasks": p[s.name], "numFailedTasks": 0,
            "executorRunTime": run_ms, "executorCpuTime": int(round(run_ms * 1e6 * s.cpu_share)),
            "inputRecords": r_in if reads_batch else 0, "shuffleReadRecords": 0 if reads_batch else r_in,
            "outputRecords": 0 if writes_shuffle else r_out, "shuffleWriteRecords": r_out if writes_shuffle else 0,
            "shuffleFetchWaitTime": 0, "shuffleWriteTime": 0,
            "submissionTime": int(round(clock * 1000)), "completionTime": int(round((clock + wall) * 1000)),
            "name": s.name,
        })
        clock += wall
    return stages, clock - start_s


def simulate_batch(dag: DagSpec, parallelism: Mapping[str, int], rows: int, cores: int, *,
                   seed: Any = None, noise: float | None = None, start_s: float = 0.0,
                   first_stage_id: int = 0) -> list[dict]:
    """One simulated micro-batch of ``rows`` rows as Spark's stage dicts (simulated numbers).

    The dicts have :mod:`lmstream_kit.engine.stages`'s field names (times as virtual epoch ms from
    ``start_s``).  Without ``seed`` the model is exact; with one (an int or a numpy Generator), each
    stage's time is multiplied by a lognormal factor of mean 1 and log-sd ``noise`` (default the DAG's
    calibrated ``noise``).  The stages run one after the other, after the DAG's ``overhead_s``.
    """
    p = resolve_parallelism(dag, parallelism)
    stages, _ = _run_batch(dag, p, int(rows), int(cores), _rng(seed), dag.noise if noise is None else noise,
                           start_s, first_stage_id)
    return stages


def batch_seconds(dag: DagSpec, parallelism: Mapping[str, int], rows: int, cores: int) -> float:
    """The model's processing seconds of a batch (no noise): ``overhead_s`` plus the stages' walls."""
    p = resolve_parallelism(dag, parallelism)
    records = dag.records_in(p, int(rows))
    return dag.overhead_s + sum(stage_time(s, p[s.name], records[s.name], cores).wall_s for s in dag.order)


# ------------------------------------------------------------------------------------ rate schedules

class RateSchedule:
    """Offered rows per second over virtual time: ``rate(t)`` and the rows arrived by ``t``."""

    def rate(self, t: float) -> float:
        raise NotImplementedError

    def cumulative(self, t: float) -> float:
        """Rows arrived in ``[0, t]`` (a real number)."""
        raise NotImplementedError

    def rows(self, t0: float, t1: float) -> int:
        """Whole rows arrived in ``(t0, t1]`` (cumulative counts rounded down, so nothing drifts)."""
        return int(math.floor(self.cumulative(t1) + 1e-9)) - int(math.floor(self.cumulative(t0) + 1e-9))

    def describe(self) -> dict:
        raise NotImplementedError

    def __call__(self, t: float) -> float:
        return self.rate(t)


@dataclass(frozen=True)
class _Steady(RateSchedule):
    value: float

    def rate(self, t: float) -> float:
        return self.value

    def cumulative(self, t: float) -> float:
        return self.value * max(t, 0.0)

    def describe(self) -> dict:
        return {"schedule": "steady", "rate": self.value}


@dataclass(frozen=True)
class _Step(RateSchedule):
    base: float
    factor: float
    up_at: float
    down_at: float

    def rate(self, t: float) -> float:
        return self.base * (self.factor if self.up_at <= t < self.down_at else 1.0)

    def cumulative(self, t: float) -> float:
        t = max(t, 0.0)
        high = max(0.0, min(t, self.down_at) - self.up_at)
        return self.base * t + self.base * (self.factor - 1.0) * high

    def describe(self) -> dict:
        return {"schedule": "step", "rate": self.base, "factor": self.factor, "up_at": self.up_at,
                "down_at": self.down_at}


@dataclass(frozen=True)
class _Diurnal(RateSchedule):
    mean: float
    amplitude: float
    period_s: float

    def rate(self, t: float) -> float:
        return self.mean - self.amplitude * math.cos(2 * math.pi * t / self.period_s)

    def cumulative(self, t: float) -> float:
        t = max(t, 0.0)
        return self.mean * t - self.amplitude * self.period_s / (2 * math.pi) * math.sin(2 * math.pi * t / self.period_s)

    def describe(self) -> dict:
        return {"schedule": "diurnal", "mean": self.mean, "amplitude": self.amplitude, "period_s": self.period_s}


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def steady(rate: float) -> RateSchedule:
    """``rate`` rows/s throughout.

    >>> s = steady(1000); s(5.0), s.rows(0.0, 2.5)
    (1000.0, 2500)
    """
    return _Steady(_positive("rate", rate))


def step(rate: float, factor: float = 3.0, *, up_at: float = 60.0, down_at: float = 120.0) -> RateSchedule:
    """``rate`` rows/s, ``factor`` times that from ``up_at`` until ``down_at``, then ``rate`` again.

    >>> s = step(1000, up_at=10, down_at=20); s(9.9), s(10), s(20), s.rows(0, 30)
    (1000.0, 3000.0, 1000.0, 50000)
    """
    _positive("rate", rate), _positive("factor", factor)
    if not 0 <= up_at <= down_at:
        raise ConfigError(f"step: need 0 <= up_at <= down_at, got {up_at} and {down_at}")
    return _Step(float(rate), float(factor), float(up_at), float(down_at))


def diurnal(mean: float, amplitude: float, period_s: float) -> RateSchedule:
    """A day in ``period_s``: ``mean - amplitude * cos(2 pi t / period_s)`` rows/s (the trough at 0).

    >>> d = diurnal(1000, 500, 100); d(0), d(50), d.rows(0, 100)
    (500.0, 1500.0, 100000)
    """
    _positive("mean", mean), _positive("period_s", period_s)
    if not 0 <= amplitude <= mean:
        raise ConfigError(f"diurnal: amplitude must be in [0, mean], got {amplitude}")
    return _Diurnal(float(mean), float(amplitude), float(period_s))


# ----------------------------------------------------------------------------------------- oracle

def _minplus(walls: Sequence[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """``best[T]``: the least summed time of the stages with parallelisms adding up to ``T``, and the
    choices to recover them (``choice[k][T]``: stage k's parallelism at cumulative total ``T``)."""
    best = np.zeros(1)
    choices = []
    for w in walls:
        n = len(best) + len(w)
        new = np.full(n, np.inf)
        pick = np.zeros(n, dtype=np.int64)
        for p in range(1, len(w) + 1):
            cand = best + w[p - 1]
            seg = new[p:p + len(best)]
            better = cand < seg
            seg[better] = cand[better]
            pick[p:p + len(best)][better] = p
        best = new
        choices.append(pick)
    return best, choices


def _backtrack(choices: list[np.ndarray], total: int) -> list[int]:
    out = []
    for pick in reversed(choices):
        p = int(pick[total])
        out.append(p)
        total -= p
    return out[::-1]


def oracle_parallelism(dag: DagSpec, rate: float, cores: int, bound_s: float, *,
                       batch_interval_s: float | None = None, limit: int = MAX_PARALLELISM) -> dict[str, int] | None:
    """The smallest total parallelism (at most ``limit`` per stage) that keeps the bound at a steady ``rate``.

    In steady state a batch holds ``rate * batch_interval_s`` rows (default interval: half the bound)
    and its latency is the interval plus its processing, so it must process in
    ``min(interval, bound_s - interval)`` seconds (the model without noise).  Exact: every
    parallelism vector is covered.  Stage times add, so the stages whose records do not depend on
    another stage's parallelism are combined by a min-plus dynamic programme over the total
    parallelism (each stage's time is computed once per parallelism); only a partial aggregation
    that feeds others (its output grows with its parallelism, ``groups``) is enumerated, so the
    search costs ``limit ** k`` programmes for ``k`` such stages (at most one in the shipped DAGs).
    Ties go to the faster vector.  ``None`` when no vector meets the bound.
    """
    interval = bound_s / 2.0 if batch_interval_s is None else float(batch_interval_s)
    rows = int(round(rate * interval))
    budget = min(interval, bound_s - interval) - dag.overhead_s
    if budget <= 0:
        return None
    idx = dag._index
    order = dag.order
    fixed = {s.name: s.fixed_tasks for s in order if s.knob == "fixed"}
    coupled = [s.name for s in order if s.knob != "fixed" and s.groups is not None and idx["consumers"][s.name]]
    # stages whose records in depend on a coupled stage's parallelism
    downstream: set[str] = set()
    for s in order:
        if any(u in coupled or u in downstream for u in idx["upstream"][s.name]):
            downstream.add(s.name)
    free = [s for s in order if s.knob != "fixed" and s.name not in coupled]
    indep = [s for s in free if s.name not in downstream]
    dep = [s for s in free if s.name in downstream]
    ps = range(1, limit + 1)

    def walls(s: StageSpec, records: Mapping[str, int]) -> np.ndarray:
        return np.array([stage_time(s, p, records[s.name], cores).wall_s for p in ps])

    probe = {**{n: 1 for n in idx["by_name"]}, **fixed}
    base_records = dag.records_in(probe, rows)  # right for every stage not downstream of a coupled one
    ind_best, ind_choices = _minplus([walls(s, base_records) for s in indep])
    # prefix minimum: the least time with a total of at most T (the argmin is T itself when first reached)
    ind_prefix = np.minimum.accumulate(ind_best)
    best: tuple | None = None  # (total, seconds, vector)
    for combo in itertools.product(ps, repeat=len(coupled)):
        if best is not None and sum(combo) + len(indep) + len(dep) + sum(fixed.values()) > best[0]:
            continue  # every other stage takes at least 1
        p = {**probe, **dict(zip(coupled, combo))}
        records = dag.records_in(p, rows)
        spent = sum(stage_time(dag.stage(n), p[n], records[n], cores).wall_s for n in (*coupled, *fixed))
        dep_best, dep_choices = _minplus([walls(s, records) for s in dep])
        left = budget - spent - dep_best + 1e-12  # for each total of the dependent stages
        for t_dep in np.flatnonzero(np.isfinite(dep_best) & (left >= ind_prefix[-1])):
            t_ind = int(np.argmax(ind_prefix <= left[t_dep]))
            total = int(t_dep) + t_ind + sum(combo) + sum(fixed.values())
            seconds = spent + float(dep_best[t_dep]) + float(ind_best[t_ind])
            if best is None or (total, seconds) < best[:2]:
                vec = {**fixed, **dict(zip(coupled, combo)),
                       **dict(zip((s.name for s in dep), _backtrack(dep_choices, int(t_dep)))),
                       **dict(zip((s.name for s in indep), _backtrack(ind_choices, t_ind)))}
                best = (total, seconds, vec)
    if best is None:
        return None
    return {s.name: best[2][s.name] for s in order}


# ----------------------------------------------------------------------------------------- stream

class StreamRun(NamedTuple):
    """A simulated stream: one dict per batch and the summary (both say ``"simulated": True``)."""

    batches: list[dict]
    summary: dict


#: a tuner: ``tuner(stages, batch)`` -> new parallelism (stage names, keys or knobs) or None
Tuner = Callable[[list, dict], "Mapping[str, int] | None"]


def simulate_stream(dag: DagSpec, rate_schedule: RateSchedule, tuner: Tuner | None = None, *, cores: int,
                    bound_s: float, start_parallelism: Mapping[str, int], restart_s: float,
                    duration_s: float, batch_interval_s: float | None = None, seed: Any = None,
                    oracle_limit: int = MAX_PARALLELISM) -> StreamRun:
    """A micro-batch stream on a virtual clock, tuned after every batch by ``tuner`` (simulated numbers).

    Rows arrive at ``rate_schedule``; a processing-time trigger of ``batch_interval_s`` (default half
    of ``bound_s``) starts each batch on the interval's grid, or at once after a batch that ran late
    (as Spark's trigger does), and the batch takes every row pending.  After each batch,
    ``tuner(stages, batch)`` gets the batch's stage dicts (:func:`simulate_batch`'s) and a dict with
    ``batch_id, t, rows, bound_s, batch_interval_s, processing_s, max_latency_s, within_bound,
    backlog_rows, parallelism``; it returns new parallelism (names, keys or knobs; see
    :func:`resolve_parallelism`) or ``None``.  A change is in force from the next batch; one to a
    ``"state"`` knob stops the stream for ``restart_s`` first (rows keep arriving).

    Per batch: ``batch_id, t`` (start), ``end, rows, rate`` (offered, at ``t``), ``processing_s,
    max_latency_s, within_bound, backlog_rows`` (arrived while it ran), ``parallelism,
    total_parallelism, reconfigured, restart`` (its parallelism is new / came with a restart),
    ``needed_total`` (the oracle's total at ``rate``), ``provisioning`` (``"under"``: the model's
    batch of ``rate * interval`` rows misses the oracle's time budget; ``"over"``: it meets it with
    more than the oracle's total; ``"ok"``) and ``tuner_s`` (the tuner's real seconds, not simulated).

    The summary (see the docs for each definition): ``simulated, calibration, dag, schedule, cores,
    bound_s, batch_interval_s, restart_s, duration_s, batches, reconfigurations,
    free_reconfigurations, restarts, restart_downtime_s, violation_s, over_provisioned_s,
    under_provisioned_s, converge_s, final_parallelism, final_total_parallelism,
    oracle_parallelism, oracle_total_parallelism, max_latency_s, final_backlog_rows, tuner_s_mean``.
    """
    interval = bound_s / 2.0 if batch_interval_s is None else float(batch_interval_s)
    _positive("bound_s", bound_s), _positive("batch_interval_s", interval), _positive("duration_s", duration_s)
    if restart_s < 0:
        raise ConfigError(f"restart_s must be >= 0, got {restart_s}")
    rng = _rng(seed)
    budget = min(interval, bound_s - interval)
    current = resolve_parallelism(dag, start_parallelism)
    oracle_cache: dict[int, dict | None] = {}

    def oracle_at(rate: float) -> dict | None:
        key = int(round(rate * interval))
        if key not in oracle_cache:
            oracle_cache[key] = oracle_parallelism(dag, rate, cores, bound_s, batch_interval_s=interval,
                                                   limit=oracle_limit)
        return oracle_cache[key]

    batches: list[dict] = []
    prev_cut, start, stage_id = 0.0, interval, 0
    reconfigured, restarted = False, False
    restart_downtime = 0.0
    while start < duration_s:
        rows = rate_schedule.rows(prev_cut, start)
        if rows <= 0:
            prev_cut, start = start, (math.floor(start / interval + 1e-9) + 1) * interval
            continue
        stages, processing = _run_batch(dag, current, rows, cores, rng, dag.noise, start, stage_id)
        stage_id += len(stages)
        end = start + processing
        latency = end - prev_cut
        rate = rate_schedule.rate(start)
        needed = oracle_at(rate)
        model = batch_seconds(dag, current, int(round(rate * interval)), cores)
        total = sum(current.values())
        if model > budget + 1e-12:
            provisioning = "under"
        elif needed is not None and total > sum(needed.values()):
            provisioning = "over"
        else:
            provisioning = "ok"
        view = {"batch_id": len(batches), "t": start, "rows": rows, "bound_s": bound_s, "batch_interval_s": interval,
                "processing_s": processing, "max_latency_s": latency, "within_bound": latency <= bound_s + 1e-9,
                "backlog_rows": rate_schedule.rows(start, end), "parallelism": dict(current)}
        t0 = time.perf_counter()
        proposal = tuner(stages, dict(view)) if tuner is not None else None
        tuner_s = time.perf_counter() - t0
        batches.append({**view, "end": end, "rate": rate, "total_parallelism": total,
                        "reconfigured": reconfigured, "restart": restarted,
                        "needed_total": None if needed is None else sum(needed.values()),
                        "provisioning": provisioning, "tuner_s": tuner_s, "simulated": True})
        new = resolve_parallelism(dag, proposal, base=current) if proposal else current
        changed = [n for n in current if new[n] != current[n]]
        reconfigured = bool(changed)
        restarted = any(dag.stage(n).knob not in FREE_KNOBS for n in changed)
        current = new
        grid = (math.floor(start / interval + 1e-9) + 1) * interval
        prev_cut = start
        if restarted:
            restart_downtime += restart_s
            start = end + restart_s  # the restarted query runs its first batch at once
        else:
            start = max(end, grid)
    summary = _summarize(dag, rate_schedule, batches, cores=cores, bound_s=bound_s, interval=interval,
                         restart_s=restart_s, duration_s=duration_s, downtime=restart_downtime,
                         final=current, oracle=oracle_at(rate_schedule.rate(duration_s)))
    return StreamRun(batches, summary)


def _summarize(dag, schedule, batches, *, cores, bound_s, interval, restart_s, duration_s, downtime, final,
               oracle) -> dict:
    violation = over = under = 0.0
    prev_end = 0.0
    for i, b in enumerate(batches):
        if not b["within_bound"]:
            violation += b["end"] - prev_end  # the outputs of (prev_end, end] came late
        prev_end = b["end"]
        span = (batches[i + 1]["t"] if i + 1 < len(batches) else max(duration_s, b["end"])) - b["t"]
        if b["provisioning"] == "over":
            over += span
        elif b["provisioning"] == "under":
            under += span
    changes = [b for b in batches if b["reconfigured"]]
    restarts = sum(1 for b in changes if b["restart"])
    return {
        "simulated": True, "calibration": dag.calibration, "dag": dag.name, "schedule": schedule.describe(),
        "cores": cores, "bound_s": bound_s, "batch_interval_s": interval, "restart_s": restart_s,
        "duration_s": duration_s, "batches": len(batches),
        "reconfigurations": len(changes), "free_reconfigurations": len(changes) - restarts, "restarts": restarts,
        "restart_downtime_s": round(downtime, 6), "violation_s": round(violation, 6),
        "over_provisioned_s": round(over, 6), "under_provisioned_s": round(under, 6),
        "converge_s": round(changes[-1]["t"], 6) if changes else 0.0,
        "final_parallelism": dict(final), "final_total_parallelism": sum(final.values()),
        "oracle_parallelism": oracle, "oracle_total_parallelism": None if oracle is None else sum(oracle.values()),
        "max_latency_s": max((b["max_latency_s"] for b in batches), default=None),
        "final_backlog_rows": batches[-1]["backlog_rows"] if batches else 0,
        "tuner_s_mean": float(np.mean([b["tuner_s"] for b in batches])) if batches else 0.0,
    }


# ------------------------------------------------------------------------------------ calibration

def _nnls2(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares with one or two columns (exact: the unconstrained fit, else the
    better one-column fit, else zero)."""
    candidates = []
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    if np.all(coef >= 0):
        candidates.append(coef)
    for j in range(x.shape[1]):
        col = x[:, j]
        denom = float(col @ col)
        c = np.zeros(x.shape[1])
        c[j] = max(0.0, float(col @ y) / denom) if denom > 0 else 0.0
        candidates.append(c)
    candidates.append(np.zeros(x.shape[1]))
    return min(candidates, key=lambda c: float(np.sum((x @ c - y) ** 2)))


def _fit_groups(n: np.ndarray, out: np.ndarray, ratio: float) -> tuple[int, float] | None:
    """``(groups, keys per record)`` of ``out = groups * (1 - exp(-k * n / groups))`` per task, by a
    grid search, where it beats ``out = ratio * n`` by half the squared error; else ``None``."""
    top = float(out.max()) if len(out) else 0.0
    if top < 1:
        return None
    ks = top * np.logspace(0, 2, 121)[:, None, None]
    sel = np.logspace(-3, 2, 151)[None, :, None]
    sse = np.sum((ks * -np.expm1(-sel * n[None, None, :] / ks) - out[None, None, :]) ** 2, axis=-1)
    i, j = np.unravel_index(int(np.argmin(sse)), sse.shape)
    if sse[i, j] >= 0.5 * float(np.sum((ratio * n - out) ** 2)):
        return None
    return int(round(float(ks[i, 0, 0]))), float(sel[0, j, 0])


def fit_stage_costs(samples: Iterable[Mapping[str, Any]], cores: int) -> dict:
    """Fit one stage's costs from its samples (OperatorSample dicts; ``overlapped``: it shared the
    cores with another stage, so its wall time says nothing of its own ``per_batch_s``).

    ``useful_s = per_task_s * tasks + per_record_s * records_in`` by non-negative least squares;
    ``per_batch_s`` the median of the wall time less the waves of mean tasks (``None`` when every
    sample overlapped); the selectivity (records out over in, ``out_ratio``), or, where each task's
    records out level off as a partial aggregation's distinct keys do (:meth:`StageSpec.records_out`
    explains them with less than half the squared error), ``groups`` and the keys per record as the
    selectivity; and the CPU share.  Records in that hardly vary (less than 1,000 apart or 2x) fit a
    per-task cost only (``per_record_fitted`` False).

    >>> fit = fit_stage_costs([{"tasks": t, "records_in": r, "records_out": r // 10, "useful_s": 0.01 * t + 1e-5 * r,
    ...                         "run_s": 0.01 * t + 1e-5 * r, "cpu_s": 0.0, "wall_s": 0.05 + (0.01 * t + 1e-5 * r) / t}
    ...                        for t, r in ((1, 1000), (2, 1000), (1, 5000), (2, 9000))], cores=2)
    >>> round(fit["per_task_s"], 6), round(fit["per_record_s"], 9), round(fit["per_batch_s"], 6), fit["selectivity"]
    (0.01, 1e-05, 0.05, 0.1)
    """
    rows = list(samples)
    if not rows:
        raise ConfigError("no samples to fit")
    tasks = np.array([float(s["tasks"]) for s in rows])
    rin = np.array([float(s["records_in"]) for s in rows])
    rout = np.array([float(s["records_out"]) for s in rows])
    useful = np.array([float(s["useful_s"]) for s in rows])
    run = np.array([float(s.get("run_s") or s["useful_s"]) for s in rows])
    # records in that barely vary cannot tell a per-record cost from noise: then per task only
    identified = rin.max() - rin.min() >= _MIN_RECORD_SPREAD and rin.max() >= 2 * rin.min()
    if identified:
        per_task, per_record = _nnls2(np.column_stack([tasks, rin]), useful)
    else:
        per_task, per_record = _nnls2(tasks[:, None], useful)[0], 0.0
    pred = per_task * tasks + per_record * rin
    res = pred - useful
    scale = float(np.mean(useful)) if np.mean(useful) > 0 else 1.0
    positive = useful > 0
    gaps = [float(s["wall_s"]) - (-(-int(s["tasks"]) // cores)) * float(s.get("run_s") or s["useful_s"]) / int(s["tasks"])
            for s in rows if s.get("wall_s") is not None and not s.get("overlapped")]
    cpu = np.array([float(s.get("cpu_s") or 0.0) for s in rows])
    ratio = float(rout.sum() / rin.sum()) if rin.sum() > 0 else 0.0
    selectivity, groups = ratio, _fit_groups(rin / tasks, rout / tasks, ratio)
    if groups is not None:
        groups, selectivity = groups
    return {
        "per_record_s": float(per_record), "per_task_s": float(per_task), "per_record_fitted": bool(identified),
        "per_batch_s": max(0.0, float(np.median(gaps))) if gaps else None,
        "selectivity": selectivity, "groups": groups, "out_ratio": ratio,
        "cpu_share": float(min(1.0, cpu.sum() / run.sum())) if run.sum() > 0 else 1.0,
        "samples": len(rows), "tasks_seen": sorted({int(t) for t in tasks}),
        "records_in_range": [int(rin.min()), int(rin.max())],
        "rel_rmse": float(np.sqrt(np.mean(res ** 2)) / scale),
        "mape": float(np.mean(np.abs(res[positive]) / useful[positive])) if positive.any() else 0.0,
    }


def fit_calibration(samples: Iterable[Mapping[str, Any]], cores: int) -> dict:
    """Per workload: each stage's costs (:func:`fit_stage_costs`), the engine overhead and the noise.

    ``samples``: one dict per batch, as ``benchmarks/calibrate_stages.py`` writes them (``workload,
    warm, rows, processing_s, operators`` and optionally ``stage_times``, each stage's [submission,
    completion]).  Only warm batches are fitted (all when none is).  A stage submitted before an
    earlier stage of its batch completed shared the cores with it: its wall time is left out of
    ``per_batch_s``, which then is the median of the workload's other stages'.  The overhead is the
    median of each batch's processing time less its modelled stages (observed tasks and records);
    ``batch_mape`` and ``noise`` (the sd of the log of observed over modelled) measure that model.
    """
    by_workload: dict[str, list] = {}
    for s in samples:
        by_workload.setdefault(s["workload"], []).append(s)
    out = {}
    for name, batches in by_workload.items():
        warm = [b for b in batches if b.get("warm", True)] or batches
        per_key: dict[str, list] = {}
        for b in warm:
            times = b.get("stage_times") or [None] * len(b["operators"])
            ends: list[float] = []
            for op, tt in zip(b["operators"], times):
                overlapped = bool(tt and tt[0] is not None and ends and tt[0] < max(ends) - _OVERLAP_S)
                if tt and tt[1] is not None:
                    ends.append(tt[1])
                per_key.setdefault(op["key"], []).append({**op, "overlapped": overlapped})
        keys = sorted(per_key, key=lambda k: tuple(int(x[1:]) for x in k.split(".")))
        stages = {k: fit_stage_costs(per_key[k], cores) for k in keys}
        known = [s["per_batch_s"] for s in stages.values() if s["per_batch_s"] is not None]
        for s in stages.values():
            if s["per_batch_s"] is None:
                s["per_batch_s"] = float(np.median(known)) if known else 0.0
                s["per_batch_from"] = "the workload's other stages (this one overlapped another)"

        specs = {k: StageSpec(k, c["per_record_s"], c["per_task_s"], c["per_batch_s"], 0.0, "input")
                 for k, c in stages.items()}
        stage_model = np.array([sum(stage_time(specs[op["key"]], int(op["tasks"]), int(op["records_in"]), cores).wall_s
                                    for op in b["operators"]) for b in warm])
        proc = np.array([float(b["processing_s"]) for b in warm])
        overhead = max(0.0, float(np.median(proc - stage_model)))
        model = overhead + stage_model
        ratio = np.log(proc / model)
        out[name] = {
            "batches": len(warm), "overhead_s": overhead,
            "batch_mape": float(np.mean(np.abs(model - proc) / proc)),
            "noise": float(np.std(ratio)), "stages": stages,
        }
    method = ("per stage (key j<job>.s<position>): useful_s = per_task_s * tasks + per_record_s * records_in, "
              "non-negative least squares over warm batches; per_batch_s = median(wall_s - waves * run_s / tasks), "
              f"waves = ceil(tasks / {cores}), stages that overlapped another left out; selectivity = sum(out) / "
              "sum(in); out_per_task = median(records_out / tasks); per workload: overhead_s = median(processing_s - "
              "modelled stage walls), noise = sd(log(processing_s / modelled processing_s))")
    return {"method": method, "workloads": out}


@dataclass(frozen=True)
class Calibration:
    """Per-stage costs measured on real Spark (a calibration file, read by :func:`load_calibration`)."""

    source: str
    workloads: dict
    machine: dict
    spark: str
    created: str

    def stage(self, workload: str, key: str) -> dict:
        """The fitted costs of ``workload``'s stage ``key``."""
        try:
            return self.workloads[workload]["stages"][key]
        except KeyError:
            known = ", ".join(f"{w}:{k}" for w, v in self.workloads.items() for k in v["stages"])
            raise UnknownNameError(f"calibration {self.source} has no stage {key!r} of {workload!r}; "
                                   f"known: {known}") from None


def load_calibration(path: str | Path | None = None) -> Calibration:
    """Read a calibration file (default the shipped one, :data:`DEFAULT_CALIBRATION`)."""
    if path is None:
        text, source = DEFAULT_CALIBRATION.read_text(encoding="utf-8"), f"lmstream_kit/resources/{DEFAULT_CALIBRATION_NAME}"
    else:
        text, source = Path(path).read_text(encoding="utf-8"), str(path)
    doc = json.loads(text)
    if doc.get("format") != CALIBRATION_FORMAT:
        raise ConfigError(f"{source}: not a stage calibration (format {doc.get('format')!r}, "
                          f"expected {CALIBRATION_FORMAT!r})")
    return Calibration(source=source, workloads=doc["workloads"], machine=doc.get("machine", {}),
                       spark=str(doc.get("spark", "")), created=str(doc.get("created", "")))


# ------------------------------------------------------------------------------------- the DAGs

class _T(NamedTuple):
    """A stage template: its costs come from ``source`` (workload, key) of the calibration."""

    name: str
    kind: str
    knob: str
    source: tuple[str, str]
    selectivity: float | None = None  # None: the calibrated one
    groups: int | str | None = "calibrated"  # "calibrated": the source's (a cap on each task's records out)
    inputs: tuple[str, ...] | None = None


_SCAN, _JOIN = ("LR1T", "j0.s0"), ("LR1T", "j0.s2")
_SLIDE_PARTIAL, _TUMBLE_PARTIAL = ("LR2S", "j0.s0"), ("CM1T", "j0.s0")
#: CM2S's is the one stateful aggregation whose records in vary enough to fit a per-record cost
_STATE = ("CM2S", "j0.s1")
#: Nexmark's event mix: persons, auctions, bids (1 : 3 : 46)
_PERSONS, _AUCTIONS, _BIDS = 0.02, 0.06, 0.92

#: name -> (description, stage templates); the six workloads' stages as Spark runs them
#: (read="executors"), the Nexmark-style ones built from the calibrated stage of the same kind
_TEMPLATES: dict[str, tuple[str, tuple[_T, ...]]] = {
    "LR1S": ("Linear Road self-join in 30 s windows sliding by 5 s: both sides scan the batch (6 windows "
             "per report), a stream-stream join", (
        _T("reports", "scan", "input", ("LR1S", "j0.s0"), inputs=()),
        _T("reports_a", "scan", "input", ("LR1S", "j0.s1"), inputs=()),
        _T("join", "join", "state", ("LR1S", "j0.s2"), inputs=("reports", "reports_a")))),
    "LR1T": ("Linear Road self-join in 30 s tumbling windows: both sides scan the batch, a stream-stream join", (
        _T("reports", "scan", "input", ("LR1T", "j0.s0"), inputs=()),
        _T("reports_a", "scan", "input", ("LR1T", "j0.s1"), inputs=()),
        _T("join", "join", "state", ("LR1T", "j0.s2"), inputs=("reports", "reports_a")))),
    "LR2S": ("Linear Road segment speed: partial average per (window, segment), then the stateful average", (
        _T("partial_avg", "partial_agg", "input", ("LR2S", "j0.s0"), groups="calibrated"),
        _T("window_avg", "state_agg", "state", ("LR2S", "j0.s1")))),
    "CM1S": ("Cluster Monitoring cpu per category, 60 s windows sliding by 10 s: partial sum, stateful sum, "
             "the batch's sort (one task)", (
        _T("partial_sum", "partial_agg", "input", ("CM1S", "j0.s0"), groups="calibrated"),
        _T("window_sum", "state_agg", "state", ("CM1S", "j0.s1")),
        _T("sort", "sort", "fixed", ("CM1S", "j0.s2")))),
    "CM1T": ("Cluster Monitoring cpu per category, 60 s tumbling windows: partial sum, stateful sum, the sort", (
        _T("partial_sum", "partial_agg", "input", ("CM1T", "j0.s0"), groups="calibrated"),
        _T("window_sum", "state_agg", "state", ("CM1T", "j0.s1")),
        _T("sort", "sort", "fixed", ("CM1T", "j0.s2")))),
    "CM2S": ("Cluster Monitoring cpu per job of scheduled tasks: filter and partial average, stateful average", (
        _T("partial_avg", "partial_agg", "input", ("CM2S", "j0.s0"), groups="calibrated"),
        _T("window_avg", "state_agg", "state", ("CM2S", "j0.s1")))),
    "Q1": ("Nexmark-style Q1 (currency conversion): a map over the bids", (
        _T("convert", "scan", "input", _SCAN, groups=None, selectivity=_BIDS),)),
    "Q2": ("Nexmark-style Q2 (selection): the bids of one auction in 123", (
        _T("select", "scan", "input", _SCAN, groups=None, selectivity=_BIDS / 123),)),
    "Q3": ("Nexmark-style Q3 (local item suggestion): persons of 3 states joined with auctions of one category", (
        _T("persons", "scan", "input", _SCAN, groups=None, selectivity=_PERSONS / 2, inputs=()),
        _T("auctions", "scan", "input", _SCAN, groups=None, selectivity=_AUCTIONS / 5, inputs=()),
        _T("join", "join", "state", _JOIN, groups=None, selectivity=1.0, inputs=("persons", "auctions")))),
    "Q5": ("Nexmark-style Q5 (hot items): bids counted per auction in sliding windows, then the max per window", (
        _T("partial_count", "partial_agg", "input", _SLIDE_PARTIAL, selectivity=_BIDS, groups="calibrated"),
        _T("window_count", "state_agg", "state", _STATE, groups=None, selectivity=0.2),
        _T("max_count", "state_agg", "state", _STATE, groups=None, selectivity=0.01))),
    "Q7": ("Nexmark-style Q7 (highest bid): the max price per tumbling window joined back with the bids", (
        _T("partial_max", "partial_agg", "input", _TUMBLE_PARTIAL, selectivity=_BIDS, groups=2, inputs=()),
        _T("window_max", "state_agg", "state", _STATE, groups=None, selectivity=1.0),
        _T("bids", "scan", "input", _SCAN, groups=None, selectivity=_BIDS, inputs=()),
        _T("join", "join", "state", _JOIN, groups=None, selectivity=0.001, inputs=("window_max", "bids")))),
    "Q8": ("Nexmark-style Q8 (new users): persons and auction sellers, each distinct per tumbling window, joined", (
        _T("partial_persons", "partial_agg", "input", _TUMBLE_PARTIAL, groups=None, selectivity=_PERSONS, inputs=()),
        _T("window_persons", "state_agg", "state", _STATE, groups=None, selectivity=1.0),
        _T("partial_sellers", "partial_agg", "input", _TUMBLE_PARTIAL, groups=None, selectivity=_AUCTIONS, inputs=()),
        _T("window_sellers", "state_agg", "state", _STATE, groups=None, selectivity=0.5),
        _T("join", "join", "state", _JOIN, groups=None, selectivity=0.5, inputs=("window_persons", "window_sellers")))),
}
_WORKLOADS = ("LR1S", "LR1T", "LR2S", "CM1S", "CM1T", "CM2S")


def build_dags(calibration: Calibration | None = None) -> dict[str, DagSpec]:
    """The DAGs (the six workloads, then Nexmark-style Q1, Q2, Q3, Q5, Q7, Q8) costed by ``calibration``.

    A workload's stages take their own fitted costs.  A Nexmark-style stage takes per-record,
    per-task and per-stage costs from the calibrated stage of the same kind (a stateless scan:
    LR1T's first stage; a join: LR1T's join; a partial aggregation: LR2S's over sliding windows,
    CM1T's over tumbling ones; a stateful aggregation: CM2S's) and its selectivity from the query
    (Nexmark's event mix of persons 2%, auctions 6%, bids 92%); its overhead and noise are the
    workloads' medians.
    """
    cal = calibration if calibration is not None else load_calibration()
    out = {}
    overheads = [cal.workloads[w]["overhead_s"] for w in _WORKLOADS if w in cal.workloads]
    noises = [cal.workloads[w]["noise"] for w in _WORKLOADS if w in cal.workloads]
    for name, (description, templates) in _TEMPLATES.items():
        stages = []
        for t in templates:
            c = cal.stage(*t.source)
            groups = c.get("groups") if t.groups == "calibrated" else t.groups
            selectivity = t.selectivity if t.selectivity is not None else c["selectivity"]
            stages.append(StageSpec(
                t.name, per_record_s=c["per_record_s"], per_task_s=c["per_task_s"], per_batch_s=c["per_batch_s"],
                selectivity=selectivity,
                knob=t.knob, inputs=t.inputs, groups=groups, kind=t.kind, cpu_share=c.get("cpu_share", 1.0)))
        if name in cal.workloads:
            overhead, noise = cal.workloads[name]["overhead_s"], cal.workloads[name]["noise"]
        else:
            overhead, noise = float(np.median(overheads)), float(np.median(noises))
        out[name] = DagSpec(name, tuple(stages), overhead_s=overhead, noise=noise, calibration=cal.source,
                            description=description)
    return out


def _default_dags() -> dict[str, DagSpec]:
    try:
        return build_dags()
    except (OSError, FileNotFoundError):  # a checkout without the shipped file: build_dags(cal) still works
        return {}


#: the registry of DAGs costed by the shipped calibration
DAGS: dict[str, DagSpec] = _default_dags()


def get_dag(name: str, calibration: Calibration | None = None) -> DagSpec:
    """The DAG ``name`` (case-insensitive), costed by ``calibration`` (default the shipped one)."""
    dags = DAGS if calibration is None else build_dags(calibration)
    found = {k.lower(): v for k, v in dags.items()}.get(str(name).lower())
    if found is None:
        raise UnknownNameError(f"unknown DAG {name!r}; known: {', '.join(dags)}")
    return found
