"""Tests for lmstream_kit.controller: exact numbers, exact decisions."""

from __future__ import annotations

import json
import math
import threading
from types import SimpleNamespace

import pytest

from lmstream_kit.controller import (
    AdmissionController,
    BatchObservation,
    Decision,
    ParamChange,
    ServiceTimeModel,
    nearest_rank_quantile,
)
from lmstream_kit.exceptions import ConfigError


def ds(arrival: float, rows: int = 100, nbytes: int = 6400) -> SimpleNamespace:
    return SimpleNamespace(arrival=arrival, rows=rows, nbytes=nbytes)


def obs(nbytes: int, processing_s: float, max_latency_s: float = 1.0, rows: int = 1) -> BatchObservation:
    return BatchObservation(rows=rows, nbytes=nbytes, processing_s=processing_s, max_latency_s=max_latency_s)


# ---------------------------------------------------------------------------
# ServiceTimeModel
# ---------------------------------------------------------------------------


class TestServiceTimeModel:
    def test_prior_when_empty(self):
        m = ServiceTimeModel(prior_s=0.7)
        assert m.n == 0
        assert m.mode == "prior"
        assert m.coefficients is None
        assert m.predict(0) == 0.7
        assert m.predict(10**9) == 0.7

    def test_default_prior(self):
        assert ServiceTimeModel().predict(123) == 0.5

    def test_proportional_rule_below_three(self):
        m = ServiceTimeModel()
        m.update(100, 1.0)
        assert m.mode == "proportional"
        assert m.predict(50) == 1.0  # x <= m_x: never faster than the mean
        assert m.predict(100) == 1.0
        assert m.predict(250) == 2.5  # 1.0 * 250 / 100
        m.update(300, 2.0)  # m_t = 1.5, m_x = 200
        assert m.n == 2
        assert m.coefficients is None
        assert m.predict(150) == 1.5
        assert m.predict(200) == 1.5
        assert m.predict(400) == 3.0

    def test_proportional_rule_all_sizes_equal(self):
        m = ServiceTimeModel()
        for t in (1.0, 2.0, 3.0, 6.0):
            m.update(100, t)  # m_t = 3
        assert m.mode == "proportional"
        assert m.predict(50) == 3.0
        assert m.predict(200) == 6.0

    def test_proportional_rule_zero_mean_size(self):
        m = ServiceTimeModel()
        m.update(0, 1.0)
        m.update(0, 3.0)
        assert m.predict(0) == 2.0
        assert m.predict(10_000) == 2.0  # m_x == 0: flat

    def test_ols(self):
        m = ServiceTimeModel()
        for x, t in ((100, 1.5), (200, 2.5), (300, 3.5)):
            m.update(x, t)
        assert m.mode == "ols"
        a, b = m.coefficients
        assert a == pytest.approx(0.5, abs=1e-12)
        assert b == pytest.approx(0.01, abs=1e-15)
        assert m.predict(400) == pytest.approx(4.5, abs=1e-12)
        assert m.predict(0) == pytest.approx(0.5, abs=1e-12)

    def test_ols_negative_slope_clipped(self):
        m = ServiceTimeModel()
        for x, t in ((100, 3.0), (200, 2.0), (300, 1.0)):
            m.update(x, t)
        a, b = m.coefficients
        assert b == 0.0
        assert a == pytest.approx(2.0, abs=1e-12)  # mean(t)
        assert m.predict(10) == pytest.approx(2.0, abs=1e-12)
        assert m.predict(10_000) == pytest.approx(2.0, abs=1e-12)

    def test_ols_negative_intercept_refits_through_origin(self):
        m = ServiceTimeModel()
        for x, t in ((100, 0.5), (200, 2.0), (300, 3.5)):
            m.update(x, t)  # OLS: b = 0.015, a = -1.0 -> refit
        a, b = m.coefficients
        assert a == 0.0
        assert b == pytest.approx(1500 / 140000, rel=1e-12)  # sum(xt) / sum(x^2)
        assert m.predict(400) == pytest.approx(400 * 1500 / 140000, rel=1e-12)
        assert m.predict(0) == 0.0

    def test_history_window(self):
        m = ServiceTimeModel(history=3)
        for x, t in ((100, 100.0), (100, 1.5), (200, 2.5), (300, 3.5)):
            m.update(x, t)
        assert m.n == 3  # the outlier (100, 100.0) fell out
        a, b = m.coefficients
        assert (a, b) == (pytest.approx(0.5, abs=1e-12), pytest.approx(0.01, abs=1e-15))

    def test_prior_setter_and_validation(self):
        m = ServiceTimeModel()
        m.prior_s = 2.0
        assert m.predict(1) == 2.0
        with pytest.raises(ConfigError, match="-1"):
            m.prior_s = -1
        with pytest.raises(ConfigError, match="history"):
            ServiceTimeModel(history=0)
        with pytest.raises(ConfigError, match="prior_s"):
            ServiceTimeModel(prior_s=-0.5)
        with pytest.raises(ConfigError, match="seconds"):
            m.update(10, float("nan"))
        with pytest.raises(ConfigError, match="nbytes"):
            m.update(-1, 1.0)
        assert m.n == 0  # rejected updates left nothing behind


# ---------------------------------------------------------------------------
# nearest-rank quantile / margin
# ---------------------------------------------------------------------------


def test_nearest_rank_quantile():
    r = [4, -1, 0, 1, 0]  # sorted: -1 0 0 1 4
    assert nearest_rank_quantile(r, 0.95) == 4  # k = ceil(4.75) = 5
    assert nearest_rank_quantile(r, 0.8) == 1  # k = 4
    assert nearest_rank_quantile(r, 0.6) == 0  # k = 3 (0.6*5 is 3.0000000000000004)
    assert nearest_rank_quantile(r, 0.5) == 0  # k = ceil(2.5) = 3
    assert nearest_rank_quantile(r, 0.2) == -1  # k = 1
    assert nearest_rank_quantile([7.0], 0.01) == 7.0
    # 0.28 * 25 is 7.000000000000001 in binary: still rank 7, not 8
    assert nearest_rank_quantile(list(range(25)), 0.28) == 6
    assert nearest_rank_quantile(list(range(25)), 0.29) == 7  # ceil(7.25) = 8


