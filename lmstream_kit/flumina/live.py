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
    """

    prefix = "flumina"
    change_phase = BATCH
    PARAMS = (
        Param("workers", int, low=1, label="Flumina workers", step=1,
              doc="Workers of the Flumina plan: the next batch forks (more) or joins (fewer) the workers' "
                  "states, with no restart."),
    )
    FIELDS = {
        "flumina_workers": "workers of the Flumina plan the batch ran on (FluminaControl)",
        "flumina_logic": "the name of the Flumina update function the batch ran under ('initial': the spec's own)",
    }

    def __init__(self, runner: Any = None) -> None:
        super().__init__()
        self._runner = runner
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

    def in_force(self) -> Mapping[str, Any]:
        """What is in force, by journal op (how a restart after a crash ends the open transactions)."""
        runner = self.runner
        if runner is None:
            return {}
        return {"flumina_workers": len(runner.plan.workers), "flumina_logic": runner.logic}

    # ------------------------------------------------------------------ requests
    def _request(self, op: str, old: Any, value: Any, apply: Callable[[Any], None],
                 check: Callable[[Any], None] | None = None, **detail: Any) -> None:
        """Journal ``op``, check it on the runner now (refused: aborted and raised), queue it for the next batch."""
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
        if txn is not None:
            txn.step("prepared")
        with self._lock:  # logged as a change when applied: the batch it starts with carries it
            self._pending.append(_Request(op, value, apply, txn, old, detail))

    def _apply_workers(self, workers: int) -> None:
        """Rescale: from the next batch on, a greedy plan with at most ``workers`` workers."""
        old = self.workers
        with self._lock:  # what the next batch runs on: the last rescale waiting, or the plan in force
            waiting = [r.value for r in self._pending if r.op == "flumina_workers"]
        if workers == (waiting[-1] if waiting else old):
            return  # nothing changes: no transaction

        def plan_for(runner) -> Plan:
            plan = greedy_plan(runner.spec, workers)
            if len(plan.workers) < workers:  # refused: the plan would have fewer workers than asked
                raise ConfigError(f"flumina.workers must be <= {len(plan.workers)} for spec {runner.spec.name} "
                                  f"(one worker per independent group of tags at most), got {workers}")
            return plan

        self._request("flumina_workers", old, workers, lambda runner: runner.replan(plan_for(runner)),
                      check=plan_for)

    def set_plan(self, plan: Plan | Mapping) -> None:
        """Run the next batches on ``plan`` (a Plan for the spec, or a nested ``{"tags", "children"}``)."""
        runner = self._need_runner("set the Flumina plan")
        new = plan if isinstance(plan, Plan) else user_plan(runner.spec, plan)
        if new.spec.tags != runner.spec.tags:
            raise ConfigError(f"plan for {new.spec.name} does not cover the tags of spec {runner.spec.name}")
        tree = {k: v for k, v in new.to_dict().items() if k != "spec"}
        self._request("flumina_plan", len(runner.plan.workers), len(new.workers),
                      lambda r: r.replan(user_plan(r.spec, tree)), plan=repr(str(new)))

    def move_tags(self, tags: Iterable[Any], to: str) -> None:
        """Migrate the state of ``tags`` to worker ``to`` (a worker's name, ``w1`` ...) from the next batch.

        The plan changes owner for them (:func:`moved_plan`); the join of the old plan and the fork
        of the new carry their state to the new worker.  Refused, in one line, where the move breaks
        the plan's rules.
        """
        tags = list(tags)
        runner = self._need_runner(f"move {tags!r}")
        moved_plan(runner.plan, tags, to)  # refused now, before it is journaled as requested
        names = [repr(t) for t in tags]
        self._request("flumina_plan", len(runner.plan.workers), None,
                      lambda r: r.replan(moved_plan(r.plan, tags, to)), check=lambda r: moved_plan(r.plan, tags, to),
                      moved=names, to=to)

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
        if logic == runner.logic:
            raise ConfigError(f"the logic in force is already named {logic!r}: give the new one another name")

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
