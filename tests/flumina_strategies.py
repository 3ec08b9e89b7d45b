"""Hypothesis strategies for the Flumina tests: random plans, events, and stream interleavings with
heartbeats; and a comparison of ``(event, output)`` lists up to the dependence relation."""

from __future__ import annotations

from collections import Counter
from itertools import groupby

from hypothesis import strategies as st

from lmstream_kit.flumina import Event, Heartbeat, InputStream, random_plan
from lmstream_kit.flumina.plan import tag_key

#: payloads per example: ``{example: {tag prefix: strategy}}``; a synchronising tag not listed gets None
PAYLOADS = {
    "value_barrier": {"a": st.integers(-5, 20)},
    "max_temperature": {"t": st.integers(-100, 400).map(lambda v: v / 10)},
    "fraud_detection": {"tx": st.integers(0, 10_000)},
    "page_view": {"view": st.integers(0, 3), "update": st.tuples(st.integers(0, 3), st.integers(0, 9))},
    "outlier_detection": {"x": st.integers(-60, 60).map(lambda v: v / 10)},
}


def _payload(example: str, tag: str):
    for prefix, strategy in sorted(PAYLOADS[example].items(), key=lambda p: -len(p[0])):
        if tag.startswith(prefix) and (tag == prefix or tag[len(prefix):].isdigit()):
            return strategy
    return st.none()


@st.composite
def plans(draw, spec, max_depth: int = 3):
    """A random valid plan for ``spec`` (shrinks towards flatter plans)."""
    return random_plan(spec, lambda k: draw(st.integers(0, k - 1)), max_depth=max_depth)


@st.composite
def event_lists(draw, spec, example: str, max_size: int = 30, max_ts: int = 12):
    """Events with random tags, small integer timestamps (so ties happen) and the example's payloads."""
    tags = sorted(spec.tags, key=tag_key)
    n = draw(st.integers(0, max_size))
    out = []
    for _ in range(n):
        tag = draw(st.sampled_from(tags))
        out.append(Event(tag, draw(st.integers(0, max_ts)), draw(_payload(example, tag))))
    return out


@st.composite
def interleavings(draw, spec, events):
    """Input streams for ``events`` and one arrival order with heartbeats.

    Returns ``(streams, arrivals, reference)``: each tag goes to a random stream, each stream sends
    its events in timestamp order, heartbeats promise only what is true, and ``reference`` is all
    events in the sequential order (timestamp, stream, position in the stream).
    """
    tags = sorted(spec.tags, key=tag_key)
    count = draw(st.integers(1, 3))
    home = {t: draw(st.integers(0, count - 1)) for t in tags}
    streams = [InputStream(f"s{i}", [t for t in tags if home[t] == i]) for i in range(count)]
    queues = [sorted((e for e in events if home[e.tag] == i), key=lambda e: e.ts) for i in range(count)]
    reference = sorted(((e.ts, i, k), e) for i, q in enumerate(queues) for k, e in enumerate(q))
    arrivals, cursor = [], [0] * count
    while any(cursor[i] < len(q) for i, q in enumerate(queues)) or draw(st.booleans()):
        live = [i for i, q in enumerate(queues) if cursor[i] < len(q)]
        if not live:  # trailing heartbeats
            i = draw(st.integers(0, count - 1))
            arrivals.append((streams[i].name, Heartbeat(draw(st.integers(0, 20)))))
            continue
        i = draw(st.sampled_from(live))
        nxt = queues[i][cursor[i]]
        if draw(st.booleans()):  # a true promise: every later event of stream i is at nxt.ts or later
            arrivals.append((streams[i].name, Heartbeat(nxt.ts - draw(st.integers(1, 3)))))
        arrivals.append((streams[i].name, nxt))
        cursor[i] += 1
    return streams, arrivals, [e for _, e in reference]


def _canonical(dependence, items):
    """Items grouped into runs of one tag; a run of a tag independent of itself sorted (it commutes)."""
    out = []
    for tag, run in groupby(items, key=lambda item: item[0].tag):
        run = [repr(item) for item in run]
        out.append((repr(tag), run if dependence(tag, tag) else sorted(run)))
    return out


def assert_same_up_to_dependence(dependence, got, want):
    """``got`` and ``want`` (lists of ``(event, output)``) are equal up to reordering independent items.

    Checked on projections: for every pair of dependent tags (and every single tag), the items of
    those tags appear in the same order, up to reordering adjacent items of a self-independent tag.
    """
    assert Counter(map(repr, got)) == Counter(map(repr, want)), f"different outputs: {got} != {want}"
    tags = sorted(dependence.tags, key=tag_key)
    for i, a in enumerate(tags):
        for b in tags[i:]:
            if a != b and not dependence(a, b):
                continue
            left, right = ([item for item in items if item[0].tag in (a, b)] for items in (got, want))
            assert _canonical(dependence, left) == _canonical(dependence, right), (
                f"outputs of {a!r} and {b!r} are in a different order: {left} != {right}")
