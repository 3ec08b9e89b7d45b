"""The shared protocol of live objects, the admission book and the batch record, without Spark."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace as D

import pytest

from lmstream_kit.admission import DRAIN, HOLD, AdmissionBook
from lmstream_kit.controller import AdmissionController
from lmstream_kit.exceptions import ConfigError
from lmstream_kit.mapper import DeviceMapper
from lmstream_kit.optimizer import InflectionOptimizer
from lmstream_kit.policies import AdmitAll
from lmstream_kit.protocol import ADMISSION, BATCH, BatchController, ChangeLog, Param, Tunable
from lmstream_kit.record import BatchRecord, fields_markdown, latency_bound, summarize


# ---------------------------------------------------------------- Param
@pytest.mark.parametrize(
    "param, value, message",
    [
        (Param("rate", float, low=0, low_open=True), 0, "rate must be > 0, got 0"),
        (Param("rate", float, low=0, low_open=True), "fast", "rate must be a number, got 'fast'"),
        (Param("rate", float, low=0), math.nan, "rate must be finite, got nan"),
        (Param("window", int, low=1), 2.5, "window must be an integer, got 2.5"),
        (Param("q", float, low=0, high=1, high_open=True), 1.0, "q must be < 1, got 1.0"),
        (Param("flag", bool), 1, "flag must be True or False, got 1"),
        (Param("policy", str, choices=("a", "b")), "c", "policy must be one of 'a', 'b', got 'c'"),
    ],
)
def test_a_param_rejects_a_bad_value_with_one_line_naming_it(param, value, message):
    with pytest.raises(ValueError) as err:
        param.validate(value)
    assert str(err.value) == message


def test_a_param_coerces_and_accepts_none_when_nullable():
    assert Param("n", int, low=0).validate(3) == 3
    assert Param("x", float).validate(2) == 2.0 and isinstance(Param("x", float).validate(2), float)
    assert Param("x", float, nullable=True).validate(None) is None


# ---------------------------------------------------------------- ChangeLog and Tunable
class Knob(Tunable):
    prefix = "knob"
    change_phase = BATCH
    PARAMS = (Param("level", int, low=0, high=10),)

    def __init__(self):
        super().__init__()
        self.level = 1


def test_a_tunable_logs_each_real_change_once_with_its_owner_and_phase():
    k = Knob()
    k.set_param("level", 3)
    k.set_param("level", 3)  # unchanged: not a change
    with pytest.raises(ConfigError, match="knob.level must be <= 10, got 11"):
        k.set_param("level", 11)
    with pytest.raises(ConfigError, match="knob.speed is not a live parameter; known: level"):
        k.set_param("speed", 1)
    assert k.level == 3
    assert k.pending_changes() == [{"param": "knob.level", "old": 1, "value": 3, "at": pytest.approx(
        k.changelog.pending()[0].at)}]
    assert k.changelog.take(ADMISSION) == [] and [c.param for c in k.changelog.take(BATCH)] == ["knob.level"]


def test_binding_moves_pending_changes_to_the_shared_log_and_later_ones_go_there():
    shared = ChangeLog()
    k = Knob()
    k.set_param("level", 2)
    k.bind_changelog(shared)
    k.set_param("level", 4)
    assert [(c.param, c.old, c.value) for c in shared.take()] == [("knob.level", 1, 2), ("knob.level", 2, 4)]
    shared.stamp(5, [])
    assert shared.history() == []


def test_controls_describe_each_parameter_and_set_through_validation():
    k = Knob()
    (control,) = k.controls()
    assert (control.key, control.value, control.param.high, control.disabled) == ("knob.level", 1, 10, None)
    control.setter(7)
    assert k.level == 7
    with pytest.raises(ConfigError):
        control.setter(-1)


def test_every_declared_parameter_of_the_admission_controller_reads_as_a_control():
    c = AdmissionController(slide_s=5.0, window_period_s=10.0, lateness_s=5.0)
    values = {control.key: control.value for control in c.controls()}
    assert len(values) == len(AdmissionController.PARAMS) and values["controller.window_period_s"] == 10.0
    assert c.param_values()["tumbling_target"] == "paper"
    c.set_param("catch_up", "all")
    assert c.param_value("catch_up") == "all"


def test_the_built_in_live_objects_share_one_change_log():
    shared = ChangeLog()
    controller, mapper = AdmissionController(slide_s=5.0), DeviceMapper()
    optimizer = InflectionOptimizer(initial=150 * 1024, target_latency_s=1.0)
    try:
        for obj in (controller, mapper, optimizer):
            obj.bind_changelog(shared)
        controller.set_param("quantile", 0.9)
        mapper.set_param("transition_cost", 0.2)
        optimizer.set_param("frozen", True)
        optimizer.set_inflection_point(64 * 1024, record=False)
        changes = shared.take()
    finally:
        optimizer.close()
    assert [(c.param, c.phase) for c in changes] == [
        ("controller.quantile", ADMISSION), ("mapper.transition_cost", BATCH), ("frozen", BATCH)]
    assert changes[0].to_dict()["old"] == 0.95
    # their own logs (the standalone interface) still report the same changes
    assert [ch.changes for ch in controller.pop_changes()] == [{"quantile": (0.95, 0.9)}]


def test_every_gate_is_a_batch_controller_so_the_run_loop_needs_no_branch():
    for gate in (AdmissionController(slide_s=1.0), AdmitAll("asap")):
        assert isinstance(gate, BatchController)
        assert gate.after_batch(BatchRecord(batch_id=0, policy="x")) is None


def test_the_controller_learns_from_data_batches_through_after_batch():
    c = AdmissionController(slide_s=0.0, initial_target_s=2.0)
    c.after_batch(BatchRecord(batch_id=1, policy="lmstream", rows=0, processing_s=0.1))
    assert c.n_observed == 0
    c.after_batch(BatchRecord(batch_id=2, policy="lmstream", rows=10, bytes=100, processing_s=0.5,
                              max_latency_s=3.0))
    assert c.n_observed == 1 and c.target_s == 3.0


# ---------------------------------------------------------------- AdmissionBook
def test_the_book_replays_the_planned_batch_of_a_checkpoint_first():
    book = AdmissionBook()
    book.resume(resume=7, committed=4, now=1.0)
    assert (book.admitted_end, book.completed_end) == (7, 4)
    span, admission = book.begin_batch()
    assert span == (4, 7) and admission.reason == "replay"
    book.complete(span)
    assert book.completed_end == 7 and book.settled()


def test_the_book_counts_polls_and_decision_time_per_admission():
    book = AdmissionBook()
    for _ in range(3):
        book.polled(0.002)
    end = book.admit(0, end=5, admitted_at=10.0, reason="admit", fields={"x": 1}, policy="lmstream")
    assert end == 5 and not book.settled()
    book.planned(0, 5)
    span, admission = book.begin_batch()
    assert (admission.polls, admission.decision_s, admission.fields) == (3, pytest.approx(0.006), {"x": 1})
    book.polled(0.001)
    book.admit(5, end=6, admitted_at=11.0, reason="admit")
    book.planned(5, 6)
    assert book.begin_batch()[1].polls == 1


def test_the_book_skips_planned_spans_that_are_done_and_keeps_offsets_on_failure():
    book = AdmissionBook()
    book.resume(resume=None, committed=3)
    book.planned(0, 3)  # already processed before the restart
    book.planned(3, 3)  # Spark's empty batch at the committed offset
    span, admission = book.begin_batch()
    assert span == (3, 3) and admission is None
    book.complete(None)  # a failed batch: nothing counts as processed
    assert book.completed_end == 3 and not book.in_batch
    book.mode = HOLD
    assert book.mode == HOLD and DRAIN != HOLD


def test_a_replayed_span_that_spark_plans_without_asking_gets_a_replay_admission():
    book = AdmissionBook()
    book.planned(0, 4, now=2.0)
    assert book.admitted_end == 4
    assert book.begin_batch()[1].reason == "replay"
    book.forget_planned()
    assert book.begin_batch() == (None, None)


# ---------------------------------------------------------------- BatchRecord
def test_the_record_round_trips_through_json_with_plugin_fields():
    r = BatchRecord.from_batch(batch_id=4, policy="fixed", admitted_at=20.0, completed_at=22.0,
                               datasets=[D(arrival=10.0, rows=1, nbytes=100), D(arrival=16.0, rows=3, nbytes=300)],
                               bound_s=11.0, mapping_s=0.5, optimizer_s=0.25, counted=4,
                               changes=[{"param": "policy", "value": "fixed", "at": 1.0}])
    assert (r.max_latency_s, r.within_bound, r.net_processing_s, r.extra) == (12.0, False, 1.25, {"counted": 4})
    again = BatchRecord.from_dict(json.loads(json.dumps(r.to_dict())))
    assert again == r


def test_an_empty_record_has_no_latency_and_leaves_out_unset_device_fields():
    d = BatchRecord.from_batch(batch_id=0, policy="asap", admitted_at=1.0, completed_at=1.5, datasets=[],
                               bound_s=2.0).to_dict()
    assert d["max_latency_s"] is None and d["within_bound"] is None and d["net_processing_s"] == 0.5
    assert "device_plan" not in d and "twin_s" not in d and "changes" in d


def test_one_bound_rule_for_sliding_and_tumbling_windows():
    assert latency_bound(5, 30, speedup=2) == 2.5
    assert latency_bound(0, 60, speedup=4) == 15.0


def test_the_summary_judges_each_batch_by_its_own_bound_unless_one_is_given():
    recs = [{"rows": 10, "max_latency_s": 1.0, "avg_latency_s": 0.5, "processing_s": 0.1, "bound_s": 0.5},
            {"rows": 10, "max_latency_s": 1.0, "avg_latency_s": 0.5, "processing_s": 0.1, "bound_s": 2.0}]
    assert summarize(recs)["within_bound"] == 0.5
    assert summarize(recs, bound_s=1.0)["within_bound"] == 1.0
    assert "within_bound" not in summarize([{k: v for k, v in r.items() if k != "bound_s"} for r in recs])


def test_the_field_table_lists_every_field_once():
    table = fields_markdown()
    names = [line.split("`")[1] for line in table.splitlines()[2:]]
    assert len(names) == len(set(names)) and {"bound_s", "net_processing_s", "device_plan"} <= set(names)
