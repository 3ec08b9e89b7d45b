"""Tests for lmstream_kit.sim: exact batch boundaries on seeded traces."""

from __future__ import annotations

import random
import statistics

import pytest

from lmstream_kit.controller import AdmissionController
from lmstream_kit.exceptions import ConfigError
from lmstream_kit.sim import (
    SimBatch,
    constant_arrivals,
    random_arrivals,
    simulate,
    simulate_asap,
    simulate_fixed,
)


def const(seconds: float):
    return lambda rows, nbytes: seconds


def linear(base: float, per_byte: float):
    return lambda rows, nbytes: base + per_byte * nbytes


# ---------------------------------------------------------------------------
# traces
# ---------------------------------------------------------------------------


def test_constant_arrivals():
    assert constant_arrivals(10, 3) == [(0.0, 10, 640), (1.0, 10, 640), (2.0, 10, 640)]
    a = constant_arrivals(5, 4, bytes_per_row=100, speedup=4)
    assert a == [(0.0, 5, 500), (0.25, 5, 500), (0.5, 5, 500), (0.75, 5, 500)]
    assert [t for t, _, _ in constant_arrivals(1, 11, speedup=10)][-1] == 1.0
    assert constant_arrivals(10, 0) == []


def test_random_arrivals_seeded():
    a = random_arrivals(1000, 200, 30, seed=7)
    assert a == random_arrivals(1000, 200, 30, seed=7)
    assert a != random_arrivals(1000, 200, 30, seed=8)
    assert a[:3] == [(0.0, 949, 60736), (1.0, 1102, 70528), (2.0, 955, 61120)]
    rng = random.Random(7)
    assert [r for _, r, _ in a] == [int(round(rng.gauss(1000, 200))) for _ in range(30)]
    # seconds whose draw rounds to <= 0 rows produce no dataset
    sparse = random_arrivals(0, 1, 100, seed=3)
    assert 0 < len(sparse) < 100
    assert all(r > 0 and n == 64 * r for _, r, n in sparse)
    fast = random_arrivals(1000, 200, 30, seed=7, speedup=2)
    assert [t for t, _, _ in fast] == [k / 2 for k in range(30)]


@pytest.mark.parametrize(
    "call",
    [
        lambda: constant_arrivals(-1, 3),
        lambda: constant_arrivals(1, 3, speedup=0),
        lambda: random_arrivals(10, -1, 3, seed=1),
        lambda: simulate_asap(arrivals=[(0.0, 1, 1)], service_time=const(1), poll_interval_s=0),
        lambda: simulate_asap(arrivals=[(0.0, -1, 1)], service_time=const(1)),
        lambda: simulate_asap(arrivals=[(0.0, 1, 1)], service_time=const(-1)),
        lambda: simulate_fixed(0, arrivals=[(0.0, 1, 1)], service_time=const(1)),
    ],
)
def test_invalid_inputs(call):
    with pytest.raises(ConfigError):
        call()


# ---------------------------------------------------------------------------
# lmstream, sliding target
# ---------------------------------------------------------------------------


def test_first_admit_exact_poll_sliding():
    # One dataset per second; prior = 0.25 * 5 = 1.25 s; admit when
    # age + 1.25 + 0.01 >= 5 -> age >= 3.74: the poll at exactly 3.74.
    c = AdmissionController(slide_s=5.0, cold_start=0)
    b = simulate(c, arrivals=constant_arrivals(100, 10), service_time=const(0.5))
    first = b[0]
    assert first.admitted_at == 3.74
    assert first.completed_at == 4.24
    assert (first.n_datasets, first.rows, first.nbytes) == (4, 400, 25600)
    assert first.decision.reason == "admit"
    assert first.decision.predicted_s == 1.25
    assert first.oldest_arrival == 0.0
    assert first.max_latency_s == 4.24
    assert first.avg_latency_s == pytest.approx((4.24 + 3.24 + 2.24 + 1.24) / 4)


