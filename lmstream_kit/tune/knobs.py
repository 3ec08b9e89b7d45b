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
    so a change is in force from the next admitted batch.
    """

    partitions: int

    def on_admit(self, pending: Sequence[Any]) -> Mapping[str, Any] | None:
        self._for_next = self.partitions  # a change is in force from the next admitted batch
        return None

    def on_plan(self, start: int, end: int) -> Mapping[str, Any] | None:
        return {"partitions": getattr(self, "_for_next", self.partitions)}


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

    def before_batch(self, ctx: BatchContext) -> Mapping[str, Any] | None:
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
