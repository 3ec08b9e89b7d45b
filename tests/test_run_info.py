"""run.json's counts: every start (also one that never got Spark up), every batch of every start once."""

from __future__ import annotations

import json

import pytest

from lmstream_kit.live import LiveStream
from lmstream_kit.metrics import read_run_info, write_run_info


class SparkDidNotStart(RuntimeError):
    pass


def test_a_start_that_dies_before_spark_is_up_still_counts_as_a_restart(tmp_path, monkeypatch):
    def dies(self):
        raise SparkDidNotStart("killed while the JVM started")

    monkeypatch.setattr("lmstream_kit.engine.adapter.SparkEngine.open", dies)
    run = tmp_path / "run"
    run.mkdir()
    write_run_info(run, {"workload": "LR2S", "restarts": 2, "rows_processed": 10})
    for expected in (3, 4):
        with pytest.raises(SparkDidNotStart):
            LiveStream("LR2S", run_dir=run, optimizer=False).start()
        info = read_run_info(run)
        assert (info["restarts"], info["workload"], info["rows_processed"]) == (expected, "LR2S", 10)


def test_a_stream_refuses_a_run_directory_of_another_workload_before_writing_there(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"workload": "CM2S", "restarts": 0}))
    before = (run / "run.json").read_bytes()
    with pytest.raises(ValueError, match=f"run directory {run} holds a run of workload CM2S, not LR2S"):
        LiveStream("LR2S", run_dir=run, optimizer=False).start()
    assert (run / "run.json").read_bytes() == before and sorted(p.name for p in run.iterdir()) == ["run.json"]
