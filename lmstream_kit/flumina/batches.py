"""Micro-batch by micro-batch: a plan's worker states kept between batches, replay-safe by batch id.

A replayed batch (Spark runs a batch again after a failure, with the same id) starts from the
states before it, so it gives the same states and outputs; snapshots on disk carry them across
restarts.  Each batch runs in passes (:mod:`.speculate`); ``map_workers`` is where an engine runs
the workers of a pass in parallel.

>>> from lmstream_kit.flumina.plan import greedy_plan
>>> from lmstream_kit.flumina.spec import Event, value_barrier_spec
>>> spec = value_barrier_spec(2)
>>> runner = BatchRunner(spec, greedy_plan(spec, 2))
>>> [o for _, o in runner.run(0, [Event("a0", 1, 5), Event("a1", 2, 7)])]
[]
>>> [o for _, o in runner.run(1, [Event("b", 3), Event("a0", 4, 1)])], runner.state()
([('b', 3, 12)], 1)
>>> [o for _, o in runner.run(1, [Event("b", 3), Event("a0", 4, 1)])], runner.state()   # replayed
([('b', 3, 12)], 1)
>>> runner.last.passes, runner.last.epochs
(1, 2)
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..exceptions import ConfigError, error_line
from .plan import Plan, user_plan
from .run import fork_states, join_states
from .spec import Event, Spec
from .speculate import BatchResult, MapWorkers, run_batch

__all__ = ["INITIAL_LOGIC", "PLAN_FILE", "BatchRunner"]

#: the name of a spec's own update function, as snapshots record the logic their states were made by
INITIAL_LOGIC = "initial"

#: the plan the snapshots belong to, written beside them (the dashboard's Flumina panel draws it)
PLAN_FILE = "flumina_plan.json"


class BatchRunner:
    """Runs a spec on a plan batch by batch: each micro-batch's events, from the states the last left.

    Parameters
    ----------
    spec, plan : the specification and its plan.
    snapshots : path, optional
        A directory where the states after every batch are kept (``<batch_id>.pkl``, the last two),
        so that a restarted run continues from the batch Spark's checkpoint committed.
    logic : str
        The name of ``spec``'s update function (the snapshots record it).
    migrations : ``{logic: transform}``, optional
        How a state saved under another logic becomes a state of this one.
    logics : ``{name: (spec, transform)}``, optional
        Logics known by name: what a swap by name takes (:meth:`FluminaControl.set_param`
        ``("logic", name)``), and what a restart takes when its newest snapshot was made by one of
        them (so a run restarted after a swap continues under the swapped-in logic, with no option
        to remember).  ``transform`` migrates a state of any other of them to this one (None: the
        state is kept as it is, the logics share its shape).  ``logic`` itself is one of them.
    """

    def __init__(self, spec: Spec, plan: Plan, *, snapshots: str | Path | None = None, logic: str = INITIAL_LOGIC,
                 migrations: Mapping[str, Callable[[Any], Any]] | None = None,
                 logics: Mapping[str, tuple[Spec, Callable[[Any], Any] | None]] | None = None) -> None:
        if plan.spec.tags != spec.tags:
            raise ConfigError(f"plan for {plan.spec.name} does not cover the tags of spec {spec.name}")
        self.spec, self.plan = spec, plan
        self.snapshots = Path(snapshots) if snapshots is not None else None
        self.logic = str(logic)  # the name of the update function in force (snapshots carry it)
        self.migrations = dict(migrations or {})  # {logic: transform} for states saved under another logic
        self.logics = {str(k): (v[0], v[1]) for k, v in (logics or {}).items()}
        self.logics.setdefault(self.logic, (spec, None))
        for name, (other, _) in self.logics.items():
            if other.tags != spec.tags:
                raise ConfigError(f"logic {name!r} (spec {other.name}) has other tags than spec {spec.name}: "
                                  "the logics of one program share its tags")
        self.last_batch: int | None = None  # the last batch run
        self.last: BatchResult | None = None  # what it took (passes, epochs, events)
        self._states = fork_states(spec, plan, spec.init())  # after the last batch
        self._before: dict[str, Any] = dict(self._states)  # before the last batch (a replay starts here)
        # what a snapshot says the states before the last batch were: (states, logic, plan as a dict);
        # differs from _before only for the first batch after a logic swap (it had not committed yet)
        self._saved_before: tuple[dict, str, dict] | None = None
        # (spec, plan, logic, states, before) before a swap no batch ran under yet: what its first batch
        # goes back to if it fails, and the replay state that batch's snapshot keeps
        self._undo: tuple | None = None
        #: ``(batch id, logic, error)`` of the last swap whose first batch failed under it and ran under the old logic
        self.swap_failed: tuple[int, str, str] | None = None
        self._refused: dict[str, str] = {}  # "states"/"before": why they cannot run under this logic

    # -- running -------------------------------------------------------------------------------
    def run(self, batch_id: int, events: Iterable[Event] | None = None, *,
            map_workers: MapWorkers | None = None) -> list[tuple[Any, Any]]:
        """Run one micro-batch; returns its ``(event, output)`` pairs (as :func:`~.run.run_plan` orders them).

        ``events`` for a run in this process, or an engine's ``map_workers`` that reads the batch
        itself (:func:`lmstream_kit.engine.flumina.spark_workers`).  The same ``batch_id`` as the last
        batch replays it from the states before it; an older one is a ConfigError (Spark replays at
        most the batch it had not committed).
        """
        batch_id = int(batch_id)
        if self.last_batch is not None and batch_id < self.last_batch:
            raise ConfigError(f"batch {batch_id} is older than the last batch run ({self.last_batch}): "
                              "only the last batch can be replayed")
        replay = batch_id == self.last_batch
        which = "before" if replay else "states"
        if which in self._refused:
            raise ConfigError(self._refused[which])
        start = self._before if replay else self._states
        try:
            result = run_batch(self.spec, self.plan, events, states=start, map_workers=map_workers)
        except Exception as exc:  # noqa: BLE001  (the new logic failed on the batch: the old one runs it)
            if self._undo is None or replay:
                raise
            failed = self.logic
            self.spec, self.plan, self.logic, self._states, self._before = self._undo
            self._undo = None
            self.swap_failed = (batch_id, failed, error_line(exc))
            return self.run(batch_id, events, map_workers=map_workers)
        here = (dict(start), self.logic, self.plan.to_dict())
        if replay:
            saved_before = self._saved_before or here
        elif self._undo is not None:  # the first batch after a swap: a restart that does not take it replays
            _, plan0, logic0, states0, _ = self._undo  # this batch from the old logic's states
            saved_before = (dict(states0), logic0, plan0.to_dict())
        else:
            saved_before = here
        self._before, self._states, self.last_batch = dict(start), dict(result.states), batch_id
        self._saved_before, self._undo = saved_before, None
        self._refused.clear()
        self.last = result
        if self.snapshots is not None:
            self._save(batch_id, self._states, saved_before)
        return result.outputs

    def swap(self, spec: Spec, *, logic: str, transform: Callable[[Any], Any] | None = None) -> BatchRunner:
        """Run the next batches with ``spec`` (a new update function, named ``logic``).

        The workers' states are joined, ``transform(state)`` migrates the joined state to the new
        logic (None: it stays as it is), and the result is forked under the same plan.  Call it
        between batches.  The snapshot of the next batch keeps the states before it under the old
        logic, so a restart that does not take the swap (a crash before the batch committed)
        replays that batch as it was; a restart under the new logic migrates them with
        ``migrations`` (see :meth:`restore`).  A transform that raises changes nothing; where the
        first batch under the new logic fails, it runs again under the old one, which stays in
        force (:attr:`swap_failed` says so).
        """
        if spec.tags != self.spec.tags:
            raise ConfigError(f"spec {spec.name} has other tags than spec {self.spec.name}: a swap keeps the tags "
                              "(a new plan is a replan)")
        plan = Plan(spec, self.plan.root, rates=self.plan.rates)

        def migrate(states: dict) -> dict:
            joined = join_states(self.spec, self.plan, states)
            return fork_states(spec, plan, transform(joined) if transform is not None else joined)

        states, before = migrate(self._states), migrate(self._before)  # raises before anything changed
        if self._undo is None:
            self._undo = (self.spec, self.plan, self.logic, dict(self._states), dict(self._before))
        self.spec, self.plan, self.logic = spec, plan, str(logic)
        self._states, self._before = states, before
        self._refused.clear()
        return self

    def state(self) -> Any:
        """The workers' states after the last batch, joined into one."""
        return join_states(self.spec, self.plan, self._states)

    @property
    def worker_states(self) -> dict[str, Any]:
        return dict(self._states)

    def replan(self, plan: Plan) -> BatchRunner:
        """Run the next batches on ``plan``: the states are joined under the old plan and forked under the new.

        More workers is a fork (scale up), fewer a join (scale down); the result equals the
        sequential run either way, because ``join(fork(s)) == s``.  Call it between batches: a replay
        of the last batch after it runs that batch again on the new plan, from the states before it.
        """
        if plan.spec.tags != self.spec.tags:
            raise ConfigError(f"plan for {plan.spec.name} does not cover the tags of spec {self.spec.name}")
        if plan.to_dict() == self.plan.to_dict():
            return self
        old = self.plan
        self._states = fork_states(self.spec, plan, join_states(self.spec, old, self._states))
        self._before = fork_states(self.spec, plan, join_states(self.spec, old, self._before))
        if self._undo is not None:  # a swap waits for its first batch: going back to it keeps the new plan
            spec0, plan0, logic0, states0, before0 = self._undo
            plan1 = Plan(spec0, plan.root, rates=plan.rates)
            self._undo = (spec0, plan1, logic0, fork_states(spec0, plan1, join_states(spec0, plan0, states0)),
                          fork_states(spec0, plan1, join_states(spec0, plan0, before0)))
        self.plan = plan
        self.write_plan()
        return self

    def write_plan(self) -> None:
        """Write the plan beside the snapshots (:data:`PLAN_FILE`; nothing without a snapshot directory)."""
        if self.snapshots is None:
            return
        import json

        self.snapshots.mkdir(parents=True, exist_ok=True)
        tmp = self.snapshots / f".{PLAN_FILE}.tmp"
        tmp.write_text(json.dumps(self.plan.to_dict(), indent=1, default=repr))
        os.replace(tmp, self.snapshots / PLAN_FILE)

    # -- snapshots -----------------------------------------------------------------------------
    def _save(self, batch_id: int, states: dict, before: tuple[dict, str, dict]) -> None:
        self.snapshots.mkdir(parents=True, exist_ok=True)
        final = self.snapshots / f"{batch_id}.pkl"
        tmp = self.snapshots / f".{batch_id}.pkl.tmp"
        saved = {"batch_id": batch_id, "plan": self.plan.to_dict(), "states": states, "logic": self.logic,
                 "before": before[0], "before_logic": before[1], "before_plan": before[2]}
        with open(tmp, "wb") as f:
            pickle.dump(saved, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        for old in self._snapshot_ids()[:-2]:
            (self.snapshots / f"{old}.pkl").unlink(missing_ok=True)

    def _snapshot_ids(self) -> list[int]:
        if self.snapshots is None or not self.snapshots.is_dir():
            return []
        return sorted(int(p.stem) for p in self.snapshots.glob("*.pkl") if p.stem.isdigit())

    def restore(self) -> BatchRunner:
        """Continue from the newest snapshot, without asking Spark which batch it committed.

        The snapshot of batch ``N`` holds the states before and after it, so the next batch runs
        from the states after ``N``, and ``N`` run again (Spark replays the batch it had not
        committed) from the states before it.  No snapshot: from the start.  A snapshot saved under
        another plan is joined under that plan and forked under this one.  A snapshot made by one of
        :attr:`logics` other than this runner's (a swap by name before the restart) makes that logic
        the one in force, unless ``migrations`` says how to bring its state to this runner's.
        Writes the plan beside the snapshots (:data:`PLAN_FILE`).
        """
        ids = self._snapshot_ids()
        if ids:
            saved = self._read(ids[-1])
            self._adopt(saved["logic"])
            saved = self._load(ids[-1], saved)
            self._states, self._before = dict(saved["states"]), dict(saved["before"])
            self.last_batch = saved["batch_id"]
            self._refused = dict(saved["refused"])
        self.write_plan()
        return self

    def _read(self, batch_id: int) -> dict:
        """The snapshot of ``batch_id`` as saved (older snapshots get the fields they lacked)."""
        with open(self.snapshots / f"{batch_id}.pkl", "rb") as f:
            saved = pickle.load(f)
        saved.setdefault("logic", INITIAL_LOGIC)
        saved.setdefault("before_logic", saved["logic"])
        saved.setdefault("before_plan", saved["plan"])
        return saved

    def _adopt(self, logic: str) -> None:
        """Run under ``logic``, one of :attr:`logics`, where a saved state was made by it (see :meth:`restore`)."""
        if logic == self.logic or logic in self.migrations or logic not in self.logics:
            return
        spec = self.logics[logic][0]
        self.spec, self.plan, self.logic = spec, Plan(spec, self.plan.root, rates=self.plan.rates), logic
        self._states = fork_states(spec, self.plan, spec.init())
        self._before = dict(self._states)

    def _migration(self, logic: str) -> Callable[[Any], Any] | None:
        """How a state made by ``logic`` becomes one of the logic in force (None: it cannot)."""
        if logic in self.migrations:
            return self.migrations[logic]
        if logic in self.logics and self.logic in self.logics:  # both known by name: the one in force's transform
            return self.logics[self.logic][1] or (lambda state: state)
        return None

    def _load(self, batch_id: int, saved: dict | None = None) -> dict:
        """The snapshot of ``batch_id``, its states re-forked onto this runner's plan and logic.

        States saved under another plan are joined under that plan and forked under this one, so a
        restart with another parallelism (or a plan of the user's) continues from the same state.
        States saved under another logic (a swap, :meth:`swap`) are migrated with this runner's
        ``migrations[logic]``, or, for one of :attr:`logics`, with the transform of the logic in force;
        without either they are refused (``saved["refused"]``: the reason,
        raised when a batch would start from them), never run under a logic they were not made for.
        """
        saved = dict(saved if saved is not None else self._read(batch_id))
        saved["refused"] = {}
        for key, logic_key, plan_key, when in (("states", "logic", "plan", "after"),
                                               ("before", "before_logic", "before_plan", "before")):
            logic = saved[logic_key]
            migrate = self._migration(logic) if logic != self.logic else None
            if logic != self.logic and migrate is None:
                saved["refused"][key] = (
                    f"the Flumina state {when} batch {batch_id} was made by logic {logic!r}, but this run's logic "
                    f"is {self.logic!r}: start it with that update function, or give migrations={{{logic!r}: "
                    "transform}")
                continue
            if saved[plan_key] != self.plan.to_dict() or logic != self.logic:
                try:
                    old = user_plan(self.spec, saved[plan_key])
                except ConfigError as exc:
                    raise ConfigError(f"the state saved after batch {batch_id} belongs to a plan that does not fit "
                                      f"spec {self.spec.name}: {exc}") from None
                joined = join_states(self.spec, old, saved[key])
                if logic != self.logic:
                    joined = migrate(joined)
                saved[key] = fork_states(self.spec, self.plan, joined)
        return saved

    def resume(self, committed: int | None) -> BatchRunner:
        """Continue after batch ``committed`` (Spark's last committed batch; None: from the start).

        Loads the states saved after that batch; the batch after it then runs from them, also when
        Spark replays it.  A missing snapshot is a ConfigError naming the batch.
        """
        if committed is None:
            return self
        path = self.snapshots / f"{committed}.pkl" if self.snapshots is not None else None
        if path is None or not path.is_file():
            raise ConfigError(f"no Flumina state saved after batch {committed} in {self.snapshots}")
        saved = self._read(committed)
        self._adopt(saved["logic"])
        saved = self._load(committed, saved)
        self._states = dict(saved["states"])
        self._before = dict(self._states)
        self.last_batch = committed
        reason = saved["refused"].get("states")
        self._refused = {"states": reason, "before": reason} if reason else {}
        return self
