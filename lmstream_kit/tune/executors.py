"""The executors of a stream on a cluster, a live parameter: scale out and in while it runs.

On a cluster (a standalone one, say, with dynamic allocation off) Spark lets an application set its
executor total at run time (:mod:`lmstream_kit.engine.executors` has what was found).
:class:`ClusterExecutors` makes that total a live parameter, ``cluster.executors``: a dashboard
slider, ``set_param("executors", n)``, ``lmstream-kit reconfigure RUN --set cluster.executors=N``.
``lmstream-kit run --master spark://...`` plugs one in.

A change is a transaction of the stream's journal (:data:`ClusterExecutors.JOURNAL_OP`):

- **requested**, then **prepared** when the stream can scale (a cluster master, no dynamic
  allocation; refused otherwise: aborted with the reason, and a one-line ConfigError);
- the setter waits until Spark has the executors (about 4 s to start one, 5 s to remove one, on
  the kit's standalone cluster); where they do not come, **aborted** with Spark's error, and the
  stream runs on with the executors it has;
- **applied** at the first batch that starts after they are there (with the seconds it took);
- **committed** when that batch completed.

After a crash the restarted application has the executors it was started with: an open change
is committed where that equals its value, aborted where it does not.  ``--restore-config`` asks
for the last committed total again.

>>> class Host:
...     journal = None
...     def executors_unsupported(self): return "master local[2] runs one executor, the driver"
>>> knob = ClusterExecutors()
>>> knob.plugged(Host())
>>> knob.disabled_reason("executors")
'master local[2] runs one executor, the driver'
>>> knob.set_param("executors", 3)
Traceback (most recent call last):
...
lmstream_kit.exceptions.ConfigError: cannot set cluster.executors to 3: master local[2] runs one executor, the driver
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ..exceptions import ConfigError, one_line
from ..protocol import BATCH, BatchContext, BatchController, Param

__all__ = ["ClusterExecutors"]


class ClusterExecutors(BatchController):
    """The application's executor total, a live parameter (see the module).

    The host it plugs into scales: ``executors_unsupported()`` (why it cannot, or None),
    ``executor_count()`` and ``scale_executors(total)`` (waits until they are there; a dict with
    ``from``, ``to``, ``seconds`` and ``killed``), as :class:`~lmstream_kit.live.LiveStream` does.
    """

    prefix = "cluster"
    change_phase = BATCH
    #: the journal's op for a change of the executor total
    JOURNAL_OP = "cluster_executors"
    PARAMS = (
        Param("executors", int, low=1, restart=True, label="executors", step=1,
              doc="Executors of the Spark application: the cluster starts or removes them while the stream runs "
                  "(seconds, on a cluster without dynamic allocation)."),
    )
    FIELDS = {"executors": "executors of the application when the batch started (ClusterExecutors)"}

    def __init__(self, timeout_s: float = 60.0) -> None:
        super().__init__()
        self.timeout_s = float(timeout_s)
        self._host: Any = None
        self._count: int | None = None
        self._looked = False  # before_batch asked the host for the executors once
        self._scaling = threading.Lock()  # one scale at a time (held while Spark adds or removes executors)
        self._lock = threading.Lock()  # guards the transactions below; never held while scaling
        self._ready: list[tuple[Any, dict]] = []  # (transaction, what the scale did): awaiting a batch
        self._applied: list[tuple[int, Any]] = []  # (batch id, transaction): awaiting that batch's end

    def plugged(self, host: Any) -> None:
        self._host = host

    def _unsupported(self) -> str | None:
        check = getattr(self._host, "executors_unsupported", None)
        return "the stream cannot scale executors" if check is None else check()

    def disabled_reason(self, name: str) -> str | None:
        return self._unsupported()

    @property
    def executors(self) -> int | None:
        """The executors now (None where the stream cannot scale them)."""
        if self._count is None and self._unsupported() is None:
            self._count = self._host.executor_count()
        return self._count

    def in_force(self) -> Mapping[str, Any]:
        """The executors the application has (how a restart after a crash ends an open change)."""
        count = self.executors
        return {self.JOURNAL_OP: count} if count is not None else {}

    def _apply_executors(self, total: int) -> None:
        with self._scaling:  # not self._lock: before_batch takes that one, and batches go on while this waits
            old = self.executors
            if total == old:
                return  # nothing changes: no transaction
            journal = getattr(self._host, "journal", None)
            txn = journal.begin(self.JOURNAL_OP, old=old, value=total) if journal is not None else None
            reason = self._unsupported()
            if reason is not None:
                message = f"cannot set {self.qualified('executors')} to {total}: {reason}"
                if txn is not None:
                    txn.abort(message)
                raise ConfigError(message)
            if txn is not None:
                txn.step("prepared")
            try:
                done = self._host.scale_executors(total, timeout_s=self.timeout_s)
            except Exception as exc:  # noqa: BLE001  (Spark did not give them: the stream runs on as it was)
                self._count = None  # read again: some may have come or gone
                if txn is not None:
                    txn.abort(f"scaling to {total} executors failed: {type(exc).__name__}: {one_line(exc)}")
                raise
            self._count = int(done.get("to", total))
            with self._lock:
                self._ready.append((txn, dict(done)))
        self.log_change("executors", self._count, old=old, seconds=done.get("seconds"))

    def before_batch(self, ctx: BatchContext) -> Mapping[str, Any] | None:
        with self._lock:
            ready, self._ready = self._ready, []
            for txn, done in ready:
                if txn is not None:
                    txn.step("applied", batch_id=int(ctx.batch_id), seconds=done.get("seconds"),
                             killed=done.get("killed") or None, before=done.get("before"))
                    self._applied.append((int(ctx.batch_id), txn))
        if self._count is None and not self._looked and self._host is not None:
            self._looked = True  # once: on a stream that cannot scale, each look asks Spark's conf again
            self.executors
        return {"executors": self._count} if self._count is not None else None

    def after_batch(self, record: Any) -> Mapping[str, Any] | None:
        batch = int(record.batch_id)
        with self._lock:
            done = [txn for at, txn in self._applied if at <= batch]
            self._applied = [(at, txn) for at, txn in self._applied if at > batch]
        for txn in done:
            txn.step("committed", batch_id=batch)
        return None
