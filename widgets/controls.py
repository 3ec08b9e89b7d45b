"""Widgets for declared controls: one ipywidget per :class:`~lmstream_kit.protocol.Control`.

The widget comes from the parameter's declaration (choices, log scale, bounds),
so a new controller's parameters appear without code here.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

from lmstream_kit.units import format_bytes

__all__ = ["SlowApplier", "make_widget", "show_value"]


def make_widget(W: Any, control: Any) -> tuple[Any, list]:
    """``(widget, extra widgets shown beside it)`` for ``control`` (ipywidgets module ``W``)."""
    p = control.param
    common = {"description": control.label, "tooltip": control.tooltip}
    extra: list = []
    if p.choices is not None:
        cls = W.ToggleButtons if len(p.choices) <= 2 else W.Dropdown
        return cls(options=list(p.choices), value=None, **common), extra
    if p.kind is bool:
        return W.Checkbox(value=bool(control.value), **common), extra
    if p.kind is str:  # free text, applied on Enter or when the box loses focus
        return W.Text(value=str(control.value or ""), placeholder=p.hint, continuous_update=False, **common), extra
    low, high = control.range
    value = control.value if isinstance(control.value, (int, float)) else None
    if p.log_scale:
        lo = math.floor(math.log2(low)) if low else -10
        hi = math.ceil(math.log2(high)) if high else max(lo + 1, math.ceil(math.log2(max(value or 1, 1e-9))) + 4)
        widget = W.FloatLogSlider(value=2.0**lo, base=2, min=lo, max=hi, step=p.step or 0.25,
                                  readout=True, readout_format=".0f" if p.unit == "bytes" else ".3g",
                                  continuous_update=False, **common)
        if p.unit == "bytes":
            label = W.HTML(value="")
            label.add_class(f"lmstream-{control.key}-readout")
            widget.observe(lambda change: setattr(label, "value", format_bytes(change["new"])), names="value")
            extra.append(label)
        return widget, extra
    low = 0.0 if low is None else low
    high = high if high is not None else max(1.0, 2 * abs(value or 0.0), low + 1.0)
    if p.kind is int:
        return W.IntSlider(value=int(low), min=int(low), max=int(high), step=int(p.step or 1),
                           continuous_update=False, **common), extra
    return W.FloatSlider(value=low, min=low, max=high, step=p.step or (high - low) / 100,
                         continuous_update=False, readout_format=".2f", **common), extra


def show_value(widget: Any, value: Any) -> None:
    """Show ``value`` on ``widget``, widening a slider's range when the value lies outside it."""
    if value is not None and isinstance(value, float) and hasattr(widget, "base"):
        exp = math.log(value, widget.base) if value > 0 else widget.min
        if exp < widget.min:
            widget.min = math.floor(exp)
        if exp > widget.max:
            widget.max = math.ceil(exp)
    elif value is not None and isinstance(value, float) and hasattr(widget, "max"):
        widget.max = max(widget.max, value)
        widget.min = min(widget.min, value)
    if value is None and not hasattr(widget, "options"):
        return
    if value is not None and hasattr(widget, "options") and value not in widget.options:
        return  # a value the menu does not offer (a logic swapped in by a function): nothing to select
    if getattr(widget, "value", None) != value:
        widget.value = value


class SlowApplier:
    """Runs slow setters (those that restart the query) on one worker thread, newest value per key.

    ``apply(key, value)`` is what the worker calls; ``closed()`` tells it to stop once idle.
    """

    def __init__(self, apply: Callable[[str, Any], None], closed: Callable[[], bool]) -> None:
        self._apply = apply
        self._closed = closed
        self._cond = threading.Condition(threading.Lock())
        self._queue: dict[str, Any] = {}
        self._running: set[str] = set()
        self._thread: threading.Thread | None = None

    def busy(self) -> set[str]:
        """The keys queued or being applied."""
        with self._cond:
            return set(self._queue) | self._running

    def submit(self, key: str, value: Any) -> None:
        """Queue ``value`` for ``key`` (a newer value of the same key replaces a queued one)."""
        with self._cond:
            self._queue.pop(key, None)
            self._queue[key] = value
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="lmstream-dashboard-apply", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed():
                    self._cond.wait()
                if not self._queue:
                    return
                key = next(iter(self._queue))
                value = self._queue.pop(key)
                self._running.add(key)
            try:
                self._apply(key, value)
            finally:
                with self._cond:
                    self._running.discard(key)
                    self._cond.notify_all()

    def join(self, timeout: float) -> None:
        """Wait for the worker thread to end (after the owner closed)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout)

    def wait(self, timeout: float) -> bool:
        """Block until nothing is queued or running; False on timeout."""
        import time

        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._running:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True
