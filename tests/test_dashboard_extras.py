"""The dashboard's extra panels (widgets.extras): the Flumina panel appears when a run's Flumina data does.

Replay tests use run directories written here (metrics.jsonl, run.json, the plan in the state
directory); live tests use a LiveView-like stream that never runs and feed records by calling the
callbacks registered with its ``on_batch``, as Spark's thread would.  No Spark.
"""

from __future__ import annotations

import contextlib
import doctest
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import plotly.graph_objects as go
import pytest
from fake_streams import FakeStream

import widgets.dashboard as D
import widgets.extras as X
from lmstream_kit.flumina import EXAMPLES, greedy_plan
from widgets.flumina import FluminaPanel

needs_widgets = pytest.mark.skipif(not D._widgets_available(), reason="needs the notebook extra")
REPO = Path(__file__).resolve().parents[1]
FLUMINA_KEYS = ["flumina_plan", "flumina_workers", "flumina_joins"]


def _rec(bid, rows=100, flumina=True):
    """A metrics record of a data batch, with the fields of a 2-worker Flumina workload when ``flumina``."""
    record = {"batch_id": bid, "policy": "lmstream", "rows": rows, "bytes": rows * 40,
              "max_latency_s": 1.0 + bid / 10, "avg_latency_s": 0.5 + bid / 10, "buffering_s": 0.25,
              "processing_s": 0.75, "throughput_rows_s": rows / 0.75, "completed_at": 1000.0 + 2 * bid,
              "target_s": 2.5, "changes": None, "device_plan": None}
    if flumina:
        record.update(flumina_passes=1 + bid % 2, flumina_epochs=1 + bid % 3, flumina_events=2 * rows,
                      flumina_worker_events={"w1": rows - bid, "w2": rows + bid})
    return record


def _plan_dict():
    return greedy_plan(EXAMPLES.get("fraud_detection").spec(2), 2).to_dict()


def _write_plan(run):
    (run / "workload_state").mkdir(parents=True, exist_ok=True)
    (run / "workload_state" / "flumina_plan.json").write_text(json.dumps(_plan_dict()))


def _run_dir(tmp_path, records, with_plan=True):
    run = tmp_path / "run"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "run.json").write_text(json.dumps({"workload": "flumina:fraud_detection", "policy": "lmstream"}))
    if with_plan:
        _write_plan(run)
    return run


FLUMINA_RECORDS = [_rec(0), _rec(1), _rec(2), _rec(3)]


def _xs(fig):
    return [list(t.x) for t in fig.data]


# --------------------------------------------------------------------------- replay


@needs_widgets
def test_replay_of_a_flumina_run_shows_the_panel_below_the_grid_and_follows_the_slider(tmp_path):
    run = _run_dir(tmp_path, FLUMINA_RECORDS)
    with D.Dashboard(run) as dash:
        assert list(dash.panels) == ["flumina"]
        panel = dash.panels["flumina"]
        assert isinstance(panel, FluminaPanel) and panel.run_dir == run
        assert dash.widget.children[-1] is panel.widget and len(dash.widget.children) == 5
        assert _xs(panel.figures["workers"]) == [[0, 1, 2, 3]] * 2
        assert panel.figures["plan"].layout.title.text.startswith("Plan for fraud_detection: 2 workers")

        snap = dash.snapshot()
        assert list(snap) == [*D.FIGURE_KEYS, *FLUMINA_KEYS]
        assert all(type(f) is go.Figure for f in snap.values())
        assert _xs(snap["flumina_workers"]) == [[0, 1, 2, 3]] * 2
        assert snap["flumina_plan"].layout.title.text.startswith("Plan for fraud_detection: 2 workers")

        dash.controls["batch"].value = 1  # the slider limits the panel too
        assert _xs(panel.figures["workers"]) == [[0, 1]] * 2
        assert list(panel.figures["joins"].data[1].y) == [1, 2]  # passes of batches 0 and 1
        assert list(dash.figures["latency"].data[0].x) == [0, 1]
        snap = dash.snapshot()
        assert _xs(snap["flumina_workers"]) == [[0, 1]] * 2
        assert list(snap["flumina_joins"].data[1].y) == [1, 2]
    assert dash.closed
    assert len(panel._buffer.records()) == 4 and panel._buffer.closed  # closed with the dashboard


def test_replay_without_flumina_data_has_no_panel(tmp_path):
    run = _run_dir(tmp_path, [_rec(b, flumina=False) for b in range(4)], with_plan=False)
    with D.Dashboard(run) as dash:
        assert dash.panels == {}
        assert list(dash.snapshot()) == list(D.FIGURE_KEYS)
        if dash.widget is not None:
            assert len(dash.widget.children) == 4
        assert dash.last_error is None


