"""Check a Flumina spec's laws on sampled states and events, and shrink a failure to a small counterexample.

C1: independent events commute; C2: ``join(fork(s)) == s``; C3: an update distributes over join.
The forks tried are the ones a plan can make: two non-empty tag sets with no dependence between them.

>>> from lmstream_kit.flumina.spec import Event, value_barrier_spec
>>> history = [Event("a0", 1, 5), Event("a1", 2, 7), Event("b", 3), Event("a0", 4, 1)]
>>> print(check_spec(value_barrier_spec(2), Samples(histories=[history])))
value_barrier: C1 holds (12 cases), C2 holds (8 cases), C3 holds (24 cases)
"""

from __future__ import annotations

import heapq
import operator
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from numbers import Number
from typing import Any

from ..exceptions import ConfigError, SpecError
from .spec import Event, Spec, ordered

__all__ = ["Counterexample", "LawResult", "Samples", "SpecReport", "check_spec", "forks", "size"]

LAWS = {
    "C1": "two events of independent tags do not commute (a non-commutative update marked independent)",
    "C2": "join(fork(s, pred1, pred2)) != s (a fork that duplicates or a join that loses data)",
    "C3": "an update does not distribute over join for an event of one side (a join that loses data, "
          "or a fork that gives a side the wrong part)",
}
#: a spec with many tags has exponentially many forks; the checker tries at most this many
MAX_FORKS = 4096


@dataclass(frozen=True)
class Samples:
    """Sample events and states for :func:`check_spec`.

    ``events``: sample events; ``states``: sample states (the spec's ``init()`` is always added);
    ``histories``: event lists whose events are added to ``events`` and whose every prefix, run in
    the sequential order (:func:`~lmstream_kit.flumina.spec.run_sequential`), gives a state.
    """

    events: Sequence[Event] = ()
    states: Sequence[Any] = ()
    histories: Sequence[Sequence[Event]] = ()

    def resolve(self, spec: Spec) -> tuple[list[Event], list[Any]]:
        """The distinct sample events and states for ``spec`` (tags checked, histories run)."""
        events = [*self.events, *(e for h in self.histories for e in h)]
        for event in events:
            if not isinstance(event, Event) or event.tag not in spec.tags:
                raise ConfigError(f"spec {spec.name}: sample {event!r} is not an Event with one of its tags")
        states = [spec.init(), *self.states]
        for history in self.histories:
            state = spec.init()
            for event in ordered(history):
                state, _ = spec.update(state, event)
                states.append(state)
        return _distinct(events), _distinct(states)


def _distinct(values: Iterable) -> list:
    seen, out = set(), []
    for v in values:
        if repr(v) not in seen:  # repr, not hash: states are often dicts or lists
            seen.add(repr(v))
            out.append(v)
    return out


def size(value: Any) -> float:
    """The size key that shrinking minimises: |x| for numbers, lengths for containers (recursively).

    >>> size(0), size(-3), size("ab"), size([1, 2]), size({"k": 1}), size(None)
    (0, 3, 2, 5, 3, 0)
    """
    if value is None or isinstance(value, bool):
        return int(bool(value))
    if isinstance(value, Number):
        return abs(value)
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, dict):
        return len(value) + sum(size(k) + size(v) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return len(value) + sum(size(v) for v in value)
    return len(repr(value))


@dataclass(frozen=True)
class Counterexample:
    """The smallest sample found that breaks a law: its inputs and the two sides' results."""

    law: str
    state: Any
    events: tuple[Event, ...]
    fork: tuple[frozenset, frozenset, Any, Any] | None  # pred1, pred2, s1, s2
    sides: tuple[tuple[str, Any], tuple[str, Any]]  # (expression, result) for each side

    def __str__(self) -> str:
        lines = [f"{self.law} fails: {LAWS[self.law]}", f"  state: s = {self.state!r}"]
        if self.fork is not None:
            p1, p2, s1, s2 = self.fork
            lines.append(f"  fork:  pred1 = {_tags(p1)}, pred2 = {_tags(p2)} -> s1 = {s1!r}, s2 = {s2!r}")
        names = ["e"] if len(self.events) == 1 else [f"e{i + 1}" for i in range(len(self.events))]
        if self.events:
            lines.append("  " + ", ".join(f"{n} = {e!r}" for n, e in zip(names, self.events)))
        width = max(len(expr) for expr, _ in self.sides)
        lines += [f"  {expr:<{width}} -> {_result(result)}" for expr, result in self.sides]
        return "\n".join(lines)


def _tags(tags: frozenset) -> str:
    return "{" + ", ".join(sorted(map(repr, tags))) + "}"


def _result(result: Any) -> str:
    if isinstance(result, BaseException):
        return f"raised {type(result).__name__}: {result}"
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], list):
        return f"state {result[0]!r}, outputs {result[1]!r}"
    return repr(result)


