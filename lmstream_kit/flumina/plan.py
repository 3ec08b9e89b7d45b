"""Synchronisation plans: a tree of workers, each owning tags; leaves run independent tags in parallel.

A parent owns the tags its children depend on (the synchronising tags).  Build one with
:func:`sequential_plan`, :func:`greedy_plan` (the paper's greedy optimiser) or :func:`user_plan`.

>>> from lmstream_kit.flumina.spec import value_barrier_spec
>>> plan = greedy_plan(value_barrier_spec(2), parallelism=2)
>>> print(plan)
w0 [b] 1 ev/s
  w1 [a0] 1000 ev/s
  w2 [a1] 1000 ev/s
>>> plan.owner("a1"), [w.name for w in plan.workers], plan.depth
('w2', ['w1', 'w2'], 2)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..exceptions import ConfigError
from .spec import Spec, Tag

__all__ = ["Plan", "PlanNode", "greedy_plan", "random_plan", "sequential_plan", "tag_key", "user_plan"]


def tag_key(tag: Tag) -> tuple:
    """A sort key that orders ``a2`` before ``a10`` (digits compared as numbers)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", str(tag)) if p)


def _sorted(tags: Iterable[Tag]) -> list:
    return sorted(tags, key=tag_key)


@dataclass(frozen=True)
class PlanNode:
    """One worker of a plan: the ``tags`` it owns and its ``children`` (none for a leaf)."""

    name: str
    tags: frozenset
    children: tuple[PlanNode, ...] = ()

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def walk(self) -> Iterable[PlanNode]:
        """This node and its descendants, in pre-order."""
        yield self
        for child in self.children:
            yield from child.walk()

    @property
    def subtree_tags(self) -> frozenset:
        return frozenset().union(*(n.tags for n in self.walk()))


class Plan:
    """A validated synchronisation plan for ``spec`` (build one with the functions of this module).

    Nodes are named ``w0, w1, ...`` in pre-order (``w0`` is the root).  Rules, each checked with a
    ConfigError naming the offending tags: every tag of the spec is owned by exactly one node, every
    leaf owns a tag, and two dependent tags are owned by nodes on one root-to-leaf path (so sibling
    subtrees hold pairwise independent tags, and a tag depends only on its subtree and ancestors).
    """

    def __init__(self, spec: Spec, root: Any, rates: Mapping[Tag, float] | None = None):
        self.spec = spec
        self.rates = {**spec.rates, **dict(rates or {})}
        counter = iter(range(10**9))

        def build(node) -> PlanNode:
            name = f"w{next(counter)}"
            return PlanNode(name, frozenset(node[0]), tuple(build(c) for c in node[1]))

        self.root = root if isinstance(root, PlanNode) else build(root)
        self.nodes: tuple[PlanNode, ...] = tuple(self.root.walk())
        self._by_name = {n.name: n for n in self.nodes}
        self._parent = {c.name: n.name for n in self.nodes for c in n.children}
        self._owner: dict = {}
        self._validate()

    def _validate(self) -> None:
        where = f"plan for {self.spec.name}"
        for node in self.nodes:
            for tag in _sorted(node.tags):
                if tag not in self.spec.tags:
                    raise ConfigError(f"{where}: node {node.name} owns {tag!r}, which is not a tag of the spec")
                if tag in self._owner:
                    raise ConfigError(f"{where}: tag {tag!r} is owned by both {self._owner[tag]} and {node.name}")
                self._owner[tag] = node.name
            if node.is_leaf and not node.tags:
                raise ConfigError(f"{where}: leaf {node.name} owns no tags")
        missing = _sorted(self.spec.tags - set(self._owner))
        if missing:
            raise ConfigError(f"{where}: no node owns {', '.join(map(repr, missing))}")
        tags = _sorted(self.spec.tags)
        for i, a in enumerate(tags):
            for b in tags[i:]:
                na, nb = self._owner[a], self._owner[b]
                if self.spec.dependence(a, b) and not (self.is_ancestor(na, nb) or self.is_ancestor(nb, na)):
                    raise ConfigError(f"{where}: {a!r} ({na}) and {b!r} ({nb}) depend on each other, "
                                      "but neither node is an ancestor of the other")

    # -- structure -------------------------------------------------------------------------------
    def node(self, name: str) -> PlanNode:
        return self._by_name[name]

    def owner(self, tag: Tag) -> str:
        """The name of the node that owns ``tag``."""
        try:
            return self._owner[tag]
        except KeyError:
            raise ConfigError(f"plan for {self.spec.name}: no node owns tag {tag!r}") from None

    def parent(self, name: str) -> str | None:
        return self._parent.get(name)

    def is_ancestor(self, a: str, b: str) -> bool:
        """Whether node ``a`` is ``b`` or one of its ancestors."""
        while b is not None:
            if a == b:
                return True
            b = self._parent.get(b)
        return False

    @property
    def workers(self) -> tuple[PlanNode, ...]:
        """The leaves, in pre-order: the workers that run independent events in parallel."""
        return tuple(n for n in self.nodes if n.is_leaf)

    def leaves_under(self, name: str) -> tuple[str, ...]:
        return tuple(n.name for n in self._by_name[name].walk() if n.is_leaf)

    @property
    def depth(self) -> int:
        """The number of levels: 1 for a sequential plan, 2 for a root over leaves."""
        def levels(n: PlanNode) -> int:
            return 1 + max((levels(c) for c in n.children), default=0)
        return levels(self.root)

    @property
    def load(self) -> dict[str, float]:
        """Events per second each node receives, from the tag rates: ``{name: rate}``."""
        return {n.name: float(sum(self.rates.get(t, 0.0) for t in n.tags)) for n in self.nodes}

    # -- views -----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The tree as plain data (JSON-able for string tags); :func:`user_plan` reads it back."""
        load = self.load

        def as_dict(n: PlanNode) -> dict:
            return {"id": n.name, "tags": _sorted(n.tags), "rate": load[n.name],
                    "children": [as_dict(c) for c in n.children]}
        return {"spec": self.spec.name, **as_dict(self.root)}

    def __str__(self) -> str:
        load, lines = self.load, []

        def show(n: PlanNode, indent: int) -> None:
            tags = ", ".join(map(str, _sorted(n.tags)))
            lines.append(f"{'  ' * indent}{n.name} [{tags}] {load[n.name]:g} ev/s")
            for c in n.children:
                show(c, indent + 1)
        show(self.root, 0)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Plan({self.spec.name}, workers={len(self.workers)}, depth={self.depth})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plan) and self.spec is other.spec and self.root == other.root

    __hash__ = None  # type: ignore[assignment]


