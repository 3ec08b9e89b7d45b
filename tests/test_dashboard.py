"""widgets.dashboard: controls reach the stream, figures follow the records (no Spark, no kernel).

The live tests use a real LiveStream that is never started (constructing one
starts no Spark) and feed records by calling the callback the dashboard
registered with ``on_batch``, as Spark's thread would.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import plotly.graph_objects as go
import pytest

import widgets.dashboard as D
from lmstream_kit.exceptions import ConfigError
from lmstream_kit.live import LiveStream
from lmstream_kit.metrics import JsonlWriter, write_run_info
from widgets import status_line

needs_widgets = pytest.mark.skipif(not D._widgets_available(), reason="needs the notebook extra")
REPO = Path(__file__).resolve().parents[1]


def _rec(bid, rows=100, **kw):
    """A realistic metrics record of a data batch (or an empty batch with rows=0)."""
    if rows == 0:
        base = {"batch_id": bid, "policy": "lmstream", "rows": 0, "bytes": 0, "max_latency_s": None,
                "avg_latency_s": None, "buffering_s": None, "processing_s": 0.5, "throughput_rows_s": 0.0,
                "completed_at": 1000.0 + bid, "target_s": 2.5, "changes": None, "device_plan": None}
    else:
        base = {"batch_id": bid, "policy": "lmstream", "rows": rows, "bytes": rows * 77,
                "max_latency_s": 1.0 + bid / 10, "avg_latency_s": 0.5 + bid / 10,
                "buffering_s": 0.25 + bid / 100, "processing_s": 0.75 + bid / 100,
                "throughput_rows_s": rows / (0.75 + bid / 100), "completed_at": 1000.0 + bid,
                "target_s": 2.5, "changes": None, "device_plan": None,
                "inflection_point": 153600.0 + bid, "partition_bytes": 100000.0 + 1000 * bid,
                "gpu_ops": bid % 3, "mapping_s": 0.001 * bid, "optimizer_s": 0.002 * bid}
    base.update(kw)
    return base


def _plan(devices):
    return {"inflection_point": 153600.0, "partition_bytes": 65536.0,
            "entries": [{"id": i, "exec_name": f"Op{i}Exec", "op_class": "Projection", "device": d,
                         "cpu_cost": 1.0, "gpu_cost": 0.9, "reason": "test", "children": [i + 1]
                         if i + 1 < len(devices) else []} for i, d in enumerate(devices)]}


def _wait(cond, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _find(widget, css_class):
    """The widgets under ``widget`` with a CSS class, depth first."""
    found = [widget] if css_class in getattr(widget, "_dom_classes", ()) else []
    for child in getattr(widget, "children", ()):
        found += _find(child, css_class)
    return found


def _error_text(dash, key):
    return dash.errors[key].value


@pytest.fixture
def stream(tmp_path):
    s = LiveStream("LR2S", policy="lmstream", speedup=4, run_dir=tmp_path / "run")
    # constructing a LiveStream starts nothing
    assert s.spark is None and s.query is None and not s.is_active
    yield s
    if s.optimizer is not None:
        s.optimizer.close()


def _capture(stream):
    """The callbacks registered with ``stream.on_batch`` from now on."""
    got = []
    real = stream.on_batch

    def on_batch(callback):
        got.append(callback)
        real(callback)

    stream.on_batch = on_batch
    return got


@pytest.fixture
def live(stream):
    """(dashboard, stream, on_batch callback) with a long throttle (tests call refresh())."""
    callbacks = _capture(stream)
    dash = D.Dashboard(stream, throttle_s=60.0)
    assert len(callbacks) == 1
    yield dash, stream, callbacks[0]
    dash.close()


# --------------------------------------------------------------------------- construction


@needs_widgets
def test_live_dashboard_has_every_control_and_figure_with_the_streams_values(live):
    import ipywidgets

    dash, stream, _ = live
    assert dash.mode == "live" and dash.stream is stream
    assert list(dash.controls) == list(D.LIVE_CONTROLS)
    assert set(dash.errors) == set(D.LIVE_CONTROLS)
    assert list(dash.figures) == list(D.FIGURE_KEYS)
    assert all(isinstance(f, go.FigureWidget) for f in dash.figures.values())
    assert isinstance(dash.controls["inflection_point"], ipywidgets.FloatLogSlider)
    assert isinstance(dash.controls["policy"], ipywidgets.Dropdown)
    assert isinstance(dash.controls["optimizer"], ipywidgets.ToggleButtons)
    for key, ctrl in dash.controls.items():
        assert f"lmstream-{key}" in ctrl._dom_classes
        assert ctrl.description
        assert dash.errors[key].value == ""
    assert isinstance(dash.status, ipywidgets.HTML) and isinstance(dash.widget, ipywidgets.VBox)
    values = {k: c.value for k, c in dash.controls.items()}
    assert values == {"inflection_point": 153600.0, "slide_s": 10.0,
                      "target_s": stream.controller.slide_s * 4, "policy": "lmstream",
                      "rate_scale": 1.0, "optimizer": "tuning"}
    # the bound, not the shorter target the controller starts with before its first batch (cold_target_s)
    assert values["target_s"] == 10.0 and stream.controller.target_s * 4 == 5.0
    assert not any(c.disabled for c in dash.controls.values())
    assert dash.status.value.startswith("live: workload LR2S, policy lmstream")
    # every figure starts with the "no micro-batch yet" annotation
    for key in D.FIGURE_KEYS[:-1]:
        assert [a.text for a in dash.figures[key].layout.annotations] == ["no micro-batch yet"]


@needs_widgets
def test_repr_mimebundle_shows_the_widget_and_a_text_summary(live):
    dash, _, _ = live
    bundle = dash._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == dash.widget.model_id
    assert bundle["text/plain"] == repr(dash)
    assert "no micro-batch yet" in bundle["text/plain"]


def test_bad_arguments_raise_config_error(stream, tmp_path):
    for bad in (-1, float("nan"), "fast", True):
        with pytest.raises(ConfigError, match="throttle_s"):
            D.Dashboard(stream, throttle_s=bad)
    with pytest.raises(ConfigError, match="LiveStream or a run directory"):
        D.Dashboard(42)
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=str(missing)):
        D.Dashboard(missing)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=f"{empty}.*metrics"):
        D.Dashboard(str(empty))


# --------------------------------------------------------------------------- control round trips


@needs_widgets
def test_inflection_slider_sets_the_mapper_and_freezes_the_optimizer(live):
    dash, stream, _ = live
    dash.controls["inflection_point"].value = 64 * 1024
    assert stream.mapper.snapshot()["inflection_point"] == 65536.0
    assert stream.optimizer.snapshot()["frozen"] is True
    assert dash.controls["optimizer"].value == "frozen"  # the toggle follows the stream
    assert _error_text(dash, "inflection_point") == ""
    [readout] = _find(dash.widget, "lmstream-inflection_point-readout")
    assert readout.value == "64.0 KiB"


@needs_widgets
def test_inflection_outside_the_optimizers_bounds_shows_the_setters_message_and_changes_nothing(live):
    dash, stream, _ = live
    with pytest.raises(ConfigError) as exc:
        stream.set_inflection_point(2048.0)  # what the setter says (and it changes nothing)
    dash.controls["inflection_point"].value = 2048.0
    assert html.escape(str(exc.value), quote=False) in _error_text(dash, "inflection_point")
    assert "bounds" in _error_text(dash, "inflection_point")
    assert stream.mapper.snapshot()["inflection_point"] == 153600.0
    assert stream.optimizer.snapshot()["frozen"] is False
    assert dash.controls["inflection_point"].value == 153600.0  # put back to the stream's value
    # a valid value afterwards applies and clears the message
    dash.controls["inflection_point"].value = 32 * 1024
    assert stream.mapper.snapshot()["inflection_point"] == 32768.0
    assert _error_text(dash, "inflection_point") == ""


@needs_widgets
def test_target_control_sets_the_controllers_bound_in_wall_seconds(live):
    dash, stream, _ = live
    if not hasattr(stream, "set_target"):
        pytest.skip("this LiveStream has no set_target")
    dash.controls["target_s"].value = 6.0
    # 6 simulated s at speedup 4: the controller's bound (its target until the first batch is the window's
    # sixth, 1.25 s, at most half the bound: 0.75 s)
    assert stream.controller.slide_s == pytest.approx(1.5)
    assert stream.controller.target_s == pytest.approx(0.75)
    assert stream.slide_s == 10.0 and stream.workload.slide_s == 10.0  # the window is untouched
    assert _error_text(dash, "target_s") == ""


@needs_widgets
def test_slide_control_applies_on_a_worker_thread(live):
    dash, stream, _ = live
    dash.controls["slide_s"].value = 5.0
    assert dash.wait_applied(10.0)
    assert stream.slide_s == 5.0
    # 5 simulated s at speedup 4 is the bound, 1.25 s; before the first batch half of it
    assert stream.controller.slide_s == pytest.approx(1.25)
    assert stream.controller.target_s == pytest.approx(0.625)
    assert _error_text(dash, "slide_s") == ""
    assert dash.controls["target_s"].value == pytest.approx(5.0)  # the target control follows


@needs_widgets
def test_slow_setter_shows_applying_and_does_not_block_the_widget_thread(live):
    dash, stream, _ = live
    release = threading.Event()
    seen = []

    def slow_set_slide(value):
        seen.append(threading.current_thread())
        release.wait(10.0)
        if value == 7.0:
            raise ConfigError("cannot restart the query now: slide 7")
        stream.slide_s = value

    stream.set_slide = slow_set_slide
    t0 = time.monotonic()
    dash.controls["slide_s"].value = 7.0
    assert time.monotonic() - t0 < 1.0  # returned while the setter still runs
    assert "applying" in _error_text(dash, "slide_s")
    _wait(lambda: seen, what="the setter to start")
    assert seen[0] is not threading.current_thread()
    release.set()
    assert dash.wait_applied(10.0)
    assert "cannot restart the query now: slide 7" in _error_text(dash, "slide_s")
    assert dash.controls["slide_s"].value == 10.0 and stream.slide_s == 10.0
    dash.controls["slide_s"].value = 4.0
    assert dash.wait_applied(10.0)
    assert stream.slide_s == 4.0 and _error_text(dash, "slide_s") == ""


@needs_widgets
def test_policy_switch_disables_the_target_control_without_a_controller(live):
    dash, stream, _ = live
    if not hasattr(stream, "set_policy"):
        pytest.skip("this LiveStream has no set_policy")
    dash.controls["policy"].value = "asap"
    assert dash.wait_applied(10.0)
    assert stream.policy.name == "asap" and stream.controller is None
    target = dash.controls["target_s"]
    assert target.disabled and "no admission controller" in target.tooltip
    dash.controls["policy"].value = "lmstream"
    assert dash.wait_applied(10.0)
    assert stream.policy.name == "lmstream"
    assert not target.disabled and "no admission controller" not in target.tooltip


@needs_widgets
def test_rate_scale_without_a_running_generator_shows_the_setters_message(live):
    dash, stream, _ = live
    with pytest.raises(ConfigError) as exc:
        stream.set_rate_scale(2.0)
    dash.controls["rate_scale"].value = 2.0
    assert html.escape(str(exc.value), quote=False) in _error_text(dash, "rate_scale")
    assert dash.controls["rate_scale"].value == 1.0
    assert stream.traffic.scale == 1.0


@needs_widgets
def test_controls_that_do_not_apply_are_disabled_with_the_reason(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    s = LiveStream("LR2S", policy="asap", input_dir=inputs, run_dir=tmp_path / "run")
    assert s.optimizer is None and s.traffic is None
    with D.Dashboard(s) as dash:
        c = dash.controls
        assert c["optimizer"].disabled and "without the inflection-point optimizer" in c["optimizer"].tooltip
        assert c["rate_scale"].disabled and "directory" in c["rate_scale"].tooltip
        assert c["target_s"].disabled and "'asap' has no admission controller" in c["target_s"].tooltip
        assert not c["inflection_point"].disabled and not c["policy"].disabled
    t = LiveStream("LR1T", policy="lmstream", optimizer=False, run_dir=tmp_path / "run2")
    with D.Dashboard(t) as dash:
        assert dash.controls["slide_s"].disabled and "tumbling" in dash.controls["slide_s"].tooltip
        assert not dash.controls["target_s"].disabled


@needs_widgets
def test_a_flumina_programs_logic_menu_and_move_box_reach_its_control(tmp_path):
    import ipywidgets

    from lmstream_kit.flumina import EXAMPLES
    from lmstream_kit.flumina.examples import labelled
    from lmstream_kit.workloads.flumina import flumina_workload

    update = EXAMPLES.get("value_barrier").spec(2).update
    s = LiveStream(flumina_workload("value_barrier", logics={"v2": labelled(update, "v2")}), policy="lmstream",
                   run_dir=tmp_path / "run")
    with D.Dashboard(s) as dash:
        logic, move = dash.controls["flumina.logic"], dash.controls["flumina.move"]
        assert isinstance(logic, ipywidgets.ToggleButtons) and logic.options == ("initial", "v2")
        assert isinstance(move, ipywidgets.Text) and (move.value, move.placeholder) == ("", "a2 -> w1")
        move.value = "a1 -> w1"  # the program has not started: the control's one-line refusal is shown
        assert "cannot move a1: the Flumina program has not started yet" in _error_text(dash, "flumina.move")
        logic.value = "v2"
        assert "the Flumina program has not started yet" in _error_text(dash, "flumina.logic")


@needs_widgets
def test_optimizer_toggle_freezes_and_releases(live):
    dash, stream, _ = live
    dash.controls["optimizer"].value = "frozen"
    assert stream.optimizer.snapshot()["frozen"] is True
    dash.controls["optimizer"].value = "tuning"
    assert stream.optimizer.snapshot()["frozen"] is False
    assert _error_text(dash, "optimizer") == ""


@needs_widgets
def test_an_unexpected_setter_error_is_shown_not_raised(live):
    dash, stream, _ = live

    def broken(value):
        raise RuntimeError("boom\nsecond line")

    stream.set_rate_scale = broken
    dash.controls["rate_scale"].value = 2.0  # must not raise
    assert "RuntimeError: boom" in _error_text(dash, "rate_scale")
    assert "second line" not in _error_text(dash, "rate_scale")
    assert dash.controls["rate_scale"].value == 1.0


# --------------------------------------------------------------------------- figures


def _spy(monkeypatch, name):
    calls = []
    real = getattr(D, name)

    def spy(*args, **kw):
        calls.append((time.monotonic(), threading.current_thread().name))
        return real(*args, **kw)

    monkeypatch.setattr(D, name, spy)
    return calls


@needs_widgets
def test_redraws_are_throttled_with_a_trailing_redraw(stream, monkeypatch):
    calls = _spy(monkeypatch, "latency_figure")
    callbacks = _capture(stream)
    throttle = 0.5
    with D.Dashboard(stream, throttle_s=throttle) as dash:
        [callback] = callbacks
        assert len(calls) == 1  # the first draw, at construction
        callback(_rec(0))
        _wait(lambda: len(calls) == 2, what="the immediate redraw")
        t0 = time.monotonic()
        for b in range(1, 20):
            callback(_rec(b))
        assert time.monotonic() - t0 < throttle / 2  # the callback only buffers
        _wait(lambda: len(calls) == 3, what="the trailing redraw")
        time.sleep(2 * throttle)
        assert len(calls) == 3  # one immediate, one trailing: nothing more
        assert calls[2][0] - calls[1][0] >= throttle - 0.05
        assert {name for _, name in calls[1:]} == {"lmstream-dashboard-redraw"}
        assert list(dash.figures["latency"].data[0].x) == list(range(20))  # the last batch is shown
        assert "batch 19" in dash.status.value


@needs_widgets
def test_slow_redraws_leave_three_times_their_duration_idle(stream, monkeypatch):
    starts = []
    real = D.latency_figure

    def slow_latency_figure(records):
        starts.append(time.monotonic())
        time.sleep(0.2)  # a redraw of at least 0.2 s
        return real(records)

    monkeypatch.setattr(D, "latency_figure", slow_latency_figure)
    callbacks = _capture(stream)
    with D.Dashboard(stream, throttle_s=0.01) as dash:
        [callback] = callbacks
        callback(_rec(0))
        _wait(lambda: len(starts) == 2, what="the immediate redraw")
        callback(_rec(1))
        _wait(lambda: len(starts) == 3, what="the trailing redraw")
        assert starts[2] - starts[1] >= 4 * 0.2 - 0.01  # not throttle_s = 0.01 s
        _wait(lambda: [r["batch_id"] for r in dash.records] == [0, 1], what="both records")


@needs_widgets
def test_records_from_several_threads(stream):
    callbacks = _capture(stream)
    with D.Dashboard(stream, throttle_s=0.02) as dash:
        [callback] = callbacks
        n_threads, per_thread = 4, 30

        def feed(k):
            for i in range(per_thread):
                callback(_rec(k * per_thread + i))

        threads = [threading.Thread(target=feed, args=(k,)) for k in range(n_threads)]
        for t in threads:
            t.start()
        dash.refresh()  # a redraw from this thread at the same time
        for t in threads:
            t.join()
        every = list(range(n_threads * per_thread))
        _wait(lambda: list(dash.figures["latency"].data[0].x) == every, what="every record drawn")
        assert dash.last_error is None
        assert [r["batch_id"] for r in dash.records] == every
        snap = dash.snapshot()
        assert list(snap["throughput"].data[0].x) == every


@needs_widgets
def test_device_plan_is_redrawn_only_when_it_changes(stream, monkeypatch):
    calls = _spy(monkeypatch, "device_plan_figure")
    callbacks = _capture(stream)
    with D.Dashboard(stream, throttle_s=60.0) as dash:
        [callback] = callbacks
        assert len(calls) == 1  # construction: "no device plan yet"
        plan_a, plan_b = _plan(["CPU", "GPU", "GPU"]), _plan(["CPU", "CPU"])
        callback(_rec(0, device_plan=json.dumps(plan_a)))
        dash.refresh()
        assert len(calls) == 2
        assert "2 of 3 operators on the GPU" in dash.figures["device_plan"].layout.title.text
        callback(_rec(1))  # no plan recorded: the latest is still plan A
        callback(_rec(2, device_plan=plan_a))  # the same plan again
        dash.refresh()
        assert len(calls) == 2
        callback(_rec(3, device_plan=plan_b))
        dash.refresh()
        assert len(calls) == 3
        assert "0 of 2 operators on the GPU" in dash.figures["device_plan"].layout.title.text
        nodes = [t for t in dash.figures["device_plan"].data if t.mode == "markers+text"]
        assert [t.name for t in nodes] == ["CPU"]


@needs_widgets
def test_figure_widgets_equal_the_pure_figures_and_snapshot_is_static(live):
    dash, _, callback = live
    records = [_rec(0, rows=0), _rec(1), _rec(2, changes=[{"param": "slide_s", "value": 5, "at": 1.0}]),
               _rec(3, target_s=1.25)]
    callback(records[0])
    callback(records[1])
    dash.refresh()  # data, no change yet: the "no micro-batch yet" annotation of the first draw goes
    assert [a.text for a in dash.figures["latency"].layout.annotations] == []
    assert dash.figures["latency"].layout.xaxis.showticklabels is None
    assert all(f.layout.height == 360 for f in dash.figures.values())  # the widget keeps its size
    for r in records[2:]:
        callback(r)
    dash.refresh()
    snap = dash.snapshot()
    assert list(snap) == list(D.FIGURE_KEYS)
    builders = {"latency": D.latency_figure, "batch_size": D.batch_size_figure,
                "throughput": D.throughput_figure, "time_split": D.time_split_figure,
                "inflection": D.inflection_figure}
    for key, fn in builders.items():
        fig = snap[key]
        assert type(fig) is go.Figure
        want = fn(records)
        assert [(t.type, t.name, list(t.x), list(t.y)) for t in fig.data] == [
            (t.type, t.name, list(t.x), list(t.y)) for t in want.data], key
        # the "no micro-batch yet" annotation of the first draw is gone; the change marker is there
        assert [a.text for a in fig.layout.annotations] == [a.text for a in want.layout.annotations]
        assert [a.text for a in fig.layout.annotations] == ["slide_s=5"]
        assert fig.layout.xaxis.showticklabels is None
    # the snapshot is a copy: later batches do not change it
    callback(_rec(4))
    dash.refresh()
    assert list(snap["latency"].data[0].x) == [1, 2, 3]
    assert list(dash.figures["latency"].data[0].x) == [1, 2, 3, 4]
    assert "last change: batch 2" in dash.status.value and "slide_s=5" in dash.status.value


@needs_widgets
def test_close_detaches_from_the_stream(stream, monkeypatch):
    calls = _spy(monkeypatch, "latency_figure")
    callbacks = _capture(stream)
    removed = []
    real_remove = stream.remove_on_batch

    def remove(callback):
        removed.append(callback)
        real_remove(callback)

    stream.remove_on_batch = remove
    dash = D.Dashboard(stream, throttle_s=0.01)
    [callback] = callbacks
    dash.close()
    assert removed == [callback]
    assert dash.closed and not dash._redraw_thread.is_alive()
    assert all(c.disabled for c in dash.controls.values())
    callback(_rec(0))  # a late batch: ignored
    time.sleep(0.2)
    assert dash.records == [] and len(calls) == 1
    dash.close()  # idempotent


@needs_widgets
def test_close_without_remove_on_batch_makes_the_callback_a_no_op(stream, monkeypatch):
    monkeypatch.delattr(LiveStream, "remove_on_batch", raising=False)
    assert not hasattr(stream, "remove_on_batch")
    callbacks = _capture(stream)
    dash = D.Dashboard(stream, throttle_s=0.01)
    [callback] = callbacks
    callback(_rec(0))
    _wait(lambda: len(dash.records) == 1, what="the first record")
    dash.close()
    callback(_rec(1))
    assert [r["batch_id"] for r in dash.records] == [0]


# --------------------------------------------------------------------------- replay


def _write_run(run_dir, records, info=None):
    run_dir.mkdir(parents=True, exist_ok=True)
    writer = JsonlWriter(run_dir / "metrics.jsonl", durable=False)
    for r in records:
        writer.append(r)
    writer.close()
    write_run_info(run_dir, info or {"workload": "LR2S", "policy": "lmstream", "speedup": 4})
    return run_dir


RUN_RECORDS = [_rec(0, rows=0), _rec(1), _rec(2, device_plan=_plan(["CPU", "GPU"])), _rec(3),
               _rec(4, changes=[{"param": "slide_s", "value": 5, "at": 1.0}]),
               _rec(5, device_plan=_plan(["GPU", "GPU", "GPU"]))]


@needs_widgets
def test_replay_batch_slider_restricts_every_figure(tmp_path):
    run = _write_run(tmp_path / "run", RUN_RECORDS)
    with D.Dashboard(run) as dash:
        assert dash.mode == "replay" and dash.stream is None
        batch = dash.controls["batch"]
        assert "lmstream-batch" in batch._dom_classes
        assert (batch.min, batch.max, batch.value) == (0, 5, 5)
        assert list(dash.figures["latency"].data[0].x) == [1, 2, 3, 4, 5]
        assert "3 of 3 operators on the GPU" in dash.figures["device_plan"].layout.title.text
        assert "workload LR2S, policy lmstream" in dash.status.value
        assert "batch 5 of 0–5" in dash.status.value
        batch.value = 3
        assert list(dash.figures["latency"].data[0].x) == [1, 2, 3]
        assert list(dash.figures["batch_size"].data[0].x) == [0, 1, 2, 3]
        assert [a.text for a in dash.figures["latency"].layout.annotations] == []  # change at 4 not yet
        assert "1 of 2 operators on the GPU" in dash.figures["device_plan"].layout.title.text
        assert "batch 3 of 0–5" in dash.status.value
        assert status_line(RUN_RECORDS[:4]) in dash.status.value
        dash.controls["play"].value = 4  # the play widget drives the slider
        assert batch.value == 4
        assert [a.text for a in dash.figures["latency"].layout.annotations] == ["slide_s=5"]
        assert list(dash.snapshot()["throughput"].data[0].x) == [1, 2, 3, 4]


# --------------------------------------------------------------------------- fallback


def test_without_widgets_the_dashboard_is_a_text_summary(stream, tmp_path, monkeypatch):
    monkeypatch.setattr(D, "_widgets_available", lambda: False)
    callbacks = _capture(stream)
    dash = D.Dashboard(stream)
    [callback] = callbacks
    assert dash.mode == "live"
    assert dash.figures == {} and dash.controls == {} and dash.errors == {}
    assert dash.widget is None and dash.status is None
    records = [_rec(b) for b in range(8)]
    for r in records:
        callback(r)
    text = repr(dash)
    assert status_line(records) in text
    assert "widgets unavailable" in text
    assert "max latency (s) of the last 5 data batches: #3 1.30, #4 1.40, #5 1.50, #6 1.60, #7 1.70" in text
    assert dash._repr_mimebundle_() == {"text/plain": text}

    class Printer:
        def __init__(self):
            self.out = ""

        def text(self, s):
            self.out += s

    p = Printer()
    dash._repr_pretty_(p, False)
    assert p.out == text
    snap = dash.snapshot()  # static figures still work without ipywidgets
    assert list(snap["latency"].data[0].x) == list(range(8))
    dash.close()
    replay = D.Dashboard(_write_run(tmp_path / "run", RUN_RECORDS))
    assert replay.mode == "replay" and replay.controls == {}
    assert "workload LR2S, policy lmstream" in repr(replay)


def test_replay_without_ipywidgets_and_pyspark_in_a_fresh_interpreter(tmp_path):
    run = _write_run(tmp_path / "run", RUN_RECORDS)
    code = textwrap.dedent(f"""
        import sys
        sys.modules["ipywidgets"] = None   # import ipywidgets -> ImportError
        sys.modules["pyspark"] = None
        from widgets import Dashboard
        dash = Dashboard({str(run)!r})
        assert dash.mode == "replay" and dash.figures == {{}} and dash.widget is None
        assert "lmstream_kit.live" not in sys.modules
        print(repr(dash))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "widgets unavailable" in out.stdout
    assert status_line(RUN_RECORDS) in out.stdout
    assert "#5 1.50" in out.stdout


def test_import_widgets_stays_cheap():
    code = ("import sys, widgets; assert 'widgets.dashboard' not in sys.modules; "
            "print(widgets.Dashboard.__name__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Dashboard"


def test_a_live_record_buffer_keeps_the_newest_batches_and_a_replay_keeps_all():
    from widgets.sources import RecordBuffer

    live = RecordBuffer(kept=10)
    for b in range(12):  # trimmed in steps of a tenth: 11 kept until the 12th
        live.push({"batch_id": b})
    assert live.batch_ids() == [] and [r["batch_id"] for r in live.records()] == list(range(2, 12))
    replay = RecordBuffer(kept=10)
    replay.load({"batch_id": b} for b in range(30))
    assert len(replay.records()) == 30
