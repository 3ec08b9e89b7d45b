"""Notebook layer of lmstream_kit: the dashboard, its figures and its text status.

:class:`~widgets.dashboard.Dashboard` shows a running
:class:`~lmstream_kit.live.LiveStream` (live figures and controls) or replays a
finished run directory; :mod:`lmstream_kit.plots` holds the pure plotly figures it
draws (re-exported by :mod:`widgets.figures`), and :func:`status_line` the one-line status it shows (and falls back to
where ipywidgets is missing).  ``Dashboard`` is imported lazily, so
``import widgets`` stays cheap; nothing here imports pyspark.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

__all__ = ["Dashboard", "status_line"]


def __getattr__(name):
    if name == "Dashboard":
        from .dashboard import Dashboard

        return Dashboard
    raise AttributeError(f"module 'widgets' has no attribute {name!r}")


def status_line(records: Sequence[Mapping]) -> str:
    """One line of status from a stream's metric records.

    >>> status_line([{"batch_id": 4, "rows": 900, "max_latency_s": 2.25, "changes": None}])
    'batch 4 | rows 900 | last max latency 2.25 s | batches 1'
    >>> status_line([])
    'no micro-batch yet'
    """
    if not records:
        return "no micro-batch yet"
    last = records[-1]
    lat = last.get("max_latency_s")
    lat_text = "-" if lat is None or (isinstance(lat, float) and math.isnan(lat)) else f"{lat:.2f} s"
    return (
        f"batch {last['batch_id']} | rows {last['rows']:,} | last max latency {lat_text} "
        f"| batches {len(records)}"
    )
