"""The tuner panel (widgets.tuning) and its figures (lmstream_kit.plots.tuning), without Spark.

Records are hand-built like those of the ParallelismTuner: two stages, the source stage ``j0.s0``
(tuned: its proposals applied as ``tuner.partitions`` changes) and ``j0.s1`` (fixed).  Replay tests
write them to a run directory; live tests feed a LiveView-like stream that never runs.
"""

from __future__ import annotations

import doctest
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import plotly.graph_objects as go
import pytest
from fake_streams import FakeStream

import lmstream_kit.plots.tuning as P
import widgets.dashboard as D
import widgets.extras as X
import widgets.tuning as T
from lmstream_kit.exceptions import ConfigError
from widgets.tuning import TunerPanel

needs_widgets = pytest.mark.skipif(not D._widgets_available(), reason="needs the notebook extra")
REPO = Path(__file__).resolve().parents[1]
TUNING_KEYS = ["tuning_parallelism", "tuning_bottlenecks", "tuning_overhead"]
FIXED = "fixed: not a knob of the lmstream source"

#: batch id -> (source tasks, source load, observed bottleneck, proposal, reason, changes)
PLAN = {
    0: (2, 0.9, True, 3, "apply: 2 -> 3", None),
    1: (3, 0.6, False, 3, "hold: no change needed",
        [{"param": "tuner.partitions", "old": 2, "value": 3, "at": 11.0}]),
    2: (3, 0.8, True, 4, "hold: cooldown (1 of 2 batches since the last change)",
        [{"param": "rate_scale", "old": 1.0, "value": 1.5, "at": 12.0}]),  # not the tuner's: no marker
    3: (3, 0.65, False, 4, "apply: 3 -> 4", None),
    4: (4, 0.5, False, 4, "hold: no change needed",
        [{"param": "tuner.partitions", "old": 3, "value": 4, "at": 14.0}]),
}


def _rec(bid, operators=True):
    """A metrics record; with ``operators``, the tuner's fields of :data:`PLAN`."""
    record = {"batch_id": bid, "policy": "lmstream", "rows": 100 * (bid + 1), "bytes": 4000,
              "max_latency_s": 1.0, "avg_latency_s": 0.5, "buffering_s": 0.25, "processing_s": 0.75,
              "throughput_rows_s": 100.0, "completed_at": 1000.0 + 2 * bid, "target_s": 2.5,
              "bound_s": 2.0, "within_bound": True, "changes": None, "device_plan": None}
    if operators:
        tasks, load, bottleneck, proposal, reason, changes = PLAN[bid]
        record.update(
            changes=changes,
            operators=[
                {"key": "j0.s0", "job": 0, "position": 0, "stage_id": 2 * bid, "status": "COMPLETE",
                 "tasks": tasks, "records_in": 1000, "records_out": 1000, "load": load, "bottleneck": bottleneck},
                {"key": "j0.s1", "job": 0, "position": 1, "stage_id": 2 * bid + 1, "status": "COMPLETE",
                 "tasks": 4, "records_in": 1000, "records_out": 10, "load": 0.25, "bottleneck": False},
            ],
            operators_s=0.002 * (bid + 1), tuner_s=0.001,
            tuner_policy="learned", tuner_model="learned (12 transitions)",
            tuner_proposal={"j0.s0": proposal, "j0.s1": 4}, tuner_reason={"j0.s0": reason, "j0.s1": FIXED},
            input_partitions=tasks)
    return record


#: batches 0-4 with operators, then an empty batch without
RECORDS = [_rec(b) for b in range(5)] + [_rec(5, operators=False)]


def _run_dir(tmp_path, records=RECORDS):
    run = tmp_path / "run"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "run.json").write_text(json.dumps({"workload": "lr2s", "policy": "lmstream"}))
    return run


def _traces(fig):
    return [(t.name, list(t.x), list(t.y)) for t in fig.data]


# --------------------------------------------------------------------------- figures


