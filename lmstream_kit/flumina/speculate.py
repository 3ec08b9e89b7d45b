"""A whole micro-batch per pass: workers run every epoch at once on guessed fork states, the driver checks.

Spark offers no cheap way for the tasks of one job to meet at a barrier (``BarrierTaskContext.allGather``
costs about a second here), and a job per synchronising event costs its fixed start-up each time.  So a
micro-batch runs in *passes*, each one engine job in which every worker processes all of its events:

* the events are cut into *epochs* by the synchronising events (``sync 0`` ends epoch 0, and so on);
* a worker runs its events of every epoch; at a sync it cannot see the other workers' states, so it
  *guesses* them (their states forked at the last sync it resolved, or, from the second pass on, their
  states the previous pass reported), joins, updates and forks as the plan says, and goes on from its
  share of that fork;
* the driver then replays the syncs on the states the workers *reported*: from the true states at the
  start of the pass it joins, updates (the sync's outputs are computed here, once) and forks, epoch by
  epoch, and checks that every worker began the next epoch on exactly the state it forked.  Up to the
  first epoch where a guess was wrong everything is final; the next pass starts there, from the true
  states, with the reported states as better guesses.

Each pass makes at least one more epoch final, so a batch takes at most ``epochs`` passes and the result
is that of :func:`~lmstream_kit.flumina.run.run_plan` (so of the sequential run) whatever the guesses.
How many passes it takes depends on the spec: one where a fork gives the workers states that do not
depend on the other workers' contributions (value barrier, max temperature, page view), two where the
sync feeds back a value computed from every worker that the later updates read, but that value does
not depend on what it feeds (fraud detection's threshold, outlier detection's reference set).

States are compared with ``==`` (so they must compare by value, as Python numbers, tuples, dicts and
dataclasses do); where ``==`` does not give a bool (numpy arrays), with their pickles.

>>> from lmstream_kit.flumina.plan import greedy_plan
>>> from lmstream_kit.flumina.examples import EXAMPLES
>>> from lmstream_kit.flumina.run import run_plan
>>> spec = EXAMPLES.get("fraud_detection").spec(2)
>>> events = EXAMPLES.get("fraud_detection").events(400, 2, 0)
>>> result = run_batch(spec, greedy_plan(spec, 2), events)
>>> result.passes, result.epochs, result.outputs == run_plan(spec, greedy_plan(spec, 2), events)[1]
(2, 21, True)
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import ConfigError
from .plan import Plan
from .run import fork_states, join_states
from .spec import Event, Spec, ordered

__all__ = ["BatchResult", "MapWorkers", "WorkerReport", "WorkerTask", "in_process_workers", "resolve",
           "run_batch", "run_pass", "run_worker", "same_state", "worker_events"]


@dataclass(frozen=True)
class WorkerTask:
    """What one pass asks of a ``worker``: run from epoch ``start`` on the true states ``vector`` (every
    worker's state at the start of that epoch), with ``hints[k]``, the other workers' states at the end
    of epoch ``k`` as the last pass reported them, as guesses at the syncs."""

    worker: str
    start: int
    vector: Mapping[str, Any]
    hints: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    report_syncs: bool = False


@dataclass
class WorkerReport:
    """What a worker did in one pass: the state it began each epoch after ``start`` on (``starts``), its
    state at the end of each epoch from ``start`` on (``ends``), its outputs as ``(epoch, event, output)``,
    the synchronising events it saw (when asked) and how many events it processed."""

    worker: str
    start: int
    starts: dict[int, Any]
    ends: dict[int, Any]
    outputs: list[tuple[int, Event, Any]]
    syncs: list[Event]
    events: int = 0


def same_state(a: Any, b: Any) -> bool:
    """Whether two states are equal: ``==`` when it gives a bool, else their pickles.

    >>> same_state({"a": 1}, {"a": 1}), same_state((1, 2), (1, 3))
    (True, False)
    """
    try:
        eq = a == b
        if isinstance(eq, bool):
            return eq
    except Exception:
        pass
    return pickle.dumps(a) == pickle.dumps(b)


def run_worker(spec: Spec, plan: Plan, task: WorkerTask, events: Iterable[Event]) -> WorkerReport:
    """Run one worker's events for one pass.

    ``events``: the worker's own events and *every* synchronising event, in the sequential order (by
    timestamp, ties in arrival order).  Events before epoch ``task.start`` are skipped (the driver has
    them already); at each sync from there on the worker guesses the other states, joins, updates and
    forks as the plan says, and goes on from its share.
    """
    worker, start = task.worker, task.start
    if worker not in {w.name for w in plan.workers}:
        raise ConfigError(f"{worker!r} is not a worker of plan {plan.spec.name}")
    owner = {tag: plan.owner(tag) for tag in spec.tags}
    under = {n.name: frozenset(plan.leaves_under(n.name)) for n in plan.nodes if not n.is_leaf}
    report = WorkerReport(worker, start, {}, {}, [], [])
    vector = dict(task.vector)
    state = vector[worker]
    epoch, seen = 0, 0
    update = spec.update
    for event in events:
        node = owner.get(event.tag)
        if node == worker:
            if epoch >= start:
                state, out = update(state, event)
                for o in out:
                    report.outputs.append((epoch, event, o))
                seen += 1
            continue
        if node not in under:
            raise ConfigError(f"event {event!r} belongs to worker {node!r}, not to {worker!r}"
                              if node is not None else f"spec {spec.name}: event {event!r} has a tag it does not declare")
        if task.report_syncs:
            report.syncs.append(event)
        if epoch >= start:
            report.ends[epoch] = state
            if worker in under[node]:
                guess = dict(vector)
                guess.update(task.hints.get(epoch, {}))
                guess[worker] = state
                joined = join_states(spec, plan, guess, node)
                joined, _ = update(joined, event)
                forked = fork_states(spec, plan, joined, node)
                vector.update(forked)
                state = forked[worker]
        epoch += 1
        if epoch > start:
            report.starts[epoch] = state
    if epoch >= start:
        report.ends[epoch] = state
    report.events = seen
    return report


@dataclass
class Resolution:
    """The driver's check of one pass: epochs ``start..valid-1`` are final; ``done`` when all are."""

    valid: int
    done: bool
    vector: dict[str, Any]  # the true states at the start of epoch ``valid`` (at the end, when done)
    outputs: list[tuple[Event, Any]]


