"""The notebook dashboard: live controls and figures of a stream, or a replay of a finished run.

:class:`Dashboard` wraps the pure figures of :mod:`lmstream_kit.plots` in plotly
``FigureWidget`` objects and wires them to a source:

*live*
    a :class:`~lmstream_kit.live.LiveStream` (running or not yet started), or
    a running pyspark ``StreamingQuery`` (attached with
    :func:`lmstream_kit.attached.attach`; any :class:`~lmstream_kit.protocol.LiveView`).  The
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

A panel of a capability appears below the figures when its data does
(:data:`widgets.extras.EXTRA_PANELS`): for a Flumina fork/join run, the
:class:`~widgets.flumina.FluminaPanel` (plan tree, events per worker, joins over
time), built at once in replay mode and in live mode as soon as the run's plan
or a record with ``flumina_passes`` is there.

Without ipywidgets (or plotly's ``FigureWidget`` and anywidget) a dashboard
still builds: ``figures`` and ``controls`` are empty, its text form is the
status line and the latency of the last batches, and :meth:`Dashboard.snapshot`
still returns static figures.

Nothing here imports pyspark or :mod:`lmstream_kit.live`.  The parts it composes:
:mod:`widgets.sources` (records), :mod:`widgets.redraw` (when and how figures are
redrawn), :mod:`widgets.panel` (controls), :mod:`widgets.status` (status text) and
:mod:`widgets.extras` (the panels added for a capability's data).

>>> format_bytes(150 * 1024), format_bytes(64 * 1024 * 1024), format_bytes(512)
('150.0 KiB', '64.0 MiB', '512 B')
"""

from __future__ import annotations

import html
import math
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.protocol import LiveView
from lmstream_kit.units import format_bytes

from .extras import EXTRA_PANELS, ExtraPanel
from .figures import (
    batch_size_figure,
    device_plan_figure,
    inflection_figure,
    latency_figure,
    latest_plan,
    throughput_figure,
    time_split_figure,
)
from .panel import ControlPanel
from .redraw import Redraw, _copy_into
from .sources import RecordBuffer, attach_live, detach_live, load_run
from .status import _one_line, status_text

__all__ = ["FIGURE_KEYS", "LIVE_CONTROLS", "Dashboard", "format_bytes"]

#: the keys of :attr:`Dashboard.figures`, in display order
FIGURE_KEYS = ("latency", "batch_size", "throughput", "time_split", "inflection", "device_plan")

#: the keys of :attr:`Dashboard.controls` for a LiveStream without plug-ins (the controls it declares);
#: replay mode has ``batch`` and ``play``
LIVE_CONTROLS = ("inflection_point", "slide_s", "target_s", "policy", "rate_scale", "optimizer")

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


def _batch_figures(records: list[dict]) -> dict[str, go.Figure]:
    """The pure figures of ``records`` but the device plan, keyed like :data:`FIGURE_KEYS`.

    The builders are looked up in this module when called, so that tests can replace them here.
    """
    return {
        "latency": latency_figure(records),
        "batch_size": batch_size_figure(records),
        "throughput": throughput_figure(records),
        "time_split": time_split_figure(records),
        "inflection": inflection_figure(records),
    }


def _attach_query(source: Any) -> Any:
    """An :class:`~lmstream_kit.attached.AttachedStream` on ``source`` if it is a StreamingQuery, else None."""
    from lmstream_kit.attached import attach, is_streaming_query

    return attach(source) if is_streaming_query(source) else None


