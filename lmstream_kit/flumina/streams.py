"""Input streams with heartbeats, merged into one order that the dependence relation allows.

An event is released once no event that depends on it can still arrive before it: every stream
that carries a dependent tag has passed its timestamp (a heartbeat or a later event).

>>> from lmstream_kit.flumina.spec import Event, value_barrier_spec
>>> m = Merger(value_barrier_spec(1).dependence, [InputStream("a", ["a0"]), InputStream("b", ["b"])])
>>> m.push("a", Event("a0", 1, 5)), m.push("b", Event("b", 2))   # a0@1 waits for stream b to pass 1
([], [Event(tag='a0', ts=1, payload=5)])
>>> m.push("a", Heartbeat(2)), m.pending
([Event(tag='b', ts=2, payload=None)], ())
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..exceptions import ConfigError
from .spec import Dependence, Event, Tag

__all__ = ["Heartbeat", "InputStream", "Merger", "merge_streams"]


@dataclass(frozen=True)
class InputStream:
    """An input stream: its ``name`` and the ``tags`` its events carry."""

    name: str
    tags: frozenset

    def __init__(self, name: str, tags: Iterable[Tag]):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "tags", frozenset(tags))


@dataclass(frozen=True)
class Heartbeat:
    """A stream's promise: every later event of it has a timestamp greater than ``ts``."""

    ts: float


class Merger:
    """Merge events and heartbeats as they arrive into the sequential order, up to dependence.

    The order is by ``(timestamp, stream position in streams, arrival in the stream)``; an event is
    released when every other stream that carries a tag dependent on its tag can no longer send an
    event before it, and no unreleased dependent event comes before it.  Each stream must send its
    events in non-decreasing timestamp order and keep its heartbeats' promise (a ConfigError
    otherwise).  :meth:`boundary` is a micro-batch boundary: a heartbeat of every stream at the
    latest timestamp seen.
    """

    def __init__(self, dependence: Dependence, streams: Sequence[InputStream]):
        self.dependence = dependence
        self.streams = tuple(streams)
        self._index = {s.name: i for i, s in enumerate(self.streams)}
        if len(self._index) != len(self.streams):
            raise ConfigError(f"input stream names must be unique, got {[s.name for s in self.streams]}")
        for s in self.streams:
            unknown = sorted(map(repr, s.tags - dependence.tags))
            if unknown:
                raise ConfigError(f"input stream {s.name} carries unknown tag(s) {', '.join(unknown)}")
        self._last = [None] * len(self.streams)       # timestamp of each stream's last event
        self._beat = [None] * len(self.streams)       # each stream's latest heartbeat
        self._count = [0] * len(self.streams)
        self._pending: list[tuple[tuple, Event]] = []  # (order key, event), sorted by key
        self._latest: float | None = None

    @property
    def pending(self) -> tuple[Event, ...]:
        """Events that arrived but wait for other streams to pass them, in order."""
        return tuple(e for _, e in self._pending)

    def push(self, stream: str, item: Event | Heartbeat) -> list[Event]:
        """Take one event or heartbeat of ``stream``; return the events it releases, in order."""
        if stream not in self._index:
            raise ConfigError(f"unknown input stream {stream!r}; known: {', '.join(self._index)}")
        i = self._index[stream]
        if isinstance(item, Heartbeat):
            if self._beat[i] is None or item.ts > self._beat[i]:
                self._beat[i] = item.ts
        elif isinstance(item, Event):
            if item.tag not in self.streams[i].tags:
                raise ConfigError(f"input stream {stream} does not carry tag {item.tag!r} of {item!r}")
            if self._last[i] is not None and item.ts < self._last[i]:
                raise ConfigError(f"input stream {stream}: {item!r} comes after an event at {self._last[i]}")
            if self._beat[i] is not None and item.ts <= self._beat[i]:
                raise ConfigError(f"input stream {stream}: {item!r} breaks its heartbeat at {self._beat[i]}")
            self._last[i] = item.ts
            self._pending.append(((item.ts, i, self._count[i]), item))
            self._pending.sort(key=lambda p: p[0])
            self._count[i] += 1
        else:
            raise ConfigError(f"input stream {stream}: expected an Event or a Heartbeat, got {item!r}")
        ts = item.ts
        self._latest = ts if self._latest is None else max(self._latest, ts)
        return self._release()

    def boundary(self) -> list[Event]:
        """A micro-batch boundary: every stream beats at the latest timestamp seen; releases all."""
        if self._latest is not None:
            self._beat = [self._latest if b is None else max(b, self._latest) for b in self._beat]
        return self._release()

    def _passed(self, j: int, key: tuple) -> bool:
        """Whether stream ``j`` can no longer send an event ordered before ``key``."""
        ts, i, _ = key
        beat, last = self._beat[j], self._last[j]
        if beat is not None and beat >= ts:
            return True
        return last is not None and (last > ts or (last == ts and j > i))

    def _release(self) -> list[Event]:
        released, waiting = [], []
        for key, event in self._pending:
            blocked = any(self.dependence(event.tag, other.tag) for _, other in waiting) or any(
                j != key[1] and not self._passed(j, key)
                for j, s in enumerate(self.streams) if self.dependence.depends_on_any(event.tag, s.tags))
            if blocked:
                waiting.append((key, event))
            else:
                released.append(event)
        self._pending = waiting
        return released


def merge_streams(dependence: Dependence, streams: Sequence[InputStream],
                  arrivals: Iterable[tuple[str, Event | Heartbeat]]) -> list[Event]:
    """All events of ``arrivals`` (``(stream name, event or heartbeat)`` in arrival order), merged
    by a :class:`Merger` and released at the end by one micro-batch boundary.

    >>> from lmstream_kit.flumina.spec import value_barrier_spec
    >>> streams = [InputStream("a", ["a0", "a1"]), InputStream("b", ["b"])]
    >>> arrivals = [("a", Event("a1", 3, 2)), ("b", Event("b", 2)), ("a", Event("a0", 3, 1))]
    >>> [(e.tag, e.ts) for e in merge_streams(value_barrier_spec(2).dependence, streams, arrivals)]
    [('b', 2), ('a1', 3), ('a0', 3)]
    """
    merger = Merger(dependence, streams)
    out: list[Event] = []
    for stream, item in arrivals:
        out += merger.push(stream, item)
    return out + merger.boundary()