def feed_margin_residuals(c: AdmissionController) -> None:
    """Observations of 0-byte batches: each prediction is the mean of the
    previous times (m_x == 0), the first is the prior (0).  Times 1,1,1,5,1
    give residuals 1, 0, 0, 4, -1."""
    for t in (1.0, 1.0, 1.0, 5.0, 1.0):
        c.observe(obs(0, t))


class TestMargin:
    def test_no_residuals(self):
        assert AdmissionController(slide_s=5).margin_s == 0.0
        assert AdmissionController(slide_s=5, min_margin_s=0.3).margin_s == 0.3

    def test_quantile_of_residuals(self):
        c = AdmissionController(slide_s=5, prior_processing_s=0.0, interval_margin=False)
        feed_margin_residuals(c)
        assert c.margin_s == 4.0  # q = 0.95
        c.mutate({"quantile": 0.8})
        assert c.margin_s == 1.0
        c.mutate({"quantile": 0.6})
        assert c.margin_s == 0.0
        c.mutate({"quantile": 0.2})  # quantile -1 -> clipped at 0
        assert c.margin_s == 0.0
        c.mutate({"quantile": 0.8, "min_margin_s": 2.0})
        assert c.margin_s == 2.0
        c.mutate({"min_margin_s": 0.5})
        assert c.margin_s == 1.0

    def test_residuals_use_prediction_before_update_and_history(self):
        # history=2: model and residual windows both hold 2.  Predictions
        # before each update: 0 (prior), 1, 1, 1, mean(1, 5) = 3.
        c = AdmissionController(
            slide_s=5, prior_processing_s=0.0, history=2, quantile=0.5, interval_margin=False
        )
        feed_margin_residuals(c)
        # residuals kept: [5 - 1, 1 - 3] = [4, -2]; q = 0.5 -> k = 1 -> -2 -> 0
        assert c.margin_s == 0.0
        c.mutate({"quantile": 0.95})
        assert c.margin_s == 4.0
        # with the bound, 2 residuals are too few for it: their largest size counts
        c.mutate({"quantile": 0.5, "interval_margin": True})
        assert c.margin_s == 4.0

    def test_interval_bound_widens_the_margin_while_errors_are_few(self):
        c = AdmissionController(slide_s=5, prior_processing_s=0.0)
        c.observe(obs(0, 0.0))
        c.observe(obs(0, 3.0))  # residuals 0, 3: too few for a bound -> the largest size
        assert c.margin_s == 3.0
        c = AdmissionController(slide_s=5, prior_processing_s=2.0)
        c.observe(obs(0, 0.5))  # over-predicted by 1.5: the margin is 1.5, not 0
        assert c.margin_s == 1.5
        c = AdmissionController(slide_s=5, prior_processing_s=0.0)
        c.observe(obs(0, 1.0))
        c.observe(obs(0, 1.0))
        for t in (1.0, 5.0, 1.0):
            c.observe(obs(0, t))  # residuals 1, 0, 0, 4, -1
        assert c.margin_s == pytest.approx(5.288, abs=1e-3)  # > the quantile, 4
        c.mutate({"interval_margin": False})
        assert c.margin_s == 4.0
        with pytest.raises(ConfigError, match="interval_margin must be True or False, got 1"):
            c.mutate({"interval_margin": 1})

    def test_margin_enters_the_estimate(self):
        c = AdmissionController(slide_s=10, prior_processing_s=0.0, interval_margin=False)
        feed_margin_residuals(c)  # margin 4, model predicts mean = 1.8
        d = c.decide(3.0, [ds(0.0, nbytes=0)])
        assert d.margin_s == 4.0
        assert d.predicted_s == pytest.approx(1.8)
        assert d.estimate_s == pytest.approx(3.0 + 1.8 + 4.0 + 0.01)
        assert d.reason == "wait"
        assert c.decide(4.2, [ds(0.0, nbytes=0)]).reason == "admit"  # 4.2+1.8+4+0.01


# ---------------------------------------------------------------------------
# decide(): exact decisions
# ---------------------------------------------------------------------------


