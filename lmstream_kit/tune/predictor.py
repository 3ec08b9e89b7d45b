"""The bottleneck predictor: will this operator be a bottleneck at parallelism ``p``?  Monotone in ``p``.

It learns from *transitions*: an operator observed in one batch (its parallelism ``p``, its useful
task-seconds over the batch's budget, its place in the DAG) and the same operator in the next batch
at parallelism ``p'``, after the input grew by some factor, labelled with whether it was a
bottleneck then (:attr:`~lmstream_kit.tune.operators.OperatorSample.bottleneck`).  So it sees how
an operator's work changes with its parallelism (per-task overheads, waves beyond the cores),
which DS2's rule assumes away.

The model is scikit-learn's ``HistGradientBoostingClassifier`` with monotonic constraints: the
probability of a bottleneck is non-increasing in ``log2 p'`` and non-decreasing in the work now and
in the growth, **by construction** (every tree's splits respect them), so "more parallelism never
makes an operator more of a bottleneck" holds for any training data, and :meth:`smallest` can
bisect.  The DAG enters through :func:`embed`: a simplified graph convolution (SGC, Wu et al.
2019) of per-stage features over the stage chain's normalised adjacency, a fixed propagation with
no training of its own, so the classifier stays light enough for a 2-core CI (fits take tens of
milliseconds on thousands of rows).

>>> from lmstream_kit.tune.operators import OperatorSample
>>> def op(key, pos, p, useful, load):
...     return OperatorSample(key, 0, pos, pos, "COMPLETE", p, 1000, 100, useful, useful, useful, 1.0,
...                           1000 / useful, load, load > 0.7)
>>> batch = [op("j0.s0", 0, 2, 1.0, 0.5), op("j0.s1", 1, 2, 0.2, 0.1)]
>>> embed(batch)["j0.s0"].shape
(6,)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..exceptions import ConfigError
from .history import stage_dag
from .operators import OperatorSample

__all__ = ["FEATURES", "BottleneckModel", "Transition", "embed", "stage_budgets", "transitions"]

#: the model's features, in order, and their monotonic constraint (-1: the probability does not
#: increase with it, +1: does not decrease, 0: free)
FEATURES: tuple[tuple[str, int], ...] = (
    ("log2_next_parallelism", -1),
    ("log_work_over_budget", +1),   # useful task-seconds now over the batch's budget
    ("log_growth", +1),             # the next batch's rows over this one's
    ("log2_parallelism", 0),        # the parallelism the work was measured at
    *((f"dag_{i}", 0) for i in range(6)),
)
_EPS = 1e-6


def _node_features(s: OperatorSample, total_useful: float) -> list[float]:
    return [
        1.0 if s.position == 0 else 0.0,                                # reads the source (a job's first stage)
        math.log((s.records_out + 1) / (s.records_in + 1)),             # selectivity
        s.useful_s / total_useful if total_useful > 0 else 0.0,         # share of the batch's work
    ]


def embed(batch: Sequence[OperatorSample], hops: int = 2) -> dict[str, np.ndarray]:
    """Each stage's DAG embedding: its own features and those propagated ``hops`` times over the
    stage graph's symmetric normalised adjacency with self-loops (SGC), concatenated (6 numbers)."""
    keys = [s.key for s in batch]
    index = {k: i for i, k in enumerate(keys)}
    n = len(keys)
    if n == 0:
        return {}
    total = sum(s.useful_s for s in batch)
    x = np.array([_node_features(s, total) for s in batch], dtype=float)
    a = np.eye(n)
    for u, v in stage_dag([{"key": s.key, "job": s.job, "position": s.position} for s in batch]):
        if u in index and v in index:
            a[index[u], index[v]] = a[index[v], index[u]] = 1.0
    d = 1.0 / np.sqrt(a.sum(axis=1))
    s_hat = a * d[:, None] * d[None, :]
    h = x
    for _ in range(hops):
        h = s_hat @ h
    return {k: np.concatenate([x[i], h[i]]) for k, i in index.items()}