@dataclass(frozen=True)
class LawResult:
    """One law's verdict: how many cases were tried, and the counterexample if it failed."""

    law: str
    cases: int
    counterexample: Counterexample | None = None

    @property
    def holds(self) -> bool:
        return self.counterexample is None


@dataclass(frozen=True)
class SpecReport:
    """What :func:`check_spec` found, law by law (``report.laws["C1"]``)."""

    spec_name: str
    laws: dict[str, LawResult]

    @property
    def ok(self) -> bool:
        return all(r.holds for r in self.laws.values())

    @property
    def failures(self) -> list[Counterexample]:
        return [r.counterexample for r in self.laws.values() if r.counterexample is not None]

    def holds(self, law: str) -> bool:
        return self.laws[law].holds

    def raise_if_failed(self) -> None:
        """Raise a SpecError with the first failing law's counterexample."""
        if not self.ok:
            raise SpecError(f"spec {self.spec_name}: {self.failures[0]}")

    def __str__(self) -> str:
        verdicts = ", ".join(f"{r.law} {'holds' if r.holds else 'FAILS'} ({r.cases} cases)"
                             for r in self.laws.values())
        return "\n".join([f"{self.spec_name}: {verdicts}", *map(str, self.failures)])


def forks(spec: Spec, limit: int = MAX_FORKS) -> list[tuple[frozenset, frozenset]]:
    """The ordered pairs of non-empty tag sets with no dependence across them, smallest first (at most ``limit``).

    >>> from lmstream_kit.flumina.spec import value_barrier_spec
    >>> [(sorted(a), sorted(b)) for a, b in forks(value_barrier_spec(2))]
    [(['a0'], ['a1']), (['a1'], ['a0'])]
    """
    tags, found = sorted(spec.tags, key=repr), []
    dep = spec.dependence

    budget = [64 * limit]  # nodes to visit: mutually dependent tags make many dead branches

    def place(i: int, one: list, two: list) -> None:
        budget[0] -= 1
        if len(found) >= limit or budget[0] < 0:
            return
        if i == len(tags):
            if one and two:
                found.append((frozenset(one), frozenset(two)))
            return
        t = tags[i]
        place(i + 1, one, two)
        if not any(dep(t, u) for u in two):
            place(i + 1, one + [t], two)
        if not any(dep(t, u) for u in one):
            place(i + 1, one, two + [t])

    place(0, [], [])
    return sorted(found, key=lambda f: (len(f[0]) + len(f[1]), sorted(map(repr, f[0])), sorted(map(repr, f[1]))))


