"""The parallelism knobs a tuner (or a person) turns while the stream runs.

:class:`InputPartitions` sets how many input partitions the ``lmstream`` source splits each batch
into: the parallelism of the batch's first stage (``j0.s0`` in :mod:`.operators`).  It needs no
restart: the source asks the driver when Spark plans each batch, and a change is in force from
the next batch the gate admits.  It acts where the source splits batches, that is when Spark's
tasks read the spool (``read="executors"``, the default on a cluster); with ``read="driver"`` (the
default on ``local[N]``) a batch reaches Spark whole, as one partition, and the record says so.

>>> knob = InputPartitions(partitions=3)
>>> knob.on_admit([]); knob.on_plan(0, 10)
{'partitions': 3}
>>> knob.set_param("partitions", 0)
Traceback (most recent call last):
...
lmstream_kit.exceptions.ConfigError: source.partitions must be >= 1, got 0
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..exceptions import ConfigError
from ..protocol import ADMISSION, BatchContext, BatchController, Param

__all__ = ["MAX_INPUT_PARTITIONS", "ExplorePartitions", "InputPartitions", "PlannedPartitions",
           "input_partitions_field"]

#: the largest input partition count the knob takes
MAX_INPUT_PARTITIONS = 4096


def input_partitions_field(ctx: BatchContext) -> Mapping[str, Any] | None:
    """The record field ``input_partitions``: what the source split the batch into, if known."""
    made = ((ctx.admission or {}).get("planned") or {}).get("partitions")
    return {"input_partitions": made} if made is not None else None


class PlannedPartitions:
    """The hooks of a controller that sets the source's input partitions from its ``partitions``.

    The value in force when the gate admits a batch is the one the source gets when Spark plans it,
    so a change is in force from the next admitted batch.  A change asked by hand
    (``set_param("partitions", n)``, ``lmstream-kit reconfigure --set source.partitions=n``) on a
    stream with a journal is a transaction of its own (:data:`JOURNAL_OP`): requested and prepared
    when asked, applied with the first batch admitted after it, committed when that batch completed.
    A tuner's own moves are transactions too, with the reason it gave (``why``).
    """

    partitions: int
    #: the journal's op for a change of the source's partitions
    JOURNAL_OP = "source_partitions"
    _journal_lock = threading.Lock()

    def _journal_partitions(self, old: int, value: int, why: str = "") -> None:
        """Journal a change of ``partitions`` (nothing where the host keeps no journal)."""
        journal = getattr(getattr(self, "_host", None), "journal", None)
        if journal is None or old == value:
            return
        txn = journal.begin(self.JOURNAL_OP, old=old, value=value, **({"why": why} if why else {}))
        txn.step("prepared")
        with self._journal_lock:
            self._txns = [*getattr(self, "_txns", []), ["admit", txn]]

    def _txns_at(self, stage: str) -> list:
        with self._journal_lock:
            return [t for t in getattr(self, "_txns", []) if t[0] == stage]

    def on_admit(self, pending: Sequence[Any]) -> Mapping[str, Any] | None:
        self._for_next = self.partitions  # a change is in force from the next admitted batch
        for t in self._txns_at("admit"):
            t[0] = "run"
        return None

    def on_plan(self, start: int, end: int) -> Mapping[str, Any] | None:
        return {"partitions": getattr(self, "_for_next", self.partitions)}

    def before_batch(self, ctx: BatchContext) -> Mapping[str, Any] | None:
        for t in self._txns_at("run"):  # the batch admitted after the change: the first in force
            t[0] = "done"
            t[1].step("applied", batch_id=int(ctx.batch_id))
        return super().before_batch(ctx)

    def after_batch(self, record: Any) -> Mapping[str, Any] | None:
        for t in self._txns_at("done"):
            t[1].step("committed", batch_id=int(record.batch_id))
        with self._journal_lock:
            self._txns = [t for t in getattr(self, "_txns", []) if t[1].state not in ("committed", "aborted")]
        return super().after_batch(record)

    def in_force(self) -> Mapping[str, Any]:
        """The partitions in force (how a restart after a crash ends an open change of them)."""
        return {self.JOURNAL_OP: self.partitions}


class InputPartitions(PlannedPartitions, BatchController):
    """The ``lmstream`` source's input partitions per batch, a live parameter (see the module).

    Parameters
    ----------
    partitions : int
        Input partitions per batch (at most one per spool dataset in the batch).
    """

    prefix = "source"
    change_phase = ADMISSION
    PARAMS = (Param("partitions", int, low=1, high=MAX_INPUT_PARTITIONS, label="input partitions",
                    doc="Partitions the source splits each batch into: the first stage's parallelism."),)
    FIELDS = {
        "input_partitions": "input partitions the source split the batch into (1 where the batch is read in the driver)",
    }

    def __init__(self, partitions: int = 2) -> None:
        super().__init__()
        self.partitions = self.param("partitions").validate(partitions)
        self._host = None

    def plugged(self, host: Any) -> None:
        self._host = host  # its journal takes the changes asked by hand

    def _apply_partitions(self, value: int) -> None:
        old, self.partitions = self.partitions, value
        self._journal_partitions(old, value)
        self.log_change("partitions", value, old=old)

    def before_batch(self, ctx: BatchContext) -> Mapping[str, Any] | None:
        super().before_batch(ctx)
        return input_partitions_field(ctx)


class ExplorePartitions(InputPartitions):
    """Input partitions drawn at random for every admitted batch, between ``low`` and ``high`` (seeded).

    For building a tuning history: batches at many parallelisms teach a tuner what a task costs
    (``benchmarks/seed_history.py`` makes the kit's seed history with it).

    >>> knob = ExplorePartitions(low=1, high=8, seed=3)
    >>> [(knob.on_admit([]), knob.on_plan(0, 1)["partitions"])[1] for _ in range(5)]
    [4, 3, 6, 8, 2]
    """

    def __init__(self, *, low: int = 1, high: int = 8, seed: int = 0) -> None:
        import random

        super().__init__(partitions=low)
        self.low = self.param("partitions").validate(low, label="low")
        self.high = self.param("partitions").validate(high, label="high")
        if self.low > self.high:
            raise ConfigError(f"low ({self.low}) must not exceed high ({self.high})")
        self._rng = random.Random(seed)

    def on_admit(self, pending: Sequence[Any]) -> Mapping[str, Any] | None:
        self.partitions = self._rng.randint(self.low, self.high)
        return super().on_admit(pending)
