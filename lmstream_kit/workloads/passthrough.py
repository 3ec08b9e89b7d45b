"""PASSTHROUGH: Linear Road reports written to the output unchanged.

Not a query from the paper: it moves every input row to the output, which makes
exactly-once delivery checkable row by row (ingest runs, restart tests).  Its
latency bound is a nominal 10 s slide, like LR2S.
"""

from __future__ import annotations

from .base import Workload, register
from .linear_road import LR_CHECKS, LR_SCHEMA, make_position_reports

PASSTHROUGH = register(
    Workload(
        name="PASSTHROUGH",
        description="Linear Road position reports copied to the output unchanged "
        "(exactly-once checks); nominal 10 s latency bound",
        schema=LR_SCHEMA,
        make_rows=make_position_reports,
        build_query=lambda stream: stream,
        window_range_s=0,
        slide_s=10,
        output_mode="append",
        checks=LR_CHECKS,
        time_column="time",
    )
)
