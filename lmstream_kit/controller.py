"""Latency-bounded dynamic micro-batching: LMStream's ConstructMicroBatch.

This module implements Algorithm 1 / Eq. 6 of the LMStream paper as a small,
engine-independent controller.  Every poll (every ~10 ms) the stream asks
:meth:`AdmissionController.decide` whether the datasets waiting so far should
be admitted as one micro-batch.  The answer is "yes" as soon as the estimated
latency of the oldest waiting row,

    estimate = age + predicted_service + margin + poll_interval,

reaches the latency target.  After each micro-batch completes, the stream
reports a :class:`BatchObservation` through :meth:`AdmissionController.observe`
so that the service-time model, the safety margin and (for tumbling windows)
the target itself follow the workload.

Nothing here imports Spark; the hot path (:meth:`AdmissionController.decide`)
is plain Python so that it costs a few microseconds per poll.

Example
-------
>>> from types import SimpleNamespace as D
>>> c = AdmissionController(slide_s=5.0, prior_processing_s=1.0)
>>> c.decide(10.0, []).reason
'empty'
>>> d = c.decide(10.0, [D(arrival=9.0, rows=10, nbytes=640)])
>>> d.admit, d.reason, d.estimate_s       # 1 s old + 1 s prior + 1 s cold-start margin + 0.01 s poll < 5 s
(False, 'wait', 3.01)
>>> c.decide(13.0, [D(arrival=9.0, rows=10, nbytes=640)]).reason   # 4 + 1 + 1 + 0.01 >= 5
'admit'
>>> c.decide(14.0, [D(arrival=9.0, rows=10, nbytes=640)]).reason   # age 5 >= 5
'overdue'
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .exceptions import ConfigError
from .protocol import BatchController, Param
from .service_model import CAP_FLOOR_SHARE, INPUTS, HeapForecast, RowCap, window_end_at, window_ends_passed
from .stats import (
    ServiceTimeModel,
    _check_history,
    _nonneg,
    nearest_rank_quantile,
    prediction_bound,
)

__all__ = [
    "AdmissionController",
    "BatchObservation",
    "Decision",
    "ParamChange",
    "ServiceTimeModel",
    "nearest_rank_quantile",
]

# Decisions compare sums of decimal-looking floats (e.g. 3.74 + 1.25 + 0.01
# against 5.0).  A one-nanosecond tolerance makes such exact ties resolve the
# way the arithmetic on paper says (as "reached") instead of depending on
# binary rounding; a nanosecond is far below any meaningful latency.
_TIE_EPS_S = 1e-9

#: parameter changes a controller keeps in memory (each is also in its batch's record, on disk)
CHANGES_KEPT = 1000
#: ``gc_margin``: the full-collection errors whose largest a due collection's margin takes
GC_ERRORS_KEPT = 5
#: the pause ``idle_collect`` makes room for before the stream ran a full collection of its own: LR1S's
#: full collections took 1.1-1.4 s (parallel collector, 4 GiB driver, 2-core VM)
IDLE_COLLECT_PRIOR_S = 1.5
#: ``close_horizon``: the share of processing time per wall second of arriving data above which the
#: batches cannot shrink before a window's close, so every pending dataset goes at once (asap)
CLOSE_RHO_MAX = 0.95
#: ``catch_up="chunks"``: after this many chunks in a row that left the backlog (its bytes pending at a
#: chunk's admission) no smaller than it was that many chunks before, the chunks cannot drain it (the
#: data arrives faster than bounded batches process it), and admission takes everything pending
#: (reason ``"overload"``) until what is pending fits the budget again
DRAIN_CHUNKS = 3


# ---------------------------------------------------------------------------
# value types
# ---------------------------------------------------------------------------



def _number(value: Any) -> float:
    """``value`` as a float where it is a finite number, else NaN (a progress without the field).

    >>> _number(3), _number(None), _number(float("inf"))
    (3.0, nan, nan)
    """
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return math.nan


@dataclass(frozen=True)
class BatchObservation:
    """What the stream reports after a micro-batch completes.

    Parameters
    ----------
    rows : int
        Rows in the batch.
    nbytes : int
        Bytes in the batch (the service-time model's input).
    processing_s : float
        Service time: ``completed_at - admitted_at``.
    max_latency_s : float
        ``completed_at - oldest arrival in the batch``.

    Examples
    --------
    >>> BatchObservation(rows=10, nbytes=640, processing_s=0.5, max_latency_s=4.5)
    BatchObservation(rows=10, nbytes=640, processing_s=0.5, max_latency_s=4.5, features=None, batch_id=None)
    """

    rows: int
    nbytes: int
    processing_s: float
    max_latency_s: float
    features: Mapping[str, float] | None = None  # what the feature model saw at admission
    batch_id: int | None = None  # Spark's batch id, which its progress (and a collection there) names


@dataclass(frozen=True)
class Decision:
    """The controller's answer to one poll.

    Attributes
    ----------
    admit : bool
        Whether everything pending should be admitted now.
    reason : str
        ``"empty"`` (nothing pending), ``"wait"`` (estimate below target),
        ``"admit"`` (estimate reached target), ``"overdue"`` (the age of the
        oldest pending dataset alone already reached the target), ``"window"`` /
        ``"emit"`` / ``"close"`` (the ``"window"`` tumbling target; ``"close"``: with
        ``close_horizon``, admitted early so that the batches before a window's close end by
        it), ``"catch-up"`` (a chunk of a
        backlog), ``"overload"`` (everything pending: catch-up chunks did not
        shrink the backlog), ``"heap"`` (``heap_admit``: the driver's old generation is
        forecast to fill), ``"busy"`` (``busy_load``: the stream is near saturation at the pending
        batch's size) or ``"collect"`` (``idle_collect``: not admitted; the
        driver's heap is to be collected now, while the data waits anyway).
    n_datasets, rows, nbytes : int
        Size of what is pending (the batch, if admitted).
    age_s : float
        ``now`` minus the oldest pending arrival (0.0 when empty).
    predicted_s : float
        Predicted service time for ``nbytes`` (0.0 when empty).
    margin_s : float
        Safety margin in force (reported even when empty).
    estimate_s : float
        ``age_s + predicted_s + margin_s + poll_interval_s`` (0.0 when empty).
    target_s : float
        Latency target in force.
    take : int or None
        How many of the oldest pending datasets are admitted: None for all of
        them, a smaller count for a catch-up chunk (reason ``"catch-up"``; then
        ``rows``, ``nbytes`` and ``predicted_s`` are the chunk's).
    """

    admit: bool
    reason: str
    n_datasets: int
    rows: int
    nbytes: int
    age_s: float
    predicted_s: float
    margin_s: float
    estimate_s: float
    target_s: float
    take: int | None = None
    features: Mapping[str, float] | None = None


@dataclass(frozen=True)
class ParamChange:
    """One applied :meth:`AdmissionController.mutate` call.

    Attributes
    ----------
    seq : int
        Monotonic sequence number (1, 2, ...) within one controller.
    wall_time : float
        ``time.time()`` when the change was applied.
    changes : dict
        ``{param: (old, new)}`` for every parameter whose value changed.
    """

    seq: int
    wall_time: float
    changes: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-serialisable form (tuples become two-element lists).

        Examples
        --------
        >>> ParamChange(1, 0.0, {"slide_s": (5.0, 2.0)}).to_dict()
        {'seq': 1, 'wall_time': 0.0, 'changes': {'slide_s': [5.0, 2.0]}}
        """
        return {
            "seq": self.seq,
            "wall_time": self.wall_time,
            "changes": {k: [old, new] for k, (old, new) in self.changes.items()},
        }


#: the ``cold_fraction`` a :class:`~lmstream_kit.live.LiveStream` gives its controller: a sliding window's
#: first target is at most half its slide (see the parameter)
STREAM_COLD_FRACTION = 0.5


class AdmissionController(BatchController):
    """LMStream's ConstructMicroBatch: admit pending data when latency requires.

    Parameters
    ----------
    slide_s : float
        Window slide in seconds.  ``> 0`` (sliding window): the latency target
        is ``slide_s``.  ``0`` (tumbling window): see ``tumbling_target``.
    poll_interval_s : float, default 0.01
        How often the stream polls; added to the estimate because the next
        chance to admit is one poll later (>= 0).  A LiveStream makes it Spark's
        wait between two asks of the gate while it holds data back (Spark's
        polling delay, fixed when the query starts: a live change moves the
        estimate at once and Spark's polling at the query's next start), and
        gives its controller 0.05 s unless told otherwise
        (:data:`~lmstream_kit.policies.STREAM_POLL_INTERVAL_S`).
    quantile : float, default 0.95
        Quantile of past prediction residuals used as safety margin, in (0, 1).
    history : int, default 100
        Batches remembered by the service-time model and the margin (>= 1).
        Not live-mutable.
    initial_target_s : float, default 1.0
        Tumbling-window target before any batch was observed (> 0), under
        either ``tumbling_target``.
    cold_target_s : float, default 0.0
        A sliding window's target before any batch was observed (>= 0; at
        most ``slide_s``; 0: the slide from the start).  The prior predicts the
        same time whatever a batch holds, so at a high rate the first batches,
        admitted on it, held a slide's worth of data and took several times
        the prediction: LR2S at 256,000 rows/s began with batches of 1.5 and
        2.0 M rows that took 4.2 and 5.1 s against 1.25 s predicted, and a
        stream at its capacity never caught up.  A short first target makes
        the first batches small ones that teach the model what a row costs.
        :class:`~lmstream_kit.live.LiveStream` sets it to a sixth of the window.
    cold_fraction : float, default 1.0
        A sliding window's target before any batch was observed is at most
        this fraction of ``slide_s`` (in (0, 1]; 1: the slide, or
        ``cold_target_s``).  :class:`~lmstream_kit.live.LiveStream` sets it to
        :data:`STREAM_COLD_FRACTION` (since 2026-12-08).  The prior predicts a
        quarter of the target and keeps as much for the margin, so a first
        batch holds about half the target's data: with the whole 5 s bound as
        the target, CM1S at 165,000 rows/s (near capacity; 2-core VM,
        2026-12-08, ``benchmarks/results/cold-target-2026-12-08``) began with
        batches of 825,000-990,000 rows that took 2.2-2.9 s, and one of the
        first two was late in 4 of 5 runs (the only late batches of three of
        them).  At half the bound they held 495,000 rows and took 1.35-1.46 s,
        within in 3 of 3 runs (which kept 92.3%, 100% and 100% of their batches
        within).
        At a quarter the first batches were as small as asap's, but the runs'
        batches grew from there as they do near capacity, and kept 30-35%.
    prior_processing_s : float or None, default None
        Predicted service time before any batch was observed (>= 0); None means
        ``0.25 * target`` (following the target while nothing is observed).
    min_margin_s : float, default 0.0
        Lower bound of the safety margin (>= 0).
    cold_start : int, default 3
        Batches during which the margin is at least the prediction itself
        (>= 0; 0: none), so that each of them leaves room for twice its
        predicted processing.  A model that has seen a few batches has not
        seen the query's slow ones, and before the first it predicts a
        quarter of the target: in the capacity probes of 2026-11-28 every
        late batch that set lmstream's bound on LR2S, CM1S and LR1T was one
        of the first three (LR2S's first, predicted 1.25 s, took 1.8 s;
        LR1T's third, the first to evict its join's state, took 1.5-2.3
        times its predecessors).  From three errors on the margin has its
        prediction bound.
    cold_evictions : int, default 2
        State evictions (progresses that report state rows removed) during which a batch that
        will evict has the ``cold_start`` margin, at least its prediction (>= 0; 0: none).  The
        batch after the one whose data passes a window's end (``window_period_s``, plus
        ``lateness_s``) drops that window's state, and the model, which sees bytes, has not seen
        that cost until an eviction ran: with the short first target LR1T's first eviction comes
        after ``cold_start``, and in 11 of 14 of lmstream's failed LR1T probes (2026-12-05/06)
        the first late batch was the first eviction.  On LR1T at 30,444 rows/s (80% of asap's
        capacity; 2-core VM, 4 GiB driver, 5 runs each way, seeds 10-14) without it the first
        eviction's learned margin was below its prediction in 4 runs and 2 of those batches were
        late (one began a collector thrash: 55.6% within); with it 4 of 5 runs kept every batch
        within, the rule raised the first eviction's margin in 3 (each within), and the fifth
        failed on a first eviction whose learned margin was already above its prediction
        (``benchmarks/results/lr1t-at-80pct-ce-{on,off}-2026-12-06``).  On the capacity search
        it never acted (``lr1t-cold-evictions-2026-12-06``), so LR1T's capacity is unchanged.
        0 is LMStream's rule.
    warmup : int, default 0
        Number of first observations to ignore (a cold JVM's first batch can
        take several times longer than the next ones).  Not live-mutable.
    interval_margin : bool, default True
        Also take the normal prediction bound of the residuals (see
        :func:`prediction_bound`) into the margin.  The empirical quantile alone
        lets about ``1 - quantile`` of batches overshoot even with a perfect
        estimate of it, and it is only the largest of a few errors early in a
        run; the bound keeps the guarantee with few observations.

    tumbling_target : {"paper", "window"}, default "paper"
        The target of a tumbling window (``slide_s == 0``).  ``"paper"``: the
        running mean of the ``max_latency_s`` of every observed batch, or
        ``initial_target_s`` before the first observation (LMStream's rule; it
        reinforces itself: small first batches set a small target).
        ``"window"``: a window's result appears only when it closes, so inside
        a window the target is ``window_target_s`` (the window's length, the
        query's bound), and pending data that closes a window is admitted at
        once (reason ``"window"``; see ``close_period_s``).  Spark emits the
        window in the batch after that one, so the next admission goes at
        once too, with whatever is pending (reason ``"emit"``).  Before the
        first observed batch the target is ``initial_target_s`` under both
        rules: a window's length of data on the prior's guess took many times
        that guess, so the first batches are small ones that teach the model.
        See also ``close_horizon``.
    window_target_s : float, default 0.0
        The ``"window"`` target in wall seconds (0: ``initial_target_s``).
    close_period_s : float, default 0.0
        Event-time seconds between window ends (a tumbling window's length; 0:
        the query's results do not wait for windows to close, as a join's, and
        ``"window"`` only batches up to ``window_target_s``).  Pending datasets
        tell their event time by a ``second`` attribute (the spool's generated
        second); data without it never counts as closing a window.
    lateness_s : float, default 0.0
        The watermark's delay in event-time seconds: a window ending at ``e``
        closes once data of second ``e + lateness_s`` arrived.
    close_horizon : bool, default True
        With the ``"window"`` target and a ``close_period_s``: admit inside a window early
        enough that the batches running when the window's closing data arrives are short
        (reason ``"close"``).  Without it, a batch admitted by the window target may still run
        when the closing data arrives, and a window's result waits behind it: on CM1T at
        102,400 rows/s (2-core VM) lmstream's 2-3 M-row batches took 8-11 s, and a result came
        24.1 s after its window closed, against asap's 0.86 s.  With the bytes model's line
        ``a + b bytes`` (:attr:`~lmstream_kit.stats.ServiceTimeModel.line`; none before the
        first batch, when the rule does not act) and ``rho = b`` times the bytes arriving per
        wall second (the processing a wall second of data costs), the rule acts only where
        waiting costs: where the batch that would hold everything pending at the close is
        predicted to take more than twice an asap batch (``a / (1 - rho)``).  It then admits
        once ``now + margin + poll + predicted / (1 - rho)`` reaches the closing data's
        expected arrival: after a batch of ``P`` s, batches admitted at once shrink
        geometrically (``P``, ``rho P``, ...) and together take about ``P / (1 - rho)``, so the
        one running at the close is short.  The arrival is extrapolated from the pending
        datasets' event seconds and arrivals (the last pair seen, when one dataset is pending);
        with ``rho`` at or above :data:`CLOSE_RHO_MAX` everything goes at once.
    evict_horizon : bool, default True
        With the ``"window"`` target where the results do not wait for a window's close
        (``close_period_s`` 0, a join's) but a window's end drops its state: take the window
        ends (``window_period_s``) as the closes.  The data that passes one goes at once (reason
        ``"window"``), the batch after it, which drops the state, at once too (``"emit"``), and
        ``close_horizon`` keeps the batches before the end short, so that the evicting batch
        holds only what arrived during a short batch.  The evicting batch pays for the eviction
        on top of its rows and waits behind the batch before it: on LR1T above 35,000 rows/s
        (2-core VM, 4 GiB driver) lmstream's evicting batches held what arrived during its long
        batch before (340,000-410,000 rows) and took 11-25 s, where asap's held 190,000-270,000.
        With the rule lmstream's capacity bracket equalled asap's in one side-by-side search
        (34,896-37,644 rows/s each), and at 30,444 rows/s it kept every batch within in 3 of 3
        runs (4 of 5 before) at 0.80-0.83x asap's CPU per row (0.58-0.66x before: more,
        smaller batches around each end).  ``False`` is LMStream's rule.
    service_model : {"bytes", "features"}, default "bytes"
        What predicts a batch's processing time.  ``"bytes"``: least squares
        on the batch's bytes (:class:`~lmstream_kit.stats.ServiceTimeModel`).
        ``"features"``: :class:`~lmstream_kit.service_model.FeatureServiceModel`
        also sees the windows the batch closes (``window_period_s``,
        ``lateness_s``), the state size and removals from Spark's last progress
        (:meth:`on_progress`) and the time since state was last evicted; it is
        fitted in a background thread, and until its first fit the bytes model
        predicts.  The margin is learned from the errors of whichever predicted.
    window_period_s : float, default 0.0
        Event-time seconds between window ends (a sliding window's slide, a
        tumbling window's length; 0: no windows), for the feature model.
    gc_margin : bool, default False
        Keep the errors of batches in which the driver ran a *full* garbage collection (Spark's
        progress says so, after the batch) out of the margin, and put the largest of the last
        few back into a decision's margin only while the heap forecast
        (:class:`~lmstream_kit.service_model.HeapForecast`) says the batch being admitted will
        run one.  A full collection empties the old generation, so the next is minutes away, but
        its 1-2 s error otherwise keeps the margin up (and the batches small) for the next
        ``history`` batches; and when the next one is due the margin has room for its pause.
        The first full collection of a run is not foreseen: no pause is known yet.
    heap_admit : bool, default False
        Admit at once, instead of waiting for more data, where the heap forecast
        (:class:`~lmstream_kit.service_model.HeapForecast`) says the pending batch already
        overflows the driver's old generation (reason ``"heap"``).  Waiting would only make the
        batch larger when the full collection comes, and the collection's pause grows with what
        the heap holds: on LR1T (a join whose state fills most of a 4 GiB heap) lmstream's batches,
        which fill the 15 s bound, left the collector 74-79% of the processing time at rates the
        fixed trigger's 5 s batches held.  With it, LR1T's capacity within the bound rose from
        22,627-24,675 to 29,344-32,000 rows/s on the 2-core VM, and at 1,000 rows/s its cell
        batched as before (one capacity search each, fresh JVMs, every probe on a collected heap;
        ``benchmarks/results/lr1t-heap-admit-*-collected``).  A third search with it on
        (``paper-collected-heap``) found 14,672-16,000, failing at 16,000 on one late batch of
        seven, twice, where the rule never acted: a single LR1T search moves by 2x, so that gain
        is not settled.  Off by default since 2026-12-06 (LMStream's rule): with ``evict_horizon``
        it cost LR1T both capacity and CPU.  A side-by-side search found lmstream at
        37,644-40,609 rows/s without it (37,644 passed twice) and 34,896-37,644 with it, asap at
        34,896-37,644 in both; at 30,444 rows/s every batch was within either way, at 0.64-0.69x
        asap's CPU per row without it and 0.80-0.83x with it, whose 91,000-274,000-row batches
        after each window's end paid a fixed cost each
        (``benchmarks/results/lr1t-{eh-no-heap-admit-capacity,at-80pct-eh-no-heap-admit}-2026-12-06``).
    idle_collect : bool, default False
        Collect the driver's heap while the pending data waits, where the heap forecast
        (:meth:`~lmstream_kit.service_model.HeapForecast.collection_near`) says the next batch is
        likely to stop for a full collection, and the target leaves room for the pause: the target
        minus the estimate is at least the longest full collection the stream has run (before one,
        :data:`IDLE_COLLECT_PRIOR_S`).  The decision is ``"collect"`` (not admitted), and none
        follows until Spark's progress reports a full collection: the stream asks its engine for the collection
        (:attr:`lmstream_kit.runloop.RunLoop.collect_heap`), which runs beside the wait, and the
        next decision sees the time it took in the data's age.  A policy that batches spends most of
        the bound waiting; a collection there delays no batch, where one inside a batch delays it and
        the data behind it.  Where the bound is tight it cannot act: on LR1S at 2,593 rows/s (2.5 s
        bound) a batch took 1.2 s and the margin 0.6 s, so no wait left the 1.3 s a full collection
        took there.  The collection shows in Spark's next progress (``jvm_gc_ms``, a full
        collection), and no collection is asked for before the progress of the last batch has come.
        Only the driver's heap is collected: on a cluster the executors' collections are their own.
        Measured on LR1T at 16,000 rows/s (2-core VM, two runs each way), it held the bound as well
        as without and cost 11-18% more CPU per row, so it is off by default.
    row_cap : bool, default False
        Cap a batch's rows where large batches thrash in the driver's collector
        (:class:`~lmstream_kit.service_model.RowCap`: a batch that ran a full collection taking at
        least 40% of its processing halves the cap; one that held at least half of it without a
        full collection raises it by a quarter), and to the rows whose promotion, by the heap
        forecast, fits the old generation's free part, whichever is lower, never below an eighth of
        the largest recent batch.  Pending data that reaches the cap is admitted at once (reason
        ``"row-cap"``), and an admission above it takes the oldest datasets up to it.
        Built for LR1T near its capacity (a join whose state fills most of a 4 GiB heap), where
        lmstream's 15 s batches of 560,000-630,000 rows spent 46-95% of their time in the collector
        at 34,896 rows/s, and asap's batches of 76,000-150,000 held the bound at 38,055.  Measured
        there (2-core VM, ``benchmarks/results/lr1t-row-cap-2-2026-12-06``) it did not raise
        lmstream's capacity: 32,000-34,896 rows/s with it as without, and above that its batches
        fell to a dataset each, whose fixed cost (0.7-1.5 s for 38,000 rows: the join's state) let
        the backlog grow (20% of the batches within the bound at 34,896 and 38,055 rows/s, against
        44-83% without).  So it is off.
    busy_load : float, default 0.0
        Admit at once, instead of waiting for more data, where the stream is near saturation at the
        pending batch's size: its predicted processing per byte times the bytes arriving per wall
        second (the processing a wall second of data costs, at that size) is at least this (reason
        ``"busy"``; >= 0, 0: never, LMStream's rule).  The arrival rate is the pending datasets' (the
        bytes after the oldest over the time since it), the last one seen while a single dataset is
        pending; the rule waits for ``cold_start`` observed batches (at least 1).  Near saturation a
        larger batch processes its rows no faster where a row costs the same in any batch, and
        waiting for it spends the slack that a slow batch or a collector pause needs.  SIMULATED on
        LR2S (``benchmarks/lr2s_capacity_sim.py``, calibrated on the probes of
        ``benchmarks/results/paper-2026-12-06``): with 0.9, 80% of runs held the bound at 215,269
        rows/s (asap 90%, LMStream's rule 20%).  Measured on Spark (2026-12-07, one VM, side by side
        with asap): at 0.8 lmstream's capacity was 107,635-117,377 rows/s against asap's
        98,702-107,635, but at 80% of that the rule acted on 62 of 68 batches, at 0.89x asap's CPU
        per row; at 0.9 98,702-107,635 against 117,377-128,000 (asap's own bracket moved 15% between
        the two runs).  The capacity and the CPU goals pull apart, so it is off.
    catch_up : {"chunks", "all"}, default "chunks"
        What an admission takes once the backlog cannot meet the target in one
        batch (after a restart or a burst).  ``"all"``: everything pending, as
        Algorithm 1 does.  ``"chunks"``: the oldest datasets, as many as the
        model predicts to finish within the target (see Notes).

    Notes
    -----
    * Algorithm 1 admits *everything* pending, so a single dataset whose
      prediction alone exceeds the target is admitted at once, and a backlog
      becomes one long batch that delays every row arriving meanwhile.  With
      ``catch_up="chunks"``, an admission whose whole backlog is predicted to
      take longer than the *budget* ``target - margin - poll_interval`` takes
      only the longest prefix of ``pending`` (in spool order, oldest first)
      predicted to fit the budget (reason ``"catch-up"``); where the margin
      leaves room for no dataset, the prefix that fits ``target -
      poll_interval``.  Where that prefix is predicted to finish late anyway (a
      spike's backlog, its data already old), so is the chunk after it, which
      waits for it: the prefix then grows to what fits ``target -
      poll_interval``, one late batch instead of several, and the rest is
      admitted sooner.  Before the model has seen a batch it cannot size one,
      so a backlog whose arrivals span more than the target is cut at the
      datasets that arrived within one target of the oldest: what a batch
      holds in steady state.  Where even the oldest dataset alone does not fit
      the budget, chunks cannot help and everything is admitted.  Where
      :data:`DRAIN_CHUNKS` chunks in a row left the backlog no smaller than
      they found it, the data arrives faster than bounded batches process it
      (a sustained overload, not a burst): admission then takes everything
      pending (reason ``"overload"``), the batches grow until each pays its
      fixed cost over enough rows to keep up, and chunks resume once what is
      pending fits the budget.  The batch that drains the backlog (the first
      admission after chunks that is not one) gets ``catch_up_s``: from the
      first chunk's admission to its own completion.
    * The safety margin is ``max(min_margin_s, Q, B, 0)`` where ``Q`` is the
      nearest-rank ``quantile`` of the residuals ``processing_s - prediction``
      of the last ``history`` batches, each prediction taken just *before* that
      batch was added to the model (an honest out-of-sample error), and ``B``
      their normal prediction bound at ``quantile`` (with ``interval_margin``;
      with fewer than 3 residuals ``B`` is their largest absolute value).
      While fewer than ``cold_start`` batches were observed, and for a batch
      that will evict a window's state while fewer than ``cold_evictions``
      evictions ran, a decision's margin is also at least its prediction
      (:attr:`margin_s` is the learned margin alone).
    * ``decide``, ``observe`` and ``mutate`` may be called from different
      threads.  One lock guards the state; ``decide`` aggregates ``pending``
      outside it and holds it only for O(1) work.  Changes made by ``mutate``
      apply from the next ``decide`` call.

    Examples
    --------
    >>> from types import SimpleNamespace as D
    >>> c = AdmissionController(slide_s=5.0)          # prior = 0.25 * 5 = 1.25 s, margin as much (cold start)
    >>> p = [D(arrival=0.0, rows=100, nbytes=6400)]
    >>> c.decide(2.48, p).reason, c.decide(2.49, p).reason
    ('wait', 'admit')
    >>> c.observe(BatchObservation(rows=100, nbytes=6400, processing_s=1.0, max_latency_s=3.49))
    >>> c.margin_s, c.model.predict(6400)   # one residual, -0.25: its size until 3 are known
    (0.25, 1.0)
    >>> c.set_slide(2.0)
    >>> [ch.changes for ch in c.pop_changes()]
    [{'slide_s': (5.0, 2.0)}]
    """

    prefix = "controller"
    PARAMS = (
        Param("slide_s", float, low=0, hint="0 = tumbling window",
              doc="latency target, wall s (0 = running mean of past max latencies)"),
        Param("quantile", float, low=0, high=1, low_open=True, high_open=True,
              doc="quantile of past prediction errors kept as safety margin"),
        Param("poll_interval_s", float, low=0, doc="seconds between polls, added to the estimate"),
        Param("initial_target_s", float, low=0, low_open=True, doc="tumbling target before any batch"),
        Param("cold_target_s", float, low=0, doc="sliding target before any batch, at most the slide (0 = the slide)"),
        Param("cold_fraction", float, low=0, high=1, low_open=True,
              doc="a sliding target before any batch is at most this fraction of the slide (1 = the slide)"),
        Param("prior_processing_s", float, low=0, nullable=True, doc="predicted service time before any batch"),
        Param("min_margin_s", float, low=0, doc="lower bound of the safety margin"),
        Param("cold_start", int, low=0, doc="batches during which the margin is at least the prediction"),
        Param("cold_evictions", int, low=0,
              doc="state evictions during which the batch that evicts has a margin of at least its prediction"),
        Param("interval_margin", bool, doc="also keep the residuals' normal prediction bound as margin"),
        Param("tumbling_target", str, choices=("paper", "window"),
              doc="tumbling window: LMStream's running mean of past max latencies, or batch up to the "
                  "window's length and admit at once what closes a window"),
        Param("window_target_s", float, low=0, doc="the 'window' target, wall s (0 = initial_target_s)"),
        Param("close_period_s", float, low=0, doc="event-time s between window ends (0 = results do not wait)"),
        Param("lateness_s", float, low=0, doc="the watermark's delay, event-time s"),
        Param("close_horizon", bool,
              doc="'window' target: admit early enough that the batches before a window's close end by it"),
        Param("evict_horizon", bool,
              doc="'window' target, results that do not wait (a join's): treat the window ends that drop the "
                  "state as closes"),
        Param("service_model", str, choices=("bytes", "features"),
              doc="predict processing time from bytes, or from bytes, windows closed, state and evictions"),
        Param("window_period_s", float, low=0, doc="event-time s between window ends (0 = no windows)"),
        Param("gc_margin", bool,
              doc="keep full-collection batches' errors out of the margin, and add them back only when "
                  "the heap forecast says the batch will run a full collection"),
        Param("heap_admit", bool,
              doc="admit at once where the heap forecast says the pending batch overflows the old generation"),
        Param("idle_collect", bool,
              doc="collect the driver's heap while data waits, where a full collection is near and "
                  "the target leaves room for its pause"),
        Param("row_cap", bool,
              doc="cap a batch's rows where large batches thrash in the driver's collector (halved at each "
                  "such batch, raised by a quarter at each batch near it without a full collection)"),
        Param("busy_load", float, low=0,
              doc="admit at once where a wall second of arriving data costs at least this much processing "
                  "at the pending batch's size: near saturation, waiting buys no speed (0 = never)"),
        Param("catch_up", str, choices=("chunks", "all"),
              doc="a backlog that cannot meet the target in one batch: in chunks that fit it, or all at once"),
    )
    MUTABLE = frozenset(p.name for p in PARAMS)
    FIELDS = {
        "catch_up_s": "s from the first catch-up chunk's admission to the completion of the batch that "
                      "drained the backlog (on that batch only)",
        "service_features": "what the feature service-time model saw at the batch's admission",
        "idle_collections": "collections of the driver's heap idle_collect asked for while the batch's data "
                            "waited (on batches where it asked)",
    }

    def __init__(
        self,
        *,
        slide_s: float,
        poll_interval_s: float = 0.01,
        quantile: float = 0.95,
        history: int = 100,
        initial_target_s: float = 1.0,
        cold_target_s: float = 0.0,
        cold_fraction: float = 1.0,
        prior_processing_s: float | None = None,
        min_margin_s: float = 0.0,
        cold_start: int = 3,
        cold_evictions: int = 2,
        interval_margin: bool = True,
        tumbling_target: str = "paper",
        window_target_s: float = 0.0,
        close_period_s: float = 0.0,
        lateness_s: float = 0.0,
        close_horizon: bool = True,
        evict_horizon: bool = True,
        service_model: str = "bytes",
        window_period_s: float = 0.0,
        catch_up: str = "chunks",
        gc_margin: bool = False,
        heap_admit: bool = False,
        idle_collect: bool = False,
        row_cap: bool = False,
        busy_load: float = 0.0,
        warmup: int = 0,
    ) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._history = _check_history(history)
        if isinstance(warmup, bool) or not isinstance(warmup, numbers.Integral) or warmup < 0:
            raise ConfigError(f"warmup must be an integer >= 0, got {warmup!r}")
        self._warmup = int(warmup)
        self._warmup_left = self._warmup
        self._n_warmup = 0
        values = {
            "slide_s": slide_s,
            "poll_interval_s": poll_interval_s,
            "quantile": quantile,
            "initial_target_s": initial_target_s,
            "cold_target_s": cold_target_s,
            "cold_fraction": cold_fraction,
            "prior_processing_s": prior_processing_s,
            "min_margin_s": min_margin_s,
            "cold_start": cold_start,
            "cold_evictions": cold_evictions,
            "interval_margin": interval_margin,
            "tumbling_target": tumbling_target,
            "window_target_s": window_target_s,
            "close_period_s": close_period_s,
            "lateness_s": lateness_s,
            "close_horizon": close_horizon,
            "evict_horizon": evict_horizon,
            "service_model": service_model,
            "window_period_s": window_period_s,
            "catch_up": catch_up,
            "gc_margin": gc_margin,
            "heap_admit": heap_admit,
            "idle_collect": idle_collect,
            "row_cap": row_cap,
            "busy_load": busy_load,
        }
        self._p: dict[str, Any] = {k: self.param(k).validate(v) for k, v in values.items()}
        self._model = ServiceTimeModel(history=self._history, prior_s=0.0)
        self._residuals: deque[float] = deque(maxlen=self._history)
        self._residual_ids: deque[int | None] = deque(maxlen=self._history)  # their batches' ids, in step
        self._full_gc_batches: deque[int] = deque(maxlen=2 * self._history)  # batches that ran a full collection
        self._gc_margin: float | None = None  # the largest recent full-collection error (gc_margin)
        self._raw_margin: float | None = None  # residual quantile, None before any
        self._lat_sum = 0.0  # sum of observed max latencies (tumbling target)
        self._n_observed = 0
        self._last_decision: Decision | None = None
        self._catch_up_since: float | None = None  # admission of a catch-up's first chunk
        self._chunk_backlogs: deque[int] = deque(maxlen=DRAIN_CHUNKS)  # bytes pending at this catch-up's chunks
        self._overloaded = False  # chunks did not drain the backlog: admit it all until it fits the budget
        # {period: end of the latest window the admitted data closed} (service_model.window_ends_passed)
        self._closed_ends: dict[float, float | None] = {}
        self._emit_due = False  # the last admission closed a window: the next batch emits it
        self._arrival_rates: tuple[float, float] | None = None  # (bytes, event s) per wall s, last seen
        self._byte_rate: float | None = None  # bytes arriving per wall s, from the last poll with 2+ pending
        self._features_model = None  # FeatureServiceModel, made when service_model="features" first predicts
        self._state: dict[str, float] = {}  # state rows, bytes and removals from Spark's last progress
        self._last_eviction: float | None = None  # when a progress last reported state rows removed
        self._n_evictions = 0  # progresses that reported state rows removed
        self._evicts_next = False  # the admitted data passed a window's end: the next batch evicts its state
        self._heap = HeapForecast()  # whether a batch will stop for the driver's collector (progress' heap)
        self._batch_rows: dict[int, float] = {}  # rows of the latest batches, by batch id, for the heap forecast
        self._cap_halves: dict[int, dict] = {}  # a batch's record and progress, until both came (the row cap)
        self._row_cap = RowCap()  # learned whether or not row_cap acts on it
        self._collect_asked = False  # idle_collect asked for a collection since Spark's last progress
        self._collects = 0  # collections asked for since the last admission
        self._collects_admitted = 0  # ... before the last admission, for its batch's record
        self._batch_read: int | None = None  # the id of the last batch whose progress (the heap after it) came
        self._changes: deque[ParamChange] = deque(maxlen=CHANGES_KEPT)  # the newest; older ones are in the records
        self._n_changes = 0  # changes applied so far (the next one's seq - 1)
        self._n_reported = 0  # the seq of the last change pop_changes returned
        self._sync_prior()

    # -- internal (call with the lock held, or from __init__) ---------------
    def _target(self) -> float:
        slide = self._p["slide_s"]
        if slide > 0.0:
            if self._n_observed > 0:
                return slide
            cap = self._p["cold_fraction"] * slide  # at most the slide: the fraction is in (0, 1]
            cold = self._p["cold_target_s"]
            return min(cold, cap) if cold > 0.0 else cap
        if self._n_observed == 0:
            # before any batch: a window's length of data on a prior's guess can take many times that
            # guess (CM1T's first two at 102,400 rows/s: 15 s of data each, 10.6 and 12.6 s against
            # 7.5), so the first batches are small ones that teach the model what a row costs
            return self._p["initial_target_s"]
        if self._p["tumbling_target"] == "window":
            return self._p["window_target_s"] or self._p["initial_target_s"]
        return self._lat_sum / self._n_observed

    def _margin(self) -> float:
        m = self._p["min_margin_s"]
        raw = self._raw_margin
        if raw is not None and raw > m:
            m = raw
        return max(0.0, m)

    def _sync_prior(self) -> None:
        # The prior only matters while the model is empty; keeping it equal to
        # 0.25 * target there lets a target change move the first prediction.
        prior = self._p["prior_processing_s"]
        self._model.prior_s = 0.25 * self._target() if prior is None else prior

    def _refresh_margin(self) -> None:
        r = self._residuals
        self._gc_margin = None
        if r and self._p["gc_margin"] and self._full_gc_batches:
            full = set(self._full_gc_batches)
            marked = [i is not None and i in full for i in self._residual_ids]
            gc = [x for x, m in zip(r, marked) if m]
            if gc:
                self._gc_margin = max(0.0, max(gc[-GC_ERRORS_KEPT:]))
                r = [x for x, m in zip(r, marked) if not m]
        if not r:
            self._raw_margin = None
            return
        q = self._p["quantile"]
        margin = nearest_rank_quantile(r, q)
        if self._p["interval_margin"]:
            bound = prediction_bound(r, q)
            if bound is None:
                # too few errors for a bound: an over-prediction so far says
                # little about the next error's sign, so take its size
                bound = max(abs(x) for x in r)
            margin = max(margin, bound)
        self._raw_margin = margin

    # -- the hot path ------------------------------------------------------
    def decide(self, now: float, pending: Sequence) -> Decision:
        """Decide whether to admit everything in ``pending`` at time ``now``.

        Parameters
        ----------
        now : float
            Current time (same clock as the arrivals, epoch seconds).
        pending : sequence
            Objects with ``.arrival`` (float), ``.rows`` and ``.nbytes``, in
            spool order: a catch-up chunk is a prefix (the oldest arrival is
            still taken as the minimum).

        Returns
        -------
        Decision
            Also stored as :attr:`last_decision`.

        Examples
        --------
        >>> from types import SimpleNamespace as D
        >>> c = AdmissionController(slide_s=2.0, prior_processing_s=0.5)
        >>> c.decide(7.0, [D(arrival=4.0, rows=1, nbytes=64)]).reason
        'overdue'

        A backlog of 10 datasets of 1 s each where the target is 2 s is admitted
        in chunks that fit ``2 - 0.01`` s:

        >>> from lmstream_kit.controller import BatchObservation as B
        >>> c.observe(B(rows=1, nbytes=100, processing_s=0.5, max_latency_s=2))
        >>> c.observe(B(rows=1, nbytes=200, processing_s=1.0, max_latency_s=2))
        >>> backlog = [D(arrival=float(i), rows=1, nbytes=100) for i in range(10)]
        >>> d = c.decide(20.0, backlog)
        >>> d.reason, d.take, d.predicted_s, d.margin_s      # 3 x 100 B in 1.5 s; 4 would need 2 s
        ('catch-up', 3, 1.5, 1.5)

        (Its margin is its prediction: the controller has seen fewer than ``cold_start`` batches.)
        """
        # Aggregate outside the lock: this is the only O(len(pending)) work.
        n = 0
        rows = 0
        nbytes = 0
        oldest = math.inf
        newest = -math.inf
        oldest_bytes = 0
        for d in pending:
            a = d.arrival
            if a < oldest:
                oldest, oldest_bytes = a, d.nbytes
            newest = max(newest, a)
            rows += d.rows
            nbytes += d.nbytes
            n += 1
        with self._lock:
            target = self._target()
            margin = self._margin()
            if n == 0:
                dec = Decision(False, "empty", 0, 0, 0, 0.0, 0.0, margin, 0.0, target)
            else:
                # Clamp: an arrival stamped slightly in the future (clock skew
                # between source and driver) must not make the age negative.
                age = now - oldest
                age = max(age, 0.0)
                features = self._features(now, pending, nbytes, oldest)
                predicted = self._predict(nbytes, features)
                gc_room = self._gc_margin is not None and self._gc_margin > margin
                # the heap forecast for this batch, asked once (the feature model's features hold it already)
                full_gc_due = (gc_room or self._p["heap_admit"]) and bool(
                    features["full_gc_due"] if features and "full_gc_due" in features
                    else self._heap.features(rows).get("full_gc_due"))
                if gc_room and full_gc_due:
                    margin = self._gc_margin  # this batch will stop for a full collection: room for it
                learned = margin
                # a batch of a kind the model has not seen yet: one of the first, or one that evicts
                cold = self._n_observed < self._p["cold_start"] or (
                    self._evicts_next and self._n_evictions < self._p["cold_evictions"])
                if cold:
                    margin = max(margin, predicted)
                poll = self._p["poll_interval_s"]
                estimate = age + predicted + margin + poll
                if n > 1 and newest > oldest:  # the bytes after the oldest dataset, over the time since it
                    self._byte_rate = (nbytes - oldest_bytes) / (newest - oldest)
                if age >= target - _TIE_EPS_S:
                    admit, reason = True, "overdue"
                elif estimate >= target - _TIE_EPS_S:
                    admit, reason = True, "admit"
                elif self._busy(nbytes, predicted):
                    # near saturation at this batch's size: a larger one buys no speed, only spends slack
                    admit, reason = True, "busy"
                elif (close := self._window_close(pending)) is True:
                    admit, reason = True, "window"
                elif self._emit_due:
                    # Spark emits a window in the batch after the one whose data closed it (the kit
                    # runs no no-data batches): that next batch goes at once, with what is pending
                    admit, reason = True, "emit"
                elif close is not None and self._close_due(now, pending, close, nbytes, oldest, newest,
                                                           predicted, margin + poll):
                    admit, reason = True, "close"
                elif (cap := self._cap()) is not None and rows >= cap:
                    # a batch this large thrashed in the collector: the one pending goes now
                    admit, reason = True, "row-cap"
                elif self._p["heap_admit"] and full_gc_due:
                    # the old generation fills with this batch already: a larger one only holds more
                    # when the full collection comes
                    admit, reason = True, "heap"
                elif self._collect_now(target - estimate):
                    admit, reason = False, "collect"
                else:
                    admit, reason = False, "wait"
                dec = Decision(admit, reason, n, rows, nbytes, age, predicted, margin, estimate, target,
                               features=features)
                if admit and n > 1 and self._p["catch_up"] == "chunks":
                    # a chunk is judged by its own prediction: in a cold start, its margin is that
                    # prediction (at least the learned one), so it fits where twice it does
                    budget = target - learned - poll
                    if cold:
                        budget = min(budget, (target - poll) / 2.0)
                    chunk = self._chunk(dataclasses.replace(dec, margin_s=learned), pending, budget, oldest,
                                        cold=cold)
                    dec = chunk or dec
                if admit and dec.n_datasets > 1:
                    dec = self._capped(dec, pending, oldest, cold=cold)
                if admit:
                    if dec.reason != "catch-up":
                        self._chunk_backlogs.clear()  # the next chunks are another catch-up's
                    self._collects_admitted, self._collects = self._collects, 0
                    # whatever admitted the data that closes a window (``"window"``, or a rule before
                    # it: the target, a close or the heap), the batch after it emits (and evicts)
                    closes = self._note_admitted(pending if dec.take is None else pending[:dec.take])
                    self._emit_due = closes and self._closes_apply()
            self._last_decision = dec
        return dec

    def _busy(self, nbytes: int, predicted: float) -> bool:
        """Whether the stream is near saturation at the pending batch's size (``busy_load``; lock held):
        the processing a wall second of arriving data costs, at its predicted cost per byte, is at
        least ``busy_load``."""
        load = self._p["busy_load"]
        if load <= 0.0 or self._byte_rate is None or nbytes <= 0:
            return False
        if self._n_observed < max(1, self._p["cold_start"]):
            return False  # the prediction is the prior's guess: it says nothing of a byte's cost
        return predicted / nbytes * self._byte_rate >= load

    def _collect_now(self, slack: float) -> bool:
        """Whether to collect the heap while the data waits (``idle_collect``; lock held): a full
        collection is near and ``slack`` (the target less the estimate) has room for its pause."""
        if not self._p["idle_collect"] or self._collect_asked:
            return False
        done = next(reversed(self._batch_rows), None)  # the last batch whose record came
        if done is not None and (self._batch_read is None or self._batch_read < done):
            return False  # the heap after the last batch is not known yet (its progress comes after its record)
        if not self._heap.collection_near():
            return False
        pause = self._heap.full_pause_s()
        if slack < (IDLE_COLLECT_PRIOR_S if pause is None else pause):
            return False
        self._collect_asked = True
        self._collects += 1
        return True

    def _feature_model(self):
        if self._features_model is None:
            from .service_model import FeatureServiceModel

            self._features_model = FeatureServiceModel(history=max(self._history, 12))
        return self._features_model

    def _features(self, now: float, pending: Sequence, nbytes: int, oldest: float) -> dict | None:
        """What the feature model knows of ``pending`` before admission (None under the bytes model)."""
        if self._p["service_model"] != "features":
            return None
        out = {"bytes": float(nbytes), **self._state}
        closing = self._window_ends(pending, self._p["window_period_s"])
        if closing is not None:
            out["windows_closed"] = float(len(closing))
        if self._last_eviction is not None:
            out["since_eviction_s"] = max(0.0, now - self._last_eviction)
        out.update(self._heap.features(sum(float(getattr(d, "rows", 0) or 0) for d in pending)))
        return out

    def _predict(self, nbytes: float, features: Mapping[str, float] | None) -> float:
        """The feature model's prediction where it has a fit, else the bytes model's (lock held)."""
        if features is not None:
            predicted = self._feature_model().predict({**features, "bytes": float(nbytes)})
            if predicted is not None:
                return max(0.0, predicted)
        return self._model.predict(nbytes)

    def on_progress(self, progress: Mapping[str, Any]) -> None:
        """Spark reported a batch's progress: keep its state size, note an eviction, learn the heap.

        ``progress`` holds ``state_rows``, ``state_bytes`` and ``state_rows_removed`` (sums over
        the query's stateful operators; see :func:`lmstream_kit.engine.listener.progress_record`),
        and the driver JVM's heap and collections, which the :class:`HeapForecast` learns from.
        """
        state = {k: float(progress[k]) for k in ("state_rows", "state_bytes", "state_rows_removed")
                 if isinstance(progress.get(k), (int, float)) and math.isfinite(progress[k]) and progress[k] >= 0}
        with self._lock:
            batch = progress.get("batch_id")
            if batch is not None:
                self._batch_read = int(batch) if self._batch_read is None else max(self._batch_read, int(batch))
            self._heap.observe(progress, rows=self._batch_rows.get(batch) if batch is not None else None)
            if batch is not None:
                self._cap_half(int(batch), gc_s=_number(progress.get("jvm_gc_ms")) / 1000.0,
                               full_gcs=_number(progress.get("jvm_full_gc_count")))
            self._state = state
            if state.get("state_rows_removed", 0.0) > 0:
                self._last_eviction = time.time()
                self._n_evictions += 1
            full = progress.get("jvm_full_gc_count")
            if isinstance(full, numbers.Real) and full > 0:
                self._collect_asked = False  # the collection asked for (or one of Spark's own) ran
                if batch is not None:
                    self._full_gc_batches.append(int(batch))  # its error (now or when observed) leaves the margin
                    if self._p["gc_margin"]:
                        self._refresh_margin()

    def before_batch(self, ctx) -> dict | None:
        """Carry the features the batch was admitted with into its record (the feature model learns them), and
        the collections ``idle_collect`` asked for while its data waited."""
        decision = ctx.admission.get("decision") if ctx.admission else None
        features = getattr(decision, "features", None)
        out = {"service_features": dict(features)} if features else {}
        if self._collects_admitted:
            out["idle_collections"] = self._collects_admitted
        return out or None

    def close(self) -> None:
        if self._features_model is not None:
            self._features_model.close()

    def _closes_apply(self) -> bool:
        """Whether the ``"window"`` target's closes apply: a tumbling window, that target and a close
        period (``close_period_s``, or the window ends with ``evict_horizon``)."""
        return (self._p["slide_s"] <= 0.0 and self._p["tumbling_target"] == "window"
                and self._close_period() > 0.0)

    def _window_close(self, pending: Sequence) -> bool | float | None:
        """With the ``"window"`` target (lock held): True where ``pending`` holds data that closes a window
        still open; else the event second whose arrival will close the next one (None: no window
        closes, or nothing tells: another target, no close period, no data with an event second)."""
        if not self._closes_apply():
            return None
        period = self._close_period()
        seconds = [float(s) for d in pending if (s := getattr(d, "second", None)) is not None]
        if not seconds:
            return None
        # the watermark passes a window's end between what was admitted and what is pending
        closed, passed = window_ends_passed(self._closed_end(period), seconds, period, self._p["lateness_s"])
        if passed:
            return True
        return None if closed is None else window_end_at(closed, period) + period + self._p["lateness_s"]

    def _close_due(self, now: float, pending: Sequence, close_second: float, nbytes: int, oldest: float,
                   newest: float, predicted: float, slack: float) -> bool:
        """``close_horizon`` (lock held): whether to admit ``pending`` now so that the batches running when
        ``close_second`` arrives are short (see the parameter)."""
        rates = self._arrival_rates
        # the oldest and newest datasets with an event second (_window_close found at least one)
        first = next(d for d in pending if getattr(d, "second", None) is not None)
        last = next(d for d in reversed(pending) if getattr(d, "second", None) is not None)
        if newest > oldest and last.second > first.second and last.arrival > first.arrival:
            rates = ((nbytes - pending[0].nbytes) / (newest - oldest),
                     (last.second - first.second) / (last.arrival - first.arrival))
            self._arrival_rates = rates
        if not self._p["close_horizon"] or rates is None:
            return False
        line = self._model.line
        if line is None:
            return False  # no batch seen: nothing tells what the batches before the close will take
        byte_rate, seconds_rate = rates
        closes_at = float(last.arrival) + (close_second - float(last.second)) / seconds_rate  # the closing data's arrival
        intercept, slope = line
        rho = slope * byte_rate  # s of processing per wall s of arriving data
        if rho >= CLOSE_RHO_MAX:
            return True
        asap = intercept / (1.0 - rho)  # an asap batch: the fixed point of p = intercept + rho p
        wait = intercept + slope * (nbytes + byte_rate * max(0.0, closes_at - newest))
        if wait <= 2.0 * asap:
            return False  # the batch that holds everything pending at the close is short anyway
        return now + slack + predicted / (1.0 - rho) >= closes_at - _TIE_EPS_S

    def _close_period(self) -> float:
        """Event seconds between the window ends the ``"window"`` target admits at (lock held):
        ``close_period_s``, or with ``evict_horizon`` and none, ``window_period_s``."""
        period = self._p["close_period_s"]
        if period <= 0.0 and self._p["evict_horizon"]:
            return self._p["window_period_s"]
        return period

    def _window_ends(self, pending: Sequence, period: float) -> list[float] | None:
        """The window ends (every ``period`` event seconds) that admitting ``pending`` would let the
        watermark pass; None where nothing tells (no period, or no data with an event second)."""
        seconds = [float(s) for d in pending if (s := getattr(d, "second", None)) is not None]
        if period <= 0.0 or not seconds:
            return None
        return window_ends_passed(self._closed_end(period), seconds, period, self._p["lateness_s"])[1]

    def _closed_end(self, period: float) -> float | None:
        """The end of the latest window of ``period`` the admitted data closed (None before any data); for
        a period just set live, the latest end of its multiples the watermark had already passed."""
        if period in self._closed_ends or not self._closed_ends:
            return self._closed_ends.get(period)
        passed = max(v for v in self._closed_ends.values() if v is not None)
        return window_end_at(passed, period)

    def _note_admitted(self, admitted: Sequence) -> bool:
        """Note the window ends the ``admitted`` data lets the watermark pass; whether it closes a
        window whose results wait for the close (``close_period_s``, or the window ends with
        ``evict_horizon``)."""
        seconds = [float(s) for d in admitted if (s := getattr(d, "second", None)) is not None]
        self._evicts_next = False
        if not seconds:
            return False
        closes, close_period = False, self._close_period()
        for period in {self._p["window_period_s"], close_period}:
            if period > 0.0:
                closed, passed = window_ends_passed(self._closed_end(period), seconds, period, self._p["lateness_s"])
                self._closed_ends[period] = closed
                if passed and period == close_period:
                    closes = True
                if passed and period == self._p["window_period_s"]:
                    # Spark's watermark for the next batch passes a window's end: that batch drops the
                    # window's state (LR1T: the state rows removed, in the batch after the one whose data
                    # passed each 30 s window's end plus the lateness, in every probe of 2026-12-05)
                    self._evicts_next = True
        return closes

    def _fits(self, pending: Sequence, budget: float, features: Mapping[str, float] | None = None) -> int:
        """How many of the oldest ``pending`` datasets the model predicts to finish within ``budget``."""
        take, size = 0, 0
        for d in pending:
            if self._predict(size + d.nbytes, features) > budget + _TIE_EPS_S:
                break
            size += d.nbytes
            take += 1
        return take

    def _chunk(self, dec: Decision, pending: Sequence, budget: float, oldest: float, *,
               cold: bool = False) -> Decision | None:
        """A catch-up chunk of ``pending`` for an admission ``dec`` (its learned margin), or None to admit
        it all (lock held); ``cold``: the chunk's margin is at least its prediction (``cold_start``)."""
        model = self._model
        if model.n == 0:
            # nothing observed: a prediction is the prior whatever the size, so cut
            # the backlog at what arrived within one target of its oldest dataset
            if max(d.arrival for d in pending) - oldest <= dec.target_s:
                return None
            take = 0
            for d in pending:
                if d.arrival - oldest >= dec.target_s and take > 0:
                    break
                take += 1
        else:
            # (decide() forgets this catch-up's chunk backlogs at any admission that is not a chunk)
            if dec.predicted_s <= budget:
                self._overloaded = False
                return None
            backlogs = self._chunk_backlogs
            if self._overloaded or (len(backlogs) == DRAIN_CHUNKS and dec.nbytes >= backlogs[0]):
                # the last chunks left the backlog as large as they found it: bounded batches fall
                # behind the arrivals, and only larger ones (each paying a batch's fixed cost once)
                # can keep up
                self._overloaded = True
                return dataclasses.replace(dec, reason="overload")
            take = self._fits(pending, budget, dec.features)
            if take == 0:  # the margin leaves no room: size the chunk by the target alone
                take = self._fits(pending, dec.target_s - self._p["poll_interval_s"], dec.features)
            if take == 0:
                return None  # the oldest dataset alone overruns the target: smaller batches cannot help
            take = self._merge_late(pending, take, dec, oldest + dec.age_s)
        if take >= dec.n_datasets:
            return None
        if model.n > 0:
            self._chunk_backlogs.append(dec.nbytes)
        return self._prefix(dec, pending, take, oldest, cold=cold, reason="catch-up")

    def _prefix(self, dec: Decision, pending: Sequence, take: int, oldest: float, *, cold: bool,
                reason: str) -> Decision:
        """``dec`` cut to the oldest ``take`` datasets of ``pending``, judged by its own prediction (lock
        held); ``cold``: its margin is at least that prediction (``cold_start``)."""
        chunk = pending[:take]
        rows = sum(d.rows for d in chunk)
        nbytes = sum(d.nbytes for d in chunk)
        features = self._features(oldest + dec.age_s, chunk, nbytes, oldest) if dec.features is not None else None
        predicted = self._predict(nbytes, features)
        margin = max(dec.margin_s, predicted) if cold else dec.margin_s
        return dataclasses.replace(dec, reason=reason, rows=rows, nbytes=nbytes, predicted_s=predicted,
                                   features=features, margin_s=margin,
                                   estimate_s=dec.age_s + predicted + margin + self._p["poll_interval_s"],
                                   take=take)

    def _cap_half(self, batch: int, **half: float) -> None:
        """A batch's record (rows, processing) or progress (collections): the row cap learns the batch
        once both came, in either order (lock held)."""
        got = self._cap_halves.setdefault(batch, {})
        got.update(half)
        if len(got) == 4:
            del self._cap_halves[batch]
            self._row_cap.observe(**got)
        while len(self._cap_halves) > 64:
            self._cap_halves.pop(next(iter(self._cap_halves)))

    def _cap(self) -> float | None:
        """The row cap in force (``row_cap``; lock held), None where there is none: the lower of what
        :class:`RowCap` learned from thrashing batches and the rows whose promotion fits the old
        generation's free part (:meth:`HeapForecast.rows_fitting`), never below
        :data:`~lmstream_kit.service_model.CAP_FLOOR_SHARE` of the largest recent batch."""
        if not self._p["row_cap"]:
            return None
        caps = [c for c in (self._row_cap.cap, self._heap.rows_fitting()) if c is not None]
        if not caps:
            return None
        floor = CAP_FLOOR_SHARE * max(self._batch_rows.values(), default=0.0)
        return max(min(caps), floor, 1.0)

    def _capped(self, dec: Decision, pending: Sequence, oldest: float, *, cold: bool) -> Decision:
        """``dec`` cut to the oldest datasets whose rows fit the row cap, at least one (lock held)."""
        cap = self._cap()
        taken = dec.n_datasets if dec.take is None else dec.take
        if cap is None or dec.rows <= cap:
            return dec
        take, rows = 0, 0
        for d in pending[:taken]:
            if take > 0 and rows + d.rows > cap:
                break
            take, rows = take + 1, rows + d.rows
        if take >= taken:
            return dec
        return self._prefix(dec, pending, take, oldest, cold=cold, reason="row-cap")

    def _merge_late(self, pending: Sequence, take: int, dec: Decision, now: float) -> int:
        """The first chunk's size where it is predicted late anyway (lock held).

        A chunk of ``take`` datasets, the most that fit the budget, is late when its predicted
        completion plus the margin is more than the target after its oldest arrival (a spike's
        backlog: its data already old).  The chunk after it is then late too: it waits for this
        one, and the two together do not fit the budget.  So the late chunks merge into one batch,
        as far as it is predicted to fit ``target - poll_interval``: one late batch, not one per
        chunk, with their per-batch costs paid once, so the rest is admitted sooner.
        """
        target, poll = dec.target_s, self._p["poll_interval_s"]
        first = pending[:take]
        finish = now + self._predict(sum(d.nbytes for d in first), dec.features) + poll
        if finish - min(d.arrival for d in first) + dec.margin_s <= target + _TIE_EPS_S:
            return take
        return max(take, self._fits(pending, target - poll, dec.features))

    # -- learning ----------------------------------------------------------
    def observe(self, obs: BatchObservation) -> None:
        """Learn from a completed micro-batch.

        Records the residual against the model's prediction *before* adding
        the batch, updates the model, the margin and the tumbling target.  The
        first ``warmup`` observations are counted (``n_warmup``) and otherwise
        ignored.

        Raises
        ------
        ConfigError
            If the observation holds negative or non-finite numbers.

        Examples
        --------
        >>> c = AdmissionController(slide_s=0, initial_target_s=2.0)
        >>> c.target_s
        2.0
        >>> c.observe(BatchObservation(rows=1, nbytes=64, processing_s=0.2, max_latency_s=3.0))
        >>> c.observe(BatchObservation(rows=1, nbytes=64, processing_s=0.2, max_latency_s=4.0))
        >>> c.target_s
        3.5
        """
        nbytes = _nonneg("nbytes")(obs.nbytes)
        proc = _nonneg("processing_s")(obs.processing_s)
        lat = _nonneg("max_latency_s")(obs.max_latency_s)
        with self._lock:
            if obs.batch_id is not None:
                self._cap_half(int(obs.batch_id), rows=float(obs.rows), processing_s=proc)
            if self._warmup_left > 0:
                # a cold engine's first batches (JIT, class loading) say nothing
                # about later ones; learning from them would inflate the margin
                # for the next `history` batches
                self._warmup_left -= 1
                self._n_warmup += 1
                return
            features = obs.features if self._p["service_model"] == "features" else None
            self._residuals.append(proc - self._predict(nbytes, features))
            self._residual_ids.append(None if obs.batch_id is None else int(obs.batch_id))
            self._model.update(nbytes, proc)
            if features:
                self._feature_model().observe({**features, "bytes": float(nbytes)}, proc)
            self._lat_sum += lat
            self._n_observed += 1
            self._refresh_margin()
            self._sync_prior()

    update = observe  # river-style alias

    def on_resume(self, records: Sequence[Mapping[str, Any]]) -> None:
        """The stream resumed its run directory: learn the service time from the run's last data batches.

        A restarted stream would otherwise start with an empty model, and a backlog that piled up
        while it was down would be caught up in chunks sized by the prior (what arrived within
        one target of the oldest dataset): many small batches, each paying a batch's fixed cost.
        The run's records (``metrics.jsonl``) say what its batches cost; the last ``history``
        data batches are observed as if they had just run.  The new run's first batches still
        count as warm-up: its JVM is cold again.

        >>> c = AdmissionController(slide_s=2.0, history=3)
        >>> c.on_resume([{"rows": 10, "bytes": b, "processing_s": 0.1 + b / 1e6, "max_latency_s": 1.0}
        ...              for b in (1e5, 2e5, 3e5, 4e5)] + [{"rows": 0, "bytes": 0, "processing_s": 0.05}])
        >>> c.n_observed, c.n_warmup, round(c.model.predict(1e6), 6)
        (3, 0, 1.1)
        """
        usable = []
        for r in records:
            try:
                values = [float(r[k]) for k in ("rows", "bytes", "processing_s", "max_latency_s")]
            except (KeyError, TypeError, ValueError):
                continue
            if values[0] <= 0 or not all(math.isfinite(v) and v >= 0 for v in values):
                continue
            features = r.get("service_features")  # those of an older kit's model are left out
            features = {k: v for k, v in features.items() if k in INPUTS} if isinstance(features, Mapping) else None
            usable.append(BatchObservation(rows=int(values[0]), nbytes=int(values[1]), processing_s=values[2],
                                           max_latency_s=values[3], features=features or None))
        with self._lock:
            left, self._warmup_left = self._warmup_left, 0
        try:
            for obs in usable[-self._history:]:
                self.observe(obs)
        finally:
            with self._lock:
                self._warmup_left = left

    # -- live parameters ---------------------------------------------------
    def mutate(self, changes: Mapping[str, Any], *, record: bool = True) -> None:
        """Change live-mutable parameters atomically.

        Every key and value is validated before anything is applied, so a
        failed call changes nothing.  Parameters whose value actually changes
        are recorded as one :class:`ParamChange`, and each in the change log
        unless ``record=False`` (for a caller that logs the change under the
        name the user set, e.g. the stream's ``target_s``).

        Raises
        ------
        ConfigError
            Unknown key (the message lists :attr:`MUTABLE`) or invalid value
            (the message names the key and the value).

        Examples
        --------
        >>> c = AdmissionController(slide_s=5.0)
        >>> c.mutate({"slide_s": 2.0, "quantile": 0.9})
        >>> c.target_s
        2.0
        >>> c.mutate({"history": 10})
        Traceback (most recent call last):
        ...
        lmstream_kit.exceptions.ConfigError: cannot change 'history' on a live controller; mutable parameters: busy_load, catch_up, close_horizon, close_period_s, cold_evictions, cold_fraction, cold_start, cold_target_s, evict_horizon, gc_margin, heap_admit, idle_collect, initial_target_s, interval_margin, lateness_s, min_margin_s, poll_interval_s, prior_processing_s, quantile, row_cap, service_model, slide_s, tumbling_target, window_period_s, window_target_s
        """
        if not isinstance(changes, Mapping):
            raise ConfigError(f"mutate expects a mapping of parameter -> value, got {changes!r}")
        unknown = sorted(str(k) for k in changes if k not in self.MUTABLE)
        if unknown:
            allowed = ", ".join(sorted(self.MUTABLE))
            raise ConfigError(
                f"cannot change {', '.join(repr(k) for k in unknown)} on a live controller; "
                f"mutable parameters: {allowed}"
            )
        new = {k: self.param(k).validate(v) for k, v in changes.items()}
        with self._lock:
            diff = {k: (self._p[k], v) for k, v in new.items() if self._p[k] != v}
            if not diff:
                return
            self._p.update(new)
            if "quantile" in diff or "interval_margin" in diff or "gc_margin" in diff:
                self._refresh_margin()
            self._sync_prior()
            self._n_changes += 1
            self._changes.append(ParamChange(self._n_changes, time.time(), diff))
            for key, (old, value) in diff.items():
                if record:
                    self.log_change(key, value, old=old)

    def set_param(self, name: str, value: Any) -> None:
        """The protocol's setter: ``mutate({name: value})``."""
        self.mutate({name: value})

    def after_batch(self, record) -> dict | None:
        """Learn from a completed data batch (the run loop's hook); time a catch-up that it ends."""
        if record.rows <= 0:
            return None
        features = (getattr(record, "extra", None) or {}).get("service_features")
        batch_id = getattr(record, "batch_id", None)
        self.observe(BatchObservation(rows=record.rows, nbytes=record.bytes, processing_s=record.processing_s,
                                      max_latency_s=record.max_latency_s, features=features,
                                      batch_id=None if batch_id is None else int(batch_id)))
        with self._lock:
            # the heap forecast learns per admitted row (Spark's progress comes after the record)
            if getattr(record, "batch_id", None) is not None:
                self._batch_rows[int(record.batch_id)] = float(record.rows)
            while len(self._batch_rows) > 64:
                self._batch_rows.pop(next(iter(self._batch_rows)))
            if record.decision_reason == "catch-up":
                if self._catch_up_since is None:
                    self._catch_up_since = record.admitted_at
                return None
            since, self._catch_up_since = self._catch_up_since, None
        return None if since is None else {"catch_up_s": record.completed_at - since}

    def set_slide(self, slide_s: float, *, record: bool = True) -> None:
        """Shorthand for ``mutate({"slide_s": slide_s}, record=record)``."""
        self.mutate({"slide_s": slide_s}, record=record)

    @property
    def changes(self) -> list[ParamChange]:
        """The applied changes, oldest first (a copy): the newest :data:`CHANGES_KEPT`."""
        with self._lock:
            return list(self._changes)

    def pop_changes(self) -> list[ParamChange]:
        """Return the changes not returned by an earlier call, and mark them reported.

        The stream calls this when it starts a batch, to record the changes
        with that batch's id; each change is reported exactly once.
        """
        with self._lock:
            out = [c for c in self._changes if c.seq > self._n_reported]
            self._n_reported = self._n_changes
            return out

    # -- read-only answers -------------------------------------------------
    @property
    def target_s(self) -> float:
        """Latency target in force."""
        with self._lock:
            return self._target()

    @property
    def margin_s(self) -> float:
        """Safety margin in force."""
        with self._lock:
            return self._margin()

    @property
    def model(self) -> ServiceTimeModel:
        """The service-time model (do not update it directly; use observe)."""
        return self._model

    @property
    def feature_model(self):
        """The feature service-time model (None until ``service_model="features"`` first used it)."""
        return self._features_model

    @property
    def n_warmup(self) -> int:
        """Observations ignored as warm-up so far."""
        return self._n_warmup

    @property
    def n_observed(self) -> int:
        """Number of batches observed so far."""
        return self._n_observed

    @property
    def last_decision(self) -> Decision | None:
        """The most recent :meth:`decide` answer, or None."""
        return self._last_decision

    @property
    def slide_s(self) -> float:
        return self._p["slide_s"]

    @property
    def poll_interval_s(self) -> float:
        return self._p["poll_interval_s"]

    @property
    def quantile(self) -> float:
        return self._p["quantile"]

    @property
    def history(self) -> int:
        return self._history

    @property
    def resume_records(self) -> int:
        """The newest records :meth:`on_resume` is handed: ``history`` (of which the empty
        batches' are left out, so a run of many empty batches resumes with fewer observations)."""
        return self._history

    @property
    def initial_target_s(self) -> float:
        return self._p["initial_target_s"]

    @property
    def prior_processing_s(self) -> float | None:
        return self._p["prior_processing_s"]

    @property
    def min_margin_s(self) -> float:
        return self._p["min_margin_s"]

    @property
    def interval_margin(self) -> bool:
        return self._p["interval_margin"]

    def param_value(self, name: str) -> Any:
        """The value in force of the declared parameter ``name``."""
        with self._lock:
            return self._p[name]

    def params(self) -> dict:
        """The constructor parameters currently in force.

        Examples
        --------
        >>> AdmissionController(slide_s=5).params()["slide_s"]
        5.0
        """
        with self._lock:
            out = dict(self._p)
        out["history"] = self._history
        out["warmup"] = self._warmup
        return out

    def snapshot(self) -> dict:
        """JSON-serialisable state: params plus target, margin, model fit, counts.

        Examples
        --------
        >>> import json
        >>> s = AdmissionController(slide_s=5).snapshot()
        >>> s["target_s"], s["margin_s"], s["coefficients"], s["n_observed"]
        (5.0, 0.0, None, 0)
        >>> _ = json.dumps(s)
        """
        with self._lock:
            out = dict(self._p)
            out["history"] = self._history
            out["target_s"] = self._target()
            out["margin_s"] = self._margin()
            coef = self._model.coefficients
            out["coefficients"] = None if coef is None else [coef[0], coef[1]]
            out["model_mode"] = self._model.mode
            out["model_n"] = self._model.n
            out["prior_s"] = self._model.prior_s
            out["n_observed"] = self._n_observed
            out["n_warmup"] = self._n_warmup
            out["n_changes"] = self._n_changes
            fm = self._features_model
        out["feature_model"] = None if fm is None else fm.snapshot()
        return out

    def __repr__(self) -> str:
        p = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"AdmissionController({p})"
