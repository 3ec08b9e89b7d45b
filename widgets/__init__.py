"""Notebook layer of lmstream_kit (dashboard widgets and figures).

The live dashboard arrives with the Jupyter issue; until then this package
offers the text status that the dashboard falls back to where ipywidgets is
missing.  It only reads metric records and never imports pyspark.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence


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
