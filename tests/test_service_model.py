"""FeatureServiceModel: exact fits on seeded LR1S-like traces, spike errors, never blocking.

Synthetic LR1S trace
--------------------
Batch ``i`` has ``U(3e5, 5e5)`` bytes, ``U(4e5, 6e5)`` state rows, state bytes ``120 * rows + U(0,
1e6)``, 8 partitions, and closes one window every 5th batch (``i % 5 == 4``); it takes
``0.2 + 2e-6 bytes + 0.3 windows_closed + 1e-6 windows_closed * state_rows + N(0, 0.01)`` seconds,
so window-closing batches take about 1.8 s against 1.0 s.  Measured with 150 batches, seeds 0-2:
the bytes-only model's spike-batch mean absolute error is 0.64-0.66 s, the feature model's
0.008-0.010 s (ratio <= 0.016); the test allows 0.05.
"""

from __future__ import annotations

import json
import math
import threading

import numpy as np
import pytest

from lmstream_kit import service_model
from lmstream_kit.exceptions import ConfigError
from lmstream_kit.service_model import FEATURES, INPUTS, FeatureServiceModel, compare_errors, windows_closed

TRUE = {"intercept": 0.2, "bytes": 2e-6, "windows_closed": 0.3, "windows_closed_x_state_rows": 1e-6}


def lr1s_trace(seed: int, n: int = 150, noise: float = 0.01) -> list[tuple[dict, float]]:
    rng = np.random.default_rng(seed)
    out = []
    last_eviction = 0
    for i in range(n):
        nbytes = float(rng.uniform(3e5, 5e5))
        closed = 1 if i % 5 == 4 else 0
        rows = float(rng.uniform(4e5, 6e5))
        features = {
            "bytes": nbytes,
            "windows_closed": closed,
            "state_rows": rows,
            "state_bytes": 120.0 * rows + float(rng.uniform(0, 1e6)),
            "since_eviction_s": float(i - last_eviction),
            "partitions": 8,
        }
        if closed:
            last_eviction = i
        seconds = (TRUE["intercept"] + TRUE["bytes"] * nbytes + TRUE["windows_closed"] * closed
                   + TRUE["windows_closed_x_state_rows"] * closed * rows)
        if noise:
            seconds += float(rng.normal(0.0, noise))
        out.append((features, seconds))
    return out


def fitted(trace, **kwargs) -> FeatureServiceModel:
    model = FeatureServiceModel(background=False, **kwargs)
    for features, seconds in trace:
        model.observe(features, seconds)
    return model


# -- accuracy --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_feature_model_sees_the_window_closing_spikes_the_bytes_model_misses(seed):
    out = compare_errors(lr1s_trace(seed), history=200)
    assert out["n"] == 150 - 12
    assert out["n_spikes"] >= 20  # about one batch in 5 is a spike
    bytes_only, feats = out["bytes_only"], out["features"]
    assert bytes_only["spike_mae_s"] > 0.5  # the trace has spikes bytes cannot tell
    assert feats["spike_mae_s"] < 0.05 * bytes_only["spike_mae_s"]
    assert feats["spike_p95_abs_s"] < 0.05 * bytes_only["spike_p95_abs_s"]
    assert feats["mae_s"] < 0.02 < bytes_only["mae_s"]


def test_noiseless_trace_recovers_the_exact_coefficients():
    model = fitted(lr1s_trace(7, noise=0.0))
    coef = model.coefficients
    for name in ("intercept", *FEATURES):
        assert coef[name] == pytest.approx(TRUE.get(name, 0.0), rel=1e-9, abs=1e-12), name
    snap = model.snapshot()
    assert snap["fit_rmse_s"] < 1e-9 and snap["errors_p95_abs_s"] < 1e-9


def test_same_observations_give_the_same_coefficients():
    trace = lr1s_trace(3)
    assert fitted(trace).coefficients == fitted(trace).coefficients


def test_coefficients_and_intercept_are_never_negative():
    # unconstrained: seconds = -0.1 + 1e-6 bytes - 0.05 partitions; every fitted term must stay >= 0
    trace = [({"bytes": 1e5 * (1 + i % 7), "partitions": i % 3}, max(0.0, -0.1 + 0.1 * (1 + i % 7) - 0.05 * (i % 3)))
             for i in range(30)]
    coef = fitted(trace).coefficients
    assert coef["intercept"] == 0.0
    assert coef["partitions"] == 0.0
    assert all(v >= 0.0 for v in coef.values())
    assert coef["bytes"] > 0.0