def resolve(spec: Spec, plan: Plan, start: int, vector: Mapping[str, Any],
            reports: Mapping[str, WorkerReport], syncs: Sequence[Event]) -> Resolution:
    """Replay the syncs of a pass on the reported states; how far the workers' guesses held.

    ``vector``: the true states at the start of epoch ``start``; ``syncs``: every synchronising event of
    the batch in order.  Outputs of the final epochs come in :func:`~.run.run_plan`'s order: each
    epoch's workers' outputs in plan order, then the sync's.
    """
    workers = [w.name for w in plan.workers]
    by_epoch: dict[tuple[str, int], list[tuple[Event, Any]]] = {}
    for w in workers:
        for k, e, o in reports[w].outputs:
            by_epoch.setdefault((w, k), []).append((e, o))
    cur = dict(vector)
    outputs: list[tuple[Event, Any]] = []
    epoch = start
    while True:
        if epoch > start and not all(same_state(reports[w].starts[epoch], cur[w]) for w in workers):
            return Resolution(epoch, False, cur, outputs)
        for w in workers:
            outputs += by_epoch.get((w, epoch), [])
        ends = {w: reports[w].ends[epoch] for w in workers}
        if epoch == len(syncs):
            return Resolution(epoch + 1, True, ends, outputs)
        sync = syncs[epoch]
        node = plan.owner(sync.tag)
        joined = join_states(spec, plan, ends, node)
        joined, out = spec.update(joined, sync)
        outputs += [(sync, o) for o in out]
        cur = {**ends, **fork_states(spec, plan, joined, node)}
        epoch += 1