def check_spec(spec: Spec, samples: Samples | Iterable[Event], *, max_examples: int = 200, seed: int = 0,
               equal: Callable[[Any, Any], bool] = operator.eq, size: Callable[[Any], float] = size) -> SpecReport:
    """Test the laws C1-C3 of ``spec`` on ``samples``; a failure comes shrunk to its smallest case.

    Parameters
    ----------
    spec : Spec
        The spec to check.
    samples : Samples or list of Event
        A list of events is one history: its events, and the state after each of its prefixes.
    max_examples : int
        Cases tried per law.  With fewer cases than this all are tried, smallest first, so a
        counterexample is the smallest there is; otherwise the smallest half and a seeded random half,
        and a failure is shrunk one coordinate (the state, or the events and fork) at a time.
    seed : int
        Seeds the random half.
    equal : callable
        ``equal(x, y)`` compares states, and single outputs (default ``==``; pass a tolerance for floats).
    size : callable
        The key that shrinking minimises, applied to states and to events' payloads (default :func:`size`).

    Returns
    -------
    SpecReport
        Each law's verdict and counterexample; :meth:`SpecReport.raise_if_failed` raises a SpecError.

    Examples
    --------
    >>> from lmstream_kit.flumina.spec import Event, define_spec
    >>> digits = define_spec("digits", tags=["x", "y"], depends={}, init=lambda: 0,
    ...     update=lambda s, e: (s * 10 + e.payload, []), fork=lambda s, t1, t2: (s, 0), join=lambda a, b: a + b)
    >>> report = check_spec(digits, [Event("x", 1, 2), Event("y", 2, 1)])
    >>> report.holds("C1"), report.holds("C2")
    (False, True)
    >>> print(report.laws["C1"].counterexample)
    C1 fails: two events of independent tags do not commute (a non-commutative update marked independent)
      state: s = 0
      e1 = Event(tag='y', ts=2, payload=1), e2 = Event(tag='x', ts=1, payload=2)
      upd(upd(s, e1), e2) -> state 12, outputs []
      upd(upd(s, e2), e1) -> state 21, outputs []
    """
    if not isinstance(max_examples, int) or max_examples < 1:
        raise ConfigError(f"max_examples must be an integer >= 1, got {max_examples!r}")
    if not isinstance(samples, Samples):
        samples = Samples(histories=[list(samples)])
    events, states = samples.resolve(spec)
    events.sort(key=lambda e: size(e.payload))  # stable: ties keep the samples' order
    states.sort(key=size)
    law = _Laws(spec, equal)
    dep = spec.dependence
    pairs = [(a, b) for i, a in enumerate(events) for b in events[i + 1:] if not dep(a.tag, b.tag)]
    splits = forks(spec)
    sides = [(p1, p2, side, e) for p1, p2 in splits for side, pred in ((1, p1), (2, p2))
             for e in events if e.tag in pred]
    sides.sort(key=lambda c: size(c[3].payload))
    plan = {"C1": (law.c1, pairs, [size(a.payload) + size(b.payload) for a, b in pairs]),
            "C2": (law.c2, splits, [0] * len(splits)),
            "C3": (law.c3, sides, [size(c[3].payload) for c in sides])}
    rng = random.Random(seed)
    results = {}
    for name, (test, cases, case_sizes) in plan.items():
        tried, found = _search(test, states, cases, [size(s) for s in states], case_sizes, max_examples, rng)
        results[name] = LawResult(name, tried, found)
    return SpecReport(spec.name, results)


