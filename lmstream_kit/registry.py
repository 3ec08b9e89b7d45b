"""A small name -> object registry (policies, workloads, traffic patterns).

Example
-------
>>> r = Registry("colour")
>>> r.register("red", 1)
1
>>> r.get("red")
1
>>> r.get("blue")
Traceback (most recent call last):
...
lmstream_kit.exceptions.UnknownNameError: unknown colour 'blue'; known: red
"""

from __future__ import annotations

from typing import Generic, Iterator, TypeVar

from .exceptions import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Objects registered by name; lookups of unknown names list the known ones."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._display: dict[str, str] = {}

    def register(self, name: str, obj: T) -> T:
        key = name.lower()
        if key in self._items:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._items[key] = obj
        self._display[key] = name
        return obj

    def get(self, name: str) -> T:
        try:
            return self._items[str(name).lower()]
        except KeyError:
            known = ", ".join(self.names()) or "(none)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        return sorted(self._display.values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