#: ``map_workers(spec, plan, tasks) -> {worker: WorkerReport}``: one pass, the workers in parallel
MapWorkers = Callable[[Spec, Plan, Sequence[WorkerTask]], Mapping[str, WorkerReport]]


def worker_events(plan: Plan, events: Iterable[Event]) -> dict[str, list[Event]]:
    """Each worker's input for a pass: its own events and every synchronising event, in order."""
    leaves = {w.name for w in plan.workers}
    out: dict[str, list[Event]] = {w: [] for w in leaves}
    for event in ordered(events):
        node = plan.owner(event.tag)
        if node in leaves:
            out[node].append(event)
        else:
            for events_ in out.values():
                events_.append(event)
    return out


def in_process_workers(events: Iterable[Event]) -> MapWorkers:
    """A :data:`MapWorkers` that runs the workers one after another in this process (the reference)."""
    events = list(events)

    def run(spec: Spec, plan: Plan, tasks: Sequence[WorkerTask]) -> dict[str, WorkerReport]:
        inputs = worker_events(plan, events)
        return {t.worker: run_worker(spec, plan, t, inputs[t.worker]) for t in tasks}

    return run


@dataclass
class BatchResult:
    """One micro-batch: the workers' states after it, its ``(event, output)`` pairs, and what it took."""

    states: dict[str, Any]
    outputs: list[tuple[Event, Any]]
    passes: int
    epochs: int
    events: int
    worker_events: dict[str, int] = field(default_factory=dict)  # per worker, over all passes


def run_pass(spec: Spec, plan: Plan, map_workers: MapWorkers, start: int, vector: Mapping[str, Any],
             hints: Mapping[int, Mapping[str, Any]]) -> tuple[dict[str, WorkerReport], list[Event]]:
    """One pass: every worker's report and the batch's synchronising events."""
    first = plan.workers[0].name
    tasks = [WorkerTask(w.name, start, vector, hints, report_syncs=w.name == first) for w in plan.workers]
    reports = dict(map_workers(spec, plan, tasks))
    missing = [w.name for w in plan.workers if w.name not in reports]
    if missing:
        raise ConfigError(f"no report from worker(s) {', '.join(missing)} of plan {plan.spec.name}")
    return reports, reports[first].syncs


def run_batch(spec: Spec, plan: Plan, events: Iterable[Event] | None = None, *,
              states: Mapping[str, Any] | None = None, map_workers: MapWorkers | None = None,
              on_pass: Callable[[int, int], None] | None = None) -> BatchResult:
    """Run one micro-batch in passes until every epoch is final.

    Parameters
    ----------
    spec, plan : the specification and its plan.
    events : the batch's events (for the in-process workers; an engine's ``map_workers`` reads its own).
    states : the workers' states before the batch (default: ``init()`` forked down the plan).
    map_workers : runs one pass (default: :func:`in_process_workers` over ``events``).
    on_pass : ``on_pass(pass_number, epochs_final_so_far)``, after each pass (for progress).
    """
    if plan.spec.tags != spec.tags:
        raise ConfigError(f"plan for {plan.spec.name} does not cover the tags of spec {spec.name}")
    if map_workers is None:
        if events is None:
            raise ConfigError("run_batch needs the events or an engine's map_workers")
        map_workers = in_process_workers(events)
    vector = dict(states) if states is not None else fork_states(spec, plan, spec.init())
    start, hints, passes, outputs = 0, {}, 0, []
    per_worker = {w.name: 0 for w in plan.workers}
    while True:
        reports, syncs = run_pass(spec, plan, map_workers, start, vector, hints)
        passes += 1
        for w, r in reports.items():
            per_worker[w] += r.events
        res = resolve(spec, plan, start, vector, reports, syncs)
        outputs += res.outputs
        if on_pass is not None:
            on_pass(passes, res.valid)
        if res.done:
            return BatchResult(res.vector, outputs, passes, len(syncs) + 1, sum(per_worker.values()), per_worker)
        start, vector = res.valid, res.vector
        hints = {k: {w: r.ends[k] for w, r in reports.items() if k in r.ends} for k in range(start, len(syncs) + 1)}

