"""Swap a running stream's per-batch function at a batch boundary, with no restart.

The per-batch function is what the foreachBatch sink runs on each micro-batch's result after the
query (``batch_df -> DataFrame``): an enrichment, a UDF, a sink-side transform.  Spark plans it
anew for every batch, so a new one needs no restart: :class:`BatchFunction` holds the function in
force and a pending one, and hands the pending one over at the start of the next batch.

``LiveStream.set_batch_function(fn, name=...)`` checks the new function against the schema of the
last batch's result first (Spark's analysis, no job), and refuses one that does not fit, in one
line, with the stream running on under the old one.  The swap is a journal transaction: requested
and prepared (checked) when asked, applied at the batch it starts with, committed when that batch
completed.  A function that passes the check but fails on the data of its first batch (a UDF
that raises) is undone: the batch runs again under the old function, and the swap is aborted
with the error.

>>> swap = BatchFunction()
>>> swap.finish([1, 2])                     # no function yet: the batch as the query made it
[1, 2]
>>> swap.request(lambda rows: [r * 10 for r in rows], "times10")
>>> swap.finish([1, 2])                     # pending: in force from the next batch
[1, 2]
>>> _ = swap.before_batch(type("Ctx", (), {"batch_id": 7})()); swap.finish([1, 2]), swap.name
([10, 20], 'times10')
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from .exceptions import error_line
from .protocol import BATCH, BatchContext, BatchController

__all__ = ["BatchFunction"]


class BatchFunction(BatchController):
    """The stream's per-batch function, swapped at a batch boundary (see the module).

    Parameters
    ----------
    base : callable, optional
        The workload's own ``finish_batch``, which runs first (CM1's per-batch order, say).
    """

    prefix = "batch"
    change_phase = BATCH
    FIELDS = {"batch_function": "the per-batch function the batch ran under (LiveStream.set_batch_function), 'none' without one"}

    def __init__(self, base: Callable[[Any], Any] | None = None) -> None:
        super().__init__()
        self.base = base
        self.function: Callable[[Any], Any] | None = None
        self.name = "none"
        self._pending: tuple[Callable[[Any], Any], str, Any] | None = None
        self._applied: tuple[int, Any] | None = None  # (batch id, transaction) awaiting its batch's end
        self._previous: tuple[Callable[[Any], Any] | None, str] = (None, "none")  # what a failed swap goes back to
        self._lock = threading.Lock()

    def request(self, function: Callable[[Any], Any], name: str, txn: Any = None) -> None:
        """Make ``function`` the per-batch function from the next batch (``txn``: its journal transaction)."""
        with self._lock:
            if self._pending is not None and self._pending[2] is not None:
                self._pending[2].abort(f"replaced by {name!r} before a batch ran under it")
            self._pending = (function, name, txn)
        self.log_change("function", name, old=self.name)

    def finish(self, batch_df: Any) -> Any:
        """The batch's result as written: the workload's own ``finish_batch``, then the function in force."""
        out = self.base(batch_df) if self.base is not None else batch_df
        function = self.function
        return function(out) if function is not None else out

    def before_batch(self, ctx: BatchContext) -> Mapping[str, Any] | None:
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is not None:
                self._previous = (self.function, self.name)
                self.function, self.name, txn = pending
                if txn is not None:
                    txn.step("applied", batch_id=int(ctx.batch_id))
                    self._applied = (int(ctx.batch_id), txn)
        return None

    def on_batch_failed(self, ctx: BatchContext, error: BaseException) -> bool:
        """The first batch under a new function failed (a UDF that raises on data, say): the old
        function comes back, the swap is aborted with the error, and the batch runs again under it."""
        with self._lock:
            if self._applied is None or self._applied[0] != int(ctx.batch_id):
                return False
            (_, txn), self._applied = self._applied, None
            failed, (self.function, self.name) = self.name, self._previous
        reason = (f"batch function {failed!r} failed on batch {ctx.batch_id}, which ran again under "
                  f"{self.name!r}: {error_line(error)}")
        if txn is not None:
            txn.abort(reason, batch_id=int(ctx.batch_id))
        self.log_change("function", self.name, aborted=reason, requested=failed)
        return True

    def after_batch(self, record: Any) -> Mapping[str, Any] | None:
        with self._lock:
            if self._applied is not None and int(record.batch_id) >= self._applied[0]:
                (_, txn), self._applied = self._applied, None
                txn.step("committed", batch_id=int(record.batch_id))
        return {"batch_function": self.name}