def test_features_that_never_vary_are_dropped():
    # no state information at all, and a constant partition count (collinear with the intercept)
    trace = [({"bytes": 1e5 * (1 + i % 4), "windows_closed": int(i % 5 == 4), "partitions": 8},
              0.2 + 1e-6 * 1e5 * (1 + i % 4) + 0.3 * (i % 5 == 4)) for i in range(20)]
    model = fitted(trace)
    coef = model.coefficients
    assert model.snapshot()["dropped"] == ["state_rows", "state_bytes", "state_rows_removed", "since_eviction_s",
                                           "partitions", "young_gc_due", "full_gc_due",
                                           "windows_closed_x_state_rows"]
    assert coef["partitions"] == 0.0 and coef["state_rows"] == 0.0
    assert coef["intercept"] == pytest.approx(0.2, rel=1e-9)
    assert model.predict({"bytes": 2e5, "windows_closed": 1, "partitions": 8}) == pytest.approx(0.7, rel=1e-9)


# -- lifecycle of a fit -----------------------------------------------------------------------------


def test_fewer_than_min_obs_observations_predict_none():
    trace = lr1s_trace(0, n=12)
    model = FeatureServiceModel(background=False, min_obs=12)
    for features, seconds in trace[:11]:
        model.observe(features, seconds)
        assert model.predict(features) is None
    assert model.mode == "unfitted" and model.coefficients is None and model.errors == []
    model.observe(*trace[11])
    assert model.mode == "fitted" and model.predict(trace[0][0]) is not None


def test_errors_are_out_of_sample_and_bounded_by_history():
    trace = lr1s_trace(4, n=40)
    model = FeatureServiceModel(background=False, min_obs=12, history=20)
    expected = []
    for features, seconds in trace:
        before = model.predict(features)
        if before is not None:
            expected.append(seconds - before)
        model.observe(features, seconds)
    assert len(expected) == 40 - 12
    assert model.errors == expected[-20:]
    assert model.n == 20


def test_snapshot_is_json_serialisable_and_names_every_feature():
    model = fitted(lr1s_trace(5, n=30))
    snap = json.loads(json.dumps(model.snapshot()))
    assert list(snap["coefficients"]) == ["intercept", *FEATURES]
    assert snap["mode"] == "fitted" and snap["n"] == 30 and snap["errors_n"] == 30 - 12
    assert snap["fits_run"] == snap["fits_requested"] == 30 - 11


# -- validation -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("features", "message"),
    [
        ({"bytes": -1}, "feature 'bytes' must be a finite number >= 0, got -1"),
        ({"state_rows": math.nan}, "feature 'state_rows' must be a finite number >= 0, got nan"),
        ({"partitions": math.inf}, "feature 'partitions' must be a finite number >= 0, got inf"),
        ({"windows_closed": True}, "feature 'windows_closed' must be a finite number >= 0, got True"),
        ({"bytes": "10"}, "feature 'bytes' must be a finite number >= 0, got '10'"),
        ({"byte": 10}, "unknown feature 'byte'; known features: " + ", ".join(INPUTS)),
        ({"windows_closed_x_state_rows": 1}, "unknown feature 'windows_closed_x_state_rows'"),
    ],
)
def test_invalid_features_raise_config_error_naming_them(features, message):
    model = FeatureServiceModel(background=False, min_obs=2)
    with pytest.raises(ConfigError) as err:
        model.observe(features, 1.0)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="feature"):
        model.predict(features)
    assert model.n == 0


@pytest.mark.parametrize("seconds", [-0.1, math.nan, math.inf])
def test_invalid_seconds_raise_config_error(seconds):
    with pytest.raises(ConfigError, match="seconds must be a finite number >= 0"):
        FeatureServiceModel(background=False).observe({"bytes": 1}, seconds)


@pytest.mark.parametrize(
    "kwargs", [{"min_obs": 1}, {"history": 5, "min_obs": 6}, {"history": 2.5}, {"background": "yes"}]
)
def test_invalid_settings_raise_config_error(kwargs):
    with pytest.raises(ConfigError):
        FeatureServiceModel(**kwargs)


