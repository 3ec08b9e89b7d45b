"""A backlog that cannot meet the target in one batch is admitted in chunks (issue 15, item 5)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from lmstream_kit.controller import AdmissionController, BatchObservation
from lmstream_kit.exceptions import ConfigError
from lmstream_kit.protocol import BatchController, ChangeLog
from lmstream_kit.runloop import BatchSettings, RunLoop
from lmstream_kit.sim import constant_arrivals, simulate


def backlog(n, nbytes=100, t0=0.0):
    return [NS(seq=i, arrival=t0 + i, rows=10, nbytes=nbytes) for i in range(n)]


def learned(catch_up="chunks"):
    """2 s target; the model has seen 100 B in 0.5 s and 200 B in 1.0 s (both predicted exactly: margin 0)."""
    c = AdmissionController(slide_s=2.0, prior_processing_s=0.5, catch_up=catch_up, cold_start=0)
    c.observe(BatchObservation(rows=10, nbytes=100, processing_s=0.5, max_latency_s=2.0))
    c.observe(BatchObservation(rows=20, nbytes=200, processing_s=1.0, max_latency_s=2.0))
    assert c.margin_s == 0.0 and c.model.predict(400) == 2.0
    return c


def test_a_backlog_is_cut_at_the_longest_prefix_predicted_to_fit_the_budget():
    d = learned().decide(20.0, backlog(10))
    # budget 2 - 0 - 0.01 s: 3 datasets (300 B) take 1.5 s, 4 would take 2.0 s
    assert (d.admit, d.reason, d.take, d.rows, d.nbytes, d.n_datasets) == (True, "catch-up", 3, 30, 300, 10)
    assert (d.predicted_s, d.estimate_s) == (1.5, 20.0 + 1.5 + 0.01)


def test_the_paper_rule_admits_the_whole_backlog():
    d = learned("all").decide(20.0, backlog(10))
    assert (d.reason, d.take, d.nbytes, d.predicted_s) == ("overdue", None, 1000, 5.0)


def test_a_backlog_that_fits_is_admitted_whole():
    d = learned().decide(3.0, backlog(3))
    assert (d.reason, d.take, d.nbytes) == ("overdue", None, 300)


def test_where_the_oldest_dataset_alone_overruns_chunks_cannot_help():
    d = learned().decide(20.0, backlog(10, nbytes=500))  # 500 B: 2.5 s > budget
    assert (d.reason, d.take) == ("overdue", None)


def with_margin():
    """``learned()`` with a 0.5 s margin: the budget is 2 - 0.5 - 0.01 s, 2 datasets of 100 B (1 s)."""
    c = AdmissionController(slide_s=2.0, prior_processing_s=0.5, min_margin_s=0.5, cold_start=0)
    c.observe(BatchObservation(rows=10, nbytes=100, processing_s=0.5, max_latency_s=2.0))
    c.observe(BatchObservation(rows=20, nbytes=200, processing_s=1.0, max_latency_s=2.0))
    assert c.margin_s == 0.5
    return c


def test_a_chunk_late_anyway_grows_to_what_fits_the_target():
    # a spike's backlog: 100 B every 0.5 s, the oldest 1.6 s old.  The budget's chunk (2 datasets,
    # 1 s) would end at 11.01 s, 2.61 s after its oldest arrival (+ 0.5 s margin > 2 s): late, and
    # the next chunk, waiting for it, too.  So one batch takes what fits 2 - 0.01 s: 3 datasets
    arrivals = [8.4, 8.9, 9.4, 9.9]
    d = with_margin().decide(10.0, [NS(arrival=a, rows=10, nbytes=100) for a in arrivals])
    assert (d.admit, d.reason, d.take, d.nbytes, d.predicted_s) == (True, "catch-up", 3, 300, 1.5)


def test_a_chunk_on_time_keeps_the_budget():
    # a burst of 4 fresh datasets: the budget's chunk (2) ends 1.11 s after them, + 0.5 s <= 2 s
    d = with_margin().decide(10.0, [NS(arrival=9.9, rows=10, nbytes=100) for _ in range(4)])
    assert (d.reason, d.take, d.nbytes, d.predicted_s) == ("catch-up", 2, 200, 1.0)


def test_before_any_batch_a_backlog_is_cut_at_one_target_of_arrivals():
    c = AdmissionController(slide_s=2.0, prior_processing_s=0.5)
    d = c.decide(20.0, backlog(10))  # arrivals 0..9 s: the oldest two arrived within 2 s
    assert (d.reason, d.take, d.nbytes, d.predicted_s) == ("catch-up", 2, 200, 0.5)
    # a fresh stream's first batch spans less than the target: admitted whole
    assert c.decide(2.5, backlog(2)).take is None


def test_catch_up_is_a_validated_live_parameter():
    c = AdmissionController(slide_s=2.0)
    c.set_param("catch_up", "all")
    assert c.params()["catch_up"] == "all"
    with pytest.raises(ConfigError, match="'some'"):
        c.set_param("catch_up", "some")


# --------------------------------------------------------------------------- the run loop


class LinearRunner(BatchController):
    """Runs a batch in 0.5 ms per byte of the loop's clock."""

    def __init__(self, clock) -> None:
        super().__init__()
        self.clock = clock

    def run_batch(self, ctx, output_dir):
        self.clock.t += ctx.nbytes * 0.0005
        return ctx.rows, {}


