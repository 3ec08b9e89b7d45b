"""DiffStream's check that two output streams are equal up to a dependence relation over their items.

Dependent items must come in the same order on both sides; independent ones may be reordered.  With
nothing dependent it is bag (multiset) equality, with everything dependent sequence equality.

>>> assert_equivalent([1, 2, 3], [3, 1, 2], bag)
3
>>> by_sensor = same_key(lambda item: item[0])
>>> assert_equivalent([("t1", 20), ("t2", 5), ("t1", 21)], [("t2", 5), ("t1", 20), ("t1", 21)], by_sensor)
3
>>> assert_equivalent([("t1", 20), ("t1", 21)], [("t1", 21), ("t1", 20)], by_sensor)
Traceback (most recent call last):
AssertionError: not equivalent: left[0] = ('t1', 20) is unmatched: right[0] = ('t1', 21) depends on it and comes first on the right (dependent items in another order, or an item missing or changed)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from ..exceptions import ConfigError
from .spec import Dependence

__all__ = ["Matcher", "assert_equivalent", "bag", "rows", "same_key", "sequence"]

_OTHER = {"left": "right", "right": "left"}


def bag(a: Any, b: Any) -> bool:
    """No item depends on another: the streams must be equal as multisets."""
    return False


def sequence(a: Any, b: Any) -> bool:
    """Every item depends on every other: the streams must be equal as sequences."""
    return True


def same_key(key: Callable[[Any], Hashable]) -> Callable[[Any, Any], bool]:
    """Items with the same ``key(item)`` depend on each other (per-key order), others do not.

    >>> same_key(lambda row: row["k"])({"k": 1, "v": 2}, {"k": 1, "v": 3})
    True
    """
    return _SameKey(key)


@dataclass(frozen=True)
class _SameKey:
    key: Callable[[Any], Hashable]

    def __call__(self, a: Any, b: Any) -> bool:
        return self.key(a) == self.key(b)


def _freeze(value: Any) -> Hashable:
    """A hashable stand-in for ``value`` that is equal exactly when the values are (dicts, lists, ...)."""
    try:
        hash(value)
        return value
    except TypeError:
        pass
    if isinstance(value, dict):
        return ("dict", frozenset((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_freeze(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return frozenset(_freeze(v) for v in value)
    return ("repr", repr(value))


class _Side:
    """One stream's unmatched items: by dependence group and by equality key, each in arrival order."""

    def __init__(self) -> None:
        self.groups: dict[Hashable, OrderedDict[int, Any]] = {}
        self.equal: dict[Hashable, OrderedDict[int, None]] = {}
        self.at: dict[int, tuple[Any, Hashable, Hashable]] = {}  # position -> (item, group, equality key)
        self.seen = 0

    def add(self, position: int, item: Any, group: Hashable, key: Hashable) -> None:
        self.groups.setdefault(group, OrderedDict())[position] = item
        self.equal.setdefault(key, OrderedDict())[position] = None
        self.at[position] = (item, group, key)

    def remove(self, position: int) -> None:
        _, group, key = self.at.pop(position)
        for index, k in ((self.groups, group), (self.equal, key)):
            del index[k][position]
            if not index[k]:
                del index[k]

    def first(self, groups: Iterable[Hashable]) -> int | None:
        """The earliest unmatched position in ``groups``."""
        firsts = [next(iter(self.groups[g])) for g in groups if g in self.groups]
        return min(firsts) if firsts else None