def sequential_plan(spec: Spec) -> Plan:
    """One node that owns every tag: the sequential run."""
    return Plan(spec, (spec.tags, ()))


def _components(spec: Spec, tags: set) -> list[list]:
    """Connected components of the dependence graph on ``tags``, each sorted, in tag order."""
    left, out = _sorted(tags), []
    seen: set = set()
    for start in left:
        if start in seen:
            continue
        group, todo = [], [start]
        seen.add(start)
        while todo:
            t = todo.pop()
            group.append(t)
            for u in left:
                if u not in seen and spec.dependence(t, u):
                    seen.add(u)
                    todo.append(u)
        out.append(_sorted(group))
    return out


def greedy_plan(spec: Spec, parallelism: int, rates: Mapping[Tag, float] | None = None) -> Plan:
    """A root over at most ``parallelism`` leaves, chosen greedily as Flumina's optimiser does.

    The rule, deterministic (ties go to the smaller tag in :func:`tag_key` order):

    1. While the dependence graph (edges between distinct dependent tags) on the remaining tags is
       connected, move one tag to the root: the lowest rate first, then the one with the most
       dependent tags, then the smallest.  These are the synchronising tags.
    2. Each connected component of what remains is an independent group.  Sorted by total rate
       (highest first), the first ``parallelism`` groups get a leaf each; every other group goes to
       the least loaded leaf (the first on a tie).  A tag lives on one leaf, never split.
    3. With ``parallelism == 1`` or fewer than two groups the plan is :func:`sequential_plan`.

    Parameters
    ----------
    spec : the specification.
    parallelism : the most leaves (workers), an integer >= 1.
    rates : events per second per tag; tags it omits keep ``spec.rates``.

    >>> from lmstream_kit.flumina.spec import value_barrier_spec
    >>> print(greedy_plan(value_barrier_spec(4), 2, rates={"a3": 5000}))
    w0 [b] 1 ev/s
      w1 [a3] 5000 ev/s
      w2 [a0, a1, a2] 3000 ev/s
    """
    if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
        raise ConfigError(f"parallelism must be an integer >= 1, got {parallelism!r}")
    rate = {**spec.rates, **dict(rates or {})}
    unknown = _sorted(t for t in rate if t not in spec.tags)
    if unknown:
        raise ConfigError(f"rates name tag(s) {unknown!r} that spec {spec.name} does not declare")
    if parallelism == 1:
        return Plan(spec, (spec.tags, ()), rates=rate)
    remaining, sync = set(spec.tags), set()
    while remaining and len(_components(spec, remaining)) < 2:
        degree = {t: sum(spec.dependence(t, u) for u in remaining if u != t) for t in remaining}
        tag = min(remaining, key=lambda t: (rate[t], -degree[t], tag_key(t)))
        remaining.discard(tag)
        sync.add(tag)
    groups = _components(spec, remaining)
    if len(groups) < 2:
        return Plan(spec, (spec.tags, ()), rates=rate)
    group_rate = [sum(rate[t] for t in g) for g in groups]
    order = sorted(range(len(groups)), key=lambda i: (-group_rate[i], tag_key(groups[i][0])))
    leaves: list[list] = [list(groups[i]) for i in order[:parallelism]]
    loads = [group_rate[i] for i in order[:parallelism]]
    for i in order[parallelism:]:
        target = min(range(len(leaves)), key=lambda k: (loads[k], k))
        leaves[target] += groups[i]
        loads[target] += group_rate[i]
    return Plan(spec, (sync, tuple((leaf, ()) for leaf in leaves)), rates=rate)