def drain(catch_up, n=40, now=1100.0):
    clock = NS(t=now)
    gate = AdmissionController(slide_s=2.0, prior_processing_s=0.5, catch_up=catch_up, cold_start=0)
    log = ChangeLog()
    gate.bind_changelog(log)
    loop = RunLoop(gate, LinearRunner(clock), log, clock=lambda: clock.t,
                   settings=lambda: BatchSettings("TOY", "lmstream", 2.0, 2.0, None))
    loop.spool = NS(datasets=lambda start, end=None: backlog(n, nbytes=1000, t0=1000.0)[start:end])
    start, records = 0, []
    while start < n:
        end = loop.on_latest(start)
        loop.on_planned(start, end)
        records.append(loop.run_batch(NS(batch_id=len(records))))
        start = end
    return records


def test_chunks_tile_the_backlog_each_within_the_target_and_the_drain_is_timed():
    records = drain("chunks")
    spans = [(r["start_seq"], r["end_seq"]) for r in records]
    assert spans[0][0] == 0 and spans[-1][1] == 40
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # no gap, no overlap
    assert sum(r["rows"] for r in records) == 400
    # before the first batch: the datasets within one target (2 s) of the oldest.  A dataset
    # takes 0.5 s; the margin (the first batch's 0.5 s error, then the normal bound of 3 errors,
    # 1.13 s) leaves room for 2 datasets or none a chunk, but every dataset of the backlog is
    # 100 s old: each chunk is late anyway, so the late chunks merge up to what fits the target
    # alone (2 - 0.01 s): 3 datasets.  The last two are not a chunk.
    assert [r["end_seq"] - r["start_seq"] for r in records] == [2] + [3] * 12 + [2]
    assert [r["margin_s"] for r in records[:5]] == pytest.approx([0.0, 0.5, 0.5, 1.128, 0.781], abs=1e-3)
    assert [r["decision_reason"] for r in records] == ["catch-up"] * 13 + ["overdue"]
    assert max(r["processing_s"] for r in records) <= 2.0
    assert [r.get("catch_up_s") for r in records[:-1]] == [None] * 13
    assert records[-1]["catch_up_s"] == pytest.approx(records[-1]["completed_at"] - records[0]["admitted_at"])
    assert records[-1]["catch_up_s"] == pytest.approx(40 * 0.5)


def test_the_paper_rule_drains_the_backlog_in_one_long_batch():
    (record,) = drain("all")
    assert (record["start_seq"], record["end_seq"], record["processing_s"]) == (0, 40, 20.0)
    assert "catch_up_s" not in record


# --------------------------------------------------------------------------- on the virtual clock


