"""The Flumina panel: a fork/join workload's plan tree, events per worker and joins over time.

:class:`FluminaPanel` shows a running :class:`~lmstream_kit.live.LiveStream` of a Flumina workload
(:func:`lmstream_kit.workloads.flumina.flumina_workload`), redrawn after every micro-batch, or a
finished run directory.  The plan is read from the run's state directory, where the workload writes
it when the stream starts; the figures come from :mod:`lmstream_kit.plots.flumina` (pure plotly).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.flumina.batches import PLAN_FILE
from lmstream_kit.placement import WORKLOAD_STATE_DIR
from lmstream_kit.plots.flumina import flumina_figures

from .redraw import _copy_into
from .sources import RecordBuffer, detach_live, load_run

__all__ = ["FluminaPanel"]


def read_plan(run_dir: Path) -> dict | None:
    """The plan a Flumina run wrote in its state directory, None before the stream started."""
    path = Path(run_dir) / WORKLOAD_STATE_DIR / PLAN_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class FluminaPanel:
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

    def __init__(self, source: Any) -> None:
        self._buffer = RecordBuffer()
        self._lock = threading.Lock()
        self.stream = None
        if isinstance(source, (str, Path)):
            self.run_dir = Path(source)
            load_run(self.run_dir, self._buffer)
        elif hasattr(source, "on_batch") and hasattr(source, "run_dir"):
            self.stream = source
            self.run_dir = Path(source.run_dir)
        else:
            raise ConfigError(f"FluminaPanel source must be a LiveStream or a run directory, got {type(source).__name__}")
        self.figures: dict[str, Any] = {}
        self.widget = None
        try:
            import ipywidgets as W

            self.figures = {k: go.FigureWidget(layout={"height": 340}) for k in ("plan", "workers", "joins")}
            self.widget = W.VBox([self.figures["plan"], W.HBox([self.figures["workers"], self.figures["joins"]])])
            self.widget.add_class("lmstream-flumina")
        except ImportError:
            pass
        self._forward = None
        if self.stream is not None:
            self._forward = self._on_batch
            self.stream.on_batch(self._forward)
            self._buffer.seed(self.stream.records)  # after registering: no batch falls in between
        self.refresh()

    def _on_batch(self, record: dict) -> None:
        """The stream's on_batch callback (Spark's thread): buffer the record and redraw."""
        self._buffer.push(record)
        try:
            self.refresh()
        except Exception:
            pass  # a failed redraw must never stop the stream's batches

    @property
    def records(self) -> list[dict]:
        return self._buffer.records()

    def snapshot(self) -> dict[str, go.Figure]:
        """Static copies of the figures (what a saved notebook keeps)."""
        return flumina_figures(self.records, read_plan(self.run_dir))

    def refresh(self) -> None:
        """Redraw from the records received so far."""
        if not self.figures:
            return
        with self._lock:
            figs = self.snapshot()
            for key, widget in self.figures.items():
                if key in figs:
                    _copy_into(widget, figs[key])

    def close(self) -> None:
        """Stop following the stream (its batches go on)."""
        if self.stream is not None and self._forward is not None:
            detach_live(self.stream, self._forward)
            self._forward = None
        self._buffer.close()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> dict:
        if self.widget is not None:
            return self.widget._repr_mimebundle_(include=include, exclude=exclude, **kwargs)
        return {"text/plain": f"FluminaPanel({self.run_dir})"}