class TestDecide:
    def test_empty(self):
        c = AdmissionController(slide_s=5.0)
        d = c.decide(123.0, [])
        assert d == Decision(False, "empty", 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 5.0)
        assert c.last_decision is d

    def test_first_admit_with_default_prior_exact_poll(self):
        # prior = 0.25 * 5 = 1.25; admit when age + 1.25 + 0.01 >= 5, i.e. age >= 3.74
        c = AdmissionController(slide_s=5.0, cold_start=0)
        pending = [ds(0.0), ds(1.0), ds(2.0), ds(3.0)]
        d = c.decide(3.73, pending)
        assert (d.admit, d.reason) == (False, "wait")
        assert d.predicted_s == 1.25
        assert d.estimate_s == pytest.approx(4.99)
        d = c.decide(3.74, pending)  # exact tie resolves as "reached"
        assert (d.admit, d.reason) == (True, "admit")
        assert (d.n_datasets, d.rows, d.nbytes) == (4, 400, 25600)
        assert d.age_s == 3.74
        assert d.target_s == 5.0

    def test_exact_tie_counts_as_reached(self):
        # 1.49 + 0.7 + 0.01 is 2.1999999999999997 in binary; on paper it is
        # 2.2 = target, so the controller admits (1 ns tolerance).
        c = AdmissionController(slide_s=2.2, prior_processing_s=0.7, cold_start=0)
        assert c.decide(1.48, [ds(0.0)]).reason == "wait"
        assert c.decide(1.49, [ds(0.0)]).reason == "admit"

    def test_first_batch_uses_explicit_prior(self):
        c = AdmissionController(slide_s=5.0, prior_processing_s=0.7, cold_start=0)
        d = c.decide(4.0, [ds(0.0)])
        assert d.predicted_s == 0.7
        assert d.reason == "wait"  # 4 + 0.7 + 0.01 < 5
        assert c.decide(4.29, [ds(0.0)]).reason == "admit"  # 4.29 + 0.7 + 0.01 = 5

    def test_cold_start_keeps_a_margin_of_the_prediction_for_its_first_batches(self):
        c = AdmissionController(slide_s=5.0, prior_processing_s=0.7, cold_start=2)
        d = c.decide(3.58, [ds(0.0)])
        assert (d.reason, d.predicted_s, d.margin_s) == ("wait", 0.7, 0.7)  # 3.58 + 0.7 + 0.7 + 0.01 < 5
        assert c.decide(3.59, [ds(0.0)]).reason == "admit"
        assert c.margin_s == 0.0  # the learned margin, which the cold start does not change
        c.observe(obs(6400, 0.7))  # predicted 0.7 (the prior): residual 0
        assert c.decide(3.59, [ds(0.0)]).margin_s == 0.7  # one batch seen: still cold
        c.observe(obs(6400, 0.7))
        d = c.decide(4.28, [ds(0.0)])
        assert (d.reason, d.margin_s) == ("wait", 0.0)  # two seen: the learned margin alone
        assert c.decide(4.29, [ds(0.0)]).reason == "admit"

    def test_cold_start_never_lowers_a_learned_margin(self):
        c = AdmissionController(slide_s=5.0, prior_processing_s=0.2, min_margin_s=0.5, cold_start=3)
        assert c.decide(0.0, [ds(0.0)]).margin_s == 0.5
        with pytest.raises(ValueError, match="cold_start must be >= 0, got -1"):
            c.mutate({"cold_start": -1})
        c.mutate({"cold_start": 0})
        assert c.decide(0.0, [ds(0.0)]).margin_s == 0.5

    def test_prior_follows_target_until_first_observation(self):
        c = AdmissionController(slide_s=5.0)
        assert c.decide(1.0, [ds(0.0)]).predicted_s == 1.25
        c.set_slide(8.0)
        assert c.decide(1.0, [ds(0.0)]).predicted_s == 2.0
        assert c.model.prior_s == 2.0
        c.observe(obs(6400, 0.3))
        c.set_slide(4.0)
        assert c.decide(1.0, [ds(0.0)]).predicted_s == 0.3  # model, not prior

    def test_tumbling_prior_is_quarter_of_initial_target(self):
        c = AdmissionController(slide_s=0, initial_target_s=2.0, cold_start=0)
        d = c.decide(1.0, [ds(0.0)])
        assert (d.predicted_s, d.target_s) == (0.5, 2.0)
        assert d.reason == "wait"  # 1 + 0.5 + 0.01 < 2
        assert c.decide(1.49, [ds(0.0)]).reason == "admit"  # 1.49 + 0.5 + 0.01 = 2

    def test_overdue(self):
        c = AdmissionController(slide_s=5.0, prior_processing_s=0.0)
        d = c.decide(15.0, [ds(12.0), ds(10.0), ds(14.0)])  # order not relied upon
        assert (d.admit, d.reason) == (True, "overdue")
        assert d.age_s == 5.0
        assert d.n_datasets == 3

    def test_one_huge_dataset_admitted_at_once(self):
        c = AdmissionController(slide_s=5.0)
        c.observe(obs(1000, 1.0))  # proportional: 1 ms per byte above the mean
        d = c.decide(100.0, [ds(100.0, rows=10, nbytes=10_000)])
        assert d.predicted_s == 10.0
        assert (d.admit, d.reason) == (True, "admit")
        assert d.age_s == 0.0
        # the same dataset, once it is already older than the target
        d = c.decide(106.0, [ds(100.0, rows=10, nbytes=10_000)])
        assert (d.admit, d.reason) == (True, "overdue")

    def test_huge_prior_admits_first_dataset_at_once(self):
        c = AdmissionController(slide_s=5.0, prior_processing_s=6.0, cold_start=0)
        d = c.decide(50.0, [ds(50.0)])
        assert (d.admit, d.reason, d.estimate_s) == (True, "admit", 6.01)

    def test_future_arrival_clamps_age(self):
        c = AdmissionController(slide_s=5.0, prior_processing_s=1.0)
        d = c.decide(10.0, [ds(10.5)])
        assert d.age_s == 0.0
        assert d.reason == "wait"

    def test_poll_interval_in_estimate(self):
        c = AdmissionController(slide_s=5.0, prior_processing_s=1.0, poll_interval_s=0.5, cold_start=0)
        assert c.decide(3.4, [ds(0.0)]).reason == "wait"  # 3.4 + 1 + 0.5 = 4.9
        assert c.decide(3.5, [ds(0.0)]).reason == "admit"  # = 5.0


# ---------------------------------------------------------------------------
# targets
# ---------------------------------------------------------------------------


class TestTarget:
    def test_sliding_target_is_slide(self):
        c = AdmissionController(slide_s=7.5)
        c.observe(obs(100, 0.1, max_latency_s=99.0))
        assert c.target_s == 7.5

    def test_tumbling_target_is_cumulative_mean(self):
        c = AdmissionController(slide_s=0, initial_target_s=2.0)
        assert c.target_s == 2.0
        assert c.decide(0.5, [ds(0.0)]).target_s == 2.0
        expected = []
        for lat in (3.0, 4.0, 6.5, 2.5):
            c.observe(obs(100, 0.1, max_latency_s=lat))
            expected.append(c.target_s)
        assert expected == [3.0, 3.5, 4.5, 4.0]
        assert c.decide(0.5, [ds(0.0)]).target_s == 4.0

    def test_switching_to_tumbling_uses_all_observed_batches(self):
        c = AdmissionController(slide_s=5.0)
        c.observe(obs(100, 0.1, max_latency_s=4.0))
        c.observe(obs(100, 0.1, max_latency_s=5.0))
        c.set_slide(0)
        assert c.target_s == 4.5


# ---------------------------------------------------------------------------
# live mutation
# ---------------------------------------------------------------------------


