"""The consumer-lag panel: rows read and the source's lag after each micro-batch.

:class:`LagPanel` draws :func:`lmstream_kit.plots.source_lag_figure` from the records of an attached
Spark query whose source reports its latest offsets (Spark's Kafka source: ``source_lag``), live
after every batch or from a run directory.  A :class:`~widgets.dashboard.Dashboard` adds it below
its figures once a record has a lag.
"""

from __future__ import annotations

import plotly.graph_objects as go

from lmstream_kit.plots import source_lag_figure

from .recordpanel import RecordPanel

__all__ = ["LagPanel"]


class LagPanel(RecordPanel):
    """Rows read and consumer lag per micro-batch, of a stream or a run (see the module)."""

    figure_keys = ("source_lag",)
    css_class = "lmstream-lag"

    def _figures(self, records: list[dict]) -> dict[str, go.Figure]:
        return {"source_lag": source_lag_figure(records)}
