"""The dashboard's figures: re-exported from :mod:`lmstream_kit.plots`, where they are defined.

Pure plotly figures of a stream's per-micro-batch metric records and of its device plan; nothing
here imports ipywidgets or pyspark.  The names are the plotting package's own objects:

>>> import lmstream_kit.plots as plots
>>> latency_figure is plots.latency_figure and device_plan_figure is plots.device_plan_figure
True
>>> change_markers([{"batch_id": 4, "changes": [{"param": "slide_s", "value": 5.0}]}])
[(4, 'slide_s=5')]
"""

from __future__ import annotations

from lmstream_kit.plots.batches import (
    batch_size_figure,
    inflection_figure,
    latency_figure,
    throughput_figure,
    time_split_figure,
)
from lmstream_kit.plots.plan import DEVICE_COLORS, device_plan_figure, latest_plan, plan_edges, plan_layout
from lmstream_kit.plots.records import EMPTY_TEXT, change_markers, records_frame

__all__ = [
    "DEVICE_COLORS",
    "EMPTY_TEXT",
    "batch_size_figure",
    "change_markers",
    "device_plan_figure",
    "inflection_figure",
    "latency_figure",
    "latest_plan",
    "plan_edges",
    "plan_layout",
    "records_frame",
    "throughput_figure",
    "time_split_figure",
]