# -- background -------------------------------------------------------------------------------------


def test_background_mode_publishes_the_same_fit_as_inline():
    trace = lr1s_trace(6, n=40)
    with FeatureServiceModel(background=True) as model:
        for features, seconds in trace:
            model.observe(features, seconds)
        assert model.wait(timeout=30)
        assert model.coefficients == fitted(trace).coefficients
        snap = model.snapshot()
    assert snap["fits_run"] + snap["fits_coalesced"] == 40 - 11
    assert model.closed


def test_predict_never_waits_for_a_running_fit_and_piled_up_requests_coalesce(monkeypatch):
    real_fit = service_model._fit_nonneg
    started, release = threading.Event(), threading.Event()
    calls = []

    def slow_fit(X, y):
        calls.append(len(y))
        if len(calls) == 2:  # the second fit blocks until the test lets it go
            started.set()
            release.wait(60)  # bounded, so a predict that waited returns (and fails below) instead of hanging
        return real_fit(X, y)

    monkeypatch.setattr(service_model, "_fit_nonneg", slow_fit)
    trace = lr1s_trace(8, n=16)
    probe = trace[4][0]  # a spike batch
    with FeatureServiceModel(background=True, min_obs=12) as model:
        for features, seconds in trace[:12]:
            model.observe(features, seconds)
        assert model.wait(timeout=30)
        old = model.predict(probe)
        model.observe(*trace[12])
        assert started.wait(30)
        # the second fit is running: predict answers from the first, and no fit was published meanwhile
        assert model.predict(probe) == old
        assert model.fits_run == 1 and model.snapshot()["fitting"]
        for features, seconds in trace[13:]:
            model.observe(features, seconds)
        assert model.fits_run == 1
        release.set()
        assert model.wait(timeout=30)
        snap = model.snapshot()
    assert calls == [12, 13, 16]  # the three requests made during the slow fit became one fit
    assert snap["fits_run"] == 3 and snap["fits_coalesced"] == 2
    assert model.predict(probe) != old


def test_a_failing_fit_keeps_the_last_published_one(monkeypatch):
    trace = lr1s_trace(9, n=14)
    model = FeatureServiceModel(background=False, min_obs=12)
    for features, seconds in trace[:12]:
        model.observe(features, seconds)
    coef = model.coefficients

    def broken(X, y):
        raise np.linalg.LinAlgError("singular")

    monkeypatch.setattr(service_model, "_fit_nonneg", broken)
    model.observe(*trace[12])
    assert model.coefficients == coef
    assert model.snapshot()["fits_failed"] == 1
    assert model.snapshot()["last_error"] == "LinAlgError: singular"


def test_after_close_observations_are_kept_but_no_fit_runs():
    trace = lr1s_trace(10, n=20)
    model = FeatureServiceModel(background=True, min_obs=12)
    for features, seconds in trace[:12]:
        model.observe(features, seconds)
    assert model.wait(timeout=30)
    model.close()
    for features, seconds in trace[12:]:
        model.observe(features, seconds)
    assert model.n == 20 and model.fits_run == 1
    assert model.wait(timeout=0) and model.predict(trace[0][0]) is not None


# -- windows_closed ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after", "period", "lateness", "first", "expected"),
    [
        # sliding 30 s windows by 5 s, lateness 5: window ends at multiples of 5
        (112, 118, 5, 5, None, 1),  # watermark 107 -> 113 passes 110
        (100, 112, 5, 5, None, 2),  # 95 -> 107: 100 and 105
        (110, 114, 5, 5, None, 0),  # 105 -> 109: 105 was passed before
        (109.5, 110, 5, 5, None, 1),  # 104.5 -> 105: an exact tie is reached
        (0.1, 10.1, 0.1, 0.0, None, 100),  # decimal ends: no rounding loss
        # tumbling 60 s windows, lateness 5
        (64, 66, 60, 5, None, 1),
        (66, 119, 60, 5, None, 0),
        (119, 125, 60, 5, None, 1),
        (5, 245, 60, 5, None, 4),  # 0 -> 240: 60, 120, 180, 240
        # first data: windows ending at or before it hold nothing
        (None, 112, 5, 5, None, 0),
        (None, 112, 5, 5, 100, 1),  # ends in (100, 107]: 105
        (None, 125, 60, 5, 30, 2),  # ends in (30, 120]: 60 and 120
        # no movement, or a batch of older data
        (118, 118, 5, 5, None, 0),
        (118, 110, 5, 5, None, 0),
    ],
)
def test_windows_closed_counts_window_ends_the_watermark_passes(before, after, period, lateness, first, expected):
    assert windows_closed(before, after, period, lateness, first_s=first) == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [((0, 10, 0, 5), "period_s must be > 0"), ((0, 10, 5, -1), "lateness_s must be"),
     ((0, math.nan, 5, 5), "seconds_after must be"), ((math.inf, 10, 5, 5), "seconds_before must be")],
)
def test_windows_closed_rejects_invalid_arguments(args, message):
    with pytest.raises(ConfigError, match=message):
        windows_closed(*args)