class Matcher:
    """The online check: feed two runs item by item as they stream, then call :meth:`finish`.

    Each side's unmatched items form a partial order (arrival order restricted to dependent pairs).
    A new item matches the earliest *minimal* unmatched item of the other side that equals it; if it
    depends on an unmatched item there that it does not match, the check fails at once.  Unmatched
    items are indexed by equality and by dependence group, so a push costs O(g) dependence tests, g
    the groups with unmatched items: O(1) for :func:`bag`, :func:`sequence` and :func:`same_key`, the
    tags for a :class:`~lmstream_kit.flumina.spec.Dependence`, and the distinct unmatched items for
    any other function.

    Parameters
    ----------
    dependence : callable or Dependence
        ``dependence(item1, item2) -> bool``, symmetric; or a
        :class:`~lmstream_kit.flumina.spec.Dependence` (or a function) over tags, with ``tag``.
    key : callable, optional
        What of an item must be equal for a match (default: the whole item).  Items with equal keys
        must have the same dependences.
    tag : callable, optional
        ``tag(item)``, the tag ``dependence`` relates.

    Examples
    --------
    >>> m = Matcher(sequence)
    >>> m.push_left("a"); m.push_right("a"); m.push_right("b")
    >>> m.pending
    {'left': [], 'right': [(1, 'b')]}
    >>> m.push_left("b"); m.finish()
    2
    """

    def __init__(self, dependence: Callable[[Any, Any], bool] | Dependence, *,
                 key: Callable[[Any], Any] | None = None, tag: Callable[[Any], Hashable] | None = None):
        if isinstance(dependence, Dependence) and tag is None:
            raise ConfigError("a Dependence relates tags: give tag=, a function from an item to its tag")
        if not callable(dependence):
            raise ConfigError(f"dependence must be a function (item, item) -> bool, got {dependence!r}")
        self._key = key if key is not None else (lambda item: item)
        self._sides = {"left": _Side(), "right": _Side()}
        self._cache: dict[tuple, bool] = {}
        self.matched = 0
        self._failure: str | None = None
        if tag is not None:
            self._group, self._related = tag, self._by_pairs(dependence)
        elif dependence is bag or dependence is sequence:
            self._group = lambda item: None
            self._related = (lambda side, g, item: ()) if dependence is bag else (lambda side, g, item: (g,))
        elif isinstance(dependence, _SameKey):
            self._group = lambda item: _freeze(dependence.key(item))
            self._related = lambda side, g, item: (g,)
        else:  # an arbitrary relation: one group per distinct item, tested against each group's first item
            self._group = lambda item: _freeze(self._key(item))
            self._related = lambda side, g, item: [
                h for h, items in side.groups.items() if dependence(item, next(iter(items.values())))]

    def _by_pairs(self, dependence: Callable[[Hashable, Hashable], bool]):
        def related(side: _Side, g: Hashable, item: Any) -> list:
            out = []
            for h in side.groups:
                if (g, h) not in self._cache:
                    self._cache[g, h] = bool(dependence(g, h))
                if self._cache[g, h]:
                    out.append(h)
            return out
        return related

    @property
    def pending(self) -> dict[str, list[tuple[int, Any]]]:
        """Each side's unmatched items so far, as ``(position, item)``."""
        return {name: [(q, side.at[q][0]) for q in sorted(side.at)] for name, side in self._sides.items()}

    def push_left(self, item: Any) -> None:
        """The next item of the left stream; AssertionError if the streams cannot be equivalent."""
        self._push("left", item)

    def push_right(self, item: Any) -> None:
        """The next item of the right stream; AssertionError if the streams cannot be equivalent."""
        self._push("right", item)

    def finish(self) -> int:
        """Both streams ended: the number of matched pairs, or AssertionError for an unmatched item."""
        if self._failure is None:
            left, right = self._sides["left"].at, self._sides["right"].at
            if left or right:
                side = "left" if not right or (left and min(left) <= min(right)) else "right"
                self._failure = self._unmatched(side, min(self._sides[side].at), len(left) + len(right) - 1)
        if self._failure is not None:
            raise AssertionError(self._failure)
        return self.matched

    def _push(self, name: str, item: Any) -> None:
        if self._failure is not None:
            raise AssertionError(self._failure)
        own, other = self._sides[name], _OTHER[name]
        theirs = self._sides[other]
        position, own.seen = own.seen, own.seen + 1
        group, key = self._group(item), _freeze(self._key(item))
        # No unmatched item depends on an unmatched item of the other side (the later one would have
        # failed), so an equal item there makes this one minimal on its own side too.
        blocker = theirs.first(self._related(theirs, group, item))
        equal = theirs.equal.get(key)
        if equal and (blocker is None or blocker >= next(iter(equal))):
            theirs.remove(next(iter(equal)))
            self.matched += 1
        elif blocker is not None:
            self._failure = (f"not equivalent: {other}[{blocker}] = {theirs.at[blocker][0]!r} is unmatched: "
                             f"{name}[{position}] = {item!r} depends on it and comes first on the {name} "
                             "(dependent items in another order, or an item missing or changed)")
            raise AssertionError(self._failure)
        else:
            own.add(position, item, group, key)

    def _unmatched(self, name: str, position: int, more: int) -> str:
        item, group, key = self._sides[name].at[position]
        other = _OTHER[name]
        theirs = self._sides[other]
        text = f"not equivalent: {name}[{position}] = {item!r} is unmatched: "
        if key not in theirs.equal:
            text += f"nothing on the {other} equals it (missing on the {other}, or extra on the {name})"
        else:
            equal = next(iter(theirs.equal[key]))
            behind = theirs.first(self._related(theirs, group, item))
            text += f"its equal {other}[{equal}] is held" + ("" if behind is None or behind >= equal else (
                f" behind {other}[{behind}] = {theirs.at[behind][0]!r}, which it depends on"))
        if more:
            counts = {s: len(self._sides[s].at) - (s == name) for s in ("left", "right")}
            text += f"; {more} more unmatched (left {counts['left']}, right {counts['right']})"
        return text


def rows(data: Any) -> list:
    """The items of a stream: a list as it is, a pandas DataFrame (or anything with ``toPandas()``,
    such as a PySpark DataFrame) as one dict per row, NaN and NaT as None (so that they compare equal).

    >>> import pandas as pd
    >>> rows(pd.DataFrame({"k": ["a", "b"], "v": [1.5, None]}))
    [{'k': 'a', 'v': 1.5}, {'k': 'b', 'v': None}]
    """
    to_pandas = getattr(data, "toPandas", None)
    if callable(to_pandas):
        data = to_pandas()
    if callable(getattr(data, "to_dict", None)) and hasattr(data, "columns"):
        return data.astype(object).where(data.notna(), None).to_dict("records")
    return list(data)


def assert_equivalent(left: Iterable | Any, right: Iterable | Any, dependence: Callable[[Any, Any], bool] | Dependence,
                      *, key: Callable[[Any], Any] | None = None, tag: Callable[[Any], Hashable] | None = None) -> int:
    """Assert that two output streams are equal up to ``dependence``; return the number of matched items.

    ``left``, ``right``: lists, pandas DataFrames or PySpark DataFrames (see :func:`rows`); the rest as
    for :class:`Matcher`, which gets the two sides' items alternately.  Raises AssertionError naming
    the first unmatched item: its side and position, the item, and what blocked it.

    >>> assert_equivalent([1, 2], [1, 2, 2], bag)
    Traceback (most recent call last):
    AssertionError: not equivalent: right[2] = 2 is unmatched: nothing on the left equals it (missing on the left, or extra on the right)
    """
    matcher = Matcher(dependence, key=key, tag=tag)
    a, b = rows(left), rows(right)
    for i in range(max(len(a), len(b))):
        if i < len(a):
            matcher.push_left(a[i])
        if i < len(b):
            matcher.push_right(b[i])
    return matcher.finish()
