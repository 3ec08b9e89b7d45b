"""Flumina's workers on Spark: one round's segments as one Spark job, a partition per worker.

:func:`spark_segments` is a :data:`~lmstream_kit.flumina.batches.MapSegments` for a
:class:`~lmstream_kit.flumina.batches.BatchRunner`; Spark ships each worker's state and events to
an executor, runs them there and returns the new state and outputs.  :func:`events_of` reads a
micro-batch's events (columns ``tag``, ``ts``, ``payload``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["events_of", "spark_segments"]


def spark_segments(spark, *, min_parallel: int = 2):
    """A MapSegments that runs a round with ``min_parallel`` or more segments as one Spark job.

    Each segment is one partition (so one task, on any executor); a round with fewer segments runs
    in the driver, where a Spark job's fixed cost (about 0.45 s here) would only add latency.
    """
    from ..flumina.batches import in_process
    from ..flumina.run import run_leaf

    def run(spec, work: Sequence[tuple[Any, tuple]]) -> list[tuple[Any, list]]:
        if len(work) < min_parallel:
            return in_process(spec, work)
        indexed = list(enumerate(work))
        rdd = spark.sparkContext.parallelize(indexed, len(indexed))
        done = rdd.map(lambda item: (item[0], run_leaf(spec, item[1][0], item[1][1]))).collect()
        return [result for _, result in sorted(done, key=lambda pair: pair[0])]

    return run


def events_of(batch_df) -> list:
    """The events of a micro-batch DataFrame with columns ``tag``, ``ts`` and ``payload``."""
    from ..flumina.spec import Event

    frame = batch_df.select("tag", "ts", "payload").toPandas()
    return [Event(tag, float(ts), payload) for tag, ts, payload in frame.itertuples(index=False, name=None)]
