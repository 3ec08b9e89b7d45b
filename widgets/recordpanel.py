"""The base of a capability's panel: figures redrawn from a stream's records, live, or from a run's.

A panel (:class:`~widgets.flumina.FluminaPanel`, :class:`~widgets.tuning.TunerPanel`) says which
figures it has (:attr:`RecordPanel.figure_keys`), how they are laid out (:meth:`RecordPanel._layout`)
and how they are built from records (:meth:`RecordPanel._figures`); this class follows the source:
a running stream (registered with its ``on_batch``; every record buffered and the figures redrawn
on Spark's thread, a failed redraw never failing a batch) or a run directory (loaded once).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

import plotly.graph_objects as go

from lmstream_kit.exceptions import ConfigError

from .redraw import _copy_into
from .sources import RecordBuffer, detach_live, load_run

__all__ = ["RecordPanel"]


class RecordPanel:
    """Figures of a stream's or a run's records (see the module); subclasses fill in the hooks.

    Attributes
    ----------
    figures : dict of str to plotly FigureWidget
        Keyed by :attr:`figure_keys` (empty where ipywidgets is missing).
    widget : ipywidgets widget or None
        What a notebook cell displays.
    stream, run_dir
        The live source (None in replay) and its run directory.
    """

    figure_keys: ClassVar[tuple[str, ...]] = ()
    css_class: ClassVar[str] = ""
    figure_height: ClassVar[int] = 340

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
            raise ConfigError(f"{type(self).__name__} source must be a LiveStream or a run directory, "
                              f"got {type(source).__name__}")
        self.figures: dict[str, Any] = {}
        self.widget = None
        try:
            import ipywidgets as W

            self.figures = {k: go.FigureWidget(layout={"height": self.figure_height}) for k in self.figure_keys}
            self.widget = self._layout(W)
            if self.css_class:
                self.widget.add_class(self.css_class)
        except ImportError:
            pass
        self._forward = None
        if self.stream is not None:
            self._forward = self._on_batch
            self.stream.on_batch(self._forward)
            self._buffer.seed(self.stream.records)  # after registering: no batch falls in between
        self.refresh()

    # -- what a panel says -----------------------------------------------------------------------
    def _layout(self, W: Any) -> Any:
        """The panel's widget, from :attr:`figures` (and anything else it builds here)."""
        return W.VBox([self.figures[k] for k in self.figure_keys])

    def _figures(self, records: list[dict]) -> dict[str, go.Figure]:
        """The static figures of ``records``, keyed like :attr:`figures`."""
        raise NotImplementedError

    def _redrawn(self, records: list[dict]) -> None:
        """After the figures are redrawn (under the panel's lock): update anything else it shows."""

    # -- following the source --------------------------------------------------------------------
    def _on_batch(self, record: dict) -> None:
        """The stream's on_batch callback (Spark's thread): buffer the record and redraw."""
        self._buffer.push(record)
        try:
            self.refresh()
        except Exception:  # noqa: BLE001, S110  (a failed redraw must never stop the stream's batches)
            pass

    @property
    def records(self) -> list[dict]:
        return self._buffer.records()

    def snapshot(self) -> dict[str, go.Figure]:
        """Static copies of the figures (what a saved notebook keeps)."""
        return self._figures(self.records)

    def refresh(self) -> None:
        """Redraw from the records received so far."""
        if not self.figures:
            return
        with self._lock:
            records = self.records
            figs = self._figures(records)
            for key, widget in self.figures.items():
                if key in figs:
                    _copy_into(widget, figs[key])
            self._redrawn(records)

    def close(self) -> None:
        """Stop following the stream (its batches go on)."""
        if self.stream is not None and self._forward is not None:
            detach_live(self.stream, self._forward)
            self._forward = None
        self._buffer.close()

    def _text(self) -> dict:
        return {"text/plain": f"{type(self).__name__}({self.run_dir})"}

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> dict:
        if self.widget is not None:
            return self.widget._repr_mimebundle_(include=include, exclude=exclude, **kwargs)
        return self._text()
