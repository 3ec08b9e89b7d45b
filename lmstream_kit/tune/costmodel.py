"""A cost model of each stage, fitted on the run's own batches: what a task costs and what a record costs.

DS2's rule assumes an instance costs nothing by itself.  On Spark it does: each task pays its
launch, its share of the source's reader, a state store's load and commit.  So a stage's useful
task-seconds are, to a good approximation, linear in its tasks ``p`` and its records in ``R``::

    useful_s = per_task_s * p + per_record_s * R

fitted per stage by non-negative least squares over its recent batches (newer ones weigh more).
One task's time is ``per_task_s + per_record_s * R / p``, and a stage's wall time is that times
its waves (``ceil(p / cores)``) times ``spread``, the median ratio of the stage's observed wall time
to that estimate (it covers skew, the largest task and scheduling).  The batch's processing time
is the sum of its stages' walls plus ``overhead_s``, the median of what the stages leave
unexplained (planning, offsets, commits).

:meth:`CostModel.allocate` then finds, exactly within the model, the parallelism vector with the
smallest total whose predicted processing time fits a target (a min-plus programme over the
total, as the simulator's oracle does), with each stage held to its own bounds.  Every stage's
predicted wall time is non-increasing in its own parallelism as long as ``p <= cores``: more
parallelism never makes a stage more of a bottleneck there, and beyond the cores each new wave
pays the per-task cost again, which the model prices.

>>> from lmstream_kit.tune.operators import OperatorSample
>>> def op(p, rows):   # a stage whose task costs 0.1 s and record 10 us
...     useful = 0.1 * p + 1e-5 * rows
...     return OperatorSample("j0.s0", 0, 0, 1, "COMPLETE", p, rows, rows, useful, useful, useful,
...                           useful / p, rows / useful, None, False)
>>> model = CostModel(cores=8)
>>> for p, rows in [(1, 100_000), (2, 150_000), (4, 120_000), (2, 90_000)]:
...     model.observe([op(p, rows)], processing_s=(0.1 + 1e-5 * rows / p) + 0.2)
>>> c = model.stages["j0.s0"]
>>> round(c.per_task_s, 3), round(c.per_record_s * 1e6, 2), round(model.overhead_s, 3)
(0.1, 10.0, 0.2)
>>> plan = model.allocate(model.last, rows_scale=1.0, target_s=1.0, bounds={"j0.s0": (1, 8)})
>>> plan.parallelism, round(plan.processing_s, 3)
({'j0.s0': 2}, 0.75)
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..exceptions import ConfigError
from .operators import OperatorSample

__all__ = ["Allocation", "CostModel", "StageCost"]

_INF = float("inf")


@dataclass
class StageCost:
    """One stage's fitted costs (see the module) and the observations they came from."""

    key: str
    per_task_s: float = 0.0
    per_record_s: float = 0.0
    spread: float = 1.0
    observations: deque = field(default_factory=lambda: deque(maxlen=60))  # (p, records_in, useful_s, wall_s)

    @property
    def fitted(self) -> bool:
        return len(self.observations) >= 3 and (self.per_task_s > 0 or self.per_record_s > 0)

    def task_s(self, p: int, records: float) -> float:
        """One task's seconds at parallelism ``p`` with ``records`` in (the mean task)."""
        return self.per_task_s + self.per_record_s * records / max(p, 1)

    def wall_s(self, p: int, records: float, cores: int | None) -> float:
        """The stage's predicted wall seconds at parallelism ``p`` with ``records`` in."""
        waves = math.ceil(p / cores) if cores else 1
        return self.spread * waves * self.task_s(p, records)

    def fit(self, half_life: float) -> None:
        obs = list(self.observations)
        if len(obs) < 3:
            return
        from scipy.optimize import nnls

        p = np.array([o[0] for o in obs], dtype=float)
        r = np.array([o[1] for o in obs], dtype=float)
        u = np.array([o[2] for o in obs], dtype=float)
        w = np.sqrt(0.5 ** (np.arange(len(obs))[::-1] / half_life))  # newest weighs 1
        sp, sr = max(p.max(), 1.0), max(r.max(), 1.0)  # columns scaled for conditioning
        coef, _ = nnls(np.column_stack([p / sp, r / sr]) * w[:, None], u * w)
        self.per_task_s, self.per_record_s = float(coef[0] / sp), float(coef[1] / sr)
        ratios = [o[3] / base for o in obs if o[3] is not None and o[3] > 0
                  and (base := self.task_s(int(o[0]), o[1])) > 0]
        self.spread = float(np.clip(np.median(ratios[-20:]), 0.5, 4.0)) if ratios else 1.0


