"""Flumina's examples as specs, each with a generator of seeded event sequences.

Value barrier, max temperature per day, fraud detection, page-view join and outlier detection;
:data:`EXAMPLES` finds them by name for tests, notebooks and benchmarks.

>>> from lmstream_kit.flumina.spec import run_sequential
>>> spec, events = max_temperature_spec(2), max_temperature_events(8, sensors=2, day_every=3, seed=0)
>>> [(e.tag, e.ts, e.payload) for e in events][:4]
[('t1', 0, 23.2), ('end_of_day', 1, None), ('t0', 2, 21.8), ('t1', 3, 16.5)]
>>> run_sequential(spec, events)[1]
[('end_of_day', 1, 23.2), ('end_of_day', 5, 21.8), ('end_of_day', 7, 13.8)]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from ..exceptions import ConfigError
from ..registry import Registry
from .spec import Event, Spec, define_spec, value_barrier_spec

__all__ = ["EXAMPLES", "Example", "fraud_detection_events", "fraud_detection_spec", "max_temperature_events",
           "labelled", "max_temperature_spec", "outlier_detection_events", "outlier_detection_spec", "page_view_events",
           "page_view_spec", "value_barrier_events", "value_barrier_spec", "with_work"]


def _events(n: int, seed: int, shards: int, prefix: str, sync: str, every: int, payload: Callable) -> list[Event]:
    """``n`` events at timestamps 0..n-1: ``sync`` with probability 1/every, else a random shard."""
    rng = np.random.default_rng(seed)
    out = []
    for ts in range(n):
        if rng.random() < 1.0 / every:
            out.append(Event(sync, ts, payload(rng, None)))
        else:
            i = int(rng.integers(shards))
            out.append(Event(f"{prefix}{i}", ts, payload(rng, i)))
    return out


def _split(d: dict, tags2: frozenset, prefix: str) -> tuple[dict, dict]:
    """A per-shard dict split for fork: shard i goes right when ``prefix<i>`` is in ``tags2``."""
    right = {k: v for k, v in d.items() if f"{prefix}{k}" in tags2}
    return {k: v for k, v in d.items() if k not in right}, right


# -- value barrier ---------------------------------------------------------------------------------
def value_barrier_events(n: int, *, streams: int = 2, barrier_every: int = 100, seed: int = 0) -> list[Event]:
    """Events for :func:`~lmstream_kit.flumina.spec.value_barrier_spec`: ``a<i>`` with values 0..99,
    a ``b`` about every ``barrier_every`` events."""
    return _events(n, seed, streams, "a", "b", barrier_every,
                   lambda rng, i: None if i is None else int(rng.integers(100)))


# -- max temperature per day -----------------------------------------------------------------------
def max_temperature_spec(sensors: int, *, rate_t: float = 1000.0, rate_day: float = 1.0) -> Spec:
    """The highest temperature of all sensors, output and reset at each ``end_of_day``.

    Sensors ``t<i>`` report temperatures; they are independent of each other and of themselves (max
    commutes).  ``end_of_day`` depends on every tag: it outputs ``("end_of_day", ts, max)`` (``None``
    on a day without readings) and resets.  Fork copies the maximum to both sides, join takes the max.
    """
    t_tags = [f"t{i}" for i in range(sensors)]

    def update(m, event):
        if event.tag == "end_of_day":
            return -math.inf, [("end_of_day", event.ts, None if m == -math.inf else m)]
        return max(m, event.payload), []

    return define_spec("max_temperature", tags=[*t_tags, "end_of_day"],
                       depends={"end_of_day": [*t_tags, "end_of_day"]}, init=lambda: -math.inf,
                       update=update, fork=lambda m, t1, t2: (m, m), join=max,
                       description=max_temperature_spec.__doc__.split("\n")[0],
                       rates={**{t: rate_t for t in t_tags}, "end_of_day": rate_day})


def max_temperature_events(n: int, *, sensors: int = 2, day_every: int = 100, seed: int = 0) -> list[Event]:
    """Temperatures around 20 degrees (one decimal) from ``t<i>``, an ``end_of_day`` about every
    ``day_every`` events."""
    return _events(n, seed, sensors, "t", "end_of_day", day_every,
                   lambda rng, i: None if i is None else round(float(rng.normal(20.0, 5.0)), 1))


# -- fraud detection -------------------------------------------------------------------------------
def fraud_detection_spec(shards: int, *, sigmas: float = 3.0, rate_tx: float = 1000.0,
                         rate_refresh: float = 1.0) -> Spec:
    """Transactions scored against a model that a periodic ``refresh`` rebuilds from every shard.

    ``tx<i>`` carries an amount in cents for account shard ``i``; it is flagged when above the
    model's threshold (mean + ``sigmas`` standard deviations of all amounts seen at the last
    refresh; nothing is flagged before the first).  The state is ``{"threshold": float,
    "shards": {i: (count, sum, sum of squares, flagged)}}``.  ``refresh`` depends on every tag:
    it outputs ``("refresh", ts, flagged since the last refresh, new threshold)``.  Fork copies the
    threshold to both sides and gives each shard's statistics to the side that holds its tag;
    join takes the threshold from the left and unites the shards.  Integer amounts keep it exact.
    """
    tx_tags = [f"tx{i}" for i in range(shards)]

    def update(state, event):
        shards_ = dict(state["shards"])
        if event.tag == "refresh":
            count = sum(s[0] for s in shards_.values())
            total = sum(s[1] for s in shards_.values())
            squares = sum(s[2] for s in shards_.values())
            flagged = sum(s[3] for s in shards_.values())
            threshold = state["threshold"]
            if count:
                mean = total / count
                threshold = mean + sigmas * math.sqrt(max(squares / count - mean * mean, 0.0))
            shards_ = {k: (c, s, q, 0) for k, (c, s, q, _) in sorted(shards_.items())}
            return {"threshold": threshold, "shards": shards_}, [("refresh", event.ts, flagged, threshold)]
        i = int(event.tag[2:])
        c, s, q, f = shards_.get(i, (0, 0, 0, 0))
        amount = event.payload
        shards_[i] = (c + 1, s + amount, q + amount * amount, f + (amount > state["threshold"]))
        return {"threshold": state["threshold"], "shards": shards_}, []

    def fork(state, tags1, tags2):
        left, right = _split(state["shards"], tags2, "tx")
        return {"threshold": state["threshold"], "shards": left}, {"threshold": state["threshold"], "shards": right}

    def join(s1, s2):
        return {"threshold": s1["threshold"], "shards": {**s1["shards"], **s2["shards"]}}

    return define_spec("fraud_detection", tags=[*tx_tags, "refresh"], depends={"refresh": [*tx_tags, "refresh"]},
                       init=lambda: {"threshold": math.inf, "shards": {}}, update=update, fork=fork, join=join,
                       description=fraud_detection_spec.__doc__.split("\n")[0],
                       rates={**{t: rate_tx for t in tx_tags}, "refresh": rate_refresh})


def fraud_detection_events(n: int, *, shards: int = 2, refresh_every: int = 100, seed: int = 0) -> list[Event]:
    """Amounts in cents (lognormal, about 50 units, some large), a ``refresh`` about every
    ``refresh_every`` events."""
    return _events(n, seed, shards, "tx", "refresh", refresh_every,
                   lambda rng, i: None if i is None else int(rng.lognormal(8.5, 1.0)))


# -- page-view join with a changing table ----------------------------------------------------------
def page_view_spec(shards: int, *, pages: int = 4, rate_view: float = 1000.0, rate_update: float = 1.0) -> Spec:
    """Page views joined with the current value of a table that ``update`` events change.

    ``view<i>`` (shard ``i``) carries a page id and outputs ``("view", ts, page, value)`` with the
    page's current table value (``None`` before its first update); the state counts views per shard
    and value.  ``update`` carries ``(page, value)`` and depends on every tag; views are independent
    of each other and of themselves.  Fork copies the table to both sides and gives each shard's
    counts to the side that holds its tag; join takes the table from the left and unites the counts.
    """
    view_tags = [f"view{i}" for i in range(shards)]

    def update(state, event):
        if event.tag == "update":
            page, value = event.payload
            return {"table": {**state["table"], page: value}, "counts": state["counts"]}, []
        i = int(event.tag[4:])
        value = state["table"].get(event.payload)
        mine = dict(state["counts"].get(i, {}))
        mine[value] = mine.get(value, 0) + 1
        return ({"table": state["table"], "counts": {**state["counts"], i: mine}},
                [("view", event.ts, event.payload, value)])

    def fork(state, tags1, tags2):
        left, right = _split(state["counts"], tags2, "view")
        return {"table": state["table"], "counts": left}, {"table": state["table"], "counts": right}

    def join(s1, s2):
        return {"table": s1["table"], "counts": {**s1["counts"], **s2["counts"]}}

    return define_spec("page_view", tags=[*view_tags, "update"], depends={"update": [*view_tags, "update"]},
                       init=lambda: {"table": {}, "counts": {}}, update=update, fork=fork, join=join,
                       description=page_view_spec.__doc__.split("\n")[0],
                       rates={**{t: rate_view for t in view_tags}, "update": rate_update})


def page_view_events(n: int, *, shards: int = 2, pages: int = 4, update_every: int = 50, seed: int = 0
                     ) -> list[Event]:
    """Views of pages 0..pages-1, an ``update`` (page, value 0..9) about every ``update_every`` events."""
    def payload(rng, i):
        page = int(rng.integers(pages))
        return page if i is not None else (page, int(rng.integers(10)))
    return _events(n, seed, shards, "view", "update", update_every, payload)


# -- outlier detection -----------------------------------------------------------------------------
def outlier_detection_spec(streams: int, *, radius: float = 2.0, neighbours: int = 2, window: int = 50,
                           rate_x: float = 1000.0, rate_retrain: float = 1.0) -> Spec:
    """Distance-based outliers: a point with fewer than ``neighbours`` reference points within
    ``radius`` is an outlier; ``retrain`` refreshes the reference set from every stream.

    ``x<i>`` carries a value; it outputs ``("outlier", ts, i, value)`` when the reference set is not
    empty and the point is an outlier, and is kept as a new point of stream ``i``.  ``retrain``
    depends on every tag: the reference set becomes the last ``window`` of the old reference points
    and the new ones (in timestamp order); it outputs ``("retrain", ts, new points)``.  Fork copies
    the reference set to both sides and gives each stream's new points to the side that holds its
    tag; join takes the reference set from the left and unites the new points.
    """
    x_tags = [f"x{i}" for i in range(streams)]

    def update(state, event):
        ref, new = state["ref"], state["new"]
        if event.tag == "retrain":
            points = sorted((ts, i, v) for i, pts in new.items() for ts, v in pts)
            ref = (ref + tuple(v for _, _, v in points))[-window:]
            return {"ref": ref, "new": {}}, [("retrain", event.ts, len(points))]
        i, v = int(event.tag[1:]), event.payload
        close = sum(abs(v - r) <= radius for r in ref)
        out = [("outlier", event.ts, i, v)] if ref and close < neighbours else []
        return {"ref": ref, "new": {**new, i: new.get(i, ()) + ((event.ts, v),)}}, out

    def fork(state, tags1, tags2):
        left, right = _split(state["new"], tags2, "x")
        return {"ref": state["ref"], "new": left}, {"ref": state["ref"], "new": right}

    def join(s1, s2):
        return {"ref": s1["ref"], "new": {**s1["new"], **s2["new"]}}

    return define_spec("outlier_detection", tags=[*x_tags, "retrain"], depends={"retrain": [*x_tags, "retrain"]},
                       init=lambda: {"ref": (), "new": {}}, update=update, fork=fork, join=join,
                       description=outlier_detection_spec.__doc__.split("\n")[0],
                       rates={**{t: rate_x for t in x_tags}, "retrain": rate_retrain})


def outlier_detection_events(n: int, *, streams: int = 2, retrain_every: int = 50, seed: int = 0) -> list[Event]:
    """Values around 0 (one decimal; about 1 in 20 far out), a ``retrain`` about every ``retrain_every``."""
    def payload(rng, i):
        if i is None:
            return None
        far = rng.random() < 0.05
        return round(float(rng.normal(0.0, 20.0 if far else 2.0)), 1)
    return _events(n, seed, streams, "x", "retrain", retrain_every, payload)


# -- per-event work ----------------------------------------------------------------------------------
def with_work(spec: Spec, rounds: int) -> Spec:
    """``spec`` with ``rounds`` iterations of integer arithmetic added to every update of an event that
    no other tag of its own kind waits for (the parallel part): a stand-in for real per-event work,
    such as scoring a transaction with a model.  States and outputs are unchanged.

    >>> from lmstream_kit.flumina.spec import run_sequential
    >>> spec = value_barrier_spec(2)
    >>> events = value_barrier_events(50, seed=1, barrier_every=10)
    >>> run_sequential(with_work(spec, 100), events) == run_sequential(spec, events)
    True
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ConfigError(f"work rounds must be an integer >= 0, got {rounds!r}")
    if rounds == 0:
        return spec
    update, dependence = spec.update, spec.dependence
    busy = frozenset(t for t in spec.tags if not dependence(t, t))

    def working(state, event):
        if event.tag in busy:
            x = 0
            for i in range(rounds):
                x = (x * 31 + i) & 0xFFFF
        return update(state, event)

    return replace(spec, name=f"{spec.name}+work{rounds}", update=working)