def test_first_admit_with_explicit_prior_between_polls():
    # age >= 5 - 1.234 - 0.01 = 3.756 -> first poll at or after it is 3.76
    # (plain quantile margin: the over-prediction of batch 0 gives margin 0)
    c = AdmissionController(slide_s=5.0, prior_processing_s=1.234, interval_margin=False, cold_start=0)
    b = simulate(c, arrivals=constant_arrivals(100, 10), service_time=const(0.5))
    assert [(x.admitted_at, x.n_datasets) for x in b] == [(3.76, 4), (8.37, 5), (13.49, 1)]
    # after batch 0 the model holds (25600 B, 0.5 s): 5 datasets (32000 B)
    # predict 0.625 s -> age >= 4.365 from arrival 4.0 -> poll 4.26 + 411*0.01
    assert b[1].decision.predicted_s == pytest.approx(0.625)
    # the last dataset (t = 9) waits alone: 6400 B is below the mean size
    # (28800 B), so it is predicted at the mean time 0.5 s -> age >= 4.49 ->
    # 13.49 (polls 8.87 + k * 0.01)
    assert b[2].decision.predicted_s == pytest.approx(0.5)
    assert b[2].oldest_arrival == 9.0


# Seeded trace, deterministic linear service time: verified by hand for the
# first three batches (see test body) and once by running.
EXPECTED_SEED7 = [
    # admitted_at, n_datasets, rows, reason
    (3.74, 4, 3943, "admit"),
    (8.054704, 5, 5285, "admit"),
    (13.141184, 5, 5004, "admit"),
    (18.241696, 5, 4336, "admit"),
    (23.166704, 5, 4934, "admit"),
    (28.098256, 5, 5464, "admit"),
    (33.637648, 1, 1239, "admit"),
]


def test_seeded_random_trace_exact_batches():
    arrivals = random_arrivals(1000, 200, 30, seed=7)
    # the trace below was worked out for the plain residual-quantile margin
    c = AdmissionController(slide_s=5.0, interval_margin=False, cold_start=0)
    b = simulate(c, arrivals=arrivals, service_time=linear(0.2, 2e-6))
    got = [(x.admitted_at, x.n_datasets, x.rows, x.decision.reason) for x in b]
    assert len(got) == len(EXPECTED_SEED7)
    for (t, n, r, why), (et, en, er, ewhy) in zip(got, EXPECTED_SEED7):
        assert t == pytest.approx(et, abs=1e-9)
        assert (n, r, why) == (en, er, ewhy)
    # By hand: batch 0 = datasets 0..3 (252352 B) at 3.74, service
    # 0.2 + 0.504704 = 0.704704 -> completes 4.444704.  Batch 1: proportional
    # rule, 5 datasets (338240 B) predict 0.704704 * 338240 / 252352 = 0.94455;
    # age >= 5 - 0.94455 - 0.01 from arrival 4.0 -> t >= 8.04545; polls are
    # 4.444704 + k/100 -> 8.054704.
    assert b[1].decision.predicted_s == pytest.approx(0.704704 * 338240 / 252352)
    assert b[0].completed_at == pytest.approx(4.444704)
    # Batch 2: two observations, m_t = 0.790592, m_x = 295296; 5 datasets of
    # 320256 B -> 0.857417; age >= 4.132583 from 9.0 -> 13.141184.
    assert b[2].decision.predicted_s == pytest.approx(0.790592 * 320256 / 295296)
    assert b[2].oldest_arrival == 9.0
    # every dataset processed exactly once and every batch observed
    assert sum(x.rows for x in b) == sum(r for _, r, _ in arrivals)
    assert c.n_observed == len(b)
    assert all(x.max_latency_s <= 5.0 for x in b)
    assert [x.batch_id for x in b] == list(range(len(b)))


