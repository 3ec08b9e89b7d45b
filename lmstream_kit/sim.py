"""A small deterministic discrete-event simulator over the admission controller.

One micro-batch engine runs on a virtual clock:

* datasets become pending at their arrival time;
* while idle, the engine polls its policy every ``poll_interval_s`` (virtual);
* an admitted batch (everything pending) occupies the engine for
  ``service_time(rows, nbytes)`` virtual seconds; then the controller observes
  the batch and polling resumes immediately, at the completion time.

Poll times are derived as ``base + k * poll_interval_s`` for integer ``k``
(``base`` = the start, or the last completion) and rounded to 9 decimals, so
they never drift and land on the decimal values one computes by hand
(``0.01 * 374`` becomes exactly ``3.74``).  A dataset is pending at a poll if
its arrival time is ``<=`` the poll time.  Polls while nothing is pending have
no effect, so the simulator skips straight to the first poll at or after the
next arrival.

Besides :func:`simulate` (the LMStream controller) there are two baselines with
the same output type: :func:`simulate_fixed` (Spark's fixed processing-time
trigger) and :func:`simulate_asap` (admit everything whenever idle).

Example
-------
>>> from lmstream_kit.controller import AdmissionController
>>> arrivals = constant_arrivals(100, 10)            # 100 rows at t = 0, 1, ..., 9
>>> c = AdmissionController(slide_s=5.0, prior_processing_s=1.234)
>>> batches = simulate(c, arrivals=arrivals, service_time=lambda rows, nbytes: 0.5)
>>> [(b.admitted_at, b.n_datasets) for b in batches][:2]   # the first 3 keep a margin of their prediction
[(2.53, 3), (6.59, 4)]
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from .controller import AdmissionController, BatchObservation, Decision
from .exceptions import ConfigError

__all__ = [
    "SimBatch",
    "SimDataset",
    "constant_arrivals",
    "random_arrivals",
    "simulate",
    "simulate_asap",
    "simulate_fixed",
]

ServiceTime = Callable[[int, int], float]
Arrival = tuple  # (time: float, rows: int, nbytes: int)


@dataclass(frozen=True, slots=True)
class SimDataset:
    """A pending dataset as the simulator hands it to the controller."""

    arrival: float
    rows: int
    nbytes: int


@dataclass(frozen=True)
class SimBatch:
    """One simulated micro-batch.

    Attributes
    ----------
    batch_id : int
        0, 1, 2, ... in admission order.
    admitted_at, completed_at : float
        Virtual times; ``completed_at - admitted_at`` is the service time.
    n_datasets, rows, nbytes : int
        Batch size.
    oldest_arrival : float
        Earliest arrival in the batch.
    max_latency_s : float
        ``completed_at - oldest_arrival``.
    avg_latency_s : float
        Row-weighted mean of ``completed_at - arrival`` (plain mean when the
        batch has no rows).
    decision : Decision or None
        The controller's admitting decision; None for the baselines.
    """

    batch_id: int
    admitted_at: float
    completed_at: float
    n_datasets: int
    rows: int
    nbytes: int
    oldest_arrival: float
    max_latency_s: float
    avg_latency_s: float
    decision: Optional[Decision]


# ---------------------------------------------------------------------------
# arrival traces
# ---------------------------------------------------------------------------


def _check_speedup(speedup: float) -> float:
    if isinstance(speedup, bool) or not isinstance(speedup, (int, float)) or not (0 < speedup < math.inf):
        raise ConfigError(f"speedup must be a finite number > 0, got {speedup!r}")
    return float(speedup)


def _check_count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
    return value


def constant_arrivals(
    rows: int, n_seconds: int, bytes_per_row: int = 64, speedup: float = 1.0
) -> list[tuple[float, int, int]]:
    """One dataset of ``rows`` rows per trace second, for ``n_seconds`` seconds.

    Dataset ``k`` arrives at ``k / speedup`` (rounded to 9 decimals):
    ``speedup`` replays the trace faster without changing dataset sizes.

    Examples
    --------
    >>> constant_arrivals(10, 3)
    [(0.0, 10, 640), (1.0, 10, 640), (2.0, 10, 640)]
    >>> constant_arrivals(10, 3, bytes_per_row=8, speedup=2)
    [(0.0, 10, 80), (0.5, 10, 80), (1.0, 10, 80)]
    """
    rows = _check_count("rows", rows)
    n_seconds = _check_count("n_seconds", n_seconds)
    bytes_per_row = _check_count("bytes_per_row", bytes_per_row)
    sp = _check_speedup(speedup)
    return [(round(k / sp, 9), rows, rows * bytes_per_row) for k in range(n_seconds)]


def random_arrivals(
    mean: float,
    std: float,
    n_seconds: int,
    seed: int,
    bytes_per_row: int = 64,
    speedup: float = 1.0,
) -> list[tuple[float, int, int]]:
    """One dataset per trace second with ``round(Normal(mean, std))`` rows.

    Draws come from ``random.Random(seed).gauss`` (deterministic for a seed).
    Seconds whose draw rounds to ``<= 0`` rows produce no dataset (a feed
    does not publish empty datasets).  Timing as in :func:`constant_arrivals`.

    Examples
    --------
    >>> a = random_arrivals(100, 10, 3, seed=1)
    >>> a == random_arrivals(100, 10, 3, seed=1), [t for t, _, _ in a]
    (True, [0.0, 1.0, 2.0])
    """
    if not (isinstance(mean, (int, float)) and math.isfinite(mean)):
        raise ConfigError(f"mean must be a finite number, got {mean!r}")
    if not (isinstance(std, (int, float)) and math.isfinite(std) and std >= 0):
        raise ConfigError(f"std must be a finite number >= 0, got {std!r}")
    n_seconds = _check_count("n_seconds", n_seconds)
    bytes_per_row = _check_count("bytes_per_row", bytes_per_row)
    sp = _check_speedup(speedup)
    rng = random.Random(seed)
    out = []
    for k in range(n_seconds):
        r = int(round(rng.gauss(mean, std)))
        if r > 0:
            out.append((round(k / sp, 9), r, r * bytes_per_row))
    return out


# ---------------------------------------------------------------------------
# engine plumbing
# ---------------------------------------------------------------------------


def _prepare(arrivals: Sequence[tuple[float, int, int]]) -> list[SimDataset]:
    out = []
    for i, a in enumerate(arrivals):
        try:
            t, rows, nbytes = a
        except (TypeError, ValueError):
            raise ConfigError(f"arrival {i} must be a (time, rows, nbytes) tuple, got {a!r}") from None
        if not (isinstance(t, (int, float)) and math.isfinite(t)):
            raise ConfigError(f"arrival {i} time must be a finite number, got {t!r}")
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise ConfigError(f"arrival {i} rows must be an integer >= 0, got {rows!r}")
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ConfigError(f"arrival {i} nbytes must be an integer >= 0, got {nbytes!r}")
        out.append(SimDataset(float(t), rows, nbytes))
    out.sort(key=lambda d: d.arrival)  # stable: equal times keep input order
    return out


def _check_interval(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _tick(base: float, k: int, step: float) -> float:
    # base + k*step, never accumulated (no drift); rounded to 1 ns so that
    # decimal steps give the values computed by hand.  k == 0 is base itself.
    if k == 0:
        return base
    t = round(base + k * step, 9)
    return t if t > base else base


def _first_k_at_or_after(base: float, step: float, x: float, *, strict: bool = False) -> int:
    """Smallest k >= 0 with _tick(base, k) >= x (or > x when strict)."""
    k = max(0, math.ceil((x - base) / step))

    def ok(j: int) -> bool:
        t = _tick(base, j, step)
        return t > x if strict else t >= x

    while k > 0 and ok(k - 1):
        k -= 1
    while not ok(k):
        k += 1
    return k


def _service(service_time: ServiceTime, rows: int, nbytes: int) -> float:
    s = service_time(rows, nbytes)
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not (0 <= s < math.inf):
        raise ConfigError(f"service_time({rows}, {nbytes}) must return a finite number >= 0, got {s!r}")
    return float(s)


def _make_batch(
    batch_id: int, admitted: float, completed: float, batch: list[SimDataset], decision: Optional[Decision]
) -> SimBatch:
    rows = sum(d.rows for d in batch)
    nbytes = sum(d.nbytes for d in batch)
    oldest = min(d.arrival for d in batch)
    if rows > 0:
        avg = math.fsum((completed - d.arrival) * d.rows for d in batch) / rows
    else:
        avg = math.fsum(completed - d.arrival for d in batch) / len(batch)
    return SimBatch(
        batch_id=batch_id,
        admitted_at=admitted,
        completed_at=completed,
        n_datasets=len(batch),
        rows=rows,
        nbytes=nbytes,
        oldest_arrival=oldest,
        max_latency_s=completed - oldest,
        avg_latency_s=avg,
        decision=decision,
    )


def _poll_loop(
    policy: Callable[[float, list], tuple[bool, Optional[Decision]]],
    on_complete: Optional[Callable[[SimBatch, float], None]],
    arrivals: Sequence[tuple[float, int, int]],
    service_time: ServiceTime,
    poll_interval_s: float,
    until: Optional[float],
) -> list[SimBatch]:
    step = _check_interval("poll_interval_s", poll_interval_s)
    arr = _prepare(arrivals)
    if not arr:
        return []
    n = len(arr)
    i = 0
    pending: list[SimDataset] = []
    batches: list[SimBatch] = []
    base = arr[0].arrival  # the engine starts with the first dataset
    k = 0
    while True:
        t = _tick(base, k, step)
        if not pending:
            if i >= n:
                break
            if t < arr[i].arrival:
                # Empty polls change nothing: jump to the first poll that sees data.
                k = _first_k_at_or_after(base, step, arr[i].arrival)
                t = _tick(base, k, step)
        if until is not None and t > until:
            break
        while i < n and arr[i].arrival <= t:
            pending.append(arr[i])
            i += 1
        admit, decision = policy(t, pending)
        if not admit:
            k += 1
            continue
        take = getattr(decision, "take", None)  # a catch-up chunk: the oldest `take` datasets
        batch, pending = (pending, []) if take is None else (pending[:take], pending[take:])
        rows = sum(d.rows for d in batch)
        nbytes = sum(d.nbytes for d in batch)
        s = _service(service_time, rows, nbytes)
        b = _make_batch(len(batches), t, t + s, batch, decision)
        batches.append(b)
        if on_complete is not None:
            on_complete(b, s)
        base, k = b.completed_at, 0  # polling resumes at completion
    return batches


# ---------------------------------------------------------------------------
# public simulators
# ---------------------------------------------------------------------------


def simulate(
    controller: AdmissionController,
    *,
    arrivals: Sequence[tuple[float, int, int]],
    service_time: ServiceTime,
    poll_interval_s: float = 0.01,
    until: Optional[float] = None,
) -> list[SimBatch]:
    """Run the LMStream controller over an arrival trace on a virtual clock.

    Parameters
    ----------
    controller : AdmissionController
        Polled with ``decide(now, pending)``; after each batch it observes
        ``BatchObservation(rows, nbytes, processing_s, max_latency_s)``.  Its
        state carries over (it is not reset).
    arrivals : sequence of (time, rows, nbytes)
        Sorted by time here (stably); polling starts at the first arrival.
    service_time : callable(rows, nbytes) -> seconds
        Virtual service time of a batch; called once per batch, in order (a
        seeded stateful callable stays deterministic).
    poll_interval_s : float, default 0.01
        Engine poll period (> 0).  Usually equal to the controller's.
    until : float, optional
        No poll happens after this time (a batch admitted at or before it still
        completes); datasets arriving later are never admitted.  Without it
        the run ends when every dataset has been processed.

    Returns
    -------
    list of SimBatch

    Examples
    --------
    >>> from lmstream_kit.controller import AdmissionController
    >>> c = AdmissionController(slide_s=2.0, prior_processing_s=0.5)
    >>> b = simulate(c, arrivals=[(0.0, 10, 640)], service_time=lambda r, n: 0.25)
    >>> b[0].admitted_at, b[0].completed_at, b[0].decision.reason   # 0.99 + 0.5 prior + 0.5 margin + 0.01 poll = 2
    (0.99, 1.24, 'admit')
    """

    def policy(t: float, pending: list) -> tuple[bool, Optional[Decision]]:
        d = controller.decide(t, pending)
        return d.admit, d

    def on_complete(b: SimBatch, s: float) -> None:
        controller.observe(BatchObservation(b.rows, b.nbytes, s, b.max_latency_s))

    return _poll_loop(policy, on_complete, arrivals, service_time, poll_interval_s, until)


def simulate_asap(
    *,
    arrivals: Sequence[tuple[float, int, int]],
    service_time: ServiceTime,
    poll_interval_s: float = 0.01,
    until: Optional[float] = None,
) -> list[SimBatch]:
    """Baseline: admit everything pending at every poll while idle.

    Examples
    --------
    >>> b = simulate_asap(arrivals=constant_arrivals(10, 3), service_time=lambda r, n: 1.5)
    >>> [(x.admitted_at, x.n_datasets) for x in b]
    [(0.0, 1), (1.5, 1), (3.0, 1)]
    """
    return _poll_loop(lambda t, p: (True, None), None, arrivals, service_time, poll_interval_s, until)


def simulate_fixed(
    trigger_s: float,
    *,
    arrivals: Sequence[tuple[float, int, int]],
    service_time: ServiceTime,
    poll_interval_s: float = 0.01,
    until: Optional[float] = None,
) -> list[SimBatch]:
    """Baseline: Spark's fixed processing-time trigger.

    Trigger ticks are at ``start + j * trigger_s`` (``start`` = first arrival).
    At each tick, if the engine is idle and something is pending, everything
    pending is admitted; ticks with nothing pending are skipped.  If a batch
    overruns one or more ticks, the next batch is admitted as soon as it
    completes (the first poll after completion is the completion itself),
    provided something is pending; ticks stay aligned to ``start``.

    ``poll_interval_s`` is validated but does not move admissions: the trigger
    timer, not polling, drives them.

    Examples
    --------
    >>> arr = constant_arrivals(10, 6)                   # t = 0 .. 5
    >>> b = simulate_fixed(2.0, arrivals=arr, service_time=lambda r, n: 0.5)
    >>> [(x.admitted_at, x.n_datasets) for x in b]
    [(0.0, 1), (2.0, 2), (4.0, 2), (6.0, 1)]
    >>> b = simulate_fixed(2.0, arrivals=arr, service_time=lambda r, n: 3.0)
    >>> [(x.admitted_at, x.n_datasets) for x in b]    # overruns: back to back
    [(0.0, 1), (3.0, 3), (6.0, 2)]
    """
    trig = _check_interval("trigger_s", trigger_s)
    _check_interval("poll_interval_s", poll_interval_s)
    arr = _prepare(arrivals)
    if not arr:
        return []
    n = len(arr)
    i = 0
    pending: list[SimDataset] = []
    batches: list[SimBatch] = []
    start = arr[0].arrival
    t = start  # next candidate admission time (tick 0)
    while True:
        if until is not None and t > until:
            break
        while i < n and arr[i].arrival <= t:
            pending.append(arr[i])
            i += 1
        if pending:
            rows = sum(d.rows for d in pending)
            nbytes = sum(d.nbytes for d in pending)
            s = _service(service_time, rows, nbytes)
            b = _make_batch(len(batches), t, t + s, pending, None)
            batches.append(b)
            pending = []
            # Next tick strictly after this admission; if the batch ran past
            # it, Spark starts the next batch right when this one completes.
            nxt = _tick(start, _first_k_at_or_after(start, trig, t, strict=True), trig)
            t = max(b.completed_at, nxt)
        else:
            if i >= n:
                break
            # Nothing pending: the first tick after now that sees the next dataset.
            x = max(arr[i].arrival, t)
            j = _first_k_at_or_after(start, trig, x)
            if _tick(start, j, trig) <= t:
                j = _first_k_at_or_after(start, trig, t, strict=True)
            t = _tick(start, j, trig)
    return batches
