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
    def depends(a: Any, b: Any) -> bool:
        return key(a) == key(b)
    return depends


@dataclass
class _Pending:
    item: Any
    key: Any
    blockers: int  # unmatched dependent items before it on its own side: it is minimal at 0


class Matcher:
    """The online check: feed two runs item by item as they stream, then call :meth:`finish`.

    Each side's unmatched items form a partial order (arrival order restricted to dependent pairs).
    A new item matches the earliest *minimal* unmatched item of the other side that equals it; if it
    depends on an unmatched item there that it does not match, the check fails at once.  Each push
    costs O(p) dependence tests, p the unmatched items of both sides: O(n p) for n items.

    Parameters
    ----------
    dependence : ``dependence(item1, item2) -> bool``, symmetric; or a
        :class:`~lmstream_kit.flumina.spec.Dependence` over tags, with ``tag``.
    key : what of an item must be equal for a match (default: the whole item).  Items with equal keys
        must have the same dependences.
    tag : ``tag(item)``, the tag ``dependence`` is applied to.

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
        self._dep = dependence if tag is None else (lambda a, b: dependence(tag(a), tag(b)))
        self._key = key if key is not None else (lambda item: item)
        self._pending: dict[str, dict[int, _Pending]] = {"left": {}, "right": {}}
        self._seen = {"left": 0, "right": 0}
        self.matched = 0
        self._failure: str | None = None

    @property
    def pending(self) -> dict[str, list[tuple[int, Any]]]:
        """Each side's unmatched items so far, as ``(position, item)``."""
        return {side: [(q, p.item) for q, p in items.items()] for side, items in self._pending.items()}

    def push_left(self, item: Any) -> None:
        """The next item of the left stream; AssertionError if the streams cannot be equivalent."""
        self._push("left", item)

    def push_right(self, item: Any) -> None:
        """The next item of the right stream; AssertionError if the streams cannot be equivalent."""
        self._push("right", item)

    def finish(self) -> int:
        """Both streams ended: the number of matched pairs, or AssertionError for an unmatched item."""
        if self._failure is None:
            left, right = self._pending["left"], self._pending["right"]
            if left or right:
                side = "left" if not right or (left and min(left) <= min(right)) else "right"
                self._failure = self._unmatched(side, min(self._pending[side]), len(left) + len(right) - 1)
        if self._failure is not None:
            raise AssertionError(self._failure)
        return self.matched

    def _push(self, side: str, item: Any) -> None:
        if self._failure is not None:
            raise AssertionError(self._failure)
        position, other = self._seen[side], _OTHER[side]
        self._seen[side] += 1
        key, own, theirs = self._key(item), self._pending[side], self._pending[other]
        blockers = sum(1 for p in own.values() if self._dep(p.item, item))
        for q, p in theirs.items():
            if blockers == 0 and p.blockers == 0 and p.key == key:
                self._match(other, q)
                return
            if self._dep(item, p.item):
                self._failure = (f"not equivalent: {other}[{q}] = {p.item!r} is unmatched: {side}[{position}] = "
                                 f"{item!r} depends on it and comes first on the {side} "
                                 "(dependent items in another order, or an item missing or changed)")
                raise AssertionError(self._failure)
        own[position] = _Pending(item, key, blockers)

    def _match(self, side: str, position: int) -> None:
        items = self._pending[side]
        gone = items.pop(position)
        for q, p in items.items():
            if q > position and self._dep(gone.item, p.item):
                p.blockers -= 1
        self.matched += 1

    def _unmatched(self, side: str, position: int, more: int) -> str:
        item, other = self._pending[side][position], _OTHER[side]
        text = f"not equivalent: {side}[{position}] = {item.item!r} is unmatched: "
        equal = next((q for q, p in self._pending[other].items() if p.key == item.key), None)
        if equal is None:
            text += f"nothing on the {other} equals it (missing on the {other}, or extra on the {side})"
        else:
            held = self._pending[other][equal]
            behind = next((q for q, p in self._pending[other].items() if q < equal and self._dep(p.item, held.item)),
                          None)
            text += f"its equal {other}[{equal}] is held" + ("" if behind is None else (
                f" behind {other}[{behind}] = {self._pending[other][behind].item!r}, which it depends on"))
        if more:
            counts = {s: len(self._pending[s]) - (s == side) for s in ("left", "right")}
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