def test_polls_derived_without_drift():
    # A late first arrival and a long wait: poll times are base + k * 0.01
    # rounded to 1 ns, so they stay on the decimal grid.
    c = AdmissionController(slide_s=100.0, prior_processing_s=0.0, poll_interval_s=0.0)
    b = simulate(c, arrivals=[(1000.0, 1, 64)], service_time=const(1.0))
    assert b[0].admitted_at == 1100.0  # k = 10000 polls, no accumulated error
    assert b[0].decision.reason == "overdue"


def test_until_stops_polling():
    c = AdmissionController(slide_s=5.0)
    arrivals = constant_arrivals(100, 30)
    b = simulate(c, arrivals=arrivals, service_time=const(0.5), until=10.0)
    assert all(x.admitted_at <= 10.0 for x in b)
    assert len(b) == 2
    assert b[-1].completed_at > b[-1].admitted_at


def test_empty_trace():
    c = AdmissionController(slide_s=5.0)
    assert simulate(c, arrivals=[], service_time=const(1.0)) == []
    assert simulate_asap(arrivals=[], service_time=const(1.0)) == []
    assert simulate_fixed(1.0, arrivals=[], service_time=const(1.0)) == []


# ---------------------------------------------------------------------------
# lmstream, tumbling target
# ---------------------------------------------------------------------------


def test_tumbling_target_tracks_cumulative_mean_in_simulation():
    arrivals = random_arrivals(1000, 200, 40, seed=11)
    c = AdmissionController(slide_s=0, initial_target_s=3.0)
    b = simulate(c, arrivals=arrivals, service_time=linear(0.2, 2e-6))
    assert b[0].decision.target_s == 3.0
    assert b[0].decision.predicted_s == 0.75  # 0.25 * initial target
    for i in range(1, len(b)):
        mean = statistics.fmean(x.max_latency_s for x in b[:i])
        assert b[i].decision.target_s == pytest.approx(mean, rel=1e-12)
    assert c.target_s == pytest.approx(statistics.fmean(x.max_latency_s for x in b), rel=1e-12)


def test_mid_run_slide_change_via_service_callback():
    # The service-time callable runs while batch 1 is in flight; a slide change
    # there governs the first decision after it completes.
    c = AdmissionController(slide_s=5.0, prior_processing_s=1.234)
    calls = []

    def service(rows, nbytes):
        calls.append(rows)
        if len(calls) == 2:
            c.set_slide(2.0)
        return 0.5

    b = simulate(c, arrivals=constant_arrivals(100, 12), service_time=service)
    assert [x.decision.target_s for x in b[:3]] == [5.0, 5.0, 2.0]
    assert [ch.changes for ch in c.pop_changes()] == [{"slide_s": (5.0, 2.0)}]
    assert c.pop_changes() == []
    assert all(x.max_latency_s <= 2.0 for x in b[3:])


# ---------------------------------------------------------------------------
# baselines
# ---------------------------------------------------------------------------


def test_asap_exact():
    arrivals = [(0.0, 10, 640), (0.2, 10, 640), (0.3, 10, 640), (5.0, 10, 640)]
    b = simulate_asap(arrivals=arrivals, service_time=const(1.0))
    assert [(x.admitted_at, x.n_datasets, x.completed_at) for x in b] == [
        (0.0, 1, 1.0),
        (1.0, 2, 2.0),  # both arrived while busy: admitted at completion
        (5.0, 1, 6.0),  # idle: first poll at or after the arrival (2.0 + 300 * 0.01)
    ]
    assert all(x.decision is None for x in b)


def test_asap_waits_for_poll_grid():
    b = simulate_asap(arrivals=[(0.0, 1, 64), (1.234, 1, 64)], service_time=const(0.5))
    assert [x.admitted_at for x in b] == [0.0, 1.24]  # grid 0.5 + k * 0.01