class TestMutate:
    def test_set_slide_changes_the_very_next_decision(self):
        c = AdmissionController(slide_s=10.0)
        pending = [ds(0.0)]
        d = c.decide(4.0, pending)  # 4 + 2.5 + 0.01 < 10
        assert (d.reason, d.target_s) == ("wait", 10.0)
        c.set_slide(5.0)
        d = c.decide(4.0, pending)  # 4 + 1.25 + 0.01 >= 5
        assert (d.reason, d.target_s, d.predicted_s) == ("admit", 5.0, 1.25)

    def test_pop_changes_reports_once(self):
        c = AdmissionController(slide_s=10.0)
        assert c.pop_changes() == []
        c.set_slide(5.0)
        popped = c.pop_changes()
        assert len(popped) == 1
        ch = popped[0]
        assert isinstance(ch, ParamChange)
        assert ch.seq == 1
        assert ch.changes == {"slide_s": (10.0, 5.0)}
        assert ch.wall_time > 0
        assert c.pop_changes() == []
        c.mutate({"quantile": 0.9, "min_margin_s": 0.25, "slide_s": 5.0})  # slide unchanged
        c.mutate({"poll_interval_s": 0.02})
        popped = c.pop_changes()
        assert [p.seq for p in popped] == [2, 3]
        assert popped[0].changes == {"quantile": (0.95, 0.9), "min_margin_s": (0.0, 0.25)}
        assert popped[1].changes == {"poll_interval_s": (0.01, 0.02)}
        assert c.pop_changes() == []
        assert [p.seq for p in c.changes] == [1, 2, 3]
        json.dumps([p.to_dict() for p in c.changes])

    def test_no_op_mutate_records_nothing(self):
        c = AdmissionController(slide_s=5.0)
        c.mutate({"slide_s": 5})
        c.mutate({})
        assert c.changes == []

    def test_mutate_every_param(self):
        c = AdmissionController(slide_s=5.0)
        new = {
            "slide_s": 0.0,
            "quantile": 0.5,
            "poll_interval_s": 0.0,
            "initial_target_s": 3.0,
            "prior_processing_s": 0.2,
            "min_margin_s": 0.1,
            "cold_start": 0,
        }
        c.mutate(new)
        p = c.params()
        assert {k: p[k] for k in new} == new
        d = c.decide(2.0, [ds(0.0)])
        assert (d.target_s, d.predicted_s, d.margin_s) == (3.0, 0.2, 0.1)
        assert d.estimate_s == pytest.approx(2.3)
        c.mutate({"prior_processing_s": None})
        assert c.decide(2.0, [ds(0.0)]).predicted_s == 0.75

    def test_failed_mutate_applies_nothing(self):
        c = AdmissionController(slide_s=5.0)
        before = c.params()
        with pytest.raises(ConfigError, match="quantile.*2.0"):
            c.mutate({"slide_s": 2.0, "quantile": 2.0})
        with pytest.raises(ConfigError):
            c.mutate({"slide_s": 2.0, "history": 5})
        assert c.params() == before
        assert c.changes == [] and c.pop_changes() == []
        assert c.decide(4.0, [ds(0.0)]).target_s == 5.0

    def test_unknown_key_lists_allowed(self):
        c = AdmissionController(slide_s=5.0)
        with pytest.raises(ConfigError) as ei:
            c.mutate({"slide": 2.0})
        msg = str(ei.value)
        assert "'slide'" in msg
        for k in AdmissionController.MUTABLE:
            assert k in msg
        with pytest.raises(ValueError):
            c.mutate([("slide_s", 1.0)])


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value, fragment",
    [
        ("slide_s", -1, "got -1"),
        ("slide_s", -0.5, "got -0.5"),
        ("slide_s", float("nan"), "got nan"),
        ("slide_s", float("inf"), "got inf"),
        ("slide_s", "5", "'5'"),
        ("slide_s", True, "True"),
        ("quantile", 0, "got 0"),
        ("quantile", 1, "got 1"),
        ("quantile", 1.5, "got 1.5"),
        ("poll_interval_s", -0.01, "got -0.01"),
        ("initial_target_s", 0, "got 0"),
        ("initial_target_s", -2.0, "got -2.0"),
        ("prior_processing_s", -1.0, "got -1.0"),
        ("min_margin_s", -0.5, "got -0.5"),
        ("min_margin_s", float("nan"), "got nan"),
    ],
)
def test_invalid_values(key, value, fragment):
    kwargs = {"slide_s": 5.0, key: value}
    with pytest.raises(ConfigError) as ei:
        AdmissionController(**kwargs)
    assert isinstance(ei.value, ValueError)
    assert key in str(ei.value) and fragment in str(ei.value)
    c = AdmissionController(slide_s=5.0)
    with pytest.raises(ValueError) as ei:
        c.mutate({key: value})
    assert key in str(ei.value) and fragment in str(ei.value)


def test_slide_message_exact():
    with pytest.raises(ConfigError) as ei:
        AdmissionController(slide_s=-1)
    assert str(ei.value) == "slide_s must be >= 0 (0 = tumbling window), got -1"
    with pytest.raises(ValueError, match="got -1"):
        AdmissionController(slide_s=5).set_slide(-1)


@pytest.mark.parametrize("history", [0, -3, 1.5, "10", True])
def test_invalid_history(history):
    with pytest.raises(ConfigError, match="history"):
        AdmissionController(slide_s=5.0, history=history)


def test_invalid_observation():
    c = AdmissionController(slide_s=5.0)
    with pytest.raises(ConfigError, match="processing_s"):
        c.observe(obs(100, -1.0))
    with pytest.raises(ConfigError, match="max_latency_s"):
        c.observe(obs(100, 1.0, max_latency_s=float("inf")))
    assert c.n_observed == 0 and c.model.n == 0


# ---------------------------------------------------------------------------
# introspection, aliases, threads
# ---------------------------------------------------------------------------