class Dashboard:
    """Live controls and figures of a :class:`~lmstream_kit.live.LiveStream`, or a replay of a run.

    Parameters
    ----------
    source : LiveStream, StreamingQuery or path
        A stream (running or not yet started), or a running pyspark
        ``StreamingQuery``, which the dashboard attaches to
        (:func:`lmstream_kit.attached.attach`) and detaches from on :meth:`close`:
        *live* mode.  A run directory
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
    stream : LiveStream, AttachedStream or None
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
        Why the last background redraw failed, or a panel of :attr:`panels` could
        not be built (also in the status), else None.
    panels : dict of str to panel
        The panels added below the figures because the run has their data
        (:data:`widgets.extras.EXTRA_PANELS`), e.g. ``{"flumina": FluminaPanel}``
        for a Flumina fork/join run: built at construction in replay mode, and in
        live mode at construction or at the first redraw (or :meth:`snapshot`)
        that finds the data; a live panel follows the stream by itself, a replay
        panel follows the batch slider.  :meth:`close` closes them.

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

        # lock order: _draw_lock, then _ui_lock, then the buffer's lock
        self._buffer = RecordBuffer()  # its lock also guards the redraw state
        self._redraw = Redraw(self._buffer, float(throttle_s))
        self._draw_lock = threading.RLock()  # figure mutation
        self._ui_lock = threading.RLock()  # control values and messages, status
        self._redraw_thread: threading.Thread | None = None
        self.last_error: str | None = None

        self.figures: dict[str, Any] = {}
        self.status: Any = None
        self.widget: Any = None
        self.stream: Any = None
        self.run_info: dict = {}
        self._callback: Callable[[dict], None] | None = None
        self._attached: Any = None  # the AttachedStream made here for a StreamingQuery, detached on close
        self.panels: dict[str, Any] = {}  # extra panels by name (replaced, not mutated: any thread reads it)
        self._extras: dict[str, ExtraPanel] = {}  # the entry of each panel built, or that failed to build
        self._panel_error: str | None = None  # why a panel failed to build (kept in the status)

        if isinstance(source, (str, os.PathLike)):
            self.mode = "replay"
            self.run_dir = Path(source)
            self.run_info = load_run(self.run_dir, self._buffer)
        else:
            if not isinstance(source, LiveView):
                self._attached = _attach_query(source)
                source = self._attached or source
            if not isinstance(source, LiveView):
                raise ConfigError(
                    f"Dashboard source must be a StreamingQuery, a LiveStream or a run directory, "
                    f"got {type(source).__name__}"
                )
            self.mode = "live"
            self.stream = source
            self.run_dir = Path(source.run_dir)
        self._panel = ControlPanel(
            self.stream,
            ui_lock=self._ui_lock,
            closed=lambda: self._buffer.closed,
            applied=lambda: self._update_status(self._shown_records()),
        )
        self.controls: dict[str, Any] = self._panel.controls
        self.errors: dict[str, Any] = self._panel.errors

        self._has_widgets = _widgets_available()
        if self._has_widgets:
            self._build()
        if self.mode == "live":
            self._callback = attach_live(self.stream, self._buffer)
        self._add_panels(self.records)  # replay: only here; live: again at every redraw until they are there
        if self._has_widgets:
            try:
                self._draw()
            except BaseException:
                self.close()  # do not leave a callback registered on the stream
                raise
            self._redraw.last_draw = -math.inf  # the first batch is drawn at once
            if self.mode == "live":
                self._redraw_thread = self._redraw.start(self._draw, self._redraw_failed)

    @property
    def throttle_s(self) -> float:
        """Live mode: at most one redraw per ``throttle_s`` seconds."""
        return self._redraw.throttle_s

    @throttle_s.setter
    def throttle_s(self, value: float) -> None:
        self._redraw.throttle_s = value

    # ------------------------------------------------------------------ records
    @property
    def records(self) -> list[dict]:
        """All records received (live) or loaded (replay), sorted by batch id; one per batch id."""
        return self._buffer.records()

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
            rows = self._panel.build_live(W)
            info = self.stream.info()
            detail = f"{html.escape(info.detail)}, " if info.detail else ""
            title = (
                f"<b>live</b> {html.escape(info.workload)}, {detail}"
                f"run {html.escape(str(self.run_dir))}"
            )
        else:
            rows = self._panel.build_replay(W, self._buffer.batch_ids(), self._replay_draw)
            title = f"<b>replay</b> {html.escape(str(self.run_dir))}"
        grid = W.GridBox(
            [self.figures[k] for k in FIGURE_KEYS],
            layout=W.Layout(grid_template_columns="repeat(2, minmax(0, 1fr))", grid_gap="4px"),
        )
        self.widget = W.VBox([W.HTML(value=title), self.status, W.VBox(rows), grid])
        self.widget.add_class("lmstream-dashboard")

    def wait_applied(self, timeout: float = 30.0) -> bool:
        """Block until the queued slow changes (those that restart the query) are applied; False on timeout."""
        return self._panel.wait(timeout)

    # ------------------------------------------------------------------ drawing
    def _draw(self) -> None:
        """Rebuild every figure from the records shown (the device plan only when it changed)."""
        with self._draw_lock:
            started = self._redraw.begin()
            records = self._shown_records()
            if self.figures:
                built = _batch_figures(records)
                self._redraw.show(self.figures, built, latest_plan(records), device_plan_figure)
            self.last_error = self._panel_error
            if self.mode == "live":
                self._add_panels(records)
            else:
                self._draw_panels(records)
            self._panel.sync()
            self._update_status(records)
            self._redraw.done(started)

    def _add_panels(self, records: list[dict]) -> None:
        """Build the extra panels whose data is there, below the figures (redraw thread or kernel's).

        A panel that fails to build says why in :attr:`last_error` and is not tried again.
        """
        with self._draw_lock:
            for extra in EXTRA_PANELS:
                if extra.name in self._extras or self._buffer.closed:
                    continue
                try:
                    if not extra.wanted(self.run_dir, records):
                        continue
                    self._extras[extra.name] = extra
                    panel = extra.build(self.stream if self.mode == "live" else self.run_dir)
                except Exception as exc:  # noqa: BLE001  (a panel must never break the dashboard)
                    self._panel_error = self.last_error = f"{extra.name} panel: {_one_line(exc)}"
                    continue
                self.panels = {**self.panels, extra.name: panel}
                if self.widget is not None and getattr(panel, "widget", None) is not None:
                    with self._ui_lock:
                        self.widget.children = (*self.widget.children, panel.widget)

    def _draw_panels(self, records: list[dict]) -> None:
        """Replay: draw the extra panels with the records up to the slider's batch."""
        for name, panel in self.panels.items():
            widgets = getattr(panel, "figures", None) or {}
            for key, fig in self._extras[name].figures(self.run_dir, records).items():
                if key in widgets:
                    _copy_into(widgets[key], fig)

    def _redraw_failed(self, exc: Exception) -> None:
        """A background redraw raised: say why in the status (later batches are still drawn)."""
        self.last_error = _one_line(exc)
        try:
            self._update_status(self._shown_records())
        except Exception:
            pass

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
            ids = self._buffer.batch_ids()
            shown = int(records[-1]["batch_id"]) if records else None
            if "batch" in self.controls:
                shown = self.controls["batch"].value
            head = [
                f"replay: workload {info.get('workload', '?')}, policy {info.get('policy', '?')}",
                f"batch {shown} of {ids[0]}–{ids[-1]}",
            ]
        else:
            info = self.stream.info()
            head = [f"live: workload {info.workload}, policy {info.policy}"]
        return status_text(head, records, last_applied=self._panel.last_applied, last_error=self.last_error)

    def _update_status(self, records: Sequence[Mapping]) -> None:
        if self.status is None:
            return
        text = html.escape(self._status_text(records), quote=False)
        with self._ui_lock:
            self.status.value = text

    # ------------------------------------------------------------------ public
    def snapshot(self) -> dict[str, go.Figure]:
        """Static copies of the figures, keyed by :data:`FIGURE_KEYS`, then those of :attr:`panels`.

        A saved notebook keeps only a FigureWidget's initial data; end a
        notebook with these.  Without ipywidgets they are built from the records.
        A panel's figures follow, keyed ``<panel>_<figure>`` (``flumina_plan``,
        ``flumina_workers``, ``flumina_joins``): the panel's own snapshot in live
        mode, the records up to the slider's batch in replay mode.
        """
        with self._draw_lock:
            if self.figures:
                out = {key: go.Figure(fig) for key, fig in self.figures.items()}
                records = self._shown_records()
            else:
                records = self._shown_records()
                out = {**_batch_figures(records), "device_plan": device_plan_figure(latest_plan(records))}
            if self.mode == "live":
                self._add_panels(records)  # without widgets no redraw looks for them
            for name, panel in self.panels.items():
                if self.mode == "live":
                    figs = panel.snapshot()
                else:
                    figs = self._extras[name].figures(self.run_dir, records)
                out.update({f"{name}_{key}": fig for key, fig in figs.items()})
        return out

    def close(self) -> None:
        """Detach from the stream and stop the background threads (idempotent).

        The figures keep their last data; live controls are disabled.
        """
        if not self._buffer.close():
            return
        if self.mode == "live" and self._callback is not None:
            detach_live(self.stream, self._callback)
        self._panel.stop()
        if self._redraw_thread is not None and self._redraw_thread is not threading.current_thread():
            self._redraw_thread.join(timeout=5.0)
        with self._draw_lock:  # after any redraw that is building a panel
            for panel in self.panels.values():
                try:
                    panel.close()
                except Exception:  # noqa: BLE001, S110
                    pass
        if self._attached is not None:
            self._attached.detach()  # the query keeps running
        if self.mode == "live":
            self._panel.disable()

    @property
    def closed(self) -> bool:
        return self._buffer.closed

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
