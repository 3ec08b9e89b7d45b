"""The Flumina panel: a fork/join workload's plan tree, events per worker and joins over time.

:class:`FluminaPanel` shows a running :class:`~lmstream_kit.live.LiveStream` of a Flumina workload
(:func:`lmstream_kit.workloads.flumina.flumina_workload`), redrawn after every micro-batch, or a
finished run directory.  The plan is read from the run's state directory, where the workload writes
it when the stream starts; the figures come from :mod:`lmstream_kit.plots.flumina` (pure plotly).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from lmstream_kit.flumina.batches import PLAN_FILE
from lmstream_kit.placement import WORKLOAD_STATE_DIR
from lmstream_kit.plots.flumina import flumina_figures

from .recordpanel import RecordPanel

__all__ = ["FluminaPanel"]


def read_plan(run_dir: Path) -> dict | None:
    """The plan a Flumina run wrote in its state directory, None before the stream started."""
    path = Path(run_dir) / WORKLOAD_STATE_DIR / PLAN_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class FluminaPanel(RecordPanel):
    """The plan tree, the events per worker and the joins over time of a Flumina workload's run.

    Parameters
    ----------
    source : LiveStream or path
        A stream (started, so that its plan is written) or a run directory (replay).

    Attributes
    ----------
    figures : dict of str to plotly FigureWidget
        ``plan``, ``workers`` and ``joins`` (empty where ipywidgets is missing).
    widget : ipywidgets.VBox or None
        What a notebook cell displays.
    """

    figure_keys = ("plan", "workers", "joins")
    css_class = "lmstream-flumina"

    def _layout(self, W: Any) -> Any:
        return W.VBox([self.figures["plan"], W.HBox([self.figures["workers"], self.figures["joins"]])])

    def _figures(self, records: list[dict]) -> dict[str, go.Figure]:
        return flumina_figures(records, read_plan(self.run_dir))
