"""LR1S and LR1T (Table III): Linear Road, each report joined with its vehicle's reports in a window.

The Spark query (:func:`_window_join`) and its pandas/cudf twin program (:func:`_twin_window_join`)
of both windows, registered as a pair (:func:`~lmstream_kit.workloads.base.register_pair`).

>>> from lmstream_kit.workloads import get_workload
>>> [(w.name, w.slide_s, w.twin().ops[1].exec_name) for w in map(get_workload, ("LR1S", "LR1T"))]
[('LR1S', 5, 'StreamingSymmetricHashJoinExec'), ('LR1T', 0, 'StreamingSymmetricHashJoinExec')]

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

Twin
----
The twin program (:mod:`lmstream_kit.twin`) mirrors Spark's plan of the
stream-stream inner self-join on vehicle and window, root first::

    ProjectExec                  window_start, window_end, timestamp, L's columns
    StreamingSymmetricHashJoinExec
      left:  [FilterExec isnotnull(window)] <- ExpandExec | ProjectExec (window) <- FilterExec
             <- EventTimeWatermarkExec <- ProjectExec <- FilterExec isnotnull(vehicle) <- MicroBatchScanExec
      right: ProjectExec (a_window, a_vehicle) <- ... the same chain ...
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa

from ..twin.program import (
    TIMESTAMP,
    TS,
    WINDOW,
    OpFn,
    TwinOp,
    TwinProgram,
    chain,
    event_time_watermark,
    filter_not_null,
    project,
    project_ts,
    scan,
    sliding_windows,
    timestamp_schema,
    tumbling_window,
)
from .base import register_pair, time_window, with_event_time
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


def _self_join(store: str, columns: Sequence[str]) -> OpFn:
    """Stream-stream inner self-join on (window, vehicle), Spark's symmetric hash join semantics."""
    key = [*WINDOW, "vehicle"]
    cols = list(columns)
    right_names = {"a_window_start": "window_start", "a_window_end": "window_end", "a_vehicle": "vehicle"}

    def run(be, inputs, ctx):
        left, right = inputs
        late_left = left["window_end"] <= ctx.late_watermark
        late_right = right["a_window_end"] <= ctx.late_watermark
        ctx.dropped_late += int(late_left.sum()) + int(late_right.sum())
        left = left[~late_left][cols]
        right_new = right[~late_right].rename(columns=right_names)[key]
        stored = ctx.state[store]  # both sides hold the same rows: one buffer for both
        # left pass: new left rows x right state (stored); right pass: new right rows x left
        # state, which by then holds the stored and the new left rows
        pairs_new = left.merge(be.concat([stored[key], right_new]), on=key, how="inner")
        pairs_old = stored.merge(right_new, on=key, how="inner")
        out = be.concat([pairs_new[cols], pairs_old[cols]])
        kept = be.concat([stored, left])
        ctx.new_state[store] = kept[kept["window_end"] > ctx.eviction_watermark].reset_index(drop=True)
        return out

    return run


def _twin_window_join(slide_s: int) -> Callable[[], TwinProgram]:
    """``build_twin`` of the self-join over windows of RANGE_S sliding by ``slide_s`` (0: tumbling)."""

    def build() -> TwinProgram:
        report = list(REPORT_COLUMNS)  # vehicle, speed, highway, lane, direction, segment
        left_keep = ["time", *report]
        row = [*WINDOW, *left_keep]  # a left row after windowing (also the stored row)
        range_s = RANGE_S
        right_names = {"window_start": "a_window_start", "window_end": "a_window_end", "vehicle": "a_vehicle"}

        def side(first_id: int, keep: list[str], right: bool) -> list[TwinOp]:
            steps: list[tuple[str, OpFn, str]] = []
            if slide_s:
                if right:
                    steps.append(("ProjectExec", project([("a_window_start", "window_start"),
                                                          ("a_window_end", "window_end"),
                                                          ("a_vehicle", "vehicle")]),
                                  "window AS a_window, vehicle AS a_vehicle"))
                steps += [
                    ("FilterExec", filter_not_null(["window_start"]), "isnotnull(window)"),
                    ("ExpandExec", sliding_windows(range_s, slide_s, keep),
                     f"{range_s // slide_s} windows of {range_s} s sliding by {slide_s} s"),
                ]
            elif right:  # Spark computes and renames the window in one projection here
                steps.append(("ProjectExec", tumbling_window(range_s, keep, rename=right_names),
                              f"tumbling window of {range_s} s AS a_window, vehicle AS a_vehicle"))
            else:
                steps.append(("ProjectExec", tumbling_window(range_s, keep),
                              f"tumbling window of {range_s} s"))
            steps += [
                ("FilterExec", filter_not_null([TS]), "isnotnull(ts)"),
                ("EventTimeWatermarkExec", event_time_watermark(), f"ts, {LATENESS_S} seconds"),
                ("ProjectExec", project_ts(keep, "time"),
                 f"{', '.join(keep)}, timestamp_seconds(time) AS ts"),
                ("FilterExec", filter_not_null(["vehicle"]), "isnotnull(vehicle)"),
                ("MicroBatchScanExec", scan(keep if "time" in keep else ["time", *keep]),
                 ", ".join(keep if "time" in keep else ["time", *keep])),
            ]
            return chain(steps, first_id)

        left = side(2, left_keep, right=False)
        right = side(2 + len(left), ["vehicle"], right=True)
        root = TwinOp(0, "ProjectExec", (1,), project([*((c, c) for c in WINDOW), ("timestamp", "time"),
                                                        *((c, c) for c in report)]),
                      "window.start, window.end, timestamp_seconds(time) AS timestamp, " + ", ".join(report))
        join = TwinOp(1, "StreamingSymmetricHashJoinExec", (left[0].id, right[0].id), _self_join("join", row),
                      "Inner, (vehicle, window) = (a_vehicle, a_window)")
        int32 = {c: "int32" for c in left_keep}
        name = "LR1S" if slide_s else "LR1T"
        return TwinProgram(
            workload=name,
            ops=(root, join, *left, *right),
            input_schema=LR_SCHEMA,
            output_schema=timestamp_schema([
                ("window_start", TIMESTAMP, True), ("window_end", TIMESTAMP, True),
                ("timestamp", TIMESTAMP, True), *((c, pa.int32(), True) for c in report),
            ]),
            lateness_s=int(LATENESS_S),
            ordered=False,
            stores={"join": {"window_start": "int64", "window_end": "int64", **int32}},
            timestamp_columns=("window_start", "window_end", "timestamp"),
            description=f"{name}: each report joined with its vehicle's reports in 30 s windows"
            + (f" sliding by {slide_s} s" if slide_s else " (tumbling)"),
        )

    return build


LR1S, LR1T = register_pair(
    "LR1",
    description="Linear Road: each position report joined with its vehicle's reports "
    "in {window} (self-join on vehicle)",
    window_range_s=RANGE_S,
    slide_s=SLIDE_S,
    query_for_slide=_window_join,
    twin_for_slide=_twin_window_join,
    schema=LR_SCHEMA,
    make_rows=make_position_reports,
    output_mode="append",
    checks=LR_CHECKS,
    time_column="time",
    lateness_s=LATENESS_S,
)