def labelled(update: Callable, label: str) -> Callable:
    """``update`` whose every output comes as ``(label, output)``: another logic over the same state,
    whose outputs say which logic made them (what the reconfiguration chaos swaps in by name, so
    that an output made under the wrong logic shows).

    >>> labelled(value_barrier_spec(1).update, "v2")(5, Event("b", 3))
    (0, [('v2', ('b', 3, 5))])
    """
    def relabelled(state, event):
        state, outputs = update(state, event)
        return state, [(label, out) for out in outputs]

    relabelled.__name__ = str(label)
    return relabelled


class Example(NamedTuple):
    """An example: ``spec(parts)`` builds the spec for ``parts`` shards/streams/sensors, and
    ``events(n, parts, seed)`` a seeded sequence for it."""

    spec: Callable[[int], Spec]
    events: Callable[[int, int, int], list[Event]]


#: the examples by name; an unknown name lists the known ones
EXAMPLES: Registry[Example] = Registry("flumina example")
EXAMPLES.register("value_barrier", Example(
    value_barrier_spec, lambda n, k, seed: value_barrier_events(n, streams=k, seed=seed, barrier_every=20)))
EXAMPLES.register("max_temperature", Example(
    max_temperature_spec, lambda n, k, seed: max_temperature_events(n, sensors=k, seed=seed, day_every=20)))
EXAMPLES.register("fraud_detection", Example(
    fraud_detection_spec, lambda n, k, seed: fraud_detection_events(n, shards=k, seed=seed, refresh_every=20)))
EXAMPLES.register("page_view", Example(
    page_view_spec, lambda n, k, seed: page_view_events(n, shards=k, seed=seed, update_every=10)))
EXAMPLES.register("outlier_detection", Example(
    outlier_detection_spec, lambda n, k, seed: outlier_detection_events(n, streams=k, seed=seed, retrain_every=20)))
