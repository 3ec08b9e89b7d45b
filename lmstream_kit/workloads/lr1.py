"""LR1S and LR1T (Table III): Linear Road, each report joined with its vehicle's reports in a window.

``SELECT L.timestamp, L.vehicle, L.speed, L.highway, L.lane, L.direction, L.segment
FROM SegSpeedStr [range 30 (slide 5)] AS A, SegSpeedStr AS L
WHERE (A.vehicle == L.vehicle)``

Semantics
---------
A stream-stream inner self-join of the position reports on ``vehicle`` and
on equal event-time windows: both sides are assigned to the windows of
``F.window(ts, "30 seconds", "5 seconds")`` (LR1S) or ``"30 seconds"``
tumbling (LR1T), and for every window ``w`` and vehicle ``v`` the query emits
one row per pair ``(a, l)`` of reports of ``v`` that both lie in ``w``, i.e.
``|reports of v in w| ** 2`` rows, carrying ``l``'s columns:
``window_start, window_end, timestamp`` (``l.time`` as a timestamp),
``vehicle, speed, highway, lane, direction, segment``.

Rows out per report: a Linear Road vehicle reports once every 30 s (the
generator's vehicles reporting at second ``s`` are ``30*k + s % 30``), so a
30 s window holds at most one report of a vehicle and every report is paired
only with itself, once per window that contains it: **6 rows per report for
LR1S** (30 / 5 windows) and **1 row for LR1T**.  Input with several reports
of a vehicle inside 30 s (ingested user files) gives the full cross product
per window.

Spark form
----------
Both sides must be the *same* streaming relation, so that Spark plans one
``lmstream`` source: one admission (one ``latestOffset`` answer) per trigger
and one offset range that both sides read.  A plain self-join
(``df.alias("A").join(df.alias("L"), ...)``) does not do that in PySpark 4.1
or 4.3: the analyzer gives one side a new instance of the relation (new
attribute ids), and Spark then runs two sources, each asking the admission
gate on its own (and possibly admitting different ranges).  So the A side
renames its two columns (``a_window``, ``a_vehicle``) instead: the sides
share no attribute, nothing is re-instanced, and the query has one source.
Both join sides still scan that source's batch: with ``read="driver"`` the
source runner reads the admitted datasets once and both scans take them from
Spark; with ``read="executors"`` each side's scan reads them (two Python tasks
per partition).  Either way Spark's ``numInputRows`` counts every input row
twice (the metrics records' ``rows`` count it once).

The window is the only event-time column the sides carry (Spark refuses a
join input with two, and ``ts`` would be a second); ``timestamp`` is rebuilt
from ``time``.  Join on equal windows lets Spark drop a side's state rows once
the watermark passes their window's end.  Append mode: a pair is emitted in
the micro-batch in which its later report arrives, exactly once, without
waiting for the window to close.  Reports older than the watermark (the latest
event time seen minus ``LATENESS_S``) are dropped as late; the generator
produces none.
"""

from __future__ import annotations

from .base import Workload, register, time_window, with_event_time
from .linear_road import LR_CHECKS, LR_SCHEMA, make_position_reports

RANGE_S = 30
SLIDE_S = 5
#: how late (simulated seconds) a report may arrive and still count
LATENESS_S = 5
#: the L side's columns in the output, after the window
REPORT_COLUMNS = ("vehicle", "speed", "highway", "lane", "direction", "segment")


def _window_join(slide_s: int):
    """``build_query`` of a self-join over windows of RANGE_S sliding by ``slide_s`` (0: tumbling)."""

    def build_query(stream):
        from pyspark.sql import functions as F

        reports = with_event_time(stream, "time", LATENESS_S)
        window = time_window(RANGE_S, slide_s)
        # the window must be the only event-time column (ts would be a second)
        reports = reports.select(window.alias("window"), "time", *REPORT_COLUMNS)
        # renamed, not aliased: sides with no attribute in common stay on one
        # source relation (a plain self-join would start a second source)
        a = reports.select(F.col("window").alias("a_window"), F.col("vehicle").alias("a_vehicle"))
        joined = reports.join(
            a,
            (F.col("a_vehicle") == F.col("vehicle")) & (F.col("a_window") == F.col("window")),
            "inner",
        )
        return joined.select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            F.timestamp_seconds("time").alias("timestamp"),
            *REPORT_COLUMNS,
        )

    return build_query


LR1S = register(
    Workload(
        name="LR1S",
        description="Linear Road: each position report joined with its vehicle's reports "
        f"in a {RANGE_S} s window sliding by {SLIDE_S} s (self-join on vehicle)",
        schema=LR_SCHEMA,
        make_rows=make_position_reports,
        build_query=_window_join(SLIDE_S),
        window_range_s=RANGE_S,
        slide_s=SLIDE_S,
        output_mode="append",
        checks=LR_CHECKS,
        time_column="time",
        query_for_slide=_window_join,
    )
)

LR1T = register(
    Workload(
        name="LR1T",
        description="Linear Road: each position report joined with its vehicle's reports "
        f"in a {RANGE_S} s tumbling window (self-join on vehicle)",
        schema=LR_SCHEMA,
        make_rows=make_position_reports,
        build_query=_window_join(0),
        window_range_s=RANGE_S,
        slide_s=0,
        output_mode="append",
        checks=LR_CHECKS,
        time_column="time",
    )
)
