"""The spool-retention panel: what the spool keeps after each micro-batch.

:class:`RetentionPanel` draws :func:`lmstream_kit.plots.spool_retention_figure` (per batch: the spool
data kept, the first dataset still on disk and the batch's first dataset) from the records of a
:class:`~lmstream_kit.live.LiveStream` with retention on, live after every batch, or from a run
directory.  ``notebooks/12_running_for_days.ipynb`` shows it.
"""

from __future__ import annotations

import plotly.graph_objects as go

from lmstream_kit.plots import spool_retention_figure

from .recordpanel import RecordPanel

__all__ = ["RetentionPanel"]


class RetentionPanel(RecordPanel):
    """Spool data kept and the first dataset kept per micro-batch, of a stream or a run (see the module)."""

    figure_keys = ("retention",)
    figure_height = 380
    css_class = "lmstream-retention"
    title = "Spool retention per micro-batch (live)"

    def _figures(self, records: list[dict]) -> dict[str, go.Figure]:
        return {"retention": spool_retention_figure(records, title=self.title, height=self.figure_height)}
