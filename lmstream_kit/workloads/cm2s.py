"""CM2S (Table III): Cluster Monitoring, average cpu request per job of scheduled tasks.

The Spark query (:func:`build_query`) and its pandas/cudf twin program (:func:`build_twin`).

>>> from lmstream_kit.workloads import get_workload
>>> w = get_workload("CM2S")
>>> w.slide_s, w.twin().workload, w.twin().ops[-2].detail
(5, 'CM2S', 'event_type = 1')

``SELECT jobId, AVG(cpu) AS avgCpu FROM TaskEvents [range 60 slide 5]
WHERE (eventType == 1) GROUP BY jobId``

Event time is the event's ``time`` (simulated seconds).  Append mode: each
window's rows are emitted once, when the watermark closes it.
"""

from __future__ import annotations

import pyarrow as pa

from ..twin.program import TIMESTAMP, WINDOW, TwinProgram, timestamp_schema, windowed_aggregate
from .base import Workload, register, time_window, with_event_time
from .cluster_monitoring import CM_CHECKS, CM_SCHEMA, make_task_events

RANGE_S = 60
SLIDE_S = 5
LATENESS_S = 5
SCHEDULE = 1


def query_for_slide(slide_s: float):
    """``build_query`` of CM2S over windows of RANGE_S sliding by ``slide_s``."""

    def build_query(stream):
        return _job_cpu(stream, slide_s)

    return build_query


def build_query(stream):
    return _job_cpu(stream, SLIDE_S)


def _job_cpu(stream, slide_s: float):
    from pyspark.sql import functions as F

    events = with_event_time(stream, "time", LATENESS_S)
    return (
        events.where(F.col("event_type") == SCHEDULE)
        .groupBy(time_window(RANGE_S, slide_s), "job_id")
        .agg(F.avg("cpu").alias("avgCpu"), F.count("*").alias("tasks"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "job_id",
            "avgCpu",
            "tasks",
        )
    )


def build_twin() -> TwinProgram:
    """The twin program of CM2S (:mod:`lmstream_kit.twin`): its windowed aggregation on pandas/cudf."""
    return windowed_aggregate(
        workload="CM2S",
        input_schema=CM_SCHEMA,
        lateness_s=LATENESS_S,
        range_s=RANGE_S,
        slide_s=SLIDE_S,
        keys=["job_id"],
        key_dtypes={"job_id": "int64"},
        buffers=[("cpu_sum", "cpu"), ("tasks", None)],
        measures=["cpu"],
        pre_filter=("event_type", SCHEDULE),
        final=[*((c, c) for c in WINDOW), ("job_id", "job_id"),
               ("avgCpu", lambda f: f["cpu_sum"] / f["tasks"]), ("tasks", "tasks")],
        final_detail="avgCpu = avg(cpu), tasks = count(1)",
        top=[],
        output_schema=timestamp_schema([
            ("window_start", TIMESTAMP, True), ("window_end", TIMESTAMP, True), ("job_id", pa.int64(), True),
            ("avgCpu", pa.float64(), True), ("tasks", pa.int64(), False),
        ]),
        ordered=False,
        description="CM2S: avg cpu per job of SCHEDULE events, 60 s windows sliding by 5 s",
    )


CM2S = register(
    Workload(
        name="CM2S",
        description=f"Cluster Monitoring: average cpu request per job of SCHEDULE events "
        f"over a {RANGE_S} s window sliding by {SLIDE_S} s",
        schema=CM_SCHEMA,
        make_rows=make_task_events,
        build_query=build_query,
        window_range_s=RANGE_S,
        slide_s=SLIDE_S,
        output_mode="append",
        checks=CM_CHECKS,
        time_column="time",
        lateness_s=LATENESS_S,
        results_at_close=True,
        query_for_slide=query_for_slide,
        twin=build_twin,
    )
)