@pytest.mark.parametrize("flumina_records, with_plan, keys", [
    (True, False, ["flumina_workers", "flumina_joins"]),  # records only: no plan figure
    (False, True, FLUMINA_KEYS),  # the plan alone (the stream started, no batch yet with Flumina fields)
])
def test_replay_finds_a_flumina_run_by_its_records_or_by_its_plan(tmp_path, flumina_records, with_plan, keys):
    run = _run_dir(tmp_path, [_rec(b, flumina=flumina_records) for b in range(3)], with_plan=with_plan)
    with D.Dashboard(run) as dash:
        assert list(dash.panels) == ["flumina"]
        assert [k for k in dash.snapshot() if k.startswith("flumina_")] == keys


def test_replay_without_widgets_still_gives_the_panels_figures(tmp_path, monkeypatch):
    monkeypatch.setattr(D, "_widgets_available", lambda: False)
    run = _run_dir(tmp_path, FLUMINA_RECORDS)
    with D.Dashboard(run) as dash:
        assert dash.widget is None and dash.figures == {}
        assert list(dash.panels) == ["flumina"]
        snap = dash.snapshot()
        assert list(snap) == [*D.FIGURE_KEYS, *FLUMINA_KEYS]
        assert _xs(snap["flumina_workers"]) == [[0, 1, 2, 3]] * 2


