"""A new per-batch controller plugs into a running stream with no edit outside its own module.

The controller below is the whole "module": it declares one live parameter and
two record fields.  The record, the change log, the stream's controls and the
dashboard pick it up through the shared protocol.
"""

from __future__ import annotations

import pytest

from lmstream_kit.live import LiveStream
from lmstream_kit.metrics import load_metrics
from lmstream_kit.protocol import BATCH, BatchController, Param


class RowCounter(BatchController):
    """Counts each batch's rows, and a scaled copy of them (the tunable part)."""

    prefix = "rowcounter"
    change_phase = BATCH
    PARAMS = (Param("scale", float, low=0, high=10, label="row scale", doc="factor on the counted rows"),)
    FIELDS = {"counted_rows": "input rows seen by the counter", "scaled_rows": "counted_rows times scale"}

    def __init__(self) -> None:
        super().__init__()
        self.scale = 1.0
        self.seen: list[int] = []
        self._scale_in_force = 1.0

    def before_batch(self, ctx):
        self._scale_in_force = self.scale  # changes are in force from the batch that starts next
        return None

    def after_batch(self, record):
        self.seen.append(record.rows)
        return {"counted_rows": record.rows, "scaled_rows": record.rows * self._scale_in_force}


def test_a_toy_controller_unplugged_in_any_other_module_reaches_record_log_and_controls(tmp_path):
    s = LiveStream("LR2S", policy="lmstream", run_dir=tmp_path / "run", controllers=[RowCounter()])
    counter = s.controllers[-1]
    control = {c.key: c for c in s.controls()}["rowcounter.scale"]
    assert (control.value, control.range, control.label, control.disabled) == (1.0, (0, 10), "row scale", None)
    control.setter(2.5)
    assert counter.scale == 2.5
    assert s.changelog.pending()[-1].to_dict()["param"] == "rowcounter.scale"
    with pytest.raises(ValueError, match="rowcounter.scale must be <= 10, got 11"):
        control.setter(11)
    fields = s.record_fields()
    assert fields["scaled_rows"] == "counted_rows times scale" and "max_latency_s" in fields
    if s.optimizer is not None:
        s.optimizer.close()


@pytest.mark.spark
def test_a_plugged_in_controller_runs_in_the_loop_and_its_change_is_recorded_once(spark, tmp_path):
    counter = RowCounter()
    run = tmp_path / "run"
    s = LiveStream("LR2S", policy="lmstream", traffic="constant", rate=500, speedup=10, run_dir=run,
                   spark=spark, device_mode="advisory")
    s.start()
    try:
        s.wait(batches=2, timeout=120)
        s.add_controller(counter)  # plugged in while the stream runs: from the next batch boundary
        s.wait(until=lambda st: len(counter.seen) >= 2, timeout=120)
        {c.key: c for c in s.controls()}["rowcounter.scale"].setter(3.0)
        n = len(counter.seen)
        s.wait(until=lambda st: len(counter.seen) >= n + 3, timeout=120)
    finally:
        s.stop(drain=False)
    df = load_metrics(run)
    counted = df[df["counted_rows"].notna()]
    assert len(counted) == len(counter.seen) >= 5
    assert (counted["counted_rows"] == counted["rows"]).all()
    # the change is recorded with one batch, and that batch is the first with the new scale
    changes = [(r.batch_id, c) for r in df.itertuples() for c in (r.changes if isinstance(r.changes, list) else [])
               if c["param"] == "rowcounter.scale"]
    assert len(changes) == 1 and changes[0][1]["old"] == 1.0 and changes[0][1]["value"] == 3.0
    changed = changes[0][0]
    before, after = counted[counted["batch_id"] < changed], counted[counted["batch_id"] >= changed]
    assert len(before) >= 2 and len(after) >= 2
    assert (before["scaled_rows"] == before["rows"]).all()
    assert (after["scaled_rows"] == 3.0 * after["rows"]).all()
    assert [b for b, c in s.changelog.history() if c.param == "rowcounter.scale"] == [changed]


def test_the_dashboard_draws_a_plugged_in_controllers_parameter_and_sets_it(tmp_path):
    ipywidgets = pytest.importorskip("ipywidgets")
    from widgets.dashboard import LIVE_CONTROLS, Dashboard

    counter = RowCounter()
    s = LiveStream("LR2S", policy="lmstream", run_dir=tmp_path / "run", controllers=[counter])
    try:
        with Dashboard(s, throttle_s=60.0) as dash:
            if not dash.controls:
                pytest.skip("ipywidgets/anywidget not importable here")
            assert list(dash.controls) == [*LIVE_CONTROLS, "rowcounter.scale"]
            slider = dash.controls["rowcounter.scale"]
            assert isinstance(slider, ipywidgets.FloatSlider) and slider.description == "row scale"
            assert (slider.min, slider.max, slider.value) == (0.0, 10.0, 1.0)
            slider.value = 4.0
            assert counter.scale == 4.0 and dash.errors["rowcounter.scale"].value == ""
    finally:
        if s.optimizer is not None:
            s.optimizer.close()
