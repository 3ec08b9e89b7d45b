"""CM2S (Table III): Cluster Monitoring, average cpu request per job of scheduled tasks.

``SELECT jobId, AVG(cpu) AS avgCpu FROM TaskEvents [range 60 slide 5]
WHERE (eventType == 1) GROUP BY jobId``

Event time is the event's ``time`` (simulated seconds).  Append mode: each
window's rows are emitted once, when the watermark closes it.
"""

from __future__ import annotations

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
        query_for_slide=query_for_slide,
    )
)