def test_replay_of_a_flumina_run_without_ipywidgets_and_pyspark_in_a_fresh_interpreter(tmp_path):
    run = _run_dir(tmp_path, FLUMINA_RECORDS)
    code = textwrap.dedent(f"""
        import sys
        sys.modules["ipywidgets"] = None   # import ipywidgets -> ImportError
        sys.modules["pyspark"] = None
        from widgets import Dashboard
        dash = Dashboard({str(run)!r})
        assert dash.widget is None and list(dash.panels) == ["flumina"], dash.panels
        assert dash.panels["flumina"].widget is None
        assert "lmstream_kit.live" not in sys.modules
        print(sorted(k for k in dash.snapshot() if k.startswith("flumina_")))
        dash.close()
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(sorted(FLUMINA_KEYS))


# --------------------------------------------------------------------------- live


@pytest.fixture
def fake(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    return FakeStream(run, workload="flumina:fraud_detection")


@needs_widgets
def test_live_the_panel_appears_at_the_first_flumina_record(fake):
    dash = D.Dashboard(fake, throttle_s=60.0)  # tests redraw with refresh()
    try:
        assert dash.panels == {} and len(fake.callbacks) == 1
        children = len(dash.widget.children)
        fake.emit(_rec(0, flumina=False))
        dash.refresh()
        assert dash.panels == {} and len(dash.widget.children) == children
        assert list(dash.snapshot()) == list(D.FIGURE_KEYS)

        fake.emit(_rec(1))  # the first record of a Flumina workload
        dash.refresh()
        assert list(dash.panels) == ["flumina"]
        panel = dash.panels["flumina"]
        assert isinstance(panel, FluminaPanel) and panel.stream is fake
        assert len(dash.widget.children) == children + 1 and dash.widget.children[-1] is panel.widget
        assert len(fake.callbacks) == 2  # the panel follows the stream by itself
        assert [r["batch_id"] for r in panel.records] == [0, 1]

        fake.emit(_rec(2))
        assert [r["batch_id"] for r in panel.records] == [0, 1, 2]
        assert _xs(panel.figures["workers"]) == [[1, 2]] * 2  # batch 0 has no worker events
        dash.refresh()
        assert dash.panels["flumina"] is panel and len(dash.widget.children) == children + 1  # built once
        snap = dash.snapshot()
        assert list(snap) == [*D.FIGURE_KEYS, "flumina_workers", "flumina_joins"]  # no plan written
        assert _xs(snap["flumina_workers"]) == [[1, 2]] * 2

        _write_plan(fake.run_dir)  # the plan is read when it is there
        assert list(dash.snapshot()) == [*D.FIGURE_KEYS, *FLUMINA_KEYS]
    finally:
        dash.close()
    assert fake.callbacks == []  # the dashboard's callback and the panel's
    fake.emit(_rec(3))
    assert [r["batch_id"] for r in panel.records] == [0, 1, 2]
    dash.close()  # idempotent


def test_live_a_stream_with_flumina_records_or_its_plan_has_the_panel_at_once(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with D.Dashboard(FakeStream(run, FLUMINA_RECORDS[:2], workload="flumina:fraud_detection"), throttle_s=60.0) as dash:
        assert list(dash.panels) == ["flumina"]
        assert [r["batch_id"] for r in dash.panels["flumina"].records] == [0, 1]
    _write_plan(run)
    with D.Dashboard(FakeStream(run, workload="flumina:fraud_detection"), throttle_s=60.0) as dash:
        assert list(dash.panels) == ["flumina"]
        assert list(dash.snapshot()) == [*D.FIGURE_KEYS, "flumina_plan", "flumina_workers", "flumina_joins"]


def test_live_without_widgets_the_snapshot_looks_for_the_panel(fake, monkeypatch):
    monkeypatch.setattr(D, "_widgets_available", lambda: False)
    with D.Dashboard(fake) as dash:
        assert dash.widget is None and dash.panels == {}
        fake.emit(_rec(0))
        snap = dash.snapshot()
        assert list(dash.panels) == ["flumina"]
        assert list(snap) == [*D.FIGURE_KEYS, "flumina_workers", "flumina_joins"]
        assert "widgets unavailable" in repr(dash)
    assert fake.callbacks == []


# --------------------------------------------------------------------------- the extension point


class _Panel:
    def __init__(self, source):
        self.source, self.closed, self.widget, self.figures = source, False, None, {}

    def snapshot(self):
        return {"rows": go.Figure()}

    def close(self):
        self.closed = True


def test_a_new_entry_adds_a_panel_and_a_failing_one_does_not_break_the_dashboard(fake, monkeypatch):
    def broken(source):
        raise RuntimeError("no such data\nsecond line")

    extras = (X.ExtraPanel("rows", lambda run_dir, records: any(r["rows"] > 150 for r in records), _Panel,
                           lambda run_dir, records: {"rows": go.Figure()}),
              X.ExtraPanel("broken", lambda run_dir, records: True, broken, lambda run_dir, records: {}))
    monkeypatch.setattr(D, "EXTRA_PANELS", extras)
    with D.Dashboard(fake, throttle_s=60.0) as dash:
        assert dash.panels == {} and dash.last_error == "broken panel: RuntimeError: no such data"
        fake.emit(_rec(0, rows=100, flumina=False))
        fake.emit(_rec(1, rows=200, flumina=False))
        snap = dash.snapshot()
        assert list(dash.panels) == ["rows"] and dash.panels["rows"].source is fake
        assert list(snap) == [*D.FIGURE_KEYS, "rows_rows"]
        dash.refresh()
        assert dash.last_error == "broken panel: RuntimeError: no such data"  # tried once, said in the status
        if dash.status is not None:
            assert "broken panel: RuntimeError: no such data" in dash.status.value
        panel = dash.panels["rows"]
    assert panel.closed


def test_extras_doctests():
    assert doctest.testmod(X).failed == 0


# --------------------------------------------------------------------------- the reconfiguration panel


def _journal(run, steps):
    """Write journal transactions through the kit's own Journal: ``steps`` are ``(op, old, value, [(state, detail)])``."""
    from lmstream_kit.journal import Journal

    journal = Journal(run)
    for op, old, value, path in steps:
        txn = journal.begin(op, old=old, value=value)
        for state, detail in path:
            txn.step(state, **detail)
    journal.close()


@needs_widgets
def test_replay_of_a_reconfigured_run_shows_the_journal_and_the_changes_on_the_latency_plot(tmp_path):
    run = _run_dir(tmp_path, [_rec(b, flumina=False) for b in range(6)], with_plan=False)
    _journal(run, [("restart", 0, 1, [("prepared", {}), ("applied", {}), ("committed", {"batch_id": 3})]),
                   ("flumina_logic", "initial", "v2", [("prepared", {}), ("aborted", {"reason": "KeyError: total"})])])
    with D.Dashboard(run) as dash:
        assert list(dash.panels) == ["reconfig"]
        panel = dash.panels["reconfig"]
        assert dash.widget.children[-1] is panel.widget
        table = panel.table.value
        assert table.index("flumina_logic") < table.index("restart")  # newest first
        assert "initial -&gt; v2" in table and "KeyError: total" in table and "2 in all" in table
        fig = panel.figures["reconfig"]
        assert [s.x0 for s in fig.layout.shapes] == [3]  # the committed one, at its batch
        assert list(fig.data[1].hovertext) == ["restart: 0 -> 1, downtime 0.00 s"]
        assert list(dash.snapshot()) == [*D.FIGURE_KEYS, "reconfig_reconfig"]
        dash.controls["batch"].value = 2  # the slider limits the latency trace
        assert list(dash.snapshot()["reconfig_reconfig"].data[0].x) == [0, 1, 2]


@contextlib.contextmanager
def _live_dashboard(tmp_path):
    """A dashboard on a fake live stream that has run one batch (no extras yet); closing it
    removes its subscription."""
    run = tmp_path / "run"
    run.mkdir()
    fake = FakeStream(run)
    dash = D.Dashboard(fake, throttle_s=60.0)
    try:
        fake.emit(_rec(0, flumina=False))
        dash.refresh()
        assert dash.panels == {}
        yield run, fake, dash
    finally:
        dash.close()
    assert fake.callbacks == []


@needs_widgets
def test_live_the_reconfig_panel_appears_with_the_journal_and_follows_it(tmp_path):
    with _live_dashboard(tmp_path) as (run, fake, dash):  # no change yet: no journal
        _journal(run, [("target_s", 10.0, 4.0, [("prepared", {}), ("applied", {})])])
        fake.emit(_rec(1, flumina=False))
        dash.refresh()
        panel = dash.panels["reconfig"]
        assert "applied" in panel.table.value and "10.0 -&gt; 4.0" in panel.table.value
        with open(run / "reconfig.jsonl", "a") as fh:  # the stream commits it with the next batch
            fh.write(json.dumps({"txn": 1, "op": "target_s", "state": "committed", "batch_id": 2}) + "\n")
        fake.emit(_rec(2, flumina=False))  # the panel redraws by itself after each batch
        assert "committed" in panel.table.value
        assert [s.x0 for s in panel.figures["reconfig"].layout.shapes] == [2]


# --------------------------------------------------------------------------- the consumer-lag panel


@needs_widgets
def test_replay_of_an_attached_kafka_query_shows_its_lag_below_the_grid(tmp_path):
    records = [{**_rec(b, flumina=False), "source_lag": 400 - 100 * b} for b in range(4)]
    run = _run_dir(tmp_path, records, with_plan=False)
    with D.Dashboard(run) as dash:
        assert list(dash.panels) == ["lag"]
        panel = dash.panels["lag"]
        assert dash.widget.children[-1] is panel.widget
        fig = panel.figures["source_lag"]
        assert fig.layout.title.text == "Rows read and consumer lag per micro-batch"
        assert list(fig.data[1].y) == [400, 300, 200, 100]
        dash.controls["batch"].value = 1  # the slider limits the panel too
        assert list(dash.snapshot()["lag_source_lag"].data[1].x) == [0, 1]


@needs_widgets
def test_live_the_lag_panel_appears_at_the_first_record_with_a_lag(tmp_path):
    with _live_dashboard(tmp_path) as (_, fake, dash):  # no lag reported yet
        fake.emit({**_rec(1, flumina=False), "source_lag": 0})
        dash.refresh()
        assert dash.panels == {}  # a lag of 0 is none
        fake.emit({**_rec(2, flumina=False), "source_lag": 7})
        dash.refresh()
        assert list(dash.panels) == ["lag"]
        assert list(dash.panels["lag"].figures["source_lag"].data[1].y)[-1] == 7


@needs_widgets
def test_the_retention_panel_draws_what_the_spool_keeps_live_and_from_a_run(tmp_path):
    from widgets.retention import RetentionPanel

    def rec(bid, first, kept):
        return {**_rec(bid, flumina=False), "start_seq": bid, "end_seq": bid + 1,
                "spool_first_seq": first, "spool_bytes": kept}

    fake = FakeStream(tmp_path)
    panel = RetentionPanel(fake)
    for bid, first, kept in ((0, 0, 4096), (1, 0, 8192), (2, 1, 8192)):
        fake.emit(rec(bid, first, kept))
    panel.refresh()
    fig = panel.figures["retention"]
    by_name = {t.name: t for t in fig.data}
    assert [round(v, 3) for v in by_name[next(n for n in by_name if "kept" in n.lower() and "KiB" in n)].y] == \
        [4.0, 8.0, 8.0]
    assert list(by_name[next(n for n in by_name if "first" in n.lower() and "kept" in n.lower())].y) == [0, 0, 1]
    assert fig.layout.title.text == RetentionPanel.title
    # the same records from a run directory
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text(
        "".join(json.dumps(rec(b, f, k)) + "\n" for b, f, k in ((0, 0, 1024), (1, 1, 2048))))
    replay = RetentionPanel(tmp_path / "run")
    replay.refresh()
    assert len(replay.figures["retention"].data[0].x) == 2
