"""The Flumina panel (widgets.flumina): a run directory's plan tree, events per worker and joins over time."""

from __future__ import annotations

import json

import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.flumina import EXAMPLES, greedy_plan
from widgets.flumina import FluminaPanel, read_plan


def _run_dir(tmp_path, with_plan=True):
    run = tmp_path / "run"
    (run / "workload_state").mkdir(parents=True)
    records = [
        {"batch_id": 0, "rows": 0, "completed_at": 10.0},
        {"batch_id": 1, "rows": 900, "completed_at": 12.0, "flumina_passes": 2, "flumina_epochs": 3,
         "flumina_events": 1800, "flumina_worker_events": {"w1": 880, "w2": 920}},
        {"batch_id": 2, "rows": 500, "completed_at": 15.5, "flumina_passes": 1, "flumina_epochs": 1,
         "flumina_events": 500, "flumina_worker_events": {"w1": 260, "w2": 240}},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "run.json").write_text("{}")
    if with_plan:
        plan = greedy_plan(EXAMPLES.get("fraud_detection").spec(2), 2)
        (run / "workload_state" / "flumina_plan.json").write_text(json.dumps(plan.to_dict()))
    return run


def test_a_run_directory_gives_the_plan_the_workers_and_the_joins(tmp_path):
    panel = FluminaPanel(_run_dir(tmp_path))
    figs = panel.snapshot()
    assert figs["plan"].layout.title.text == "Plan for fraud_detection: 2 workers, depth 2"
    workers = {t.name: (t.x, t.y) for t in figs["workers"].data}
    assert workers == {"w1": ((1, 2), (880, 260)), "w2": ((1, 2), (920, 240))}
    joins, passes = figs["joins"].data
    assert (joins.x, joins.y, passes.y) == ((0.0, 3.5), (2, 0), (2, 1))
    assert set(panel.figures) == {"plan", "workers", "joins"}  # the live widgets, drawn from the same records
    assert [t.name for t in panel.figures["workers"].data] == ["w1", "w2"]
    panel.close()


def test_before_the_stream_started_there_is_no_plan_and_bad_sources_are_one_line(tmp_path):
    run = _run_dir(tmp_path, with_plan=False)
    assert read_plan(run) is None and set(FluminaPanel(run).snapshot()) == {"workers", "joins"}
    with pytest.raises(ConfigError, match=r"^FluminaPanel source must be a LiveStream or a run directory, got int$"):
        FluminaPanel(3)
    with pytest.raises(ConfigError, match=r"^run directory .* does not exist$"):
        FluminaPanel(tmp_path / "nowhere")
