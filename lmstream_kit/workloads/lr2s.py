"""LR2S (Table III): Linear Road segment speed over a sliding window.

The Spark query (:func:`build_query`) and its pandas/cudf twin program (:func:`build_twin`).

>>> from lmstream_kit.workloads import get_workload
>>> w = get_workload("LR2S")
>>> w.slide_s, w.twin().workload, w.twin().ops[1].detail
(10, 'LR2S', 'avgSpeed < 40.0')

``SELECT timestamp, highway, direction, segment, AVG(speed) AS avgSpeed
FROM SegSpeedStr [range 30 slide 10] GROUP BY highway, direction, segment
HAVING avgSpeed < 40.0``

Event time is the report's ``time`` (simulated seconds).  The query runs in
append mode: each window's rows are emitted once, when the watermark closes it.
"""

from __future__ import annotations

import pyarrow as pa

from ..twin.program import (
    TIMESTAMP,
    WINDOW,
    TwinProgram,
    filter_less,
    project,
    timestamp_schema,
    windowed_aggregate,
)
from .base import Workload, register, time_window, with_event_time
from .linear_road import LR_CHECKS, LR_SCHEMA, make_position_reports

RANGE_S = 30
SLIDE_S = 10
#: how late (simulated seconds) a report may arrive and still count
LATENESS_S = 5


def query_for_slide(slide_s: float):
    """``build_query`` of LR2S over windows of RANGE_S sliding by ``slide_s``."""

    def build_query(stream):
        return _segment_speed(stream, slide_s)

    return build_query


def build_query(stream):
    return _segment_speed(stream, SLIDE_S)


def _segment_speed(stream, slide_s: float):
    from pyspark.sql import functions as F

    reports = with_event_time(stream, "time", LATENESS_S)
    per_segment = reports.groupBy(
        time_window(RANGE_S, slide_s),
        "highway",
        "direction",
        "segment",
    ).agg(F.avg("speed").alias("avgSpeed"), F.count("*").alias("reports"))
    return per_segment.where(F.col("avgSpeed") < 40.0).select(
        F.col("window.end").alias("timestamp"),
        "highway",
        "direction",
        "segment",
        "avgSpeed",
        "reports",
    )


def build_twin() -> TwinProgram:
    """The twin program of LR2S (:mod:`lmstream_kit.twin`): its windowed aggregation on pandas/cudf."""
    keys = ["highway", "direction", "segment"]
    return windowed_aggregate(
        workload="LR2S",
        input_schema=LR_SCHEMA,
        lateness_s=LATENESS_S,
        range_s=RANGE_S,
        slide_s=SLIDE_S,
        keys=keys,
        key_dtypes={k: "int32" for k in keys},
        buffers=[("speed_sum", "speed"), ("reports", None)],
        measures=["speed"],
        pre_filter=None,
        final=[*((c, c) for c in (*WINDOW, *keys)),
               ("avgSpeed", lambda f: f["speed_sum"] / f["reports"]), ("reports", "reports")],
        final_detail="avgSpeed = avg(speed), reports = count(1)",
        top=[
            ("ProjectExec", project([("timestamp", "window_end"), *((k, k) for k in keys),
                                     ("avgSpeed", "avgSpeed"), ("reports", "reports")]),
             "window.end AS timestamp, highway, direction, segment, avgSpeed, reports"),
            ("FilterExec", filter_less("avgSpeed", 40.0), "avgSpeed < 40.0"),
        ],
        output_schema=timestamp_schema([
            ("timestamp", TIMESTAMP, True), ("highway", pa.int32(), True), ("direction", pa.int32(), True),
            ("segment", pa.int32(), True), ("avgSpeed", pa.float64(), True), ("reports", pa.int64(), False),
        ]),
        ordered=False,
        description="LR2S: avg speed per segment, 30 s windows sliding by 10 s, below 40 mph",
    )


LR2S = register(
    Workload(
        name="LR2S",
        description="Linear Road: average speed per highway, direction and segment "
        f"over a {RANGE_S} s window sliding by {SLIDE_S} s, segments below 40 mph",
        schema=LR_SCHEMA,
        make_rows=make_position_reports,
        build_query=build_query,
        window_range_s=RANGE_S,
        slide_s=SLIDE_S,
        output_mode="append",
        checks=LR_CHECKS,
        time_column="time",
        lateness_s=LATENESS_S,
        results_at_close=True,
        query_for_slide=query_for_slide,
        twin=build_twin,
    )
)