def test_parallelism_one_line_per_operator_proposals_dotted_in_its_colour_reconfigurations_marked():
    fig = P.parallelism_figure(RECORDS)
    assert _traces(fig) == [
        ("j0.s0", [0, 1, 2, 3, 4], [2, 3, 3, 3, 4]),
        ("j0.s0 proposed", [0, 1, 2, 3, 4], [3, 3, 4, 4, 4]),
        ("j0.s1", [0, 1, 2, 3, 4], [4, 4, 4, 4, 4]),
        ("j0.s1 proposed", [0, 1, 2, 3, 4], [4, 4, 4, 4, 4]),
        ("reconfigurations", [1, 4], [4, 4]),  # at the top of the plot
    ]
    colors = P.operator_colors(RECORDS)
    assert colors == {"j0.s0": "#636EFA", "j0.s1": "#EF553B"}
    for observed, proposed in (fig.data[0], fig.data[1]), (fig.data[2], fig.data[3]):
        assert observed.line.color == proposed.line.color == colors[observed.name]
        assert proposed.line.dash == "dot" and observed.line.dash is None
    assert [(s.x0, s.x1, s.line.dash) for s in fig.layout.shapes] == [(1, 1, "dash"), (4, 4, "dash")]
    assert list(fig.data[4].hovertext) == ["batch 1: tuner.partitions: 2 -> 3", "batch 4: tuner.partitions: 3 -> 4"]
    assert fig.data[1].hovertext[2] == ("j0.s0: proposed 4 after batch 2<br>"
                                        "hold: cooldown (1 of 2 batches since the last change)")
    assert fig.layout.title.text == "Parallelism per operator (dotted: the tuner’s proposal)"


def test_bottlenecks_observed_and_predicted_the_threshold_and_the_reconfigurations():
    fig = P.bottleneck_figure(RECORDS)
    assert _traces(fig) == [
        ("j0.s0", [0, 1, 2, 3, 4], [0.9, 0.6, 0.8, 0.65, 0.5]),
        ("j0.s0 bottleneck", [0, 2], [0.9, 0.8]),  # observed
        ("j0.s0 predicted", [0, 2, 3], [0.9, 0.8, 0.65]),  # apply/hold proposing more tasks
        ("j0.s1", [0, 1, 2, 3, 4], [0.25] * 5),  # fixed: no prediction drawn, none observed
        ("reconfigurations", [1, 4], [0.9, 0.9]),
    ]
    assert fig.data[1].marker.symbol == "x" and fig.data[2].marker.symbol == "circle-open"
    assert fig.data[1].marker.color == fig.data[2].marker.color == fig.data[0].line.color
    hline, *vlines = fig.layout.shapes
    assert (hline.y0, hline.y1, hline.yref) == (0.7, 0.7, "y")
    assert [(s.x0, s.yref) for s in vlines] == [(1, "paper"), (4, "paper")]
    assert "bottleneck above load 0.7" in [a.text for a in fig.layout.annotations]
    hover = list(fig.data[0].hovertext)
    assert hover[0] == ("j0.s0, batch 0: load 0.9, 2 tasks<br>observed: bottleneck<br>"
                        "predicted: bottleneck (proposes 3)<br>apply: 2 -> 3")
    assert hover[1] == "j0.s0, batch 1: load 0.6, 3 tasks<br>predicted: ok (proposes 3)<br>hold: no change needed"
    assert fig.data[3].hovertext[0] == f"j0.s1, batch 0: load 0.25, 4 tasks<br>{FIXED}"


def test_the_threshold_follows_a_busy_share_change_or_the_argument():
    records = [*RECORDS[:3], {**RECORDS[3], "changes": [{"param": "operators.busy_share", "old": 0.7, "value": 0.85}]}]
    assert P.busy_share(records) == 0.85
    assert P.bottleneck_figure(records).layout.shapes[0].y0 == 0.85
    assert P.bottleneck_figure(RECORDS, threshold=0.5).layout.shapes[0].y0 == 0.5
    assert P.reconfigurations(records) == [(1, "tuner.partitions: 2 -> 3")]  # busy_share is not a reconfiguration