def test_fixed_exact_ticks_and_overrun():
    arr = constant_arrivals(10, 6)  # t = 0..5
    b = simulate_fixed(2.0, arrivals=arr, service_time=const(0.5))
    assert [(x.admitted_at, x.n_datasets) for x in b] == [(0.0, 1), (2.0, 2), (4.0, 2), (6.0, 1)]
    b = simulate_fixed(2.0, arrivals=arr, service_time=const(3.0))
    # overrun: the next batch starts when the previous completes
    assert [(x.admitted_at, x.n_datasets) for x in b] == [(0.0, 1), (3.0, 3), (6.0, 2)]


def test_fixed_skips_empty_ticks_and_stays_aligned():
    arrivals = [(0.0, 1, 64), (7.0, 1, 64), (7.5, 1, 64)]
    b = simulate_fixed(2.0, arrivals=arrivals, service_time=const(2.5))
    # tick 0 -> batch; ticks 2, 4, 6 see nothing; tick 8 sees 7.0 and 7.5
    assert [(x.admitted_at, x.n_datasets) for x in b] == [(0.0, 1), (8.0, 2)]
    b = simulate_fixed(0.3, arrivals=[(0.0, 1, 64), (0.95, 1, 64)], service_time=const(0.1))
    assert [x.admitted_at for x in b] == [0.0, 1.2]  # 4 * 0.3 == 1.2 on the grid


def test_fixed_row_weighted_latency():
    arrivals = [(0.0, 100, 6400), (1.0, 100, 6400), (1.5, 300, 19200)]
    b = simulate_fixed(2.0, arrivals=arrivals, service_time=const(0.5))
    assert isinstance(b[1], SimBatch)
    assert (b[1].admitted_at, b[1].completed_at, b[1].rows) == (2.0, 2.5, 400)
    assert b[1].max_latency_s == 1.5
    assert b[1].avg_latency_s == pytest.approx((100 * 1.5 + 300 * 1.0) / 400)


def test_fixed_until():
    b = simulate_fixed(2.0, arrivals=constant_arrivals(10, 20), service_time=const(0.5), until=6.0)
    assert [x.admitted_at for x in b] == [0.0, 2.0, 4.0, 6.0]


# ---------------------------------------------------------------------------
# property: latency bound under noisy, sustainable random traffic
# ---------------------------------------------------------------------------


def noisy_service(seed: int, sd: float = 0.1, base: float = 0.3, per_byte: float = 2e-7):
    rng = random.Random(seed)

    def service(rows, nbytes):
        return max(0.0, (base + per_byte * nbytes) * (1.0 + sd * rng.gauss(0.0, 1.0)))

    return service


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_latency_bound_property(seed):
    # ~1000 rows/s for 10 minutes, ~0.36 s service for a 5 s batch +-10%
    # (sustainable), with the default margin (0.95 quantile plus the normal
    # prediction bound).  The quantile alone failed ">= 95% within target" for
    # 23 of 40 seeds (a 0.95 quantile lets ~5% overshoot by construction, and a
    # dataset arriving at the admitting poll adds a little more); with the
    # bound all 40 held (min 97.4%).
    arrivals = random_arrivals(1000, 300, 600, seed=seed)
    target = 5.0
    c = AdmissionController(slide_s=target)
    lm = simulate(c, arrivals=arrivals, service_time=noisy_service(1000 + seed))
    tail = lm[5:]
    within = sum(b.max_latency_s <= target for b in tail) / len(tail)
    assert within >= 0.95

    fixed = simulate_fixed(10.0, arrivals=arrivals, service_time=noisy_service(1000 + seed))
    assert sum(b.max_latency_s > target for b in fixed[5:]) / len(fixed[5:]) > 0.5

    asap = simulate_asap(arrivals=arrivals, service_time=noisy_service(1000 + seed))
    assert statistics.fmean(b.rows for b in lm) > 2 * statistics.fmean(b.rows for b in asap)
    for run in (lm, fixed, asap):
        assert sum(b.rows for b in run) == sum(r for _, r, _ in arrivals)