def _search(test, states, cases, state_sizes, case_sizes, max_examples, rng):
    """``(cases tried, smallest counterexample found or None)``; ``test(state, case)`` gives one or None."""
    n = len(states) * len(cases)

    def key(c):
        return (state_sizes[c[0]] + case_sizes[c[1]], c[0], c[1])

    def run(c):
        return test(states[c[0]], cases[c[1]])

    if n <= max_examples:
        candidates = [(i, j) for i in range(len(states)) for j in range(len(cases))]
    else:
        every = ((i, j) for i in range(len(states)) for j in range(len(cases)))
        smallest = heapq.nsmallest(max_examples // 2, every, key=key)
        taken = {i * len(cases) + j for i, j in smallest}
        rest = [k for k in rng.sample(range(n), min(n, max_examples * 2)) if k not in taken]
        candidates = smallest + [divmod(k, len(cases)) for k in rest[: max_examples - len(smallest)]]
    for c in sorted(candidates, key=key):
        found = run(c)
        if found is not None:
            break
    else:
        return len(candidates), None
    shrunk = True
    while shrunk and n > max_examples:  # one coordinate at a time, as long as a smaller case still fails
        shrunk = False
        others = [(i, c[1]) for i in range(len(states))] + [(c[0], j) for j in range(len(cases))]
        for alt in sorted((a for a in others if key(a) < key(c)), key=key):
            smaller = run(alt)
            if smaller is not None:
                c, found, shrunk = alt, smaller, True
                break
    return len(candidates), found


class _Laws:
    """The three laws as tests ``(state, case) -> Counterexample | None``; a raised exception fails."""

    def __init__(self, spec: Spec, equal: Callable[[Any, Any], bool]):
        self.spec, self.equal = spec, equal

    def _run(self, state, events):
        """``(state, outputs)`` after ``events``, or the exception raised (or given as ``state``)."""
        outputs = []
        try:
            if isinstance(state, BaseException):
                raise state
            for e in events:
                state, out = self.spec.update(state, e)
                outputs += list(out)
        except Exception as exc:  # noqa: BLE001 - a spec that raises on a sample breaks the law there
            return exc
        return state, outputs

    def _fork(self, s, p1, p2):
        try:
            s1, s2 = self.spec.fork(s, p1, p2)
            return s1, s2
        except Exception as exc:  # noqa: BLE001 - as in _run
            return exc, exc

    def _join(self, s1, s2):
        try:
            for s in (s1, s2):
                if isinstance(s, BaseException):
                    raise s
            return self.spec.join(s1, s2)
        except Exception as exc:  # noqa: BLE001 - as in _run
            return exc

    def _same(self, x, y, bag: bool) -> bool:
        if isinstance(x, BaseException) or isinstance(y, BaseException):
            return False
        (s, xs), (t, ys) = x, y
        if not self.equal(s, t) or len(xs) != len(ys):
            return False
        if not bag:
            return all(self.equal(a, b) for a, b in zip(xs, ys))
        ys = list(ys)
        for a in xs:
            k = next((k for k, b in enumerate(ys) if self.equal(a, b)), None)
            if k is None:
                return False
            del ys[k]
        return True

    def c1(self, s, case):
        e1, e2 = case
        one, two = self._run(s, [e1, e2]), self._run(s, [e2, e1])
        if self._same(one, two, bag=True):
            return None
        return Counterexample("C1", s, (e1, e2), None, (("upd(upd(s, e1), e2)", one), ("upd(upd(s, e2), e1)", two)))

    def c2(self, s, case):
        p1, p2 = case
        s1, s2 = self._fork(s, p1, p2)
        joined = self._join(s1, s2)
        if not isinstance(joined, BaseException) and self.equal(joined, s):
            return None
        return Counterexample("C2", s, (), (p1, p2, s1, s2), (("join(s1, s2)", joined), ("s", s)))

    def c3(self, s, case):
        p1, p2, side, e = case
        s1, s2 = self._fork(s, p1, p2)
        whole = self._run(self._join(s1, s2), [e])
        part = self._run(s1 if side == 1 else s2, [e])
        split = part if isinstance(part, BaseException) else self._run(
            self._join(part[0], s2) if side == 1 else self._join(s1, part[0]), [])
        if not isinstance(split, BaseException):
            split = (split[0], part[1])
        if self._same(whole, split, bag=False):
            return None
        expr = "join(upd(s1, e), s2)" if side == 1 else "join(s1, upd(s2, e))"
        return Counterexample("C3", s, (e,), (p1, p2, s1, s2), (("upd(join(s1, s2), e)", whole), (expr, split)))
