"""The dashboard's redraw: a thread that redraws at most once per ``throttle_s`` (with a trailing redraw).

Also copies pure figures into the FigureWidgets, the device plan only when it changed.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import plotly.graph_objects as go

from .sources import RecordBuffer

__all__ = ["Redraw"]

_MAX_DRAW_SHARE = 0.25  # of wall time spent redrawing, at most
_WIDGET_LAYOUT = frozenset({"template", "height", "width", "autosize"})  # the widget's own, kept


def _plan_key(plan: dict | None) -> str:
    return json.dumps(plan, sort_keys=True, default=str)


def _copy_into(widget: Any, fig: go.Figure) -> None:
    """Make ``widget`` (a FigureWidget) show ``fig``: traces and layout, in as few messages as possible.

    Traces of the same number and types are updated in place in one
    ``batch_update`` (properties the new trace lacks are reset); otherwise the
    traces are replaced.  The template is not resent (both use the default), and
    the widget keeps its own size (:data:`_WIDGET_LAYOUT`).
    """
    new = list(fig.data)
    same = len(widget.data) == len(new) and all(
        type(a) is type(b) for a, b in zip(widget.data, new, strict=True)
    )
    if not same:
        widget.data = []
        if new:
            widget.add_traces(new)
    with widget.batch_update():
        if same:
            for old, trace in zip(widget.data, new, strict=True):
                props = trace.to_plotly_json()
                props.pop("type", None)
                for key in set(old.to_plotly_json()) - set(props) - {"type", "uid"}:
                    old[key] = None
                old.update(props, overwrite=True)
        layout = fig.layout.to_plotly_json()
        layout.pop("template", None)
        for key in set(widget.layout.to_plotly_json()) - set(layout) - _WIDGET_LAYOUT:
            widget.layout[key] = None
        widget.layout.update(layout, overwrite=True)


class Redraw:
    """When to redraw the figures of ``buffer``'s records, and what changed since the last redraw.

    A redraw (the caller's ``draw``) calls :meth:`begin`, :meth:`show` and
    :meth:`done`.  The thread of :meth:`start` redraws after records arrive:
    at most once per :attr:`throttle_s` seconds, with a trailing redraw, and a
    redraw that took ``d`` seconds is followed by at least ``3 d`` seconds
    without one.  Its state is guarded by ``buffer.lock``.
    """

    def __init__(self, buffer: RecordBuffer, throttle_s: float) -> None:
        self.buffer = buffer
        self.throttle_s = throttle_s
        self.last_draw = -math.inf
        self.draw_s = 0.0  # how long the last redraw took
        self._plan_key: str | None = None
        self._plan_drawn = False

    def start(self, draw: Callable[[], None], failed: Callable[[Exception], None]) -> threading.Thread:
        """Start the redraw thread: it calls ``draw()``, and ``failed(exc)`` when that raised."""
        thread = threading.Thread(
            target=self._loop, args=(draw, failed), name="lmstream-dashboard-redraw", daemon=True
        )
        thread.start()
        return thread

    def _loop(self, draw: Callable[[], None], failed: Callable[[Exception], None]) -> None:
        buffer = self.buffer
        while True:
            with buffer.changed:
                while not buffer.dirty and not buffer.closed:
                    buffer.changed.wait()
                while not buffer.closed:
                    gap = max(self.throttle_s, self.draw_s / _MAX_DRAW_SHARE)
                    left = self.last_draw + gap - time.monotonic()
                    if left <= 0:
                        break
                    buffer.changed.wait(left)
                if buffer.closed:
                    return
            try:
                draw()
            except Exception as exc:  # keep drawing later batches; say why this one failed
                failed(exc)

    def begin(self) -> float:
        """A redraw starts: merge the buffered records; returns the start time for :meth:`done`."""
        with self.buffer.lock:
            self.buffer.merge_locked()
            self.buffer.dirty = False
            self.last_draw = started = time.monotonic()
        return started

    def done(self, started: float) -> None:
        """The redraw that :meth:`begin` returned ``started`` for has ended."""
        self.draw_s = time.monotonic() - started

    def show(
        self,
        widgets: Mapping[str, Any],
        built: Mapping[str, go.Figure],
        plan: dict | None,
        plan_figure: Callable[[dict | None], go.Figure],
    ) -> None:
        """Copy the figures ``built`` into ``widgets`` (same keys), and ``plan_figure(plan)`` into
        ``widgets["device_plan"]`` only when ``plan`` changed since the last call."""
        for key, fig in built.items():
            _copy_into(widgets[key], fig)
        key = _plan_key(plan)
        if not self._plan_drawn or key != self._plan_key:
            _copy_into(widgets["device_plan"], plan_figure(plan))
            self._plan_key = key
            self._plan_drawn = True
