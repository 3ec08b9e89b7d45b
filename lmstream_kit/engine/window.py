"""Read a query's event-time window from Spark's logical plan: the ``window(...)`` it groups by.

The query is built over an empty file stream of the workload's schema (nothing runs); the
plan's ``window`` calls carry their duration and slide as Spark interval text.
"""

from __future__ import annotations

import tempfile

from ..exceptions import ConfigError
from ..units import parse_duration
from .schema import spark_ddl

__all__ = ["query_window"]


def query_window(spark, workload) -> tuple[float, float]:
    """``(range_s, slide_s)`` of the window ``workload``'s query uses; slide == range when tumbling.

    Raises ConfigError when the plan has no time window, or several different ones.
    """
    with tempfile.TemporaryDirectory(prefix="lmstream-plan-") as empty:
        stream = spark.readStream.schema(spark_ddl(workload.schema)).parquet(empty)
        try:
            df = workload.build_query(stream)
        except Exception as exc:
            raise ConfigError(f"workload {workload.name}: its query failed on the input schema: "
                              f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                              ) from None
        found = sorted(set(_windows(df._jdf.queryExecution().logical())))
    if not found:
        raise ConfigError(f"workload {workload.name}: its query's plan shows no window(...) to read the "
                          "latency bound from; give window= (and slide=) or, without a window, bound=")
    if len(found) > 1:
        shown = ", ".join(f"{r:g} s by {s:g} s" for r, s in found)
        raise ConfigError(f"workload {workload.name}: its query uses several windows ({shown}); "
                          "give window= and slide= for the one that bounds latency")
    return found[0]


def _seq(scala_seq) -> list:
    it, out = scala_seq.iterator(), []
    while it.hasNext():
        out.append(it.next())
    return out


def _windows(plan):
    """Every ``(range_s, slide_s)`` of a time window in ``plan``'s expressions."""
    nodes = [plan]
    while nodes:
        node = nodes.pop()
        exprs = _seq(node.expressions())
        while exprs:
            e = exprs.pop()
            kind = e.getClass().getSimpleName()
            if kind == "TimeWindow":  # resolved: durations in microseconds
                yield e.windowDuration() / 1e6, e.slideDuration() / 1e6
            elif kind == "UnresolvedFunction" and str(e.nameParts().last()).lower() == "window":
                args = [str(a.toString()) for a in _seq(e.arguments())]
                if len(args) >= 2:  # window(col, duration[, slide[, start]])
                    range_s = parse_duration(args[1].strip("'"), "window")
                    slide_s = parse_duration(args[2].strip("'"), "slide") if len(args) > 2 else range_s
                    yield range_s, slide_s
            exprs.extend(_seq(e.children()))
        nodes.extend(_seq(node.children()))