def test_after_a_burst_chunks_bound_every_batch_and_leave_fewer_rows_late():
    # one 100 B dataset a second, and a burst of 60 at t = 20 s; 0.1 s + 1 ms per byte
    arrivals = [*constant_arrivals(10, 60, bytes_per_row=10), *[(20.0, 10, 100)] * 60]

    def service(rows, nbytes):
        return 0.1 + 0.001 * nbytes

    runs = {}
    for rule in ("chunks", "all"):
        c = AdmissionController(slide_s=2.0, catch_up=rule, cold_start=0)
        runs[rule] = simulate(c, arrivals=arrivals, service_time=service)
    assert sum(b.rows for b in runs["chunks"]) == sum(b.rows for b in runs["all"]) == 1200
    longest = {rule: max(b.completed_at - b.admitted_at for b in bs) for rule, bs in runs.items()}
    assert longest["chunks"] <= 2.0 < longest["all"] == pytest.approx(6.2)
    # rows in batches over the 2 s bound: the burst's chunks after the first are late anyway and
    # merge up to the target, so 540 (3 batches) against the one long batch's 670 (2 batches)
    late = {rule: [b.rows for b in bs if b.max_latency_s > 2.0] for rule, bs in runs.items()}
    assert (sum(late["chunks"]), len(late["chunks"]), sum(late["all"]), len(late["all"])) == (540, 3, 670, 2)
    # the dataset that arrives at t = 24 s, after the burst in the spool, waits for all of it
    # either way: with chunks one batch's fixed cost (0.1 s) longer
    position = sorted(a for a, _, _ in arrivals).index(24.0)
    done = {}
    for rule, bs in runs.items():
        held = 0
        for b in bs:
            held += b.n_datasets
            if held > position:
                done[rule] = b.completed_at
                break
    assert done["chunks"] == pytest.approx(27.0) and done["all"] == pytest.approx(26.9)


def test_under_a_sustained_overload_chunks_give_way_to_batches_large_enough_to_keep_up(monkeypatch):
    # 900 B a second (a 90 B dataset every 0.1 s) for 60 s; a batch costs 0.5 s + 1 ms a byte. Chunks
    # that fit the 2 s target (about 1,500 B) process at most 750 B a second: they never drain the
    # backlog, and each row waits longer than the one before (LR2S at 256,000 rows/s, 2026-12-05).
    # Larger batches pay the 0.5 s once over more bytes and keep up, at about twice a 5 s period
    from lmstream_kit import controller

    arrivals = constant_arrivals(9, 600, bytes_per_row=10, speedup=10)

    def service(rows, nbytes):
        return 0.5 + 0.001 * nbytes

    def run():
        return simulate(AdmissionController(slide_s=2.0, cold_start=0), arrivals=arrivals, service_time=service)

    batches = run()
    reasons = [b.decision.reason for b in batches]
    assert reasons[:4] == ["admit"] + ["catch-up"] * 3 and set(reasons[4:]) == {"overload"}
    assert [b.n_datasets for b in batches[:6]] == [15, 16, 16, 16, 29, 31]
    assert sum(b.rows for b in batches) == 5400
    late = [round(b.max_latency_s, 1) for b in batches]
    assert late[-3:] == [8.7, 8.8, 8.8] and max(late) == 8.8  # it levels off
    # without the rule the chunks go on, and the latency grows batch after batch
    monkeypatch.setattr(controller, "DRAIN_CHUNKS", 10**6)
    chunked = run()
    assert {b.decision.reason for b in chunked[1:-1]} == {"catch-up"}
    assert [round(b.max_latency_s, 1) for b in chunked][-3:-1] == [15.3, 15.7] and len(chunked) == 38


def test_chunks_that_drain_a_burst_never_count_as_an_overload():
    # after the burst of the test above the backlog shrinks at every chunk: no "overload"
    arrivals = [*constant_arrivals(10, 60, bytes_per_row=10), *[(20.0, 10, 100)] * 60]
    batches = simulate(AdmissionController(slide_s=2.0, cold_start=0), arrivals=arrivals,
                       service_time=lambda rows, nbytes: 0.1 + 0.001 * nbytes)
    reasons = [b.decision.reason for b in batches]
    assert "catch-up" in reasons and "overload" not in reasons