def test_reconfigurations_are_the_tuners_parallelism_changes_not_its_settings():
    records = [
        {"batch_id": 0, "changes": [{"param": "tuner.mode", "old": "apply", "value": "recommend"},
                                    {"param": "tuner.busy_share", "old": 0.7, "value": 0.8},
                                    {"param": "tuner.cooldown", "old": 2, "value": 3}]},
        {"batch_id": 1, "changes": [{"param": "tuner.pin.j0.s0", "old": None, "value": 3},
                                    {"param": "slide_s", "old": 5, "value": 6}]},
        {"batch_id": 2, "changes": {"param": "tuner.parallelism.j0.s1", "old": 4, "value": 2.0}},
        {"batch_id": 3, "changes": [{"param": "tuner.low", "old": 1, "value": 2},
                                    {"param": "tuner.partitions", "old": 2, "value": 3}]},
    ]
    assert P.reconfigurations(records) == [(1, "tuner.pin.j0.s0=3"), (2, "tuner.parallelism.j0.s1: 4 -> 2"),
                                           (3, "tuner.partitions: 2 -> 3")]


def test_overhead_in_milliseconds_stacked_and_the_panels_three_figures():
    fig = P.overhead_figure(RECORDS)
    assert _traces(fig) == [
        ("reading the stages", [0, 1, 2, 3, 4], [2.0, 4.0, 6.0, 8.0, 10.0]),
        ("tuner deciding", [0, 1, 2, 3, 4], [1.0] * 5),
        ("reconfigurations", [1, 4], [11.0, 11.0]),
    ]
    assert fig.layout.barmode == "stack"
    figs = P.tuner_figures(RECORDS)
    assert list(figs) == ["parallelism", "bottlenecks", "overhead"]
    assert all(type(f) is go.Figure for f in figs.values())


def test_operator_metrics_without_the_tuner_draw_no_proposal_and_no_prediction():
    records = [{k: v for k, v in _rec(b).items() if not k.startswith("tuner_")} for b in range(3)]
    assert [t.name for t in P.parallelism_figure(records).data] == ["j0.s0", "j0.s1", "reconfigurations"]
    assert [t.name for t in P.bottleneck_figure(records).data] == ["j0.s0", "j0.s0 bottleneck", "j0.s1",
                                                                    "reconfigurations"]
    assert _traces(P.overhead_figure(records))[:1] == [("reading the stages", [0, 1, 2], [2.0, 4.0, 6.0])]


@pytest.mark.parametrize("records", [
    None, [], [_rec(0, operators=False)], [{"batch_id": 0, "operators": []}],
    [{"batch_id": 0, "operators": "garbled"}, {"operators": [{"key": "j0.s0", "tasks": 2}]}, "not a record"],
], ids=["none", "empty", "no-operators", "empty-operators", "malformed"])
def test_no_operator_metrics_gives_empty_figures_with_a_clear_title(records):
    for key, fig in P.tuner_figures(records).items():
        assert fig.layout.title.text == "no operator metrics yet", key
        assert fig.data == () and fig.layout.shapes == ()
        assert [a.text for a in fig.layout.annotations] == ["no operator metrics yet"]


def test_missing_values_are_gaps_not_errors():
    records = [{"batch_id": 0, "operators": [{"key": "j1.s0", "tasks": None, "load": float("nan")},
                                             {"key": "j0.s3", "tasks": 2}],
                "tuner_proposal": {"j1.s0": "x"}, "changes": "garbled"}]
    assert _traces(P.parallelism_figure(records)) == [("j0.s3", [0], [2]), ("j1.s0", [0], [None])]
    assert _traces(P.bottleneck_figure(records)) == [("j0.s3", [0], [None]), ("j1.s0", [0], [None])]


def test_the_plots_and_panel_doctests():
    assert doctest.testmod(P).failed == 0
    assert doctest.testmod(T).failed == 0


# --------------------------------------------------------------------------- the panel


