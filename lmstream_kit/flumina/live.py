"""Reconfigure a running Flumina program between micro-batches: rescale, migrate, swap its logic.

:class:`FluminaControl` is a live object plugged into a stream that runs a Flumina workload
(:func:`lmstream_kit.workloads.flumina.flumina_workload` plugs one in).  Its changes wait for the
next micro-batch boundary, where the run loop's ``before_batch`` applies them to the workload's
:class:`~lmstream_kit.flumina.batches.BatchRunner`; none needs the query to restart:

- **rescale** (``workers``): the next batches run on a greedy plan with that many workers; the
  workers' states are joined under the old plan and forked under the new one, so scaling up is a
  fork and scaling down a join;
- **migrate** (:meth:`FluminaControl.move_tags`): the state of some tags moves to another worker
  (off a hot one, say): the plan changes owner for them, and join/fork carry their state across;
- **swap the logic** (:meth:`FluminaControl.set_update`): a new update function (or a whole spec
  with the same tags), with an optional state transformer that migrates the joined state to it.

Every one of them equals the sequential run with the change made at that batch boundary, because
``join(fork(s)) == s`` (the laws :func:`~lmstream_kit.flumina.check.check_spec` checks).  Each is a
transaction of the stream's journal: requested and prepared (checked) when asked, applied at the
batch it starts with, committed when that batch completed, or aborted with the reason where it
could not be applied (the stream runs on as it was).

>>> from lmstream_kit.flumina.batches import BatchRunner
>>> from lmstream_kit.flumina.plan import greedy_plan
>>> from lmstream_kit.flumina.spec import Event, value_barrier_spec
>>> spec = value_barrier_spec(3)
>>> control = FluminaControl(BatchRunner(spec, greedy_plan(spec, 3)))
>>> control.workers
3
>>> control.set_param("workers", 2)             # in force from the next batch
>>> control.before_batch(type("Ctx", (), {"batch_id": 4})()), control.workers
({'flumina_workers': 2, 'flumina_logic': 'initial'}, 2)
>>> control.set_param("workers", 0)
Traceback (most recent call last):
...
lmstream_kit.exceptions.ConfigError: flumina.workers must be >= 1, got 0
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..exceptions import ConfigError, one_line
from ..protocol import BATCH, BatchContext, BatchController, Param
from .batches import INITIAL_LOGIC
from .plan import Plan, greedy_plan, tag_key, user_plan
from .spec import Spec

__all__ = ["FluminaControl", "moved_plan"]


def moved_plan(plan: Plan, tags: Iterable[Any], to: str) -> Plan:
    """``plan`` with ``tags`` owned by worker ``to`` (a leaf's name), validated.

    A leaf left without tags is dropped.  A move that breaks the plan's rules (a tag that depends
    on a tag of another leaf, say) is a ConfigError naming the tags.

    >>> from lmstream_kit.flumina.spec import value_barrier_spec
    >>> spec = value_barrier_spec(3)
    >>> print(moved_plan(greedy_plan(spec, 3), ["a2"], "w1"))
    w0 [b] 1 ev/s
      w1 [a0, a2] 2000 ev/s
      w2 [a1] 1000 ev/s
    >>> moved_plan(greedy_plan(spec, 3), ["b"], "w1")     # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: cannot move ['b'] to worker w1: ... depend on each other, but neither ...
    """
    tags = list(tags)
    if not tags:
        raise ConfigError("move at least one tag")
    leaves = {w.name for w in plan.workers}
    if to not in leaves:
        raise ConfigError(f"there is no worker {to!r} to move tags to; workers: {', '.join(sorted(leaves))}")
    for tag in tags:
        plan.owner(tag)  # a tag the plan does not know raises, naming it
    moving = set(tags)

    def tree(node) -> dict | None:
        own = [t for t in node.tags if t not in moving] + (tags if node.name == to else [])
        children = [c for c in (tree(child) for child in node.children) if c is not None]
        if not own and not children and node is not plan.root:
            return None
        return {"tags": sorted(own, key=tag_key), "children": children}

    try:
        return user_plan(plan.spec, tree(plan.root))
    except ConfigError as exc:
        raise ConfigError(f"cannot move {tags!r} to worker {to}: {exc}") from None


class _Request:
    """One change waiting for the next batch: what it does to the runner, and its transaction."""

    def __init__(self, op: str, value: Any, apply: Callable[[Any], None], txn: Any, old: Any = None,
                 detail: Mapping[str, Any] | None = None) -> None:
        self.op, self.value, self.apply, self.txn = op, value, apply, txn
        self.old, self.detail = old, dict(detail or {})


class FluminaControl(BatchController):
    """The live reconfiguration of a Flumina workload's workers and logic (see the module).

    Parameters
    ----------
    runner : BatchRunner, optional
        The runner to reconfigure; plugged into a LiveStream, it is the workload's (read from the
        host's ``batch_program`` once the stream started).
    logics : names, optional
        The program's logics known by name (the runner's :attr:`~.batches.BatchRunner.logics`):
        with them, ``logic`` is a live parameter too (a dashboard menu, ``reconfigure --set
        flumina.logic=NAME``), a swap by name.
    warm : bool
        A rescale first readies Spark for the new plan's workers (the host's ``warm_workers``: the
        partition keys, and a Python worker per task with the pass's modules loaded), so that the
        first batch on the new plan does not pay for them; the journal's ``prepared`` step says
        how long it took (``warm_s``).

    Besides ``workers`` (and ``logic``), ``move`` is a live parameter: ``"a2 -> w1"`` (tags
    separated by commas) migrates the tags' state to a worker, as :meth:`move_tags` does; it reads
    as the last move asked.
    """

    prefix = "flumina"
    change_phase = BATCH
    PARAMS = (
        Param("workers", int, low=1, label="Flumina workers", step=1,
              doc="Workers of the Flumina plan: the next batch forks (more) or joins (fewer) the workers' "
                  "states, with no restart."),
        Param("move", str, label="move tags", hint="a2 -> w1",
              doc="Migrate tags' state to another worker from the next batch: 'a2 -> w1' (tags separated by "
                  "commas; the workers are the plan's, w1, w2, ...), with no restart."),
    )
    FIELDS = {
        "flumina_workers": "workers of the Flumina plan the batch ran on (FluminaControl)",
        "flumina_logic": "the name of the Flumina update function the batch ran under ('initial': the spec's own)",
    }

    def __init__(self, runner: Any = None, *, logics: Iterable[str] = (), warm: bool = True) -> None:
        super().__init__()
        self.warm = bool(warm)  # a rescale readies the host's Spark workers before it is queued
        names = tuple(dict.fromkeys([INITIAL_LOGIC, *map(str, logics)]))
        if len(names) > 1:  # this instance's parameters: the class's and the swap by name
            self.PARAMS = (*type(self).PARAMS, Param(
                "logic", str, choices=names, label="Flumina logic",
                doc="The update function the next batches run under, by name; the state goes across with the "
                    "logic's own transform, with no restart."))
        self._runner = runner
        self._move = ""
        self._host: Any = None
        self._lock = threading.Lock()
        self._pending: list[_Request] = []
        self._applied: list[tuple[int, str, Any]] = []  # (batch id, op, transaction) awaiting their batch's end

    # ------------------------------------------------------------------ the runner
    @property
    def runner(self) -> Any:
        """The runner reconfigured (None before the stream started)."""
        if self._runner is None and self._host is not None:
            self._runner = getattr(getattr(self._host, "batch_program", None), "runner", None)
        return self._runner

    def _need_runner(self, what: str) -> Any:
        runner = self.runner
        if runner is None:
            raise ConfigError(f"cannot {what}: the Flumina program has not started yet (start the stream first)")
        return runner

    def plugged(self, host: Any) -> None:
        workload = getattr(host, "workload", None)
        if workload is not None and getattr(workload, "batch_program", None) is None:
            raise ConfigError(f"workload {workload.name} runs no Flumina program: a FluminaControl has nothing to "
                              "reconfigure")
        self._host = host

    @property
    def workers(self) -> int | None:
        runner = self.runner
        return len(runner.plan.workers) if runner is not None else None

    @property
    def logic(self) -> str | None:
        runner = self.runner
        return runner.logic if runner is not None else None

    @property
    def move(self) -> str:
        """The last move asked (``"a2 -> w1"``; empty before any)."""
        return self._move

    def in_force(self) -> Mapping[str, Any]:
        """What is in force, by journal op (how a restart after a crash ends the open transactions)."""
        runner = self.runner
        if runner is None:
            return {}
        return {"flumina_workers": len(runner.plan.workers), "flumina_logic": runner.logic}

    # ------------------------------------------------------------------ requests
    def _request(self, op: str, old: Any, value: Any, apply: Callable[[Any], None],
                 check: Callable[[Any], None] | None = None, warm: int | None = None, **detail: Any) -> None:
        """Journal ``op``, check it on the runner now (refused: aborted and raised), queue it for the next batch.

        ``warm``: the workers of the plan it makes; the host readies Spark for them first (its
        ``warm_workers``), so that the first batch on the new plan does not pay for that.
        """
        journal = getattr(self._host, "journal", None)
        txn = journal.begin(op, old=old, value=value, **detail) if journal is not None else None
        try:
            runner = self._need_runner(f"change {op} to {value!r}")
            if check is not None:
                check(runner)
        except ConfigError as exc:
            if txn is not None:
                txn.abort(one_line(exc))
            raise
        readied: dict[str, Any] = {}
        if self.warm and warm is not None and warm > 1 and getattr(self._host, "warm_workers", None) is not None:
            try:
                warmed = self._host.warm_workers(warm)
                readied = {"warm_s": round(warmed, 3)} if warmed is not None else {}
            except Exception as exc:  # noqa: BLE001  (only a head start: the batch readies Spark itself)
                readied = {"warm_error": f"{type(exc).__name__}: {one_line(exc)}"}
        if txn is not None:
            txn.step("prepared", **readied)
        with self._lock:  # logged as a change when applied: the batch it starts with carries it
            self._pending.append(_Request(op, value, apply, txn, old, detail))

    def _next(self, op: str, in_force: Any) -> Any:
        """What the next batch runs with for ``op``: the last such change waiting, or what is in force."""
        with self._lock:
            waiting = [r.value for r in self._pending if r.op == op]
        return waiting[-1] if waiting else in_force

    def _apply_workers(self, workers: int) -> None:
        """Rescale: from the next batch on, a greedy plan with at most ``workers`` workers."""
        old = self.workers
        if workers == self._next("flumina_workers", old):
            return  # nothing changes: no transaction

        def plan_for(runner) -> Plan:
            plan = greedy_plan(runner.spec, workers)
            if len(plan.workers) < workers:  # refused: the plan would have fewer workers than asked
                raise ConfigError(f"flumina.workers must be <= {len(plan.workers)} for spec {runner.spec.name} "
                                  f"(one worker per independent group of tags at most), got {workers}")
            return plan

        self._request("flumina_workers", old, workers, lambda runner: runner.replan(plan_for(runner)),
                      check=plan_for, warm=workers)

    def set_plan(self, plan: Plan | Mapping) -> None:
        """Run the next batches on ``plan`` (a Plan for the spec, or a nested ``{"tags", "children"}``)."""
        runner = self._need_runner("set the Flumina plan")
        new = plan if isinstance(plan, Plan) else user_plan(runner.spec, plan)
        if new.spec.tags != runner.spec.tags:
            raise ConfigError(f"plan for {new.spec.name} does not cover the tags of spec {runner.spec.name}")
        tree = {k: v for k, v in new.to_dict().items() if k != "spec"}
        self._request("flumina_plan", len(runner.plan.workers), len(new.workers),
                      lambda r: r.replan(user_plan(r.spec, tree)), warm=len(new.workers), plan=repr(str(new)))

    def move_tags(self, tags: Iterable[Any], to: str) -> None:
        """Migrate the state of ``tags`` to worker ``to`` (a worker's name, ``w1`` ...) from the next batch.

        The plan changes owner for them (:func:`moved_plan`); the join of the old plan and the fork
        of the new carry their state to the new worker.  Refused, in one line, where the move breaks
        the plan's rules.
        """
        tags = list(tags)
        runner = self._need_runner(f"move {tags!r}")
        new = moved_plan(runner.plan, tags, to)  # refused now, before it is journaled as requested
        with self._lock:
            idle = not self._pending
        if idle and new.to_dict() == runner.plan.to_dict():
            return  # the tags are that worker's already: no transaction
        names = [repr(t) for t in tags]
        self._request("flumina_plan", len(runner.plan.workers), None,
                      lambda r: r.replan(moved_plan(r.plan, tags, to)), check=lambda r: moved_plan(r.plan, tags, to),
                      moved=names, to=to)

    def _apply_move(self, text: str) -> None:
        """``"a2, a3 -> w1"``: :meth:`move_tags` with the tags named as the spec prints them."""
        text = text.strip()
        if not text:
            return  # an emptied box moves nothing
        names, sep, to = text.partition("->")
        if not sep or not to.strip() or not names.strip():
            raise ConfigError(f"flumina.move takes 'TAG[, TAG...] -> WORKER', e.g. 'a2 -> w1', got {text!r}")
        runner = self._need_runner(f"move {names.strip()}")
        known = {str(t): t for t in runner.spec.tags}
        tags = []
        for name in (n.strip() for n in names.split(",")):
            if name not in known:
                raise ConfigError(f"flumina.move: spec {runner.spec.name} has no tag {name!r}; its tags: "
                                  f"{', '.join(sorted(known, key=lambda k: tag_key(known[k])))}")
            tags.append(known[name])
        self.move_tags(tags, to.strip())
        self._move = f"{', '.join(map(str, tags))} -> {to.strip()}"

    def _apply_logic(self, name: str) -> None:
        """Swap to the logic ``name`` (one of the runner's :attr:`~.batches.BatchRunner.logics`)."""
        runner = self._need_runner(f"swap the logic to {name!r}")
        if name not in runner.logics:
            raise ConfigError(f"flumina.logic {name!r} is not a logic of this program; its logics: "
                              f"{', '.join(runner.logics)}")
        if name == self._next("flumina_logic", runner.logic):
            return  # nothing changes: no transaction
        spec, transform = runner.logics[name]
        self.set_update(spec=spec, name=name, transform=transform)

    def set_update(self, update: Callable | None = None, *, spec: Spec | None = None, name: str | None = None,
                   transform: Callable[[Any], Any] | None = None) -> None:
        """Swap the update function from the next batch, with no restart.

        ``update(state, event) -> (state, outputs)`` replaces the spec's own; or ``spec``, a whole
        spec with the same tags (where the state's shape changes, its fork and join must too).
        ``transform(state) -> state`` migrates the workers' joined state to the new logic at the
        boundary (None: the state stays as it is); a transform that raises aborts the swap and the
        stream runs on under the old logic; so does one that Spark's tasks cannot load (checked with
        one task when asked), and one whose first batch fails under it (that batch runs again under
        the old logic, and the swap is aborted with the error).  ``name`` names the logic in records, the journal and
        the snapshots (default: the function's name); a restart after a crash must be started with
        the logic its saved state was made by, or with ``migrations`` from it
        (:class:`~lmstream_kit.flumina.batches.BatchRunner`).
        """
        if (update is None) == (spec is None):
            raise ConfigError("give either update= (a function) or spec= (a whole spec), not both or neither")
        if update is not None and not callable(update):
            raise ConfigError(f"update must be a function (state, event) -> (state, outputs), got {update!r}")
        if spec is not None and not isinstance(spec, Spec):
            raise ConfigError(f"spec must be a Flumina Spec, got {spec!r}")
        if transform is not None and not callable(transform):
            raise ConfigError(f"transform must be a function state -> state, got {transform!r}")
        fn = update if update is not None else spec.update
        logic = str(name or getattr(fn, "__name__", None) or "update")
        runner = self._need_runner(f"swap the update function to {logic!r}")
        if logic == self._next("flumina_logic", runner.logic):
            raise ConfigError(f"the logic in force is already named {logic!r}: give the new one another name")
        if logic in runner.logics and runner.logics[logic][0] is not spec:
            raise ConfigError(f"{logic!r} names a logic this program declares: swap to it by name "
                              f"(flumina.logic={logic}), or give the new one another name")

        def new_spec(r) -> Spec:
            s = spec if spec is not None else dataclasses.replace(r.spec, update=update)
            if s.tags != r.spec.tags:
                raise ConfigError(f"spec {s.name} has other tags than spec {r.spec.name}: the logic swap keeps the tags")
            return s

        def check(r) -> None:
            new_spec(r)
            # the update runs in Spark's tasks: one that they cannot load (a function of a module the
            # executors do not have) is refused now, not when the next batch fails on it
            reason = getattr(self._host, "task_function_unsupported", lambda fn: None)(fn)
            if reason is not None:
                raise ConfigError(f"update {logic!r} cannot run in Spark's tasks: {reason}")

        self._request("flumina_logic", runner.logic, logic,
                      lambda r: r.swap(new_spec(r), logic=logic, transform=transform), check=check,
                      transform=getattr(transform, "__name__", "given") if transform is not None else None)

    # ------------------------------------------------------------------ per-batch hooks
    def before_batch(self, ctx: BatchContext) -> Mapping[str, Any] | None:
        with self._lock:
            pending, self._pending = self._pending, []
        runner = self.runner
        if runner is None:
            return None
        for req in pending:
            try:
                req.apply(runner)
            except Exception as exc:  # noqa: BLE001  (a transform or a plan that fails: the stream runs on as it was)
                why = one_line(exc) if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {one_line(exc)}"
                reason = f"applying {req.op} = {req.value!r} at batch {ctx.batch_id} failed: {why}"
                if req.txn is not None:
                    req.txn.abort(reason, batch_id=int(ctx.batch_id))
                self.log_change(req.op.removeprefix("flumina_"), None, aborted=reason, requested=req.value)
                continue
            self.log_change(req.op.removeprefix("flumina_"), req.value, old=req.old, **req.detail)
            if req.txn is not None:
                req.txn.step("applied", batch_id=int(ctx.batch_id), workers=len(runner.plan.workers))
                with self._lock:
                    self._applied.append((int(ctx.batch_id), req.op, req.txn))
        return {"flumina_workers": len(runner.plan.workers), "flumina_logic": runner.logic}

    def after_batch(self, record: Any) -> Mapping[str, Any] | None:
        batch = int(record.batch_id)
        runner = self.runner
        failed = getattr(runner, "swap_failed", None)
        with self._lock:
            done = [(at, op, txn) for at, op, txn in self._applied if at <= batch]
            self._applied = [(at, op, txn) for at, op, txn in self._applied if at > batch]
        for at, op, txn in done:
            if op == "flumina_logic" and failed is not None and failed[0] == at:
                reason = f"logic {failed[1]!r} failed on batch {at}, which ran again under {runner.logic!r}: {failed[2]}"
                txn.abort(reason, batch_id=batch)
                self.log_change("logic", runner.logic, aborted=reason, requested=failed[1])
            else:
                txn.step("committed", batch_id=batch)
        return {"flumina_logic": runner.logic} if runner is not None else None
