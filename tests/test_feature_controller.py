"""The admission controller with the feature service-time model (issue 15, item 1), on seeded inputs."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from lmstream_kit.controller import AdmissionController, BatchObservation


def pending(lo, hi, arrival=100.0):
    return [NS(second=s, arrival=arrival, rows=100, nbytes=10_000) for s in range(lo, hi)]


def trained():
    """LR1S-like: 0.5 s a batch, 1 s more when the batch closes a window (every 5th batch)."""
    c = AdmissionController(slide_s=2.5, service_model="features", window_period_s=5.0, lateness_s=5.0,
                            prior_processing_s=0.5)
    c.on_progress({"state_rows": 20_000, "state_bytes": 1e6, "state_rows_removed": 0})
    for k in range(30):
        closes = float(k % 5 == 0)
        features = {"bytes": 50_000.0, "windows_closed": closes, "state_rows": 20_000.0}
        c.observe(BatchObservation(rows=500, nbytes=50_000, processing_s=0.5 + 1.0 * closes, max_latency_s=2.0,
                                   features=features))
        assert c.feature_model.wait(timeout=30)  # each fit published before the next batch: deterministic
    return c


def test_a_batch_that_closes_a_window_is_predicted_slower():
    c = trained()
    # no data admitted yet: seconds 20..24 leave the watermark at 19 (no window end passed),
    # 20..30 move it to 25, past the end at 25
    calm, closing = c.decide(100.1, pending(20, 25)), c.decide(100.1, pending(20, 31))
    assert calm.features["windows_closed"] == 0 and closing.features["windows_closed"] == 1
    assert calm.predicted_s == pytest.approx(0.5, abs=0.05)
    assert closing.predicted_s == pytest.approx(1.5, abs=0.05)
    # the bytes model alone cannot tell them apart (same sizes): it predicts the mean, 0.5 + 6 / 30
    assert c.model.predict(50_000) == pytest.approx(0.7, abs=1e-9)


def test_the_margin_is_learned_from_the_feature_models_errors():
    c = trained()
    # 12 residuals before the first fit are the bytes model's (up to 1 s on a spike), 18 after it
    # the feature model's (about 0); a fresh controller learning only from the feature model's
    # errors keeps a margin near 0
    errors = c.feature_model.errors
    assert len(errors) == 18 and max(abs(e) for e in errors) < 0.05
    assert c.margin_s > 0.5  # the bytes model's early spike errors are still in the window


def test_without_a_fit_the_bytes_model_predicts_and_progress_feeds_the_features():
    c = AdmissionController(slide_s=2.5, service_model="features", window_period_s=5.0, lateness_s=5.0,
                            prior_processing_s=0.4)
    c.on_progress({"state_rows": 1234, "state_bytes": 5678, "state_rows_removed": 9})
    d = c.decide(100.1, pending(20, 25))
    assert d.predicted_s == 0.4  # the prior: nothing fitted yet
    assert {k: d.features[k] for k in ("state_rows", "state_bytes", "state_rows_removed")} == {
        "state_rows": 1234.0, "state_bytes": 5678.0, "state_rows_removed": 9.0}
    assert d.features["since_eviction_s"] >= 0  # 9 rows removed: an eviction was seen
    bytes_only = AdmissionController(slide_s=2.5).decide(100.1, pending(20, 25))
    assert bytes_only.features is None


def test_the_record_carries_the_admission_features_back_to_the_model():
    c = trained()
    d = c.decide(100.1, pending(20, 31))
    fields = c.before_batch(NS(admission={"decision": d}))
    assert fields == {"service_features": dict(d.features)}
    n = c.feature_model.n
    c.after_batch(NS(rows=100, bytes=110_000, processing_s=1.4, max_latency_s=2.0, decision_reason="admit",
                     admitted_at=0.0, completed_at=1.4, extra=fields))
    assert c.feature_model.n == n + 1
    c.close()


def test_a_batch_that_would_start_a_full_collection_is_predicted_slower():
    """LR1S under the serial collector: 0.5 s a batch, 0.6 s more when it overflows the old generation."""
    mb = 2**20
    c = AdmissionController(slide_s=2.5, service_model="features", prior_processing_s=0.5)

    def progress(rows, eden, old, young=0, full=0):
        return {"numInputRows": rows, "eden_used_bytes": eden * mb, "eden_committed_bytes": 100 * mb,
                "old_used_bytes": old * mb, "old_committed_bytes": 300 * mb, "jvm_gc_count": young + full,
                "jvm_full_gc_count": full}

    c.on_progress(progress(0, 0, 200))
    eden, old = 0, 200
    for k in range(40):  # 500 rows allocate 60 MB of eden: a young collection every other batch
        young = eden + 60 > 100
        full = young and old + 25 > 300
        features = c.decide(100.0 + k, pending(20, 25)).features  # 5 datasets of 100 rows
        c.observe(BatchObservation(rows=500, nbytes=50_000, processing_s=0.5 + 0.6 * full + 0.1 * young,
                                   max_latency_s=2.0, features=features))
        eden, old = (60, (200 if full else old + 25)) if young else (eden + 60, old)
        c.on_progress(progress(500, eden, old, young=int(young and not full), full=int(full)))
        assert c.feature_model.wait(timeout=30)
    d = c.decide(200.0, pending(20, 25))
    # eden 60 + 60 overflows; the old generation is at 200 + 25 * k: the forecast says which collection comes
    assert d.features["young_gc_due"] == 1.0
    assert d.features["full_gc_due"] == float(old + 25 > 300)
    expected = 0.5 + 0.1 + 0.6 * (old + 25 > 300)
    assert d.predicted_s == pytest.approx(expected, abs=0.05)
    assert c.model.predict(50_000) == pytest.approx(0.5 + 0.05 + 0.6 * 0.1, abs=0.1)  # bytes alone: the mean


def test_the_heap_forecast_counts_the_rows_the_batch_admitted_not_sparks_input_rows():
    """On LR1S Spark's numInputRows is twice the admitted rows (the self-join reads the source twice)."""
    mb = 2**20
    c = AdmissionController(slide_s=2.5, service_model="features", prior_processing_s=0.5)

    def progress(batch_id, eden):
        return {"batch_id": batch_id, "numInputRows": 2000, "eden_used_bytes": eden * mb,
                "eden_committed_bytes": 100 * mb, "old_used_bytes": 10 * mb, "old_committed_bytes": 300 * mb,
                "jvm_gc_count": 0, "jvm_full_gc_count": 0}

    for batch_id, eden in ((1, 10), (2, 40)):  # 30 MB of eden for a batch of 1,000 admitted rows
        c.after_batch(NS(batch_id=batch_id, rows=1000, bytes=100_000, processing_s=0.5, max_latency_s=2.0,
                         decision_reason="admit", admitted_at=0.0, completed_at=0.5, extra={}))
        c.on_progress(progress(batch_id, eden))
    # 30 KB per admitted row: 2,100 rows (63 MB) overflow the 60 MB left; per Spark row (15 KB) they would not
    assert c._heap.features(2100)["young_gc_due"] == 1.0 and c._heap.features(1900)["young_gc_due"] == 0.0
    c.close()