def test_the_proposal_table_is_the_last_batch_with_operators():
    rows = T.proposal_rows(RECORDS)
    assert rows == [
        {"operator": "j0.s0", "tasks": 4, "load": 0.5, "bottleneck": False, "proposal": 4,
         "reason": "hold: no change needed"},
        {"operator": "j0.s1", "tasks": 4, "load": 0.25, "bottleneck": False, "proposal": 4, "reason": FIXED},
    ]
    text = T.proposal_table_html(RECORDS)
    assert text.startswith('<div class="lmstream-tuner-table"><b>batch 4</b> · policy learned · '
                           "model learned (12 transitions)<table>")
    assert "<tr><td>j0.s0</td><td>4</td><td>0.5</td><td>no</td><td>4</td><td>hold: no change needed</td></tr>" in text
    assert T.proposal_rows([]) == [] and "no operator metrics yet" in T.proposal_table_html([_rec(0, False)])


def test_a_run_directory_gives_the_panel_its_figures_and_table(tmp_path):
    panel = TunerPanel(_run_dir(tmp_path))
    try:
        figs = panel.snapshot()
        assert list(figs) == ["parallelism", "bottlenecks", "overhead"]
        assert _traces(figs["parallelism"])[0] == ("j0.s0", [0, 1, 2, 3, 4], [2, 3, 3, 3, 4])
        assert "<b>batch 4</b>" in panel.table_html()
        if panel.widget is not None:
            assert set(panel.figures) == {"parallelism", "bottlenecks", "overhead"}
            assert [t.name for t in panel.figures["bottlenecks"].data] == [
                "j0.s0", "j0.s0 bottleneck", "j0.s0 predicted", "j0.s1", "reconfigurations"]
            assert panel.table.value == panel.table_html()
            assert "lmstream-tuner" in panel.widget._dom_classes
    finally:
        panel.close()


def test_bad_sources_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^TunerPanel source must be a LiveStream or a run directory, got int$"):
        TunerPanel(3)
    with pytest.raises(ConfigError, match=r"^run directory .* does not exist$"):
        TunerPanel(tmp_path / "nowhere")


# --------------------------------------------------------------------------- in the dashboard


def test_the_extras_entry():
    assert [e.name for e in X.EXTRA_PANELS] == ["flumina", "tuning", "reconfig", "lag"]
    assert X.tuning_wanted(".", RECORDS[-1:]) is False and X.tuning_wanted(".", RECORDS) is True
    assert X.tuning_wanted(".", [{"batch_id": 0, "operators": []}, {"batch_id": 1, "operators": None}]) is False


@needs_widgets
def test_replay_shows_the_panel_and_follows_the_slider(tmp_path):
    run = _run_dir(tmp_path)
    with D.Dashboard(run) as dash:
        assert list(dash.panels) == ["tuning"]
        panel = dash.panels["tuning"]
        assert isinstance(panel, TunerPanel) and panel.run_dir == run
        assert dash.widget.children[-1] is panel.widget
        snap = dash.snapshot()
        assert list(snap) == [*D.FIGURE_KEYS, *TUNING_KEYS]
        assert all(type(f) is go.Figure for f in snap.values())
        assert _traces(snap["tuning_parallelism"])[-1] == ("reconfigurations", [1, 4], [4, 4])

        dash.controls["batch"].value = 2  # the slider limits the panel's figures too
        assert list(panel.figures["parallelism"].data[0].x) == [0, 1, 2]
        assert [t.name for t in panel.figures["parallelism"].data][-1] == "reconfigurations"
        assert list(panel.figures["parallelism"].data[-1].x) == [1]
        snap = dash.snapshot()
        assert _traces(snap["tuning_bottlenecks"])[0] == ("j0.s0", [0, 1, 2], [0.9, 0.6, 0.8])
    assert dash.closed and panel._buffer.closed


def test_replay_without_widgets_still_gives_the_panels_figures(tmp_path, monkeypatch):
    monkeypatch.setattr(D, "_widgets_available", lambda: False)
    with D.Dashboard(_run_dir(tmp_path)) as dash:
        assert dash.widget is None and list(dash.panels) == ["tuning"]
        snap = dash.snapshot()
        assert list(snap) == [*D.FIGURE_KEYS, *TUNING_KEYS]
        assert _traces(snap["tuning_overhead"])[1] == ("tuner deciding", [0, 1, 2, 3, 4], [1.0] * 5)


