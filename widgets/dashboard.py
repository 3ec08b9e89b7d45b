"""The notebook dashboard: live controls and figures of a stream, or a replay of a finished run.

:class:`Dashboard` wraps the pure figures of :mod:`widgets.figures` in plotly
``FigureWidget`` objects and wires them to a source:

*live*
    a :class:`~lmstream_kit.live.LiveStream` (running or not yet started).  The
    dashboard registers with ``stream.on_batch``; the callback only appends the
    record to a buffer, and a redraw thread rebuilds the figures at most once
    every ``throttle_s`` seconds, with a trailing redraw so the last batch is
    always shown.  Controls call the stream's public setters (inflection point,
    window slide, latency target, policy, offered rate, optimizer on/off); a
    rejected value shows the setter's message next to its control and the
    control goes back to the stream's value.
*replay*
    a run directory (``metrics.jsonl`` and ``run.json``).  A batch slider redraws
    every figure with the records up to that batch.  Replay needs no pyspark.

Without ipywidgets (or plotly's ``FigureWidget`` and anywidget) a dashboard
still builds: ``figures`` and ``controls`` are empty, its text form is the
status line and the latency of the last batches, and :meth:`Dashboard.snapshot`
still returns static figures.

Nothing here imports pyspark or :mod:`lmstream_kit.live`.

>>> format_bytes(150 * 1024), format_bytes(64 * 1024 * 1024), format_bytes(512)
('150.0 KiB', '64.0 MiB', '512 B')
"""

from __future__ import annotations

import html
import json
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.metrics import METRICS_FILE, read_jsonl, read_run_info
from lmstream_kit.units import format_bytes

from . import status_line
from .controls import SlowApplier, make_widget, show_value
from .figures import (
    batch_size_figure,
    change_markers,
    device_plan_figure,
    inflection_figure,
    latency_figure,
    latest_plan,
    throughput_figure,
    time_split_figure,
)

__all__ = ["FIGURE_KEYS", "LIVE_CONTROLS", "Dashboard", "format_bytes"]

#: the keys of :attr:`Dashboard.figures`, in display order
FIGURE_KEYS = ("latency", "batch_size", "throughput", "time_split", "inflection", "device_plan")

#: the keys of :attr:`Dashboard.controls` for a LiveStream without plug-ins (the controls it declares);
#: replay mode has ``batch`` and ``play``
LIVE_CONTROLS = ("inflection_point", "slide_s", "target_s", "policy", "rate_scale", "optimizer")

_APPLYING = "applying…"
_MAX_DRAW_SHARE = 0.25  # of wall time spent redrawing, at most
_WIDGET_LAYOUT = frozenset({"template", "height", "width", "autosize"})  # the widget's own, kept
_NOTEBOOK_HINT = "install the notebook extra: pip install 'lmstream_kit[notebook]'"


def _widgets_available() -> bool:
    """Whether ipywidgets, anywidget and plotly's ``FigureWidget`` can be imported.

    A module-level function so that tests can replace it to simulate a missing package.
    """
    try:
        import anywidget  # noqa: F401  (plotly's FigureWidget needs it)
        import ipywidgets  # noqa: F401
        from plotly.graph_objects import FigureWidget  # noqa: F401
    except ImportError:
        return False
    return True


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    if isinstance(exc, ConfigError):
        return line or type(exc).__name__
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _plan_key(plan: dict | None) -> str:
    return json.dumps(plan, sort_keys=True, default=str)


def _clock(epoch: Any) -> str | None:
    try:
        value = float(epoch)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(value) or value <= 0:
        return None
    return time.strftime("%H:%M:%S", time.localtime(value))


def _last_change(records: Sequence[Mapping]) -> str | None:
    """``"batch 7 (12:00:01): slide_s=5"`` for the newest batch that recorded changes, else None."""
    markers = change_markers(list(records))
    if not markers:
        return None
    bid, label = markers[-1]
    when = None
    for rec in records:
        if rec.get("batch_id") != bid:
            continue
        changes = rec.get("changes")
        times = []
        if isinstance(changes, list):
            for c in changes:
                if isinstance(c, Mapping):
                    times.append(c.get("at", c.get("wall_time")))
        when = next((t for t in map(_clock, reversed(times)) if t), None) or _clock(rec.get("completed_at"))
    return f"batch {bid}" + (f" ({when})" if when else "") + f": {label}"


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


