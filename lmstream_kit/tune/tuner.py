"""The online parallelism tuner: a live object that reads each batch's stages and sets the parallelism.

:class:`ParallelismTuner` is one plug-in (``stream.add_controller(ParallelismTuner())``) that

1. reads every batch's Spark stages (it is an :class:`~lmstream_kit.tune.operators.OperatorMetrics`);
2. proposes, after each batch, the smallest parallelism per stage that it predicts leaves no
   bottleneck at the expected input: with ``policy="learned"`` (StreamTune's idea) from a
   :class:`~lmstream_kit.tune.predictor.BottleneckModel` pre-trained on transitions of earlier runs
   and fine-tuned on this run's own as they come (DS2's rule until the model has seen both a
   bottleneck and none), with ``policy="ds2"`` from :func:`~lmstream_kit.tune.ds2.ds2_parallelism`
   alone (the baseline, in the same harness);
3. applies it where Spark allows without a restart, today the source stage's input partitions
   (``j0.s0``, set when the next batch is planned, like :class:`~lmstream_kit.tune.knobs.InputPartitions`);
   the other stages' proposals are recommendations, with the reason they are not applied.

It does not oscillate: after a change it waits ``cooldown`` batches; it scales up to the smallest
parallelism whose predicted probability of a bottleneck is below ``threshold``, but down only to
the smallest below ``threshold - margin`` (hysteresis: DS2's rule has no probability, so it has no
such margin); and it never scales down while a backlog is being caught up (the batch missed its
bound).

``mode``: ``"apply"`` (the default), ``"recommend"`` (proposals in the record only, nothing set:
for users who want advice) or ``"frozen"`` (no proposals).  ``pin(key, p)`` holds one stage.

Record fields: ``tuner_policy``, ``tuner_model``, ``tuner_proposal`` ``{key: p}``,
``tuner_reason`` ``{key: why}``, ``tuner_s`` (the tuner's own seconds) and, from the plug-in it
extends, ``operators`` and ``operators_s``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..exceptions import ConfigError
from ..protocol import ADMISSION, BatchContext, Param
from .costmodel import Allocation, CostModel
from .ds2 import ds2_parallelism
from .knobs import MAX_INPUT_PARTITIONS, PlannedPartitions, input_partitions_field
from .operators import OperatorMetrics, OperatorSample
from .predictor import BottleneckModel, Transition, embed, stage_budgets, transitions

__all__ = ["SOURCE_STAGE", "ParallelismTuner"]

#: the stage whose parallelism the tuner sets without a restart: the first stage of the batch's first job
SOURCE_STAGE = "j0.s0"
_FIXED_REASON = ("fixed: a shuffle after the source feeds Spark's stateful operators, whose partitions the "
                 "checkpoint fixes (Spark 4.2+ repartitions them offline, with a restart)")


class ParallelismTuner(PlannedPartitions, OperatorMetrics):
    """Proposes and sets each stage's parallelism after every batch (see the module).

    Parameters
    ----------
    policy : {"learned", "ds2"}
    mode : {"apply", "recommend", "frozen"}
    partitions : int
        The source stage's parallelism to start from.
    pretrain : sequence of Transition
        Transitions of earlier runs of similar DAGs (:func:`~lmstream_kit.tune.predictor.transitions`).
    knobs : mapping of stage key to kind, optional
        The stages the tuner may set and how: ``"input"`` or ``"shuffle"`` (free, per batch) or
        ``"state"`` (a restart; set only with ``allow_restarts``).  Default: the source stage only,
        ``{"j0.s0": "input"}``, which is what a Spark stream of the kit offers today; the simulator
        (:mod:`~lmstream_kit.tune.stagesim`) offers every stage.  Applied values are in
        :attr:`applied`; the source stage's is also the ``partitions`` parameter.
    allow_restarts : bool
        Whether a ``"state"`` knob may be changed (each change costs a restart).
    split_budget : bool
        Give each stage its share of the batch's budget (they run one after the other; the share
        that needs the least total parallelism, :func:`~lmstream_kit.tune.predictor.stage_budgets`)
        instead of the whole budget; the load, DS2's rule and the model's labels all use it.
    history : path, ``"seed"``, a list of them, History or pyarrow Table, optional
        A history store (:mod:`~lmstream_kit.tune.history`; ``"seed"``: the seed history the kit
        ships, real runs of its six workloads): at the first batch, the runs whose DAG is
        within ``max_distance`` (graph edit distance, :mod:`~lmstream_kit.tune.pretrain`) of this
        query's become pre-training transitions.  Neither this nor ``pretrain``: a cold start.
    max_distance : float
        The largest graph edit distance of a DAG in this query's cluster.
    cost_model : bool
        With ``policy="learned"``: plan the whole batch with a cost model of its stages
        (:mod:`~lmstream_kit.tune.costmodel`) once each stage has three batches.
    cores : int, optional
        The task slots the cost model prices waves against; default: the engine's at every batch
        (Spark's default parallelism), none without an engine.
    headroom : float
        The share of the batch's budget the cost model plans to fill.
    down_gain : float
        Scale down (and restart for a ``state`` knob) only for at least this share fewer tasks.
    forecast : bool
        The learned tuner plans for the recent trend of the arrival rate past its cooldown, not
        only the recent peak.
    busy_share, cooldown, low, high, threshold, margin, utilisation : see :attr:`PARAMS`.
    refit_every : int
        Refit the model after this many batches of this run.
    pretrain_cap : int
        At most this many pre-training transitions (a seeded sample), so that a refit stays light.
    """

    prefix = "tuner"
    change_phase = ADMISSION
    PARAMS = (
        Param("mode", str, choices=("apply", "recommend", "frozen"), label="tuner",
              doc="apply proposals, only recommend them, or make none"),
        Param("partitions", int, low=1, high=MAX_INPUT_PARTITIONS, label="source partitions",
              doc="the source stage's parallelism in force (the tuner sets it; set it by hand with mode frozen)"),
        Param("busy_share", float, low=0, high=1, low_open=True, label="bottleneck above load",
              doc="a stage busy for more than this share of the batch's bound is a bottleneck"),
        Param("cooldown", int, low=0, high=1000, label="cooldown (batches)",
              doc="batches to wait after a change before the next"),
        Param("low", int, low=1, high=MAX_INPUT_PARTITIONS, label="lowest parallelism"),
        Param("high", int, low=1, high=MAX_INPUT_PARTITIONS, label="highest parallelism"),
    )
    FIELDS = {
        **OperatorMetrics.FIELDS,
        "tuner_policy": "the parallelism tuner's policy (learned or ds2)",
        "tuner_model": "what the proposal came from (the model and its rows, or ds2's rule)",
        "tuner_proposal": "the parallelism the tuner proposes per stage {key: p}",
        "tuner_reason": "why each proposal is or is not applied {key: why}",
        "tuner_s": "seconds the tuner spent deciding",
    }

    def __init__(self, *, policy: str = "learned", mode: str = "apply", partitions: int = 2,
                 pretrain: Sequence[Transition] = (), busy_share: float = 0.7, cooldown: int = 2, low: int = 1,
                 high: int = 64, threshold: float = 0.5, margin: float = 0.15, utilisation: float = 0.7,
                 refit_every: int = 4, pretrain_cap: int = 4000, history: Any = None, max_distance: float = 2.0,
                 knobs: Mapping[str, str] | None = None, allow_restarts: bool = False, split_budget: bool = False,
                 cost_model: bool = True, cores: int | None = None, headroom: float = 0.9, down_gain: float = 0.15,
                 forecast: bool = True,
                 timeout_s: float = 1.0, seed: int = 0) -> None:
        super().__init__(busy_share=busy_share, timeout_s=timeout_s)
        if policy not in ("learned", "ds2"):
            raise ConfigError(f"policy must be 'learned' or 'ds2', got {policy!r}")
        self.policy = policy
        self.mode = self.param("mode").validate(mode)
        self.partitions = self.param("partitions").validate(partitions)
        self.cooldown = self.param("cooldown").validate(cooldown)
        self.low = self.param("low").validate(low)
        self.high = self.param("high").validate(high)
        if self.low > self.high:
            raise ConfigError(f"low ({self.low}) must not exceed high ({self.high})")
        if not 0 < threshold < 1 or not 0 <= margin < threshold:
            raise ConfigError(f"threshold must be in (0, 1) and margin in [0, threshold), got {threshold!r}, {margin!r}")
        self.threshold, self.margin, self.utilisation = float(threshold), float(margin), float(utilisation)
        if not 0 < headroom <= 1 or not 0 <= down_gain < 1:
            raise ConfigError(f"headroom must be in (0, 1] and down_gain in [0, 1), got {headroom!r}, {down_gain!r}")
        self.headroom, self.down_gain, self.forecast = float(headroom), float(down_gain), bool(forecast)
        self.costs = CostModel(cores=cores) if cost_model and policy == "learned" else None
        self._cores_from_engine = cores is None  # read from the engine at every batch
        self.pretrain_cap, self.seed = int(pretrain_cap), int(seed)
        self.pretrain = self._capped(list(pretrain))
        self.history, self.max_distance = history, float(max_distance)
        self.pretrain_dags: dict[str, float] = {}  # the history's DAGs this query was clustered with
        self.refit_every = int(refit_every)
        self.refit_window = 60  # the predictor fine-tunes on this run's last batches
        self.model = BottleneckModel(seed=seed)
        if self.policy == "learned" and self.pretrain:
            self.model.fit(self.pretrain)
        self.pins: dict[str, int] = {}
        self.knobs = dict(knobs) if knobs is not None else {SOURCE_STAGE: "input"}
        bad = {k: v for k, v in self.knobs.items() if v not in ("input", "shuffle", "state")}
        if bad:
            raise ConfigError(f"a knob's kind must be 'input', 'shuffle' or 'state', got {bad}")
        self.allow_restarts = bool(allow_restarts)
        self.split_budget = bool(split_budget)
        self.applied: dict[str, int] = {SOURCE_STAGE: self.partitions} if SOURCE_STAGE in self.knobs else {}
        self.restarts = 0  # changes of a state knob (each needs a restart)
        self._batches: list[tuple[list[OperatorSample], int, float]] = []  # this run's data batches
        self._expected: list[float] = []  # the rows expected of the batch after each of them
        self._cuts: list[float] = []  # when each batch was cut (admitted), for the arrival rate
        self._fitted_on = 0
        self._since_change = 10**9
        self.last_proposal: dict[str, int] = {}
        self.last_reason: dict[str, str] = {}
        self._recommend_only: str | None = None  # why it may not apply (a query the kit did not build)
        self._blocked: dict[str, str | None] = {}  # knob kind -> why the stream cannot set it, this batch
        self._host = None  # the stream it is plugged into (None in the simulator: every knob applies there)
        self._why = ""  # why the partitions change (the tuner's reason), for the journal

    def plugged(self, host) -> None:
        """Plugged into a stream (:class:`~lmstream_kit.protocol.StreamHost`): where the stream cannot set
        the source's partitions (an attached query), only ``recommend`` and ``frozen`` are allowed."""
        reason = host.parallelism_unsupported("input")
        if reason is not None and self.mode == "apply":
            raise ConfigError(f"a ParallelismTuner on this stream can only recommend: set mode='recommend' "
                              f"(got mode 'apply'; {reason})")
        self._recommend_only = reason
        self._host = host

    def _capped(self, rows: list[Transition]) -> list[Transition]:
        """At most ``pretrain_cap`` transitions (a seeded sample), so that a refit stays light."""
        if len(rows) <= self.pretrain_cap:
            return rows
        import random

        return random.Random(self.seed).sample(rows, self.pretrain_cap)

    def _pretrain_from_history(self, samples: Sequence[OperatorSample]) -> None:
        """Once, at the first batch: this query's cluster of the history becomes pre-training data."""
        source, self.history = self.history, None
        if source is None:
            return
        from .history import History, read_history
        from .pretrain import history_transitions, similar_fingerprints

        if isinstance(source, History):
            table = source.read()
        elif hasattr(source, "num_rows"):
            table = source
        else:
            table = read_history(source)
        self.pretrain_dags = similar_fingerprints(table, samples, max_distance=self.max_distance)
        if self.pretrain_dags:
            self.pretrain = self._capped(self.pretrain + history_transitions(
                table, self.pretrain_dags, split_budget=self.split_budget, busy_share=self.busy_share))
            self.model.fit(self.pretrain)

    # -- live parameters ----------------------------------------------------------------------
    def _apply_mode(self, value: str) -> None:
        if value == "apply" and self._recommend_only:
            raise ConfigError(f"tuner.mode cannot be 'apply' here: {self._recommend_only}")
        old, self.mode = self.mode, value
        self.log_change("mode", value, old=old)

    def _apply_low(self, value: int) -> None:
        if value > self.high:
            raise ConfigError(f"tuner.low must not exceed tuner.high ({self.high}), got {value!r}")
        old, self.low = self.low, value
        self.log_change("low", value, old=old)

    def _apply_high(self, value: int) -> None:
        if value < self.low:
            raise ConfigError(f"tuner.high must not be below tuner.low ({self.low}), got {value!r}")
        old, self.high = self.high, value
        self.log_change("high", value, old=old)

    def _apply_partitions(self, value: int) -> None:
        old, self.partitions = self.partitions, value
        if SOURCE_STAGE in self.knobs:
            self.applied[SOURCE_STAGE] = value
        self._journal_partitions(old, value, why=self._why)  # a journal transaction, the tuner's or by hand
        self.log_change("partitions", value, old=old)

    def pin(self, key: str, parallelism: int) -> None:
        """Hold stage ``key`` at ``parallelism`` (the source stage's is set from the next batch)."""
        p = self.param("partitions").validate(parallelism, label=f"tuner.pin({key!r})")
        old = self.pins.get(key)
        self.pins[key] = p
        self.log_change(f"pin.{key}", p, old=old)
        if key == SOURCE_STAGE and p != self.partitions:
            self.set_param("partitions", p)
        if key in self.knobs:
            self.applied[key] = p

    def release(self, key: str) -> None:
        """Let the tuner move stage ``key`` again."""
        if key in self.pins:
            old = self.pins.pop(key)
            self.log_change(f"pin.{key}", None, old=old)

    # -- the knob: the source stage's partitions (PlannedPartitions' hooks), read when Spark plans ---
    def before_batch(self, ctx: BatchContext) -> Mapping[str, Any] | None:
        super().before_batch(ctx)
        if self.costs is not None and self._cores_from_engine and hasattr(ctx.engine, "cores"):
            try:  # the task slots, so that the cost model prices waves beyond them (they can change on a cluster)
                self.costs.cores = int(ctx.engine.cores()) or None
            except Exception:  # noqa: BLE001  (without it the model assumes no waves)
                pass
        return input_partitions_field(ctx)

    # -- deciding ------------------------------------------------------------------------------
    def after_batch(self, record: Any) -> Mapping[str, Any] | None:
        fields = super().after_batch(record)
        if fields is None:
            return None
        t0 = time.perf_counter()
        out = dict(fields)
        out.update(self.observe(self.last, rows=int(record.rows or 0), budget_s=self._budget(record),
                                behind=record.within_bound is False, processing_s=record.processing_s,
                                expected_rows=self._expected_rows(record)))
        out["tuner_s"] = round(time.perf_counter() - t0, 4)
        return out

    def _expected_rows(self, record: Any) -> float | None:
        """The batch's rows at the arrival rate (rows over the time since the last cut) times the usual
        time between cuts (the median of the last 8), or None before two cuts."""
        cut = getattr(record, "admitted_at", None)
        if cut is None or not math.isfinite(cut):
            return None
        self._cuts = [*self._cuts[-8:], float(cut)]
        gaps = [b - a for a, b in zip(self._cuts, self._cuts[1:]) if b > a]
        if not gaps or not record.rows:
            return None
        return float(record.rows) / gaps[-1] * float(np.median(gaps))

    @staticmethod
    def _budget(record: Any) -> float:
        b = record.bound_s if record.bound_s else record.processing_s
        return float(b) if b and math.isfinite(b) and b > 0 else 0.0

    def observe(self, samples: Sequence[OperatorSample], *, rows: int, budget_s: float,
                behind: bool, processing_s: float | None = None, expected_rows: float | None = None) -> dict[str, Any]:
        """Learn from one batch's ``samples`` and decide (the engine-free core; returns record fields).

        ``behind``: the batch missed its bound (a backlog is being caught up: never scale down).
        ``processing_s``: the batch's processing seconds (the cost model's overhead comes from it).
        ``expected_rows``: the rows a batch holds at the current arrival rate (default ``rows``): a
        batch after a restart or a late one holds a backlog too, which the next batches will not.
        """
        fields: dict[str, Any] = {"tuner_policy": self.policy}
        costed = False  # the cost model has every stage fitted: it plans this batch
        if self.mode == "frozen" or not samples or rows <= 0 or budget_s <= 0:
            fields["tuner_model"] = "frozen" if self.mode == "frozen" else "no data"
            return fields
        self._batches.append((list(samples), rows, budget_s))
        self._batches = self._batches[-200:]
        self._expected = [*self._expected[-7:], float(expected_rows) if expected_rows and expected_rows > 0
                          else float(rows)]
        self._since_change += 1
        source = "ds2"
        if self.policy == "learned":
            if self.history is not None:
                self._pretrain_from_history(samples)
            if self.costs is not None:
                self.costs.observe(samples, processing_s=processing_s)
                costed = self.costs.ready([s.key for s in samples])
            if costed:  # the cost model plans the batch: the per-stage predictor is not needed (nor refitted)
                source = (f"cost model of {len(samples)} stages, fitted on "
                          f"{min(len(self.costs.stages[s.key].observations) for s in samples)} batches of this run")
            else:
                own = transitions(self._batches[-self.refit_window:], split_budget=self.split_budget,
                                  busy_share=self.busy_share)
                batches = len(self._batches)
                if own and (batches - self._fitted_on >= self.refit_every or not self.model.ready):
                    self.model.fit(self.pretrain, own)
                    self._fitted_on = batches
                if self.model.ready:
                    source = (f"learned: {len(self.pretrain)} pre-training transitions"
                              f"{f' of {len(self.pretrain_dags)} similar DAGs' if self.pretrain_dags else ''}, "
                              f"{len(own)} of this run")
        growth = self._growth()
        # what the stream cannot set (asked once per batch): on real Spark a state knob needs 4.2+ and RocksDB
        self._blocked = {kind: self._host.parallelism_unsupported(kind) for kind in ("shuffle", "state")
                         if kind in self.knobs.values()} if self._host is not None else {}
        proposal, reason = self._propose(samples, budget_s, growth, behind, costed)
        fields.update(tuner_model=source, tuner_proposal=proposal, tuner_reason=reason)
        self.last_proposal, self.last_reason = proposal, reason
        if self.mode == "apply":
            changed = False
            state: dict[str, int] = {}
            for key, want in proposal.items():
                if not reason.get(key, "").startswith("apply"):
                    continue
                changed = True
                if key == SOURCE_STAGE:
                    self._why = f"tuner: {reason[key]}"
                    try:
                        self.set_param("partitions", want)
                    finally:
                        self._why = ""
                else:
                    self.log_change(f"parallelism.{key}", want, old=self.applied.get(key))
                self.applied[key] = want
                if self.knobs.get(key) == "state":
                    self.restarts += 1
                    state[key] = want
            if state and self._host is not None:  # Spark keeps one state partition count per query
                self._host.request_state_partitions(max(state.values()), why="tuner: " + "; ".join(
                    f"{k} {reason[k].split(': ', 1)[1]}" for k in sorted(state)))
            if changed:
                self._since_change = 0
        return fields

    def _growth(self) -> float:
        """The next batch's rows over this one's, expected: the recent peak of the rows expected at the
        arrival rate, over this batch's rows (below 1 where this batch held a backlog).  The learned
        tuner also projects the recent trend past its cooldown, so that a ramp is met in one larger
        step rather than one per cooldown (ContTune's "rarer, larger" changes)."""
        rows = self._batches[-1][1] if self._batches else 0
        if not rows or not self._expected:
            return 1.0
        recent = self._expected[-4:]
        peak = max(recent)
        if self.policy == "learned" and self.forecast and len(recent) >= 3:
            slope = float(np.polyfit(np.arange(len(recent)), recent, 1)[0])
            peak = max(peak, recent[-1] + slope * (self.cooldown + 1))
        return peak / rows

    def _propose(self, samples: Sequence[OperatorSample], budget_s: float, growth: float,
                 behind: bool, costed: bool) -> tuple[dict[str, int], dict[str, str]]:
        if costed:
            wants, why = self._costed(samples, budget_s, growth)
        else:
            wants, why = self._per_stage(samples, budget_s, growth), None
        proposal, reason = {}, {}
        for s in samples:
            want = proposal[s.key] = int(wants[s.key])
            kind = self.knobs.get(s.key)
            if s.key in self.pins:
                reason[s.key] = "pinned"
            elif kind is None:
                reason[s.key] = _FIXED_REASON if s.job == 0 else "fixed: not a knob of the lmstream source"
            elif kind == "state" and not self.allow_restarts and want != s.tasks:
                reason[s.key] = "fixed: state-store partitions change only with a restart (allow_restarts=False)"
            elif self._blocked.get(kind) and want != s.tasks:
                reason[s.key] = f"fixed: {self._blocked[kind]}"
            elif want == s.tasks:
                reason[s.key] = f"hold: {why}" if why else "hold: no change needed"
            elif want < s.tasks and behind:
                proposal[s.key] = s.tasks
                reason[s.key] = "hold: the stream is behind its bound, no scale-down while catching up"
            elif self._since_change < self.cooldown:
                reason[s.key] = f"hold: cooldown ({self._since_change} of {self.cooldown} batches since the last change)"
            else:
                verb = "apply" if self.mode == "apply" else "recommend"
                reason[s.key] = f"{verb}: {s.tasks} -> {want}" + (f" ({why})" if why else "")
        return proposal, reason

    def _per_stage(self, samples: Sequence[OperatorSample], budget_s: float, growth: float) -> dict[str, int]:
        """Each stage on its own: the bottleneck model's smallest safe parallelism, else DS2's rule."""
        budgets = stage_budgets(samples, budget_s) if self.split_budget else {s.key: budget_s for s in samples}
        ds2 = {s.key: ds2_parallelism([s], budget_s=budgets[s.key], utilisation=self.utilisation, growth=growth,
                                      low=self.low, high=self.high)[s.key] for s in samples}
        emb = embed(samples) if self.policy == "learned" and self.model.ready else {}
        wants = {}
        for s in samples:
            if s.key in self.pins:
                wants[s.key] = self.pins[s.key]
                continue
            probs = self.model.curve(s.tasks, s.useful_s / budgets[s.key], growth, emb[s.key], low=self.low,
                                     high=self.high) if emb else None
            if probs is not None and probs[-1] >= self.threshold:
                want = ds2[s.key]  # the model knows no parallelism without a bottleneck here: DS2's rule
            elif probs is not None:
                want = self.low + int(np.flatnonzero(probs < self.threshold)[0])
                if want < s.tasks:  # hysteresis: scale down only as far as is clearly safe
                    safe = np.flatnonzero(probs < self.threshold - self.margin)
                    want = min(s.tasks, self.low + int(safe[0])) if safe.size else s.tasks
            else:
                want = ds2[s.key]
            wants[s.key] = want
        return wants

    def _costed(self, samples: Sequence[OperatorSample], budget_s: float,
                growth: float) -> tuple[dict[str, int], str]:
        """The whole batch at once, priced by the cost model: the cheapest vector that fits the budget.

        It changes the vector only when the batch is predicted to miss ``headroom`` times its
        budget at the expected rows, or when the cheapest fitting vector saves at least
        ``down_gain`` of the total now; a change of a ``state`` knob (a restart) only when the free
        knobs cannot fit the budget, or when it saves ``down_gain`` more than they do.
        """
        assert self.costs is not None
        now = {s.key: s.tasks for s in samples}
        free: dict[str, tuple[int, int]] = {}
        restart: dict[str, tuple[int, int]] = {}
        for s in samples:
            kind = self.knobs.get(s.key)
            if s.key in self.pins:
                free[s.key] = restart[s.key] = (self.pins[s.key], self.pins[s.key])
            elif kind in ("input", "shuffle"):
                free[s.key] = restart[s.key] = (self.low, self.high)
            elif kind == "state" and self.allow_restarts:
                restart[s.key] = (self.low, self.high)
        target = self.headroom * budget_s
        predicted = self.costs.processing_s(samples, now, rows_scale=growth)
        best: Allocation = self.costs.allocate(samples, rows_scale=growth, target_s=target, bounds=free)
        if restart != free:
            full = self.costs.allocate(samples, rows_scale=growth, target_s=target, bounds=restart)
            if (full.feasible and not best.feasible) or full.total <= (1 - self.down_gain) * best.total:
                best = full
        total = sum(now.values())
        if predicted > target:
            why = f"cost model: {predicted:.2f} s predicted at {total} tasks, over {target:.2f} s"
            return best.parallelism, why
        if best.total <= (1 - self.down_gain) * total:
            why = f"cost model: {best.total} tasks fit {target:.2f} s ({best.processing_s:.2f} s predicted)"
            return best.parallelism, why
        return now | {k: self.pins[k] for k in self.pins if k in now}, \
            f"cost model: {predicted:.2f} s predicted at {total} tasks, within {target:.2f} s"