def test_a_window_where_nothing_varies_predicts_its_mean():
    trace = [({"bytes": 1000, "partitions": 4}, 0.5 + 0.1 * (i % 3)) for i in range(12)]
    model = fitted(trace)
    assert model.predict({"bytes": 1000, "partitions": 4}) == pytest.approx(0.6, rel=1e-9)
    assert model.snapshot()["dropped"] == list(FEATURES)


def test_the_heap_forecast_learns_per_admitted_row_not_per_spark_input_row():
    """A self-join reads its source twice: Spark's numInputRows is twice the rows the controller admits."""
    from lmstream_kit.service_model import HeapForecast

    mb = 2**20

    def progress(eden, old, young=0):
        return {"numInputRows": 6000, "eden_used_bytes": eden * mb, "eden_committed_bytes": 100 * mb,
                "old_used_bytes": old * mb, "old_committed_bytes": 500 * mb, "jvm_gc_count": young,
                "jvm_full_gc_count": 0}

    by_spark, by_rows = HeapForecast(), HeapForecast()
    for h, rows in ((by_spark, None), (by_rows, 3000)):
        h.observe(progress(10, 300), rows=rows)
        h.observe(progress(40, 330), rows=rows)  # 30 MB of eden and 30 MB promoted for the batch
    # 10 KB of eden per admitted row: 7,000 rows fill the 60 MB left (learned per Spark row: 5 KB, 35 MB)
    assert by_rows.features(3000) == {"young_gc_due": 0.0, "full_gc_due": 0.0}
    assert by_rows.features(7000) == {"young_gc_due": 1.0, "full_gc_due": 0.0}
    assert by_spark.features(7000) == {"young_gc_due": 0.0, "full_gc_due": 0.0}


def test_the_heap_forecast_computes_its_quantiles_once_per_batch_not_at_each_poll(monkeypatch):
    """The gate asks for the forecast at every poll (heap_admit); it must not sort or call numpy there:
    behind the process's other threads a numpy call waited for the GIL (7 ms at the 99th percentile)."""
    from lmstream_kit import service_model
    from lmstream_kit.service_model import HeapForecast

    mb = 2**20

    def progress(eden, old, young=0):
        return {"numInputRows": 3000, "eden_used_bytes": eden * mb, "eden_committed_bytes": 100 * mb,
                "old_used_bytes": old * mb, "old_committed_bytes": 500 * mb, "jvm_gc_count": young,
                "jvm_full_gc_count": 0}

    h = HeapForecast()
    for eden, old in ((10, 300), (40, 330), (70, 360), (5, 420)):
        h.observe(progress(eden, old, young=int(eden < 10)))
    asked = {rows: h.features(rows) for rows in (1000, 7000, 20000)}
    assert asked[1000] == {"young_gc_due": 0.0, "full_gc_due": 0.0}
    assert asked[20000] == {"young_gc_due": 1.0, "full_gc_due": 1.0}

    def refuse(*args, **kwargs):
        raise AssertionError("a quantile computed at a poll")

    monkeypatch.setattr(service_model, "np", None)
    monkeypatch.setattr(service_model, "nearest_rank_quantile", refuse)
    monkeypatch.setattr(service_model.statistics, "median", refuse)
    assert {rows: h.features(rows) for rows in asked} == asked
