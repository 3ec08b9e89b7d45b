"""When a windowed query's results appear: the *result latency* of every window, per batch.

A windowed aggregation in append mode emits a window's rows once the watermark has passed the
window's end, not when its rows arrive.  The rows that matter to its reader are late by

    result latency = (completion of the batch that emitted the window)
                     - (arrival of the first data that let the watermark pass the window's end)

which the batch's ``max_latency_s`` (its oldest row) does not tell: a row that opens a 60 s
window waits for the window, whatever the batching.  :class:`WindowResults` is a plug-in
controller that tells it for every batch, from what the stream already knows, with no Spark
job: the event-time second each spool dataset holds (``second``) and its arrival.

Spark's rule, which the Spark test checks against each batch's written windows: the watermark
used by batch N is the largest event time of batches before N minus the lateness, so data that
closes a window in batch N has the window emitted by batch N + 1.  The kit turns Spark's no-data
batches off (every batch is an admission), so that is the next batch the gate admits; a no-data
batch counts the same where a session runs them.

>>> from types import SimpleNamespace as NS
>>> w = WindowResults(period_s=lambda: 60.0, lateness_s=5.0)
>>> ctx = lambda *ds: NS(datasets=[NS(second=s, arrival=a) for s, a in ds])
>>> rec = lambda t: NS(completed_at=t, rows=1)
>>> w.before_batch(ctx((0, 100.0), (30, 130.0)))                       # windows still open
>>> w.after_batch(rec(131.0))
{'windows_closed': 0}
>>> w.before_batch(ctx((64, 164.0), (65, 165.0), (66, 166.0)))          # 65 closes [0, 60)
>>> w.after_batch(rec(167.0))
{'windows_closed': 0}
>>> w.before_batch(ctx((67, 167.2)))                                    # the next batch emits it
>>> w.after_batch(rec(167.5))
{'windows_closed': 1, 'result_latency_s': 2.5, 'closed_window_end': 60.0}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .protocol import BatchContext, BatchController
from .service_model import window_ends_passed

__all__ = ["WindowResults"]


class WindowResults(BatchController):
    """Per-batch result latency of a query that emits windows when they close.

    Parameters
    ----------
    period_s : callable, optional
        Event-time seconds between window ends, read at each batch (the slide, or a tumbling
        window's length).  None: the stream's it is plugged into (its ``slide_s``, else its
        workload's window length), so that it follows a live slide change.
    lateness_s : float, optional
        The watermark's delay, event-time seconds.  None: the stream's workload's.

    Notes
    -----
    Datasets without a ``second`` (ingested files) do not move the watermark here; a stream
    of them has no result latency in its records.
    """

    prefix = "results"
    FIELDS = {
        "windows_closed": "windows the batch emitted (their end passed the watermark it ran under)",
        "result_latency_s": "the emitted windows' largest result latency: the batch's completion minus the "
                            "arrival of the data that let the watermark pass the window's end",
        "closed_window_end": "event-time end of the latest window the batch emitted",
    }

    def __init__(self, *, period_s: Callable[[], float] | None = None, lateness_s: float | None = None) -> None:
        super().__init__()
        self._period = period_s
        self._lateness = None if lateness_s is None else float(lateness_s)
        self._closed_end: float | None = None  # end of the latest window known closed
        self._found: list[tuple[float, float]] = []  # (window end, closing arrival) found this batch
        self._due: list[tuple[float, float]] = []  # closed by earlier batches: emitted by this one

    def plugged(self, host: Any) -> None:
        workload = getattr(host, "workload", None)
        if self._period is None:  # the stream's slide in force, else its window's length
            self._period = lambda: float(getattr(host, "slide_s", 0.0) or getattr(host.workload, "window_range_s", 0))
        if self._lateness is None and getattr(workload, "lateness_s", None) is not None:
            self._lateness = float(workload.lateness_s)

    @classmethod
    def for_workload(cls, workload: Any) -> WindowResults | None:
        """A WindowResults for a stream of ``workload`` where it emits windows at their close
        (``results_at_close``, with a watermark), else None: period and lateness come from the
        stream it is plugged into."""
        if getattr(workload, "results_at_close", False) and getattr(workload, "lateness_s", None) is not None:
            return cls()
        return None

    def before_batch(self, ctx: BatchContext) -> None:
        period = float(self._period()) if self._period is not None else 0.0
        if period <= 0 or self._lateness is None:
            return
        for d in ctx.datasets:  # in arrival order: each one's own arrival closes the windows it passes
            second = getattr(d, "second", None)
            if second is None:
                continue
            self._closed_end, ends = window_ends_passed(self._closed_end, [float(second)], period, self._lateness)
            self._found.extend((end, float(d.arrival)) for end in ends)

    def after_batch(self, record: Any) -> dict:
        due, self._due, self._found = self._due, self._found, []
        if not due:
            return {"windows_closed": 0}
        return {"windows_closed": len(due),
                "result_latency_s": max(float(record.completed_at) - arrival for _, arrival in due),
                "closed_window_end": max(end for end, _ in due)}