class Dashboard:
    """Live controls and figures of a :class:`~lmstream_kit.live.LiveStream`, or a replay of a run.

    Parameters
    ----------
    source : LiveStream or path
        A stream (running or not yet started): *live* mode.  A run directory
        (``str`` or ``Path``) holding ``metrics.jsonl`` and ``run.json``:
        *replay* mode, which works without pyspark.
    throttle_s : float
        Live mode: at most one redraw per ``throttle_s`` seconds (>= 0).  A
        batch that arrives within it is drawn by a trailing redraw.  A redraw
        that took ``d`` seconds is also followed by at least ``3 d`` seconds
        without one, so redrawing never takes more than a quarter of the
        driver's Python time (the stream's own callbacks run in it too).

    Attributes
    ----------
    mode : {"live", "replay"}
    stream : LiveStream or None
        The live source.
    run_dir : Path
        The run directory (of the stream in live mode).
    run_info : dict
        ``run.json`` (replay mode; empty in live mode).
    controls : dict of str to ipywidgets.Widget
        Live: ``inflection_point`` (FloatLogSlider in bytes, with a KiB/MiB
        label), ``slide_s`` (window slide, simulated s; restarts the query),
        ``target_s`` (latency target, simulated s),
        ``policy`` (Dropdown), ``rate_scale`` (offered-rate factor), ``optimizer``
        (ToggleButtons ``tuning``/``frozen``).  Replay: ``batch`` (IntSlider) and
        ``play``.  Each has the CSS class ``lmstream-<key>``.
    errors : dict of str to ipywidgets.HTML
        The message next to each live control: the setter's error, ``applying…``
        while a slow setter runs, or empty.
    figures : dict of str to plotly.graph_objects.FigureWidget
        Keyed by :data:`FIGURE_KEYS`.
    status : ipywidgets.HTML
        The status line and the last reconfiguration.
    widget : ipywidgets.VBox
        The whole dashboard (what a notebook cell displays).
    last_error : str or None
        Why the last background redraw failed (also in the status), else None.

    All widget attributes are empty (``None`` for ``status`` and ``widget``)
    where ipywidgets is not installed.

    Raises
    ------
    ConfigError
        A bad ``throttle_s``, a source that is neither a stream nor a path, or a
        run directory that is missing or has no metrics.

    Examples
    --------
    >>> from lmstream_kit import LiveStream                  # doctest: +SKIP
    >>> stream = LiveStream("LR2S", speedup=5).start()       # doctest: +SKIP
    >>> dash = Dashboard(stream); dash                        # doctest: +SKIP
    >>> stream.wait(batches=20); dash.close()                 # doctest: +SKIP
    >>> Dashboard("runs/lr2s-lmstream").snapshot()["latency"]  # doctest: +SKIP
    """

    def __init__(self, source: Any, *, throttle_s: float = 0.5) -> None:
        try:
            ok = float(throttle_s) >= 0 and math.isfinite(float(throttle_s))
        except (TypeError, ValueError):
            ok = False
        if not ok or isinstance(throttle_s, bool):
            raise ConfigError(f"throttle_s must be a finite number >= 0, got {throttle_s!r}")
        self.throttle_s = float(throttle_s)

        # lock order: _draw_lock, then _ui_lock, then _lock
        self._lock = threading.Lock()  # records, pending records, redraw state
        self._wake = threading.Condition(self._lock)
        self._draw_lock = threading.RLock()  # figure mutation
        self._ui_lock = threading.RLock()  # control values and messages, status
        self._suppress: set[str] = set()  # controls being set by the dashboard itself
        self._by_id: dict[int, dict] = {}
        self._pending: list[dict] = []
        self._dirty = False
        self._closed = False
        self._last_draw = -math.inf
        self._draw_s = 0.0  # how long the last redraw took
        self._plan_key: str | None = None
        self._plan_drawn = False
        self._redraw_thread: threading.Thread | None = None
        self._slow = SlowApplier(self._apply, lambda: self._closed)
        self._last_applied: tuple[str, Any, float] | None = None
        self._tooltips: dict[str, str | None] = {}
        self.last_error: str | None = None

        self.controls: dict[str, Any] = {}
        self.errors: dict[str, Any] = {}
        self.figures: dict[str, Any] = {}
        self.status: Any = None
        self.widget: Any = None
        self.stream: Any = None
        self.run_info: dict = {}
        self._callback: Callable[[dict], None] | None = None

        if isinstance(source, (str, os.PathLike)):
            self.mode = "replay"
            self.run_dir = Path(source)
            self._load_run()
        elif callable(getattr(source, "controls", None)) and callable(getattr(source, "on_batch", None)):
            self.mode = "live"  # a LiveStream (not imported here: the dashboard needs no Spark)
            self.stream = source
            self.run_dir = Path(source.run_dir)
        else:
            raise ConfigError(
                f"Dashboard source must be a LiveStream or a run directory, got {type(source).__name__}"
            )

        self._has_widgets = _widgets_available()
        if self._has_widgets:
            self._build()
        if self.mode == "live":
            self._callback = self._on_record
            self.stream.on_batch(self._callback)
            with self._lock:  # after registering: no batch falls in between
                for record in self.stream.records:
                    self._by_id[int(record["batch_id"])] = dict(record)
        if self._has_widgets:
            try:
                self._draw()
            except BaseException:
                self.close()  # do not leave a callback registered on the stream
                raise
            self._last_draw = -math.inf  # the first batch is drawn at once
            if self.mode == "live":
                self._redraw_thread = threading.Thread(
                    target=self._redraw_loop, name="lmstream-dashboard-redraw", daemon=True
                )
                self._redraw_thread.start()

    # ------------------------------------------------------------------ records
    def _load_run(self) -> None:
        path = self.run_dir / METRICS_FILE
        if not self.run_dir.is_dir():
            raise ConfigError(f"run directory {self.run_dir} does not exist")
        self._pending = read_jsonl(path)
        self._merge_locked()
        if not self._by_id:
            raise ConfigError(
                f"run directory {self.run_dir} has no metrics ({METRICS_FILE} missing or empty)"
            )
        self.run_info = read_run_info(self.run_dir)

    def _on_record(self, record: dict) -> None:
        """The ``on_batch`` callback (Spark's thread): buffer the record and wake the redraw thread."""
        with self._lock:
            if self._closed:
                return
            self._pending.append(record)
            self._dirty = True
            self._wake.notify_all()

    def _merge_locked(self) -> None:
        """Move the pending records into ``_by_id`` (the newest record of a batch id wins)."""
        for record in self._pending:
            try:
                self._by_id[int(record["batch_id"])] = dict(record)
            except (KeyError, TypeError, ValueError):
                continue  # not a batch record
        self._pending.clear()

    @property
    def records(self) -> list[dict]:
        """All records received (live) or loaded (replay), sorted by batch id; one per batch id."""
        with self._lock:
            self._merge_locked()
            return [self._by_id[b] for b in sorted(self._by_id)]

    def _shown_records(self) -> list[dict]:
        records = self.records
        if self.mode == "replay" and "batch" in self.controls:
            upto = self.controls["batch"].value
            records = [r for r in records if int(r["batch_id"]) <= upto]
        return records

    # ------------------------------------------------------------------ building
    def _build(self) -> None:
        import ipywidgets as W

        self.status = W.HTML(value="")
        self.status.add_class("lmstream-status")
        for key in FIGURE_KEYS:
            fig = go.FigureWidget(layout={"height": 360, "autosize": True})
            try:
                fig.add_class(f"lmstream-figure-{key}")
            except AttributeError:  # an older FigureWidget without DOM classes
                pass
            self.figures[key] = fig
        if self.mode == "live":
            rows = self._build_live_controls(W)
            title = (
                f"<b>live</b> {html.escape(self.stream.workload.name)}, "
                f"speedup {float(self.stream.speedup):g}×, "
                f"run {html.escape(str(self.run_dir))}"
            )
        else:
            rows = self._build_replay_controls(W)
            title = f"<b>replay</b> {html.escape(str(self.run_dir))}"
        grid = W.GridBox(
            [self.figures[k] for k in FIGURE_KEYS],
            layout=W.Layout(grid_template_columns="repeat(2, minmax(0, 1fr))", grid_gap="4px"),
        )
        self.widget = W.VBox([W.HTML(value=title), self.status, W.VBox(rows), grid])
        self.widget.add_class("lmstream-dashboard")

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

    def _build_live_controls(self, W: Any) -> list:
        rows = []
        for control in self._declared().values():
            widget, extra = make_widget(W, control)
            rows.append(self._control(W, control.key, widget, extra))
        self._sync_controls()
        return rows

    def _build_replay_controls(self, W: Any) -> list:
        ids = sorted(self._by_id)
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
        batch.observe(lambda change: self._replay_draw(), names="value")
        return [W.HBox([play, batch])]

    # ------------------------------------------------------------------ live controls
    def _declared(self) -> dict[str, Any]:
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

    def _sync_controls(self, skip: Sequence[str] = ()) -> None:
        """Show the stream's current values and which controls apply (never raises)."""
        if self.mode != "live" or not self.controls:
            return
        busy = self._slow.busy()
        try:
            declared = self._declared()
        except Exception:
            return
        with self._ui_lock:
            for key, control in declared.items():
                if key in skip or key in busy or key not in self.controls:
                    continue
                ctrl = self.controls[key]
                self._set_control(key, control.value)
                disabled = self._closed or control.disabled is not None
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
        if self._closed or key in ("batch", "play"):
            return
        control = self._declared().get(key)
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
            self._declared()[key].setter(value)
        except Exception as exc:  # a control error must never reach the kernel
            self._message(key, _one_line(exc), error=True)
            try:
                self._set_control(key, self._declared()[key].value)
            except Exception:
                pass
            return
        self._message(key, "", error=False)
        self._last_applied = (key, value, time.time())
        try:
            self._sync_controls()
            self._update_status(self._shown_records())
        except Exception:
            pass

    def wait_applied(self, timeout: float = 30.0) -> bool:
        """Block until the queued slow changes (those that restart the query) are applied; False on timeout."""
        return self._slow.wait(timeout)

    # ------------------------------------------------------------------ drawing
    def _redraw_loop(self) -> None:
        while True:
            with self._wake:
                while not self._dirty and not self._closed:
                    self._wake.wait()
                while not self._closed:
                    gap = max(self.throttle_s, self._draw_s / _MAX_DRAW_SHARE)
                    left = self._last_draw + gap - time.monotonic()
                    if left <= 0:
                        break
                    self._wake.wait(left)
                if self._closed:
                    return
            try:
                self._draw()
            except Exception as exc:  # keep drawing later batches; say why this one failed
                self.last_error = _one_line(exc)
                try:
                    self._update_status(self._shown_records())
                except Exception:
                    pass

    def _draw(self) -> None:
        """Rebuild every figure from the records shown (the device plan only when it changed)."""
        with self._draw_lock:
            with self._lock:
                self._merge_locked()
                self._dirty = False
                self._last_draw = started = time.monotonic()
            records = self._shown_records()
            if self.figures:
                built = {
                    "latency": latency_figure(records),
                    "batch_size": batch_size_figure(records),
                    "throughput": throughput_figure(records),
                    "time_split": time_split_figure(records),
                    "inflection": inflection_figure(records),
                }
                for key, fig in built.items():
                    _copy_into(self.figures[key], fig)
                plan = latest_plan(records)
                key = _plan_key(plan)
                if not self._plan_drawn or key != self._plan_key:
                    _copy_into(self.figures["device_plan"], device_plan_figure(plan))
                    self._plan_key = key
                    self._plan_drawn = True
            self.last_error = None
            self._sync_controls()
            self._update_status(records)
            self._draw_s = time.monotonic() - started

    def _replay_draw(self) -> None:
        try:
            self._draw()
        except Exception as exc:  # a slider must not raise into the kernel
            self.last_error = _one_line(exc)
            self._update_status(self._shown_records())

    def refresh(self) -> None:
        """Redraw now, in this thread, with every record received so far."""
        self._draw()

    def _status_text(self, records: Sequence[Mapping]) -> str:
        if self.mode == "replay":
            info = self.run_info
            ids = sorted(self._by_id)
            shown = int(records[-1]["batch_id"]) if records else None
            if "batch" in self.controls:
                shown = self.controls["batch"].value
            parts = [
                f"replay: workload {info.get('workload', '?')}, policy {info.get('policy', '?')}",
                f"batch {shown} of {ids[0]}–{ids[-1]}",
            ]
        else:
            s = self.stream
            parts = [f"live: workload {s.workload.name}, policy {s.policy.name}"]
        parts.append(status_line(records))
        last = _last_change(records)
        if last:
            parts.append(f"last change: {last}")
        if self._last_applied is not None:
            key, value, at = self._last_applied
            if key == "inflection_point":
                value = format_bytes(value)
            elif isinstance(value, float):
                value = f"{value:g}"
            parts.append(f"set {key}={value} at {_clock(at)}")
        if self.last_error:
            parts.append(f"redraw failed: {self.last_error}")
        return " | ".join(parts)

    def _update_status(self, records: Sequence[Mapping]) -> None:
        if self.status is None:
            return
        text = html.escape(self._status_text(records), quote=False)
        with self._ui_lock:
            self.status.value = text

    # ------------------------------------------------------------------ public
    def snapshot(self) -> dict[str, go.Figure]:
        """Static copies of the figures, keyed by :data:`FIGURE_KEYS`.

        A saved notebook keeps only a FigureWidget's initial data; end a
        notebook with these.  Without ipywidgets they are built from the records.
        """
        if self.figures:
            with self._draw_lock:
                return {key: go.Figure(fig) for key, fig in self.figures.items()}
        records = self._shown_records()
        return {
            "latency": latency_figure(records),
            "batch_size": batch_size_figure(records),
            "throughput": throughput_figure(records),
            "time_split": time_split_figure(records),
            "inflection": inflection_figure(records),
            "device_plan": device_plan_figure(latest_plan(records)),
        }

    def close(self) -> None:
        """Detach from the stream and stop the background threads (idempotent).

        The figures keep their last data; live controls are disabled.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._wake.notify_all()
        if self.mode == "live" and self._callback is not None:
            try:
                self.stream.remove_on_batch(self._callback)
            except Exception:
                pass  # the callback is a no-op from now on anyway
        self._slow.wake()
        self._slow.join(timeout=5.0)
        if self._redraw_thread is not None and self._redraw_thread is not threading.current_thread():
            self._redraw_thread.join(timeout=5.0)
        if self.mode == "live":
            with self._ui_lock:
                for ctrl in self.controls.values():
                    ctrl.disabled = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Dashboard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def summary(self, last: int = 5) -> str:
        """Text form: the status, the last change and the max latency of the last ``last`` data batches."""
        records = self._shown_records()
        head = f"Dashboard ({self.mode}, {self.run_dir})"
        if not self._has_widgets:
            head += f": widgets unavailable, {_NOTEBOOK_HINT}"
        lines = [head, self._status_text(records)]
        data = [r for r in records if (r.get("rows") or 0) > 0][-last:]
        if data:
            lat = ", ".join(
                f"#{r['batch_id']} "
                + ("-" if r.get("max_latency_s") is None else f"{float(r['max_latency_s']):.2f}")
                for r in data
            )
            lines.append(f"max latency (s) of the last {len(data)} data batches: {lat}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.summary())

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> dict:
        bundle: dict = {}
        if self.widget is not None:
            bundle = dict(self.widget._repr_mimebundle_(include=include, exclude=exclude, **kwargs) or {})
        bundle["text/plain"] = self.summary()
        return bundle
