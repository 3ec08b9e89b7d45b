"""The dashboard's control panel: the stream's declared controls wired to its setters, or replay's slider.

A rejected value shows the setter's message beside its control, which goes back to the stream's value.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .controls import SlowApplier, make_widget, show_value
from .status import _one_line

__all__ = ["ControlPanel"]

_APPLYING = "applying…"


class ControlPanel:
    """The dashboard's ``controls`` and the message beside each live one (``errors``).

    ``stream`` is None in replay mode.  ``ui_lock`` guards control values and
    messages; ``closed()`` says whether the dashboard closed; ``applied()`` runs
    after a value was applied.  Slow setters (those that restart the query) run
    on a :class:`~widgets.controls.SlowApplier`.
    """

    def __init__(
        self,
        stream: Any,
        *,
        ui_lock: Any,
        closed: Callable[[], bool],
        applied: Callable[[], None],
    ) -> None:
        self.stream = stream
        self.controls: dict[str, Any] = {}
        self.errors: dict[str, Any] = {}
        self.last_applied: tuple[str, Any, float] | None = None  # (key, value, time.time())
        self._ui_lock = ui_lock
        self._closed = closed
        self._applied = applied
        self._suppress: set[str] = set()  # controls being set by the dashboard itself
        self._tooltips: dict[str, str | None] = {}
        self._slow = SlowApplier(self._apply, closed)

    # ------------------------------------------------------------------ building
    def _control(self, W: Any, key: str, widget: Any, extra: Sequence[Any] = ()) -> Any:
        widget.add_class(f"lmstream-{key}")
        widget.style.description_width = "initial"
        message = W.HTML(value="")
        message.add_class(f"lmstream-error-{key}")
        self.controls[key] = widget
        self.errors[key] = message
        self._tooltips[key] = widget.tooltip
        widget.observe(lambda change, key=key: self._on_control(key, change), names="value")
        return W.HBox([widget, *extra, message])

    def build_live(self, W: Any) -> list:
        """A row per control the stream declares (ipywidgets module ``W``), showing its values."""
        rows = []
        for control in self.declared().values():
            widget, extra = make_widget(W, control)
            rows.append(self._control(W, control.key, widget, extra))
        self.sync()
        return rows

    def build_replay(self, W: Any, ids: Sequence[int], redraw: Callable[[], None]) -> list:
        """The ``batch`` slider over ``ids`` (which calls ``redraw()``) and its ``play`` button."""
        batch = W.IntSlider(
            value=ids[-1], min=ids[0], max=ids[-1], step=1, description="batch",
            continuous_update=False, tooltip="Show the records up to this batch.",
        )
        batch.add_class("lmstream-batch")
        batch.style.description_width = "initial"
        play = W.Play(value=ids[-1], min=ids[0], max=ids[-1], step=1, interval=500, description="play")
        play.add_class("lmstream-play")
        W.link((play, "value"), (batch, "value"))
        self.controls["batch"] = batch
        self.controls["play"] = play
        batch.observe(lambda change: redraw(), names="value")
        return [W.HBox([play, batch])]

    # ------------------------------------------------------------------ live controls
    def declared(self) -> dict[str, Any]:
        """The stream's declared controls by key (value in force, range, why disabled, setter)."""
        return {c.key: c for c in self.stream.controls()}

    def _set_control(self, key: str, value: Any) -> None:
        """Show ``value`` on a control without calling the stream's setter."""
        with self._ui_lock:
            self._suppress.add(key)
            try:
                show_value(self.controls[key], value)
            finally:
                self._suppress.discard(key)

    def sync(self, skip: Sequence[str] = ()) -> None:
        """Show the stream's current values and which controls apply (never raises)."""
        if self.stream is None or not self.controls:
            return
        busy = self._slow.busy()
        try:
            declared = self.declared()
        except Exception:
            return
        with self._ui_lock:
            for key, control in declared.items():
                if key in skip or key in busy or key not in self.controls:
                    continue
                ctrl = self.controls[key]
                self._set_control(key, control.value)
                disabled = self._closed() or control.disabled is not None
                if ctrl.disabled != disabled:
                    ctrl.disabled = disabled
                tooltip = control.disabled if control.disabled is not None else self._tooltips.get(key)
                if ctrl.tooltip != tooltip:
                    ctrl.tooltip = tooltip

    def _on_control(self, key: str, change: Mapping) -> None:
        """A control's value changed (the kernel's thread): apply it unless the dashboard set it."""
        with self._ui_lock:
            if key in self._suppress:
                return
        if self._closed() or key in ("batch", "play"):
            return
        control = self.declared().get(key)
        if control is not None and control.param.restart:
            self._message(key, _APPLYING, error=False)
            self._slow.submit(key, change["new"])
        else:
            self._apply(key, change["new"])

    def _message(self, key: str, text: str, *, error: bool) -> None:
        with self._ui_lock:
            widget = self.errors.get(key)
            if widget is None:
                return
            if not text:
                widget.value = ""
            elif error:
                widget.value = f'<span style="color:#B00020">⚠ {html.escape(text, quote=False)}</span>'
            else:
                widget.value = f'<span style="color:#7F7F7F">{html.escape(text, quote=False)}</span>'

    def _apply(self, key: str, value: Any) -> None:
        """Call the control's setter; on failure show its message and put the control back (never raises)."""
        try:
            self.declared()[key].setter(value)
        except Exception as exc:  # a control error must never reach the kernel
            self._message(key, _one_line(exc), error=True)
            try:
                self._set_control(key, self.declared()[key].value)
            except Exception:
                pass
            return
        self._message(key, "", error=False)
        self.last_applied = (key, value, time.time())
        try:
            self.sync()
            self._applied()
        except Exception:
            pass

    def wait(self, timeout: float) -> bool:
        """Block until the queued slow changes are applied; False on timeout."""
        return self._slow.wait(timeout)

    def stop(self) -> None:
        """Let the slow-setter worker end (the dashboard closed) and wait for it."""
        self._slow.wake()
        self._slow.join(timeout=5.0)

    def disable(self) -> None:
        """Disable every control."""
        with self._ui_lock:
            for ctrl in self.controls.values():
                ctrl.disabled = True
