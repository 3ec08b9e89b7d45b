"""The parallel semantics of a plan: what a distributed run computes, as plain Python.

:func:`segments` cuts the ordered events into rounds (leaf segments that may run in parallel, then
synchronising events); :func:`run_leaf`, :func:`join_states` and :func:`fork_states` are the pieces
an engine distributes; :func:`run_plan` composes them and is the reference a Spark run must equal.

>>> from lmstream_kit.flumina.plan import greedy_plan
>>> from lmstream_kit.flumina.spec import Event, value_barrier_spec
>>> spec = value_barrier_spec(2)
>>> events = [Event("a0", 1, 5), Event("a1", 2, 7), Event("b", 3), Event("a0", 4, 1)]
>>> [str(r) for r in segments(greedy_plan(spec, 2), events)]
['w1: a0@1 | w2: a1@2 ; w0: b@3', 'w1: a0@4']
>>> state, outputs = run_plan(spec, greedy_plan(spec, 2), events)
>>> state, [out for _, out in outputs]
(1, [('b', 3, 12)])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..exceptions import ConfigError
from .plan import Plan, PlanNode
from .spec import Event, Spec, ordered

__all__ = ["Round", "Segment", "Sync", "fork_states", "join_states", "run_leaf", "run_plan", "segments"]


@dataclass(frozen=True)
class Segment:
    """The events one ``worker`` (a leaf) processes in a row, in order, on its own state."""

    worker: str
    events: tuple[Event, ...]

    def __str__(self) -> str:
        return f"{self.worker}: " + " ".join(f"{e.tag}@{e.ts:g}" for e in self.events)


@dataclass(frozen=True)
class Sync:
    """A synchronising ``event`` of the non-leaf ``node``: join the node's subtree, update, fork back."""

    node: str
    event: Event

    def __str__(self) -> str:
        return f"{self.node}: {self.event.tag}@{self.event.ts:g}"


@dataclass(frozen=True)
class Round:
    """One step of a distributed run: the ``segments`` in parallel (one per worker at most), then the
    ``syncs`` one after another."""

    segments: tuple[Segment, ...]
    syncs: tuple[Sync, ...]

    def __str__(self) -> str:
        parts = [" | ".join(map(str, self.segments)), " ; ".join(map(str, self.syncs))]
        return " ; ".join(p for p in parts if p)


def segments(plan: Plan, events: Iterable[Event]) -> list[Round]:
    """The ``events``, in :func:`~lmstream_kit.flumina.spec.ordered` order, cut into :class:`Round`\\ s.

    A leaf's events collect into its open segment.  A synchronising event at node ``n`` closes the
    open segments of the leaves under ``n`` (everything of the subtree before it, the heartbeat
    condition).  A leaf outside ``n``'s subtree keeps its segment open: its tags are independent of
    ``n``'s, so its events may run on either side of the sync.  Closed segments join the current
    round unless the round already has a sync that they must follow (a sync at an ancestor of the
    leaf, or the leaf already has a segment in the round); then a new round starts.

    Returns
    -------
    list of Round
        In order; an engine runs each round's segments in parallel, then its syncs in order.
    """
    rounds: list[Round] = []
    cur_segments: dict[str, tuple] = {}
    cur_syncs: list[Sync] = []
    open_: dict[str, list[Event]] = {w.name: [] for w in plan.workers}

    def close(workers: list[str]) -> None:
        nonlocal cur_segments, cur_syncs
        if cur_syncs and any(w in cur_segments or any(plan.is_ancestor(s.node, w) for s in cur_syncs)
                             for w in workers):
            rounds.append(Round(_in_plan_order(plan, cur_segments), tuple(cur_syncs)))
            cur_segments, cur_syncs = {}, []
        for w in workers:
            cur_segments[w] = tuple(open_[w])
            open_[w] = []

    for event in ordered(events):
        name = plan.owner(event.tag)
        if name in open_:
            open_[name].append(event)
            continue
        close([w for w in plan.leaves_under(name) if open_[w]])
        cur_syncs.append(Sync(name, event))
    close([w for w in open_ if open_[w]])
    if cur_segments or cur_syncs:
        rounds.append(Round(_in_plan_order(plan, cur_segments), tuple(cur_syncs)))
    return rounds