def test_a_resumed_stream_sizes_its_catch_up_chunks_by_what_its_batches_cost_before():
    from lmstream_kit.controller import AdmissionController

    # the run's records: 0.4 s a batch plus 2 us a byte
    records = [{"batch_id": i, "rows": 100, "bytes": b, "processing_s": 0.4 + 2e-6 * b, "max_latency_s": 1.5}
               for i, b in enumerate([50_000, 100_000, 150_000, 200_000] * 5)]
    fresh, resumed = (AdmissionController(slide_s=2.5, prior_processing_s=0.5, warmup=1) for _ in range(2))
    resumed.on_resume(records)
    assert (resumed.n_observed, resumed.n_warmup, fresh.n_observed) == (20, 0, 0)
    backlog = [NS(arrival=float(i) / 4, rows=100, nbytes=20_000) for i in range(120)]  # 30 s of backlog
    cold, warm = fresh.decide(40.0, backlog), resumed.decide(40.0, backlog)
    # an empty model cuts at what arrived within one target (2.5 s: 10 datasets); the learned one
    # at what its model predicts to fit the budget, 0.4 + 2e-6 * 20_000 * n <= 2.5 - margin - poll,
    # where that chunk is on time; this backlog is 10 s old and more, so late anyway: its chunk
    # grows to what fits the target alone, 2.5 - poll
    assert (cold.reason, cold.take) == ("catch-up", 10)
    assert warm.margin_s > 0
    fits = max(n for n in range(121) if 0.4 + 0.04 * n <= 2.5 - 0.01 + 1e-9)
    assert warm.reason == "catch-up" and warm.take == fits > 3 * cold.take
    # the new run's first batch is still warm-up: its JVM is cold again
    resumed.observe(BatchObservation(rows=100, nbytes=100_000, processing_s=3.0, max_latency_s=4.0))
    assert (resumed.n_warmup, resumed.n_observed) == (1, 20)


def test_a_backlog_written_into_a_stopped_runs_spool_goes_on_after_its_last_second(tmp_path):
    from lmstream_kit.feed.make import write_backlog
    from lmstream_kit.feed.spool import Spool
    from lmstream_kit.workloads import get_workload

    wl = get_workload("LR2S")
    assert write_backlog(tmp_path / "spool", wl, seconds=3, rate=10, speedup=2.0, now=100.0) == 3
    assert write_backlog(tmp_path / "spool", wl, seconds=2, rate=10, speedup=2.0, now=200.0) == 2
    datasets = Spool(tmp_path / "spool", create=False).datasets(0, 5)
    assert [d.second for d in datasets] == [0, 1, 2, 3, 4]
    assert [d.arrival for d in datasets] == [99.0, 99.5, 100.0, 199.5, 200.0]


def test_a_cold_start_chunk_fits_twice_its_prediction_and_keeps_that_as_its_margin():
    def learned_cold(cold_start):
        c = AdmissionController(slide_s=2.0, prior_processing_s=0.5, cold_start=cold_start)
        c.observe(BatchObservation(rows=10, nbytes=100, processing_s=0.5, max_latency_s=2.0))
        c.observe(BatchObservation(rows=20, nbytes=200, processing_s=1.0, max_latency_s=2.0))
        return c

    burst = [NS(seq=i, arrival=18.5 + 0.05 * i, rows=10, nbytes=100) for i in range(10)]  # 5 s of work
    d = learned_cold(3).decide(19.0, burst)
    # two batches seen, fewer than 3: a chunk fits (2 - 0.01) / 2 s, one dataset (0.75 s; two take 1 s),
    # and its margin is its prediction
    assert (d.reason, d.take, d.predicted_s, d.margin_s) == ("catch-up", 1, 0.75, 0.75)
    assert d.estimate_s == pytest.approx(0.5 + 0.75 + 0.75 + 0.01)  # age + prediction + margin + poll
    d = learned_cold(0).decide(19.0, burst)  # no cold start: 3 datasets fit 2 - 0 - 0.01 s
    assert (d.reason, d.take, d.predicted_s, d.margin_s) == ("catch-up", 3, 1.5, 0.0)
    d = learned_cold(2).decide(19.0, burst)  # cold start over after two batches
    assert (d.take, d.margin_s) == (3, 0.0)