def random_plan(spec: Spec, choose: Callable[[int], int], max_depth: int = 3) -> Plan:
    """A random valid plan, for property tests: ``choose(k)`` picks an integer in ``[0, k)``.

    Each node keeps each of its tags with one choice, splits the rest into independent groups and
    deals them to 1..groups children; nodes at ``max_depth`` keep all.  Pass a seeded
    ``lambda k: int(rng.integers(k))`` or a hypothesis draw (smaller choices give flatter plans).

    >>> from lmstream_kit.flumina.spec import value_barrier_spec
    >>> print(random_plan(value_barrier_spec(3), lambda k: 0))       # the smallest choices: one node
    w0 [a0, a1, a2, b] 3001 ev/s
    """
    def build(tags: list, depth: int) -> tuple:
        own = [t for t in tags if depth >= max_depth or choose(2) == 0]
        rest = [t for t in tags if t not in own]
        if not rest:
            return own, ()
        groups = _components(spec, set(rest))
        k = 1 + choose(len(groups))
        dealt: list[list] = [[] for _ in range(k)]
        for group in groups:
            dealt[choose(k)] += group
        return own, tuple(build(_sorted(d), depth + 1) for d in dealt if d)

    return Plan(spec, build(_sorted(spec.tags), 1))


_KEYS = {"tags", "children", "id", "rate", "spec"}


def user_plan(spec: Spec, tree: Mapping) -> Plan:
    """A plan from a nested ``{"tags": [...], "children": [...]}``, validated (see :class:`Plan`).

    ``id``, ``rate`` and ``spec`` as written by :meth:`Plan.to_dict` are accepted and recomputed.

    >>> from lmstream_kit.flumina.spec import value_barrier_spec
    >>> spec = value_barrier_spec(2)
    >>> user_plan(spec, {"tags": ["b"], "children": [{"tags": ["a0"]}, {"tags": ["a1"]}]}).owner("a0")
    'w1'
    >>> user_plan(spec, {"tags": ["a0"], "children": [{"tags": ["b"]}, {"tags": ["a1"]}]})
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: plan for value_barrier: 'a1' (w2) and 'b' (w1) depend on each other, \
but neither node is an ancestor of the other
    """
    def read(node: Any, path: str) -> tuple:
        if not isinstance(node, Mapping):
            raise ConfigError(f"plan node {path} must be a dict with 'tags' and 'children', got {node!r}")
        extra = sorted(set(node) - _KEYS)
        if extra:
            raise ConfigError(f"plan node {path} has unknown key(s) {extra}; known: children, tags")
        tags = node.get("tags", [])
        children = node.get("children", [])
        if isinstance(tags, (str, bytes)) or not isinstance(tags, Iterable):
            raise ConfigError(f"plan node {path}: 'tags' must be a list of tags, got {tags!r}")
        if isinstance(children, (str, bytes, Mapping)) or not isinstance(children, Iterable):
            raise ConfigError(f"plan node {path}: 'children' must be a list of nodes, got {children!r}")
        tags = list(tags)
        dup = _sorted({t for t in tags if tags.count(t) > 1})
        if dup:
            raise ConfigError(f"plan node {path} lists {', '.join(map(repr, dup))} twice")
        return tags, tuple(read(c, f"{path}.children[{i}]") for i, c in enumerate(children))

    return Plan(spec, read(tree, "root"))