def test_params_and_snapshot_json():
    c = AdmissionController(slide_s=5, history=10, prior_processing_s=0.5)
    assert c.params() == {
        "slide_s": 5.0,
        "poll_interval_s": 0.01,
        "quantile": 0.95,
        "history": 10,
        "initial_target_s": 1.0,
        "cold_target_s": 0.0,
        "cold_fraction": 1.0,
        "prior_processing_s": 0.5,
        "min_margin_s": 0.0,
        "cold_start": 3,
        "cold_evictions": 2,
        "interval_margin": True,
        "catch_up": "chunks",
        "tumbling_target": "paper",
        "window_target_s": 0.0,
        "close_period_s": 0.0,
        "lateness_s": 0.0,
        "close_horizon": True,
        "evict_horizon": True,
        "service_model": "bytes",
        "window_period_s": 0.0,
        "gc_margin": False,
        "heap_admit": False,
        "idle_collect": False,
        "row_cap": False,
        "busy_load": 0.0,
        "warmup": 0,
    }
    for x, t in ((100, 1.5), (200, 2.5), (300, 3.5)):
        c.update(obs(x, t))  # update is observe
    s = c.snapshot()
    assert json.loads(json.dumps(s)) == s
    assert s["n_observed"] == 3 == c.n_observed
    assert s["target_s"] == 5.0
    assert s["coefficients"] == [pytest.approx(0.5), pytest.approx(0.01)]
    assert s["model_mode"] == "ols"
    assert "AdmissionController(slide_s=5.0" in repr(c)