@contextmanager
def _quiet() -> Iterator[None]:
    """scikit-learn's warning about its joblib helper used outside joblib (harmless here), silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*sklearn\.utils\.parallel\.delayed.*", category=UserWarning)
        yield


@dataclass(frozen=True)
class Transition:
    """One operator from one batch to the next: what the model learns from (see the module)."""

    key: str
    parallelism: int
    next_parallelism: int
    work_over_budget: float
    growth: float
    dag: tuple[float, ...]
    bottleneck_next: bool

    def features(self) -> list[float]:
        return _features(self.next_parallelism, self.parallelism, self.work_over_budget, self.growth, self.dag)


def _features(next_p: int, p: int, work: float, growth: float, dag: Sequence[float]) -> list[float]:
    return [math.log2(max(next_p, 1)), math.log(max(work, _EPS)), math.log(max(growth, _EPS)),
            math.log2(max(p, 1)), *[float(v) for v in dag]]


def stage_budgets(samples: Sequence[OperatorSample], budget_s: float) -> dict[str, float]:
    """Each stage's share of the batch's budget when its stages run one after the other.

    The split that needs the least total parallelism: minimising ``sum p_i`` subject to
    ``sum w_i / p_i <= budget`` (``w_i`` a stage's useful task-seconds) gives each stage a time in
    proportion to ``sqrt(w_i)`` (a Lagrange multiplier; per-task costs left aside).  Stages without
    work share equally what is left of a tiny floor.

    >>> from lmstream_kit.tune.operators import OperatorSample
    >>> def op(key, useful):
    ...     return OperatorSample(key, 0, 0, 0, "", 1, 1, 1, useful, useful, useful, None, None, None, False)
    >>> {k: round(v, 6) for k, v in stage_budgets([op("a", 4.0), op("b", 1.0)], 3.0).items()}
    {'a': 2.0, 'b': 1.0}
    """
    roots = {s.key: math.sqrt(max(s.useful_s, 0.0)) + 1e-9 for s in samples}
    total = sum(roots.values())
    return {k: budget_s * r / total for k, r in roots.items()} if total > 0 else {}


def transitions(batches: Sequence[tuple[Sequence[OperatorSample], int, float]], *,
                split_budget: bool = False, busy_share: float = 0.7) -> list[Transition]:
    """The transitions of consecutive batches ``(operators, rows, budget_s)`` of one run (same keys).

    ``split_budget``: a stage's budget is its share of the batch's (:func:`stage_budgets`: the stages
    of a micro-batch run one after the other), and the label is recomputed from it (``load`` above
    ``busy_share``); otherwise the work is over the whole budget and the label is the sample's own.
    """
    out = []
    for (ops, rows, budget), (nxt, rows_next, budget_next) in zip(batches, batches[1:]):
        if not rows or not rows_next or not budget or budget <= 0 or not budget_next or budget_next <= 0:
            continue
        mine = stage_budgets(ops, budget) if split_budget else {}
        theirs = stage_budgets(nxt, budget_next) if split_budget else {}
        emb = embed(ops)
        later = {s.key: s for s in nxt}
        for s in ops:
            n = later.get(s.key)
            if n is None or s.useful_s <= 0:
                continue
            label = n.useful_s / n.tasks / theirs[n.key] > busy_share if split_budget else bool(n.bottleneck)
            out.append(Transition(s.key, s.tasks, n.tasks, s.useful_s / mine.get(s.key, budget), rows_next / rows,
                                  tuple(float(v) for v in emb[s.key]), bool(label)))
    return out


class BottleneckModel:
    """P(bottleneck at ``p'``), monotone non-increasing in ``p'`` (see the module).

    :meth:`fit` on pre-training transitions (other runs of similar DAGs) and this job's own, the
    job's weighted ``own_weight`` times (fine-tuning); until both labels have been seen it is not
    :attr:`ready`, and a tuner falls back to DS2's rule.
    """

    def __init__(self, *, own_weight: float = 3.0, seed: int = 0) -> None:
        if not own_weight > 0:
            raise ConfigError(f"own_weight must be > 0, got {own_weight!r}")
        self.own_weight = float(own_weight)
        self.seed = int(seed)
        self._model = None
        self.rows = 0

    @property
    def ready(self) -> bool:
        return self._model is not None

    def fit(self, pretrain: Sequence[Transition] = (), own: Sequence[Transition] = ()) -> BottleneckModel:
        from sklearn.ensemble import HistGradientBoostingClassifier

        rows = [*pretrain, *own]
        labels = {t.bottleneck_next for t in rows}
        self.rows = len(rows)
        if len(labels) < 2:
            self._model = None
            return self
        x = np.array([t.features() for t in rows], dtype=float)
        y = np.array([t.bottleneck_next for t in rows], dtype=int)
        w = np.array([1.0] * len(pretrain) + [self.own_weight] * len(own))
        model = HistGradientBoostingClassifier(
            max_iter=80, learning_rate=0.1, max_leaf_nodes=15, min_samples_leaf=max(2, min(10, len(rows) // 20)),
            monotonic_cst=[c for _, c in FEATURES], random_state=self.seed)
        with _quiet():
            model.fit(x, y, sample_weight=w)
        self._model = model
        return self

    def probability(self, next_p: int, p: int, work_over_budget: float, growth: float,
                    dag: Sequence[float]) -> float:
        """P(bottleneck) at ``next_p`` for an operator at ``p`` doing ``work_over_budget``."""
        if self._model is None:
            raise ConfigError("the bottleneck model is not fitted yet (it needs both labels in its data)")
        x = np.array([_features(next_p, p, work_over_budget, growth, dag)])
        with _quiet():
            return float(self._model.predict_proba(x)[0, 1])

    def curve(self, p: int, work_over_budget: float, growth: float, dag: Sequence[float], *, low: int = 1,
              high: int = 64) -> np.ndarray:
        """P(bottleneck) at every ``p'`` from ``low`` to ``high`` (non-increasing), in one prediction."""
        if self._model is None:
            raise ConfigError("the bottleneck model is not fitted yet (it needs both labels in its data)")
        x = np.array([_features(q, p, work_over_budget, growth, dag) for q in range(int(low), int(high) + 1)])
        with _quiet():
            return self._model.predict_proba(x)[:, 1]

    def smallest(self, p: int, work_over_budget: float, growth: float, dag: Sequence[float], *, low: int = 1,
                 high: int = 64, threshold: float = 0.5) -> int:
        """The smallest ``p'`` in ``[low, high]`` predicted not to be a bottleneck (``high`` if none)."""
        probs = self.curve(p, work_over_budget, growth, dag, low=low, high=high)
        below = np.flatnonzero(probs < threshold)
        return int(low) + int(below[0]) if below.size else int(high)