def _in_plan_order(plan: Plan, segs: Mapping[str, tuple]) -> tuple[Segment, ...]:
    return tuple(Segment(w.name, segs[w.name]) for w in plan.workers if w.name in segs)


def run_leaf(spec: Spec, state: Any, events: Iterable[Event]) -> tuple[Any, list[tuple[Event, Any]]]:
    """One worker's work: ``events`` in the given order on ``state``; outputs as ``(event, output)``."""
    outputs: list[tuple[Event, Any]] = []
    for event in events:
        if event.tag not in spec.tags:
            raise ConfigError(f"spec {spec.name}: event {event!r} has a tag it does not declare")
        state, out = spec.update(state, event)
        outputs.extend((event, o) for o in out)
    return state, outputs


def fork_states(spec: Spec, plan: Plan, state: Any, node: str | None = None) -> dict[str, Any]:
    """Fork ``state`` of ``node`` (default: the root) down to the leaves under it: ``{worker: state}``.

    A node with children ``c1..ck`` forks binarily: ``fork(s, tags(c1), tags(c2..ck))``, then the
    second part for ``c2`` against ``c3..ck``, and so on (``tags``: all tags of the subtrees).
    """
    out: dict[str, Any] = {}

    def down(n: PlanNode, s: Any) -> None:
        if n.is_leaf:
            out[n.name] = s
            return
        rest = s
        for i, child in enumerate(n.children[:-1]):
            others = frozenset().union(*(c.subtree_tags for c in n.children[i + 1:]))
            mine, rest = spec.fork(rest, child.subtree_tags, others)
            down(child, mine)
        down(n.children[-1], rest)

    down(plan.node(node or plan.root.name), state)
    return out


def join_states(spec: Spec, plan: Plan, states: Mapping[str, Any], node: str | None = None) -> Any:
    """Join the leaves' ``states`` under ``node`` (default: the root) back into one state.

    The inverse of :func:`fork_states`: ``join(s1, join(s2, ... join(s_{k-1}, s_k)))``, bottom-up.
    """
    def up(n: PlanNode) -> Any:
        if n.is_leaf:
            return states[n.name]
        acc = up(n.children[-1])
        for child in reversed(n.children[:-1]):
            acc = spec.join(up(child), acc)
        return acc

    return up(plan.node(node or plan.root.name))


def run_plan(spec: Spec, plan: Plan, events: Iterable[Event], state: Any = None,
             ) -> tuple[Any, list[tuple[Event, Any]]]:
    """Run ``events`` as the distributed run of ``plan`` does; returns ``(state, outputs)``.

    The state (``init()`` unless given) is forked down to the workers; each :class:`Round` runs its
    segments with :func:`run_leaf`, then each sync joins its node's subtree, updates and forks back;
    at the end the workers' states are joined.  ``outputs`` are ``(event, output)`` pairs: each
    worker's in order, the workers of one round one after another (in plan order), each sync's after
    the segments it follows.  That is one of the orders the dependence relation allows; compare it
    with the sequential run up to dependence (equal lists when only synchronising events emit).

    Parameters
    ----------
    spec, plan : the specification and a plan for it (the plan must cover the spec's tags).
    events : any order; they are run in :func:`~lmstream_kit.flumina.spec.ordered` order.
    state : the starting state; ``spec.init()`` when ``None``.

    Returns
    -------
    tuple
        ``(state, [(event, output), ...])``.
    """
    if plan.spec.tags != spec.tags:
        raise ConfigError(f"plan for {plan.spec.name} does not cover the tags of spec {spec.name}")
    events = list(events)
    for event in events:
        if event.tag not in spec.tags:
            raise ConfigError(f"spec {spec.name}: event {event!r} has a tag it does not declare")
    states = fork_states(spec, plan, spec.init() if state is None else state)
    outputs: list[tuple[Event, Any]] = []
    for rnd in segments(plan, events):
        for seg in rnd.segments:  # in parallel on an engine: one partition per worker
            states[seg.worker], out = run_leaf(spec, states[seg.worker], seg.events)
            outputs += out
        for sync in rnd.syncs:
            joined = join_states(spec, plan, states, sync.node)
            joined, out = run_leaf(spec, joined, [sync.event])
            outputs += out
            states.update(fork_states(spec, plan, joined, sync.node))
    return join_states(spec, plan, states), outputs
