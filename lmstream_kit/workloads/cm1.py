"""CM1S and CM1T (Table III): Cluster Monitoring, total cpu request per category.

The Spark query (:func:`_per_category`) and its pandas/cudf twin program (:func:`_twin_per_category`)
of both windows, registered as a pair (:func:`~lmstream_kit.workloads.base.register_pair`).

>>> from lmstream_kit.workloads import get_workload
>>> [(w.name, w.slide_s, w.twin().ops[0].exec_name) for w in map(get_workload, ("CM1S", "CM1T"))]
[('CM1S', 10, 'SortExec'), ('CM1T', 0, 'SortExec')]

``SELECT timestamp, category, SUM(cpu) AS totalCpu FROM TaskEvents
[range 60 (slide 10)] GROUP BY category ORDER BY SUM(cpu)``

``category`` is the trace's ``scheduling_class`` (the SABER benchmark's
cluster-monitoring schema calls that column *category*).  Event time is the
event's ``time`` (simulated seconds); CM1S slides a 60 s window by 10 s,
CM1T uses a 60 s tumbling window.

Output columns: ``window_start, window_end`` (timestamps), ``category``,
``totalCpu`` (sum of ``cpu``) and ``events`` (rows in the group).

Ordering
--------
Spark cannot sort a streaming aggregate outside complete mode, so the query
runs in append mode (each window's rows are emitted once, when the watermark
closes it) and the ORDER BY is applied to each micro-batch's result in the
foreachBatch sink (:attr:`~lmstream_kit.workloads.base.Workload.finish_batch`):
by ``window_end`` ascending, then ``totalCpu`` **descending**, then
``category``.  Window end first, because one micro-batch may close several
windows and each window's ranking is what the query asks for; descending, so
that each window's busiest category comes first (the monitoring reading of
"order by load"; SQL's default direction would be ascending); ``category``
last only makes ties deterministic.  The order holds within each batch's
output file, not across files (windows close in increasing end order, so
concatenating the files in batch order keeps ``window_end`` non-decreasing).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from ..twin.program import TIMESTAMP, WINDOW, TwinProgram, sort, timestamp_schema, windowed_aggregate
from .base import register_pair, time_window, with_event_time
from .cluster_monitoring import CM_CHECKS, CM_SCHEMA, make_task_events

RANGE_S = 60
SLIDE_S = 10
#: how late (simulated seconds) an event may arrive and still count
LATENESS_S = 5
CATEGORY = "scheduling_class"


def _per_category(slide_s: int):
    """``build_query`` summing cpu per category over windows of RANGE_S sliding by ``slide_s`` (0: tumbling)."""

    def build_query(stream):
        from pyspark.sql import functions as F

        events = with_event_time(stream, "time", LATENESS_S)
        window = time_window(RANGE_S, slide_s)
        return (
            events.groupBy(window, F.col(CATEGORY).alias("category"))
            .agg(F.sum("cpu").alias("totalCpu"), F.count("*").alias("events"))
            .select(
                F.col("window.start").alias("window_start"),
                F.col("window.end").alias("window_end"),
                "category",
                "totalCpu",
                "events",
            )
        )

    return build_query


def order_batch(batch_df):
    """Order one micro-batch's result: window end, then totalCpu descending, then category.

    ``repartition(1)`` + ``sortWithinPartitions`` rather than ``orderBy``: a
    global sort range-partitions its input, and sampling the ranges is a Spark
    job of its own (two jobs per batch instead of one, measured), which runs
    the micro-batch's plan above its shuffle, the aggregation's state update
    included, a second time.  The aggregate is small (4 categories per closed
    window), so one partition is no bottleneck.
    """
    from pyspark.sql import functions as F

    return batch_df.repartition(1).sortWithinPartitions(
        F.col("window_end").asc(), F.col("totalCpu").desc(), F.col("category").asc()
    )


def _twin_per_category(slide_s: int) -> Callable[[], TwinProgram]:
    """``build_twin`` of the sum per category over windows of RANGE_S sliding by ``slide_s`` (0: tumbling)."""

    def build() -> TwinProgram:
        key = CATEGORY
        return windowed_aggregate(
            workload="CM1S" if slide_s else "CM1T",
            input_schema=CM_SCHEMA,
            lateness_s=LATENESS_S,
            range_s=RANGE_S,
            slide_s=slide_s,
            keys=[key],
            key_dtypes={key: "int32"},
            buffers=[("totalCpu", "cpu"), ("events", None)],
            measures=["cpu"],
            pre_filter=None,
            final=[*((c, c) for c in WINDOW), ("category", key), ("totalCpu", "totalCpu"),
                   ("events", "events")],
            final_detail="totalCpu = sum(cpu), events = count(1)",
            top=[("SortExec", sort(["window_end", "totalCpu", "category"], [True, False, True]),
                  "window_end ASC, totalCpu DESC, category ASC")],
            output_schema=timestamp_schema([
                ("window_start", TIMESTAMP, True), ("window_end", TIMESTAMP, True),
                ("category", pa.int32(), True), ("totalCpu", pa.float64(), True),
                ("events", pa.int64(), False),
            ]),
            ordered=True,
            description=f"CM1{'S' if slide_s else 'T'}: total cpu per category, 60 s windows"
            + (f" sliding by {slide_s} s" if slide_s else " (tumbling)") + ", busiest first",
        )

    return build


CM1S, CM1T = register_pair(
    "CM1",
    description="Cluster Monitoring: total cpu request per category (scheduling class) "
    "over {window}, busiest category first",
    window_range_s=RANGE_S,
    slide_s=SLIDE_S,
    query_for_slide=_per_category,
    twin_for_slide=_twin_per_category,
    schema=CM_SCHEMA,
    make_rows=make_task_events,
    output_mode="append",
    checks=CM_CHECKS,
    time_column="time",
    lateness_s=LATENESS_S,
    results_at_close=True,
    finish_batch=order_batch,
)
