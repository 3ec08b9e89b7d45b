"""A Flumina specification: tagged events, which tags depend on which, and update / fork / join.

Plain Python, no Spark.  Independent events may run on forked copies of the state; a dependent
event first joins them.  When the laws hold (:func:`lmstream_kit.flumina.check.check_spec`) a
parallel run equals the sequential one, :func:`run_sequential`.

>>> spec = value_barrier_spec(2)                     # a0, a1 independent; each depends on b
>>> spec.dependence("a0", "a1"), spec.dependence("a0", "b"), spec.dependence("b", "b")
(False, True, True)
>>> run_sequential(spec, [Event("a0", 1, 5), Event("a1", 2, 7), Event("b", 3), Event("a0", 4, 1)])
(1, [('b', 3, 12)])
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import ConfigError

__all__ = ["Dependence", "Event", "Spec", "define_spec", "ordered", "run_sequential", "value_barrier_spec"]

Tag = Hashable


@dataclass(frozen=True)
class Event:
    """One input event: its ``tag`` (what kind of event, and from where), time ``ts`` and ``payload``.

    ``ts`` orders dependent events; events of independent tags may be processed in any order.
    """

    tag: Tag
    ts: float
    payload: Any = None


class Dependence:
    """A symmetric relation over a finite set of tags: which events must stay ordered.

    Give it as ``{tag: tags it depends on}`` or as a function ``depends(t1, t2) -> bool``; either
    way it is closed under symmetry.  Tags it does not know raise a ConfigError.

    >>> d = Dependence(["t1", "t2", "max"], {"max": ["t1", "t2", "max"]})
    >>> d("t1", "max"), d("max", "t1"), d("t1", "t2"), d("t1", "t1")
    (True, True, False, False)
    """

    def __init__(self, tags: Iterable[Tag], depends: Mapping[Tag, Iterable[Tag]] | Callable[[Tag, Tag], bool]):
        self.tags = frozenset(tags)
        if not self.tags:
            raise ConfigError("a dependence relation needs at least one tag")
        pairs: set[frozenset] = set()
        if callable(depends):
            for a in self.tags:
                for b in self.tags:
                    if depends(a, b) or depends(b, a):
                        pairs.add(frozenset((a, b)))
        else:
            for a, others in depends.items():
                for b in others:
                    for t in (a, b):
                        if t not in self.tags:
                            raise ConfigError(f"dependence names tag {t!r}, which is not among the tags "
                                              f"{sorted(map(repr, self.tags))}")
                    pairs.add(frozenset((a, b)))
        self._pairs = frozenset(pairs)

    def __call__(self, a: Tag, b: Tag) -> bool:
        """Whether events tagged ``a`` and ``b`` must be processed in timestamp order."""
        return frozenset((a, b)) in self._pairs

    def independent(self, a: Tag, b: Tag) -> bool:
        return not self(a, b)

    def depends_on_any(self, tag: Tag, tags: Iterable[Tag]) -> bool:
        return any(self(tag, u) for u in tags)

    def __repr__(self) -> str:
        shown = sorted(tuple(sorted(map(repr, p))) for p in self._pairs)
        return f"Dependence(tags={len(self.tags)}, pairs={shown})"


@dataclass(frozen=True)
class Spec:
    """A Flumina specification (build one with :func:`define_spec`).

    ``update(state, event) -> (state, outputs)``; ``fork(state, tags1, tags2) -> (state1, state2)``
    splits a state for two sides that handle the tag sets ``tags1`` and ``tags2``;
    ``join(state1, state2) -> state`` merges them back; ``init()`` is the initial state.
    Updates, forks and joins must not mutate their arguments (return new values).
    """

    name: str
    dependence: Dependence
    init: Callable[[], Any]
    update: Callable[[Any, Event], tuple[Any, list]]
    fork: Callable[[Any, frozenset, frozenset], tuple[Any, Any]]
    join: Callable[[Any, Any], Any]
    description: str = ""
    rates: Mapping[Tag, float] = field(default_factory=dict)

    @property
    def tags(self) -> frozenset:
        return self.dependence.tags


def define_spec(name: str, *, tags: Iterable[Tag], depends: Mapping | Callable, init: Callable[[], Any],
                update: Callable, fork: Callable, join: Callable, description: str = "",
                rates: Mapping[Tag, float] | None = None) -> Spec:
    """A :class:`Spec`, with its parts checked for shape (the laws: :func:`~lmstream_kit.flumina.check.check_spec`).

    ``rates``: events per second of each tag, for the plan optimiser (default: 1 for every tag).
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"spec name must be a non-empty string, got {name!r}")
    for part, fn in (("init", init), ("update", update), ("fork", fork), ("join", join)):
        if not callable(fn):
            raise ConfigError(f"spec {name}: {part} must be a function, got {fn!r}")
    dependence = Dependence(tags, depends)
    rates = dict(rates or {})
    unknown = [t for t in rates if t not in dependence.tags]
    if unknown:
        raise ConfigError(f"spec {name}: rates name unknown tag(s) {unknown!r}")
    bad = {t: r for t, r in rates.items() if not (isinstance(r, (int, float)) and r >= 0)}
    if bad:
        raise ConfigError(f"spec {name}: rates must be numbers >= 0, got {bad!r}")
    return Spec(name=name, dependence=dependence, init=init, update=update, fork=fork, join=join,
                description=description, rates={t: float(rates.get(t, 1.0)) for t in dependence.tags})


def ordered(events: Iterable[Event]) -> list[Event]:
    """``events`` in the sequential order: by timestamp, ties in arrival order (a stable sort)."""
    return sorted(events, key=lambda e: e.ts)


def run_sequential(spec: Spec, events: Iterable[Event], state: Any = None) -> tuple[Any, list]:
    """The reference semantics: every event in :func:`ordered` order on one state.

    Returns the final state and the outputs in order.  ``state``: start from it instead of ``init()``.
    Unknown tags raise a ConfigError naming the event.
    """
    state = spec.init() if state is None else state
    outputs: list = []
    for event in ordered(events):
        if event.tag not in spec.tags:
            raise ConfigError(f"spec {spec.name}: event {event!r} has a tag it does not declare")
        state, out = spec.update(state, event)
        outputs.extend(out)
    return state, outputs


# -- the paper's main example, here because the doctests and the plan tests share it -----------------
def value_barrier_spec(streams: int, *, rate_a: float = 1000.0, rate_b: float = 1.0) -> Spec:
    """Value barrier (event window): sum the values of ``a<i>`` events; each ``b`` outputs and resets.

    The ``a<i>`` tags are independent of each other and each depends on ``b``.  Fork keeps the sum on
    the side that holds ``b`` (a tie goes to the first side) and gives the other side 0; join adds.
    """
    a_tags = [f"a{i}" for i in range(streams)]

    def update(total, event):
        if event.tag == "b":
            return 0, [("b", event.ts, total)]
        return total + event.payload, []

    def fork(total, tags1, tags2):
        return (total, 0) if "b" in tags1 or "b" not in tags2 else (0, total)

    return define_spec(
        "value_barrier", tags=[*a_tags, "b"], depends={"b": [*a_tags, "b"]}, init=lambda: 0,
        update=update, fork=fork, join=lambda x, y: x + y,
        description="sum of a-values, output and reset at each b (Flumina's event window)",
        rates={**{t: rate_a for t in a_tags}, "b": rate_b})
