"""Read a query's event-time window from Spark's logical plan: the ``window(...)`` it groups by.

The query is built over an empty file stream of the workload's schema (nothing runs) and its
analyzed plan is searched for the windows Spark rewrote ``window(...)`` into.
"""

from __future__ import annotations

import tempfile

from ..exceptions import ConfigError
from .schema import spark_ddl

__all__ = ["analyzed_plan", "query_window"]


def analyzed_plan(spark, workload, failed: str):
    """The analyzed plan of ``workload``'s query built over an empty file stream of its schema (nothing
    runs); a query that does not build is a ConfigError ``<failed>: <Type>: <first line>``."""
    with tempfile.TemporaryDirectory(prefix="lmstream-plan-") as empty:
        stream = spark.readStream.schema(spark_ddl(workload.schema)).parquet(empty)
        try:
            return workload.build_query(stream)._jdf.queryExecution().analyzed()
        except Exception as exc:  # noqa: BLE001  (the user's query: any error refuses it)
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise ConfigError(f"{failed}: {type(exc).__name__}: {text}") from None


def query_window(spark, workload) -> tuple[float, float]:
    """``(range_s, slide_s)`` of the window ``workload``'s query uses; slide == range when tumbling.

    Raises ConfigError when the plan has no time window, or several different ones.
    """
    plan = analyzed_plan(spark, workload, f"workload {workload.name}: its query failed on the input schema")
    found = sorted(set(_windows(plan)))
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
    """Every ``(range_s, slide_s)`` of a time window in ``plan``'s expressions.

    In an analyzed plan Spark has rewritten ``window(...)`` into the struct of the
    window's start and end: the start rounds the event time down to the slide
    (``ts - ts % slide``) and the end adds the window's duration to it.
    """
    nodes = [plan]
    while nodes:
        node = nodes.pop()
        if node.getClass().getSimpleName() == "Expand":  # a sliding window: one projection per overlap
            names = [str(a.name()) for a in _seq(node.output())]
            projections = _seq(node.projections())
            if "window" in names and projections:
                found = _rewritten(_seq(projections[0])[names.index("window")])
                if found is not None:
                    yield found
        exprs = _seq(node.expressions())
        while exprs:
            e = exprs.pop()
            kind = e.getClass().getSimpleName()
            if kind == "Alias" and str(e.name()) == "window":
                found = _rewritten(e.child())
                if found is not None:
                    yield found
                    continue
            exprs.extend(_seq(e.children()))
        nodes.extend(_seq(node.children()))


def _rewritten(struct):
    """``(range_s, slide_s)`` of the ``named_struct(start, ..., end, ...)`` a window became, else None."""
    if struct.getClass().getSimpleName() != "CreateNamedStruct":
        return None
    parts = _seq(struct.children())
    if len(parts) != 4 or [str(parts[0]), str(parts[2])] != ["start", "end"]:
        return None
    slide = _first(parts[1], "Remainder")
    end = parts[3]
    while end is not None and end.getClass().getSimpleName() != "Add":
        children = _seq(end.children())
        end = children[0] if len(children) == 1 else None
    if slide is None or end is None or end.right().getClass().getSimpleName() != "Literal":
        return None
    if slide.right().getClass().getSimpleName() != "Literal":
        return None
    return int(end.right().value()) / 1e6, int(slide.right().value()) / 1e6


def _first(expr, kind: str):
    stack = [expr]
    while stack:
        e = stack.pop()
        if e.getClass().getSimpleName() == kind:
            return e
        stack.extend(reversed(_seq(e.children())))
    return None