@dataclass(frozen=True)
class Allocation:
    """A parallelism vector and its predicted processing seconds; ``feasible``: it fits the target."""

    parallelism: dict[str, int]
    processing_s: float
    feasible: bool

    @property
    def total(self) -> int:
        return sum(self.parallelism.values())


class CostModel:
    """Per-stage costs fitted on a run's batches, and the cheapest allocation that fits a budget.

    Parameters
    ----------
    cores : int, optional
        The cores the stages' tasks share (waves beyond them cost again); None: never more tasks
        than cores.
    half_life : float
        Batches after which an observation weighs half as much in the fit.
    """

    def __init__(self, *, cores: int | None = None, half_life: float = 20.0) -> None:
        if cores is not None and cores < 1:
            raise ConfigError(f"cores must be >= 1, got {cores!r}")
        if not half_life > 0:
            raise ConfigError(f"half_life must be > 0, got {half_life!r}")
        self.cores = cores
        self.half_life = float(half_life)
        self.stages: dict[str, StageCost] = {}
        self._overheads: deque = deque(maxlen=30)
        self.last: list[OperatorSample] = []

    @property
    def overhead_s(self) -> float:
        """The batch's processing seconds that its stages leave unexplained (median, never below 0)."""
        return max(0.0, float(np.median(self._overheads))) if self._overheads else 0.0

    def observe(self, samples: Sequence[OperatorSample], *, processing_s: float | None = None) -> None:
        """Add one batch's stages (and its processing seconds) and refit their costs."""
        self.last = list(samples)
        walls = 0.0
        for s in samples:
            c = self.stages.setdefault(s.key, StageCost(s.key))
            if s.useful_s > 0:
                c.observations.append((s.tasks, s.records_in, s.useful_s, s.wall_s))
                c.fit(self.half_life)
            walls += s.wall_s or 0.0
        if processing_s is not None and processing_s > 0 and all(s.wall_s is not None for s in samples):
            self._overheads.append(processing_s - walls)

    def ready(self, keys: Sequence[str]) -> bool:
        """Whether every stage of ``keys`` has fitted costs."""
        return bool(keys) and all(k in self.stages and self.stages[k].fitted for k in keys)

    def processing_s(self, samples: Sequence[OperatorSample], parallelism: Mapping[str, int], *,
                     rows_scale: float = 1.0) -> float:
        """The predicted processing seconds of the next batch (``rows_scale`` times this one's records)."""
        return self.overhead_s + sum(
            self.stages[s.key].wall_s(int(parallelism.get(s.key, s.tasks)), s.records_in * rows_scale, self.cores)
            for s in samples)

    def allocate(self, samples: Sequence[OperatorSample], *, rows_scale: float, target_s: float,
                 bounds: Mapping[str, tuple[int, int]]) -> Allocation:
        """The smallest total parallelism whose predicted processing time fits ``target_s`` (exact).

        ``bounds``: each stage's ``(low, high)``; a stage not in it stays at its tasks.  The
        stages' records are this batch's times ``rows_scale``.  Of the vectors with that total the
        fastest; if none fits, the fastest vector of all (``feasible`` False).
        """
        if not samples:
            raise ConfigError("allocate needs at least one stage")
        keys, choices = [], []
        dp = np.array([0.0])  # dp[t]: least stage time at total parallelism t
        for s in samples:
            lo, hi = bounds.get(s.key, (s.tasks, s.tasks))
            if not 1 <= lo <= hi:
                raise ConfigError(f"bounds of {s.key} must satisfy 1 <= low <= high, got {(lo, hi)!r}")
            times = np.full(hi + 1, _INF)
            records = s.records_in * rows_scale
            for p in range(lo, hi + 1):
                times[p] = self.stages[s.key].wall_s(p, records, self.cores)
            new = np.full(len(dp) + hi, _INF)
            pick = np.zeros(len(dp) + hi, dtype=int)
            for p in range(lo, hi + 1):
                cand = dp + times[p]
                seg = new[p:p + len(dp)]
                better = cand < seg
                seg[better] = cand[better]
                pick[p:p + len(dp)][better] = p
            keys.append(s.key)
            choices.append(pick)
            dp = new
        budget = target_s - self.overhead_s
        fits = np.flatnonzero(dp <= budget)
        if fits.size:
            total, feasible = int(fits[0]), True
        else:
            total, feasible = int(np.argmin(dp)), False
        out, t = {}, total
        for key, pick in zip(reversed(keys), reversed(choices)):
            p = int(pick[t])
            out[key] = p
            t -= p
        parallelism = {k: out[k] for k in keys}
        return Allocation(parallelism, float(dp[total]) + self.overhead_s, feasible)
