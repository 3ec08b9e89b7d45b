"""The LR2S capacity simulation's fit, service draws and early-admission rules (benchmarks/lr2s_capacity_sim.py),
without Spark: synthetic probe journals with known answers, and decisions of the rules around the real
controller.  No timing asserts."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from lmstream_kit.controller import AdmissionController, BatchObservation

ROOT = Path(__file__).resolve().parents[1]


def _load():
    name = "lr2s_capacity_sim_benchmark"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "lr2s_capacity_sim.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


sim = _load()


def _probe(sweep: Path, name: str, batches: list[tuple[int, float, int]]) -> None:
    """A probe's journals: (rows, processing_s, full collections) per batch, after a no-data batch."""
    run = sweep / "runs" / name
    run.mkdir(parents=True)
    metrics = [{"batch_id": 0, "rows": 0, "bytes": 0, "processing_s": 0.3}]
    progress = [{"batch_id": 0, "jvm_full_gc_count": 0}]
    for i, (rows, seconds, full) in enumerate(batches, start=1):
        metrics.append({"batch_id": i, "rows": rows, "bytes": 32 * rows, "processing_s": seconds,
                        "max_latency_s": 2 * seconds, "avg_latency_s": seconds})
        progress.append({"batch_id": i, "jvm_full_gc_count": full})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    (run / "spark_progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in progress))


def test_the_fit_recovers_the_line_the_size_classes_and_the_full_collections(tmp_path):
    line = lambda rows: 0.2 + 2e-6 * rows  # noqa: E731
    # each run's first data batch is a cold start, left out (here 10x the line)
    _probe(tmp_path, "capacity-LR2S-asap-128000-r0",
           [(100_000, 10 * line(100_000), 0), (100_000, line(100_000), 0)])
    _probe(tmp_path, "capacity-LR2S-lmstream-197403-r0",
           [(900_000, 10.0, 0), (900_000, line(900_000), 0), (1_000_000, line(1_000_000) + 0.6, 1),
            (2_000_000, line(2_000_000), 0), (1_500_000, line(1_500_000), 0)])
    _probe(tmp_path, "capacity-LR2S-fixed-4000-r0", [(1, 9.0, 0), (1, 9.0, 0)])  # the trigger's: left out
    batches = sim.load_batches(tmp_path)
    assert len(batches) == 1 + 4 and int(batches["full_gc"].sum()) == 1
    assert set(batches["policy"]) == {"asap", "lmstream"}
    model = sim.fit(batches)
    # least squares on the batches without a full collection: the line itself
    assert (model["a_s"], model["b_s_per_row"]) == (pytest.approx(0.2), pytest.approx(2e-6))
    assert model["full_gc_batches"] == 1 and model["batches"] == 5
    assert model["bytes_per_row"] == 32.0
    assert model["rows_per_full_gc"] == pytest.approx(100_000 + 900_000 + 1_000_000 + 3_500_000)
    ratios = model["ratios"]
    assert [len(ratios[k]) for k in range(4)] == [1, 0, 1, 2]  # <300k, <800k, <1.2M (the full one left out), above
    assert all(r == pytest.approx(1.0) for k in ratios for r in ratios[k])
    assert model["full_excess_s"] == [pytest.approx(0.6)]


def test_a_service_draw_is_the_line_times_a_ratio_of_its_size_class_plus_a_full_collections_excess():
    model = {"a_s": 0.2, "b_s_per_row": 2e-6, "ratios": {0: [1.5], 1: [1.0], 2: [], 3: [1.2]},
             "full_excess_s": [], "rows_per_full_gc": math.inf}
    s = sim.Service(model, seed=1)
    assert s(100_000, 0) == pytest.approx(0.4 * 1.5)
    assert s(500_000, 0) == pytest.approx(1.2)
    assert s(1_000_000, 0) == pytest.approx(2.2 * 1.2)  # an empty class takes the largest class that has ratios
    model = {**model, "full_excess_s": [0.7], "rows_per_full_gc": 1e-9}  # every batch runs a full collection
    assert sim.Service(model, seed=1)(500_000, 0) == pytest.approx(1.9)
    a = [sim.Service({**model, "ratios": {0: [1, 2, 3], 1: [1, 2, 3], 2: [1], 3: [1]}}, seed=5)(400_000, 0)
         for _ in range(2)]
    assert a[0] == a[1]  # seeded


def _trained() -> AdmissionController:
    c = AdmissionController(slide_s=5.0, cold_start=0)
    for nbytes in (100_000, 200_000, 400_000):  # 0.15 s + 2 µs a byte
        c.observe(BatchObservation(rows=nbytes // 32, nbytes=nbytes, processing_s=0.15 + 2e-6 * nbytes,
                                   max_latency_s=2.0))
    return c


def test_the_fixed_share_rule_admits_only_where_waiting_would_not_make_rows_cheaper():
    young = [SimpleNamespace(arrival=9.9, rows=1, nbytes=600_000)]  # 1.35 s predicted, 0.15 s of it fixed (11%)
    assert _trained().decide(10.0, young).reason == "wait"
    share = sim.FixedShare(_trained(), 0.1)
    assert share.decide(10.0, young).reason == "wait"
    bigger = [SimpleNamespace(arrival=9.9, rows=1, nbytes=700_000)]  # 0.15 of 1.55 s: 9.7%
    d = share.decide(10.0, bigger)
    assert (d.admit, d.reason) == (True, "share")
    share.observe(BatchObservation(rows=1, nbytes=800_000, processing_s=1.75, max_latency_s=3.0))
    assert share.inner.n_observed == 4  # observations reach the controller
    # a controller with no fitted line decides alone
    assert sim.FixedShare(AdmissionController(slide_s=5.0), 0.99).decide(3.5, young).reason == "wait"


def test_the_simulated_controller_is_the_presets_with_the_rule_given():
    c = sim.controller(busy_load=0.9)
    # LR2S's 5 s bound, its first target a sixth of its 30 s window (as a LiveStream sets it), the preset's margin
    assert (c.param_value("slide_s"), c.target_s, c.quantile, c.min_margin_s, c.poll_interval_s) == (
        5.0, 2.5, 0.97, 0.5, 0.05)
    assert c.param_value("busy_load") == 0.9 and sim.controller().param_value("busy_load") == 0.0


def test_a_run_passes_with_95_percent_within_and_its_last_batch_admitted_in_time():
    def batch(latency, admitted=0.0):
        return SimpleNamespace(rows=1, max_latency_s=latency, admitted_at=admitted)
    ok = [batch(1.0)] * 19 + [batch(6.0, admitted=60.0)]
    assert sim.verdict(ok, 5.0, feed_end=59.5)[:2] == (True, 0.95)
    assert sim.verdict(ok[:-2] + [batch(6.0), batch(6.0)], 5.0, feed_end=59.5)[0] is False
    assert sim.verdict([batch(1.0)] * 19 + [batch(1.0, admitted=70.0)], 5.0, feed_end=59.5)[0] is False