def test_concurrent_decide_observe_mutate():
    c = AdmissionController(slide_s=5.0)
    pending = [ds(float(i), nbytes=1000 + i) for i in range(100)]
    errors: list[BaseException] = []

    def run(fn):
        try:
            for i in range(300):
                fn(i)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [
        threading.Thread(target=run, args=(lambda i: c.decide(100.0, pending),)),
        threading.Thread(target=run, args=(lambda i: c.observe(obs(1000 + i, 0.1 + i * 1e-4)),)),
        threading.Thread(target=run, args=(lambda i: c.set_slide(4.0 + (i % 3)),)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert c.n_observed == 300
    assert c.model.n == 100
    assert math.isfinite(c.margin_s)


def test_warmup_observations_are_counted_but_not_learned():
    c = AdmissionController(slide_s=0, initial_target_s=2.0, prior_processing_s=0.5, warmup=1)
    c.observe(obs(1000, 9.0, max_latency_s=20.0))  # a cold JVM's first batch
    assert (c.n_warmup, c.n_observed, c.model.n) == (1, 0, 0)
    assert c.target_s == 2.0 and c.margin_s == 0.0
    assert c.model.predict(1000) == 0.5  # still the prior
    c.observe(obs(1000, 1.0, max_latency_s=3.0))
    assert (c.n_warmup, c.n_observed, c.model.n) == (1, 1, 1)
    assert c.target_s == 3.0 and c.margin_s == 0.5  # residual 1.0 - 0.5
    assert c.snapshot()["n_warmup"] == 1 and c.params()["warmup"] == 1


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_warmup_must_be_a_non_negative_integer(bad):
    with pytest.raises(ConfigError, match=f"warmup must be an integer >= 0, got {bad!r}"):
        AdmissionController(slide_s=1, warmup=bad)


# ---------------------------------------------------------------------------
# gc_margin: a full collection's error leaves the margin until the next is due
# ---------------------------------------------------------------------------

MB = 2 ** 20


def heap_progress(batch, rows, old_mb, *, full=0, committed_mb=600):
    """Spark's progress of ``batch`` with the driver's heap after it: eden fills every batch, the old
    generation holds ``old_mb`` of ``committed_mb``, ``full`` full collections ran in the batch."""
    return {"batch_id": batch, "numInputRows": rows, "eden_used_bytes": 100 * MB, "eden_committed_bytes": 200 * MB,
            "old_used_bytes": old_mb * MB, "old_committed_bytes": committed_mb * MB,
            "jvm_gc_count": 1 + full, "jvm_full_gc_count": full}


def run_batches(c, errors, old_mbs, full_at):
    """Batches 1.. of 1,000 rows each taking 0.5 s plus ``errors[i]``; the progress follows each record."""
    for i, (err, old) in enumerate(zip(errors, old_mbs), start=1):
        c.observe(BatchObservation(rows=1000, nbytes=64000, processing_s=0.5 + err, max_latency_s=2.0, batch_id=i))
        c.on_progress(heap_progress(i, 1000, old, full=int(i == full_at)))


def test_gc_margin_keeps_a_full_collections_error_out_until_the_next_is_due():
    # the old generation grows 50 MB a batch to 550 of 600 MB; batch 5 collects it (1.5 s over), back to 200
    errors = [0.0, 0.1, -0.05, 0.05, 1.5, 0.0, 0.05, -0.05]
    olds = [350, 400, 450, 500, 200, 250, 300, 350]
    plain = AdmissionController(slide_s=5.0, cold_start=0)
    aware = AdmissionController(slide_s=5.0, cold_start=0, gc_margin=True)
    for c in (plain, aware):
        run_batches(c, errors, olds, full_at=5)
    # LMStream's margin keeps the collection's error for `history` batches: 2.0 s against the 0.525 s
    # the model predicted from the four batches before it (every batch has the same bytes: their mean)
    assert plain.margin_s == pytest.approx(1.475)
    # without it: the other seven errors' bound (-0.75 against the prior, then -0.32 to 0.1)
    assert aware.margin_s == pytest.approx(0.3653, abs=1e-4)
    pending = [ds(0.0, rows=1000, nbytes=64000)]
    # 350 + 50 MB a batch fits the 600 MB old generation: no full collection due, the small margin decides
    d = aware.decide(3.0, pending)
    assert d.margin_s == pytest.approx(aware.margin_s) and d.reason == "wait"
    assert plain.decide(3.0, pending).reason == "admit"  # 3 + 0.5 + 1.5 > 5
    # 580 MB of 600: the next batch collects it all, so its margin has room for the pause
    aware.on_progress(heap_progress(9, 1000, 580))
    d = aware.decide(3.0, pending)
    assert d.margin_s == pytest.approx(1.475) and d.reason == "admit"


def test_gc_margin_reads_a_progress_that_comes_before_its_batchs_record_and_can_be_switched_live():
    c = AdmissionController(slide_s=5.0, cold_start=0, gc_margin=True)
    for i, err in enumerate([0.0, 0.1, -0.05, 0.05], start=1):
        c.observe(BatchObservation(rows=1000, nbytes=64000, processing_s=0.5 + err, max_latency_s=2.0, batch_id=i))
    c.on_progress(heap_progress(5, 1000, 200, full=1))  # the progress first
    c.observe(BatchObservation(rows=1000, nbytes=64000, processing_s=2.0, max_latency_s=3.0, batch_id=5))
    small = c.margin_s
    assert small == pytest.approx(0.8430, abs=1e-4)  # the bound of -0.75, 0.1, -0.1, 0.033 (batch 5's 1.475 out)
    c.mutate({"gc_margin": False})  # live: the collection's error counts again
    assert c.margin_s == pytest.approx(2.0487, abs=1e-4)
    c.mutate({"gc_margin": True})
    assert c.margin_s == pytest.approx(small)
    # an observation without a batch id (a caller of observe) is an ordinary error
    c.observe(BatchObservation(rows=1000, nbytes=64000, processing_s=2.0, max_latency_s=3.0))
    assert c.margin_s == pytest.approx(1.7147, abs=1e-4)


def test_heap_admit_admits_at_once_where_the_pending_batch_overflows_the_old_generation():
    plain = AdmissionController(slide_s=5.0, cold_start=0)  # the default: LMStream's rule
    heap = AdmissionController(slide_s=5.0, cold_start=0, heap_admit=True)
    for c in (plain, heap):
        for i in range(1, 5):  # 1,000-row batches of 0.5 s; the old generation grows 50 MB each
            c.observe(BatchObservation(rows=1000, nbytes=64000, processing_s=0.5, max_latency_s=2.0, batch_id=i))
            c.on_progress(heap_progress(i, 1000, 300 + 50 * i))
    pending = [ds(0.0, rows=1000, nbytes=64000)]
    # 500 MB of 600 with 50 MB more a 1,000 rows: room for this batch, so both wait for more data
    assert [c.decide(1.0, pending).reason for c in (plain, heap)] == ["wait", "wait"]
    # three times the rows would promote 150 MB: over the committed 600 MB
    big = [ds(0.0, rows=1000, nbytes=64000) for _ in range(3)]
    assert [c.decide(1.0, big).reason for c in (plain, heap)] == ["wait", "heap"]
    d = heap.decide(1.0, big)
    assert d.admit and d.take is None and d.rows == 3000
    heap.mutate({"heap_admit": False})
    assert heap.decide(1.0, big).reason == "wait"


def test_idle_collect_asks_for_a_collection_while_data_waits_where_a_full_one_is_near():
    off = AdmissionController(slide_s=5.0, cold_start=0, heap_admit=False)  # the default: no collection
    on = AdmissionController(slide_s=5.0, cold_start=0, heap_admit=False, idle_collect=True)
    for c in (off, on):
        for i in range(1, 5):  # 1,000-row batches of 0.5 s; the old generation grows 50 MB each, to 500 of 600
            c.observe(BatchObservation(rows=1000, nbytes=64000, processing_s=0.5, max_latency_s=2.0, batch_id=i))
            c.on_progress(heap_progress(i, 1000, 300 + 50 * i))
    pending = [ds(0.0, rows=1000, nbytes=64000)]
    # 100 MB free, over 1.25 x the 50 MB a batch promoted: no collection is near
    assert [c.decide(1.0, pending).reason for c in (off, on)] == ["wait", "wait"]
    for c in (off, on):
        c.on_progress(heap_progress(5, 1000, 560))  # 40 MB free: the next batch stops for a full collection
    # estimate 1 + 0.5 + margin 0.13 + 0.01 poll: 3.36 s of slack, room for the 1.5 s pause assumed before one ran
    d = on.decide(1.0, pending)
    assert (d.reason, d.admit) == ("collect", False)
    admitted = on.decide(4.5, pending)  # the batch whose data waited through it carries the count
    assert admitted.admit and on.before_batch(SimpleNamespace(admission={"decision": admitted})) == {
        "idle_collections": 1}
    assert off.decide(1.0, pending).reason == "wait"
    # asked once: it waits for the collection's progress, however often it is polled
    assert on.decide(1.1, pending).reason == "wait"
    on.on_progress(heap_progress(6, 1000, 560))  # a progress without a full collection (the batch before)
    assert on.decide(1.2, pending).reason == "wait"
    # the collection ran (1.2 s of it in the next batch's progress); the heap is back to 200 MB, not near
    on.on_progress({**heap_progress(7, 1000, 200, full=1), "jvm_gc_ms": 1200})
    assert on.decide(1.3, pending).reason == "wait"
    on.on_progress(heap_progress(8, 1000, 560))
    # near again; the pause is now the stream's own, 1.2 s: room at 2.0 s of age (slack 2.36), none at 3.4 (0.96)
    assert on.decide(3.4, pending).reason == "wait"
    assert on.decide(2.0, pending).reason == "collect"
    assert on.before_batch(SimpleNamespace(admission={"decision": on.decide(4.5, pending)})) == {
        "idle_collections": 1}
    assert on.before_batch(SimpleNamespace(admission={"decision": on.decide(4.6, pending)})) is None


def test_idle_collect_leaves_no_room_where_the_target_is_near_and_is_a_live_parameter():
    c = AdmissionController(slide_s=2.5, cold_start=0, heap_admit=False)
    for i in range(1, 5):
        c.observe(BatchObservation(rows=1000, nbytes=64000, processing_s=0.5, max_latency_s=2.0, batch_id=i))
        c.on_progress(heap_progress(i, 1000, 300 + 50 * i))
    c.on_progress(heap_progress(5, 1000, 580))
    pending = [ds(0.0, rows=1000, nbytes=64000)]
    assert c.decide(0.1, pending).reason == "wait"
    c.mutate({"idle_collect": True})
    # slack 2.5 - (0.4 + 0.5 + 0.13 margin + 0.01) = 1.46 s: less than the 1.5 s pause assumed, so no collection
    assert c.decide(0.4, pending).reason == "wait"
    assert c.decide(0.3, pending).reason == "collect"  # slack 1.56 s
    with pytest.raises(ConfigError, match="idle_collect"):
        c.mutate({"idle_collect": "yes"})


def test_idle_collect_waits_for_the_heap_after_the_last_batch():
    c = AdmissionController(slide_s=5.0, cold_start=0, heap_admit=False, idle_collect=True)
    for i in range(1, 5):
        c.observe(BatchObservation(rows=1000, nbytes=64000, processing_s=0.5, max_latency_s=2.0, batch_id=i))
        c.on_progress(heap_progress(i, 1000, 300 + 50 * i))
    c.on_progress(heap_progress(5, 1000, 560))  # near: 40 MB free
    # batch 6 ends; Spark's progress of it (the heap after it) comes after its record
    c.after_batch(SimpleNamespace(rows=1000, bytes=64000, processing_s=0.5, max_latency_s=2.0, batch_id=6,
                                  decision_reason="admit", admitted_at=0.0, completed_at=0.5, extra=None))
    pending = [ds(0.0, rows=1000, nbytes=64000)]
    assert c.decide(1.0, pending).reason == "wait"  # the reading of batch 5 may be stale
    c.on_progress(heap_progress(6, 1000, 570))
    assert c.decide(1.0, pending).reason == "collect"


# ---------------------------------------------------------------------------
# the first target of a sliding window
# ---------------------------------------------------------------------------


def test_a_sliding_window_starts_at_its_cold_target_until_a_batch_is_seen():
    # LR2S at speedup 2 (5 s slide), a sixth of its 30 s window: 2.5 s; the prior is a quarter of the target
    c = AdmissionController(slide_s=5.0, cold_target_s=2.5, poll_interval_s=0.05)
    assert (c.target_s, c.model.predict(10**9)) == (2.5, 0.625)
    pending = [SimpleNamespace(arrival=0.1 * i, rows=51_200, nbytes=1_000_000) for i in range(13)]
    # 1.2 + 2 * 0.625 + 0.05 = 2.5: admitted with 1.2 s of data, where the slide's target waits for 2.45 s
    d = c.decide(1.2, pending)
    assert (d.admit, d.reason, d.target_s) == (True, "admit", 2.5)
    assert AdmissionController(slide_s=5.0, poll_interval_s=0.05).decide(1.2, pending).reason == "wait"
    c.observe(obs(13_000_000, 1.4, max_latency_s=2.6))
    assert c.target_s == 5.0  # the slide, once a batch is seen
    # never above the slide, 0 turns it off, and a bad value is one error that names it
    assert AdmissionController(slide_s=5.0, cold_target_s=9.0).target_s == 5.0
    assert AdmissionController(slide_s=5.0, cold_target_s=0.0).target_s == 5.0
    with pytest.raises(ConfigError, match="-1"):
        AdmissionController(slide_s=5.0, cold_target_s=-1.0)


def test_cold_fraction_caps_a_sliding_first_target_at_a_share_of_the_slide():
    # CM1S at speedup 2: a 5 s slide, a sixth of its 60 s window is 5 s, so without the cap the first
    # target is the whole slide; a LiveStream gives 0.5 (STREAM_COLD_FRACTION): 2.5 s
    from lmstream_kit.controller import STREAM_COLD_FRACTION

    c = AdmissionController(slide_s=5.0, cold_target_s=5.0, cold_fraction=STREAM_COLD_FRACTION,
                            poll_interval_s=0.05)
    assert (c.target_s, c.model.predict(10**9)) == (2.5, 0.625)
    pending = [SimpleNamespace(arrival=0.1 * i, rows=82_500, nbytes=1_000_000) for i in range(13)]
    # 1.2 + 2 * 0.625 + 0.05 = 2.5: admitted, where the whole slide's target waits for 2.45 s
    assert c.decide(1.2, pending).reason == "admit"
    assert AdmissionController(slide_s=5.0, cold_target_s=5.0, poll_interval_s=0.05).decide(1.2, pending).reason == "wait"
    # the lower of the two, and with no cold target the share of the slide
    assert AdmissionController(slide_s=5.0, cold_target_s=1.0, cold_fraction=0.5).target_s == 1.0
    assert AdmissionController(slide_s=5.0, cold_fraction=0.25).target_s == 1.25
    c.observe(obs(13_000_000, 1.4, max_latency_s=2.6))
    assert c.target_s == 5.0  # the slide, once a batch is seen
    c.mutate({"cold_fraction": 1.0})  # live, and checked: in (0, 1]
    assert c.changes[-1].changes == {"cold_fraction": (0.5, 1.0)}
    for bad in (0.0, 1.5, -0.5):
        with pytest.raises(ConfigError, match="cold_fraction"):
            AdmissionController(slide_s=5.0, cold_fraction=bad)
    # a tumbling window's first target is initial_target_s, whatever the share
    assert AdmissionController(slide_s=0.0, initial_target_s=3.0, cold_fraction=0.5).target_s == 3.0


# ---------------------------------------------------------------------------
# row_cap: batches that thrash in the collector cap the next batches' rows
# ---------------------------------------------------------------------------


def thrash_progress(batch, gc_ms, full):
    return {**heap_progress(batch, 1000, 500, full=full), "jvm_gc_ms": gc_ms}


def test_row_cap_admits_at_the_cap_and_cuts_an_admission_to_it_after_a_batch_thrashed():
    on = AdmissionController(slide_s=20.0, cold_start=0, heap_admit=False, row_cap=True)
    off = AdmissionController(slide_s=20.0, cold_start=0, heap_admit=False)  # the default: learned, not used
    for c in (on, off):
        # 6,000-row batches of 2 s; the third spent 3 s of 4 in full collections
        for i, (proc, gc_ms, full) in enumerate([(2.0, 300, 0), (2.0, 300, 0), (4.0, 3000, 2)], start=1):
            c.on_progress(thrash_progress(i, gc_ms, full))  # the progress may come first: paired by batch id
            c.observe(BatchObservation(rows=6000, nbytes=60000, processing_s=proc, max_latency_s=6.0, batch_id=i))
    assert on._row_cap.cap == off._row_cap.cap == 3000.0
    pending = [ds(float(i), rows=1000, nbytes=10000) for i in range(4)]  # 4,000 rows, young: the rule would wait
    assert off.decide(4.0, pending).reason == "wait"
    d = on.decide(4.0, pending)
    assert (d.reason, d.admit, d.take, d.rows, d.nbytes) == ("row-cap", True, 3, 3000, 30000)
    # an admission for another reason is cut to the cap too, oldest first, with its own prediction
    late = [ds(float(i), rows=1000, nbytes=10000) for i in range(5)]
    d = on.decide(30.0, late)
    assert (d.reason, d.take, d.rows) == ("row-cap", 3, 3000)
    assert d.predicted_s == pytest.approx(on.decide(30.0, late[:3]).predicted_s)
    assert off.decide(30.0, late).take is None
    # a batch near the cap without a full collection raises it by a quarter; one far below says nothing
    on.observe(BatchObservation(rows=3000, nbytes=30000, processing_s=1.0, max_latency_s=3.0, batch_id=4))
    on.on_progress(thrash_progress(4, 100, 0))
    assert on._row_cap.cap == 3750.0
    on.observe(BatchObservation(rows=1000, nbytes=10000, processing_s=0.4, max_latency_s=3.0, batch_id=5))
    on.on_progress(thrash_progress(5, 50, 0))
    assert on._row_cap.cap == 3750.0
    # a progress without the collector's fields teaches nothing; the cap can be switched off live
    on.observe(BatchObservation(rows=3750, nbytes=37500, processing_s=9.0, max_latency_s=3.0, batch_id=6))
    on.on_progress({"batch_id": 6})
    assert on._row_cap.cap == 3750.0
    on.mutate({"row_cap": False})
    assert on.decide(30.0, late).take is None


def test_row_cap_holds_a_batch_to_the_rows_whose_promotion_fits_the_old_generation_before_any_thrash():
    c = AdmissionController(slide_s=20.0, cold_start=0, heap_admit=False, row_cap=True)
    for i in range(1, 5):  # 1,000-row batches of 0.5 s; the old generation grows 50 MB each, to 500 of 600
        c.observe(BatchObservation(rows=1000, nbytes=64000, processing_s=0.5, max_latency_s=2.0, batch_id=i))
        c.on_progress({**heap_progress(i, 1000, 300 + 50 * i), "jvm_gc_ms": 20})
    assert c._row_cap.cap is None  # nothing thrashed
    # 100 MB free at 50 MB a 1,000 rows: 2,000 rows fit; a third dataset would overflow it
    pending = [ds(float(i), rows=1000, nbytes=64000) for i in range(3)]
    d = c.decide(3.0, pending)
    assert (d.reason, d.admit, d.take, d.rows) == ("row-cap", True, 2, 2000)
    assert c.decide(3.0, pending[:1]).reason == "wait"
    # a nearly full old generation cuts no batch below an eighth of the largest recent one (125 rows)
    c.on_progress({**heap_progress(5, 1000, 599), "jvm_gc_ms": 20})
    small = [ds(float(i), rows=100, nbytes=6400) for i in range(3)]
    d = c.decide(3.0, small)
    assert (d.reason, d.take, d.rows) == ("row-cap", 1, 100)


def test_busy_load_admits_at_once_where_a_second_of_data_costs_nearly_a_second_of_processing():
    on = AdmissionController(slide_s=5.0, cold_start=3, busy_load=1.0)
    off = AdmissionController(slide_s=5.0, cold_start=3)  # LMStream's rule: wait until the target
    for c in (on, off):
        # 0.15 s + 2 µs a byte (LR2S's shape); the margin is learned from exact predictions: 0
        for nbytes in (100_000, 200_000, 400_000):
            c.observe(BatchObservation(rows=1, nbytes=nbytes, processing_s=0.15 + 2e-6 * nbytes,
                                       max_latency_s=2.0))
    # 200,000 bytes every 0.5 s (400,000 a wall second); 600,000 pending: 1.35 s, 0.9 s a second of data
    pending = [ds(9.0 + 0.5 * i, rows=1, nbytes=200_000) for i in range(3)]
    assert [c.decide(10.05, pending).reason for c in (on, off)] == ["wait", "wait"]
    # every 0.4 s (500,000 a wall second): 1.125 s a second of data, busy
    fast = [ds(9.0 + 0.4 * i, rows=1, nbytes=200_000) for i in range(3)]
    d = on.decide(9.85, fast)
    assert (d.admit, d.reason, d.n_datasets) == (True, "busy", 3)
    assert off.decide(9.85, fast).reason == "wait"
    # one dataset pending: the rate last seen (500,000 a second) at its own cost per byte (0.55 s for
    # 200,000 bytes: 1.375 s a second)
    assert on.decide(10.0, [ds(9.9, rows=1, nbytes=200_000)]).reason == "busy"
    on.mutate({"busy_load": 2.0})  # live: a higher load needed, so it waits
    assert on.decide(10.0, [ds(9.9, rows=1, nbytes=200_000)]).reason == "wait"
    assert on.changes[-1].changes == {"busy_load": (1.0, 2.0)}


def test_busy_load_waits_for_observed_batches_before_it_trusts_a_prediction():
    c = AdmissionController(slide_s=5.0, cold_start=3, busy_load=0.1)
    pending = [ds(9.0 + 0.5 * i, rows=1, nbytes=200_000) for i in range(3)]
    assert c.decide(9.99, pending).reason == "wait"  # the prior's guess: nothing known of a byte's cost
    for nbytes in (100_000, 200_000):
        c.observe(BatchObservation(rows=1, nbytes=nbytes, processing_s=0.15 + 2e-6 * nbytes, max_latency_s=2.0))
    assert c.decide(9.99, pending).reason != "busy"
    c.observe(BatchObservation(rows=1, nbytes=400_000, processing_s=0.95, max_latency_s=2.0))
    assert c.decide(9.99, pending).reason == "busy"


@pytest.mark.parametrize("bad", [-0.5, "x", None])
def test_busy_load_is_a_load_at_least_zero(bad):
    with pytest.raises(ValueError, match="busy_load"):
        AdmissionController(slide_s=5.0, busy_load=bad)