def test_replay_without_operators_has_no_tuning_panel(tmp_path):
    with D.Dashboard(_run_dir(tmp_path, [_rec(b, operators=False) for b in range(3)])) as dash:
        assert dash.panels == {} and list(dash.snapshot()) == list(D.FIGURE_KEYS)


@needs_widgets
def test_live_the_panel_appears_at_the_first_record_with_operators(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    fake = FakeStream(run)
    dash = D.Dashboard(fake, throttle_s=60.0)  # tests redraw with refresh()
    try:
        children = len(dash.widget.children)
        fake.emit(_rec(0, operators=False))
        fake.emit({"batch_id": 1, **{k: v for k, v in _rec(1, operators=False).items() if k != "batch_id"},
                   "operators": []})  # the plug-in read no stage: not yet
        dash.refresh()
        assert dash.panels == {} and len(dash.widget.children) == children
        assert list(dash.snapshot()) == list(D.FIGURE_KEYS)

        fake.emit({**_rec(2), "batch_id": 2})
        dash.refresh()
        assert list(dash.panels) == ["tuning"]
        panel = dash.panels["tuning"]
        assert isinstance(panel, TunerPanel) and panel.stream is fake
        assert dash.widget.children[-1] is panel.widget and len(dash.widget.children) == children + 1
        assert len(fake.callbacks) == 2  # the panel follows the stream by itself
        assert list(panel.figures["parallelism"].data[0].x) == [2]

        fake.emit(_rec(3))
        fake.emit(_rec(4))
        assert _traces(panel.figures["parallelism"])[0] == ("j0.s0", [2, 3, 4], [3, 3, 4])
        assert list(panel.figures["parallelism"].data[-1].x) == [4]  # batch 1's change came before the panel's data
        assert "<b>batch 4</b>" in panel.table.value
        dash.refresh()
        assert dash.panels["tuning"] is panel and len(dash.widget.children) == children + 1  # built once
        snap = dash.snapshot()
        assert list(snap) == [*D.FIGURE_KEYS, *TUNING_KEYS]
        assert _traces(snap["tuning_parallelism"])[0] == ("j0.s0", [2, 3, 4], [3, 3, 4])
    finally:
        dash.close()
    assert fake.callbacks == []
    fake.emit(_rec(4))
    assert [r["batch_id"] for r in panel.records] == [0, 1, 2, 3, 4]


def test_live_without_widgets_the_snapshot_finds_the_panel(tmp_path, monkeypatch):
    monkeypatch.setattr(D, "_widgets_available", lambda: False)
    run = tmp_path / "run"
    run.mkdir()
    fake = FakeStream(run, [_rec(0, operators=False)])
    with D.Dashboard(fake) as dash:
        assert dash.panels == {}
        fake.emit(_rec(1))
        assert list(dash.snapshot()) == [*D.FIGURE_KEYS, *TUNING_KEYS]
        assert list(dash.panels) == ["tuning"] and dash.panels["tuning"].stream is fake
    assert fake.callbacks == []


def test_replay_of_a_tuned_run_without_ipywidgets_and_pyspark_in_a_fresh_interpreter(tmp_path):
    run = _run_dir(tmp_path)
    code = textwrap.dedent(f"""
        import sys
        sys.modules["ipywidgets"] = None   # import ipywidgets -> ImportError
        sys.modules["pyspark"] = None
        from widgets import Dashboard
        dash = Dashboard({str(run)!r})
        assert dash.widget is None and list(dash.panels) == ["tuning"], dash.panels
        assert "lmstream_kit.live" not in sys.modules and "lmstream_kit.tune" not in sys.modules
        print(sorted(k for k in dash.snapshot() if k.startswith("tuning_")))
        dash.close()
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(sorted(TUNING_KEYS))
