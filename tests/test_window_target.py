"""The window-aware tumbling target and the result latency plug-in, on seeded inputs (issue 15, item 2)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from lmstream_kit.controller import AdmissionController, BatchObservation
from lmstream_kit.exceptions import ConfigError
from lmstream_kit.results import WindowResults


def ds(second, arrival=None, nbytes=100):
    return NS(second=second, arrival=float(second if arrival is None else arrival), rows=10, nbytes=nbytes)


def window_gate(**kw):
    # CM1T at speedup 1: 60 s windows, 5 s lateness; batch up to 30 s inside a window
    params = dict(slide_s=0, prior_processing_s=1.0, tumbling_target="window", window_target_s=30.0,
                  close_period_s=60.0, lateness_s=5.0)
    return AdmissionController(**{**params, **kw})


def test_inside_a_window_the_target_is_the_windows_length_and_learning_does_not_shrink_it():
    c = window_gate()
    assert c.target_s == 1.0  # before any batch: initial_target_s, as under the paper's rule
    c.observe(BatchObservation(rows=10, nbytes=100, processing_s=0.2, max_latency_s=0.5))
    assert c.target_s == 30.0  # the paper's rule would now be 0.5
    c.observe(BatchObservation(rows=10, nbytes=100, processing_s=0.2, max_latency_s=0.4))
    assert c.target_s == 30.0
    paper = window_gate(tumbling_target="paper")
    paper.observe(BatchObservation(rows=10, nbytes=100, processing_s=0.2, max_latency_s=0.5))
    assert paper.target_s == 0.5


def test_the_first_batches_are_small_ones_that_teach_the_model_what_a_row_costs():
    # CM1T at 102,400 rows/s: the prior guessed 7.5 s (a quarter of 30) for any batch, so the first batch
    # waited 15 s for a window's worth of data and took 10.6 s. Before any batch the target is 1 s:
    c = window_gate(prior_processing_s=None)
    assert c.decide(0.2, [ds(0, 0.0), ds(1, 0.1)]).reason == "wait"  # 0.2 + 2 * 0.25 + 0.01 < 1
    d = c.decide(0.5, [ds(s, s / 10) for s in range(5)])  # 0.5 + 2 * 0.25 + 0.01 >= 1
    assert (d.admit, d.reason) == (True, "admit")
    # once a batch is seen, the window's target: the same data now waits
    c.observe(BatchObservation(rows=50, nbytes=500, processing_s=0.3, max_latency_s=0.8))
    assert c.decide(0.6, [ds(s, s / 10) for s in range(5, 11)]).reason == "wait"


def test_data_that_closes_a_window_is_admitted_at_once_and_only_then():
    # at speedup 10: second s arrives at s / 10 s; the target is 3 s, the prior 0.1 s
    # (the same target before the first batch as after it: nothing is observed in this test)
    c = window_gate(window_target_s=3.0, initial_target_s=3.0, prior_processing_s=0.1)

    def fed(lo, hi):
        return [ds(s, s / 10) for s in range(lo, hi)]

    assert c.decide(1.05, fed(0, 11)).reason == "wait"  # age 1.05 + 0.1 + 0.01 < 3
    assert c.decide(2.9, fed(0, 29)).reason == "admit"  # 2.9 + 0.11 >= 3: seconds 0..28 admitted
    assert c.decide(5.0, fed(29, 50)).reason == "wait"
    assert c.decide(5.8, fed(29, 58)).reason == "admit"  # 0..57 admitted
    # seconds 58..64: the watermark would be 59, the window [0, 60) stays open
    assert c.decide(6.45, fed(58, 65)).reason == "wait"
    d = c.decide(6.55, fed(58, 66))  # second 65: the watermark reaches 60 and closes [0, 60)
    assert (d.admit, d.reason, d.take) == (True, "window", None)
    # Spark emits [0, 60) with the next batch: it goes at once with whatever is pending
    assert c.decide(6.7, fed(66, 67)).reason == "emit"
    # [60, 120) closes only with second 125
    assert c.decide(7.05, fed(67, 71)).reason == "wait"
    assert c.decide(12.55, [ds(125, 12.5)]).reason == "window"


def test_a_stream_that_starts_inside_a_window_does_not_close_the_empty_one_before_it():
    # the first data is second 64: [0, 60) holds no row, so the watermark passing 60 emits nothing
    c = window_gate(window_target_s=3.0, initial_target_s=3.0, prior_processing_s=0.1, cold_start=0)
    assert c.decide(9.5, [ds(64, 6.4)]).admit  # waited out the target
    assert c.decide(9.75, [ds(65, 9.6), ds(66, 9.7)]).reason == "wait"  # the watermark passes 60: nothing closes
    assert c.decide(12.45, [ds(65, 9.6), ds(66, 9.7), ds(125, 12.4)]).reason == "window"  # [60, 120) closes
    # WindowResults agrees: the first window it reports emitted is [60, 120)
    w = WindowResults(period_s=lambda: 60.0, lateness_s=5.0)
    w.before_batch(NS(datasets=[ds(s, s / 10) for s in range(64, 126)]))
    w.after_batch(NS(completed_at=13.0))
    w.before_batch(NS(datasets=[]))
    assert w.after_batch(NS(completed_at=13.1))["closed_window_end"] == 120.0


def fitted_gate(**kw):
    """CM1T at speedup 10 (the window [0, 60) closes with second 65, arriving at 6.5 s), a 6 s target and
    a model that predicts 0.05 s + 50 us per byte (seen exactly; no margin)."""
    c = window_gate(window_target_s=6.0, prior_processing_s=0.1, cold_start=0, interval_margin=False, **kw)
    for nbytes, seconds in ((1000, 0.1), (2000, 0.15), (4000, 0.25)):
        c.observe(BatchObservation(rows=10, nbytes=nbytes, processing_s=seconds, max_latency_s=1.0))
    assert c.model.coefficients == pytest.approx((0.05, 5e-5)) and c.margin_s == 0.0
    return c


def fed(lo, hi, nbytes=1000):
    return [ds(s, s / 10, nbytes) for s in range(lo, hi)]


def test_before_a_close_batches_are_admitted_early_enough_to_end_by_it():
    # 10,000 B a wall second: rho = 0.5 s of processing per wall s of data. Everything pending at the
    # close (seconds 0..64, 3.3 s) is far more than an asap batch (~0.1 s), so the rule acts: it admits
    # seconds 0..k-1 once now + poll + predicted / (1 - rho) reaches 6.5 s
    c = fitted_gate()
    assert c.decide(3.105, fed(0, 32)).reason == "wait"    # 3.105 + 0.01 + 2 * 1.65 = 6.415
    d = c.decide(3.205, fed(0, 33))                        # 3.205 + 0.01 + 2 * 1.70 = 6.615
    assert (d.admit, d.reason, d.take) == (True, "close", None)
    # that batch ends at ~4.9 s; what came meanwhile goes at once, and so on, each batch shorter
    assert c.decide(4.905, fed(33, 50)).reason == "close"  # 0.9 s predicted: 4.905 + 0.01 + 1.8 >= 6.5
    assert c.decide(5.81, fed(50, 59)).reason == "close"
    # the closing data is admitted as before, then the batch that emits the window
    assert c.decide(6.51, fed(59, 66)).reason == "window"
    assert c.decide(6.9, fed(66, 70)).reason == "emit"
    # the next window closes with second 125 (12.5 s): early in it the data waits again
    assert c.decide(7.5, fed(70, 75)).reason == "wait"


def test_without_close_horizon_the_same_stream_waits_for_the_target():
    c = fitted_gate(close_horizon=False)
    assert c.decide(3.205, fed(0, 33)).reason == "wait"
    assert c.decide(4.005, fed(0, 41)).reason == "admit"   # 4.005 + 2.1 + 0.01 >= 6: a 2.1 s batch
    # the rule is a live parameter
    c.mutate({"close_horizon": True})
    assert c.decide(5.105, fed(41, 52)).reason == "wait"   # 5.105 + 0.01 + 2 * 0.60 = 6.315
    assert c.decide(5.205, fed(41, 53)).reason == "close"  # 5.205 + 0.01 + 2 * 0.65 = 6.515


def test_at_a_low_rate_the_close_rule_keeps_out_of_the_way():
    # 100 B a wall second: everything pending at the close takes ~0.08 s, less than two asap batches
    c = fitted_gate()
    assert c.decide(5.5, fed(10, 55, nbytes=10)).reason == "wait"
    assert c.decide(6.51, fed(10, 66, nbytes=10)).reason == "window"


def test_where_the_data_outruns_the_model_everything_goes_at_once():
    # 200,000 B a wall second: 10 s of processing per wall s (rho >= CLOSE_RHO_MAX), batches cannot shrink
    c = fitted_gate()
    assert c.decide(0.15, fed(0, 2, nbytes=20000)).reason == "close"
    # one dataset tells no rate: the last one seen serves
    assert c.decide(0.25, fed(2, 3, nbytes=20000)).reason == "close"


def test_the_paper_rule_and_data_without_a_second_never_close_a_window():
    assert window_gate(tumbling_target="paper", initial_target_s=30.0).decide(65.5, [ds(s, 64.0) for s in range(60, 66)]).reason == "wait"
    unknown = [NS(arrival=64.0, rows=10, nbytes=100)]
    assert window_gate(initial_target_s=30.0).decide(65.5, unknown).reason == "wait"
    # a query whose results do not wait for windows (a join): no close period, batches up to the target
    assert window_gate(close_period_s=0.0, initial_target_s=30.0).decide(65.5, [ds(s, 64.0) for s in range(60, 66)]).reason == "wait"


def test_result_latency_counts_from_the_closing_datas_arrival_to_the_batch_after_it():
    w = WindowResults(period_s=lambda: 10.0, lateness_s=2.0)  # a 10 s slide: a window ends every 10 s
    batch = lambda *seconds: NS(datasets=[ds(s, 1000.0 + s) for s in seconds])  # noqa: E731
    out = []
    for seconds, done in (((0, 1, 2), 1003.0), ((11, 12, 13), 1013.5), ((), 1013.7), ((25, 33), 1034.0),
                          ((34,), 1035.0)):
        w.before_batch(batch(*seconds))
        out.append(w.after_batch(NS(completed_at=done)))
    assert out == [
        {"windows_closed": 0},
        {"windows_closed": 0},  # second 12 closed the window ending at 10: emitted by the next batch
        {"windows_closed": 1, "result_latency_s": 1013.7 - 1012.0, "closed_window_end": 10.0},
        {"windows_closed": 0},  # 25 closed the end at 20, 33 the end at 30
        {"windows_closed": 2, "result_latency_s": 1035.0 - 1025.0, "closed_window_end": 30.0},
    ]


def test_plugged_into_a_stream_it_takes_the_streams_slide_as_it_changes_and_the_workloads_lateness():
    from lmstream_kit.workloads import get_workload

    assert WindowResults.for_workload(get_workload("LR1S")) is None  # a join: rows as they come
    w = WindowResults.for_workload(get_workload("LR2S"))  # windows of 30 s every 10 s, 5 s late
    host = NS(slide_s=10.0, workload=get_workload("LR2S"))
    w.plugged(host)
    batch = lambda *seconds: NS(datasets=[ds(s, 1000.0 + s) for s in seconds])  # noqa: E731
    w.before_batch(batch(0, 16))  # the watermark 11 passes 10
    assert w.after_batch(NS(completed_at=1016.5)) == {"windows_closed": 0}
    host.slide_s = 20.0  # a live slide change: the next ends are multiples of 20
    w.before_batch(batch(26, 45))  # 26's watermark (21) passes 20; 45's (40) passes 40, not 30
    assert w.after_batch(NS(completed_at=1045.5)) == {"windows_closed": 1, "result_latency_s": 1045.5 - 1016.0,
                                                      "closed_window_end": 10.0}
    w.before_batch(batch())
    assert w.after_batch(NS(completed_at=1046.0)) == {"windows_closed": 2, "result_latency_s": 1046.0 - 1026.0,
                                                      "closed_window_end": 40.0}


def test_a_cells_result_latency_counts_the_watermarks_no_data_batches_too():
    import pandas as pd

    from lmstream_kit.bench.cells import cell_row
    from lmstream_kit.workloads import get_workload

    metrics = pd.DataFrame([
        {"batch_id": 0, "rows": 100, "max_latency_s": 2.0, "avg_latency_s": 1.0, "processing_s": 0.5,
         "oldest_arrival": 10.0, "completed_at": 12.0, "windows_closed": 0},
        {"batch_id": 1, "rows": 0, "max_latency_s": None, "avg_latency_s": None, "processing_s": 0.1,
         "oldest_arrival": None, "completed_at": 12.2, "windows_closed": 1, "result_latency_s": 0.7},
        {"batch_id": 2, "rows": 100, "max_latency_s": 2.0, "avg_latency_s": 1.0, "processing_s": 0.5,
         "oldest_arrival": 20.0, "completed_at": 22.0, "windows_closed": 1, "result_latency_s": 1.3},
    ])
    row = cell_row(metrics, workload=get_workload("CM1T"), policy="lmstream", traffic="constant", rep=0, seed=0,
                   rate=1000, speedup=2, duration_s=60)
    assert (row["batches"], row["rows"]) == (2, 200)  # data batches only
    assert (row["result_latency_s"], row["max_result_latency_s"]) == (1.0, 1.3)
    none = cell_row(metrics.drop(columns=["result_latency_s"]), workload=get_workload("LR1T"), policy="asap",
                    traffic="constant", rep=0, seed=0, rate=1000, speedup=2, duration_s=60)
    assert none["result_latency_s"] != none["result_latency_s"]  # NaN: no window emitted


def test_bench_options_of_the_controller_are_validated_in_one_line():
    import pytest

    from lmstream_kit.bench.config import BenchConfig
    from lmstream_kit.exceptions import ConfigError

    assert BenchConfig(queries=["CM1T"]).tumbling_target == "window"
    with pytest.raises(ConfigError, match="tumbling target must be 'window' or 'paper', got 'mean'"):
        BenchConfig(queries=["CM1T"], tumbling_target="mean")
    with pytest.raises(ConfigError, match="catch-up must be 'chunks' or 'all', got 'some'"):
        BenchConfig(queries=["CM1T"], catch_up="some")


def test_the_reproduction_page_shows_prediction_errors_only_for_batches_that_carry_predictions():
    import pandas as pd

    from lmstream_kit.report import reproduction_markdown

    results = pd.DataFrame([{"query": "LR1S", "policy": "lmstream", "traffic": "constant", "rep": 0}])
    batches = pd.DataFrame({"query": ["LR1S"] * 4, "traffic": ["constant"] * 4, "policy": ["lmstream"] * 4,
                            "rep": [0] * 4, "processing_s": [1.0, 1.0, 1.0, 3.0],
                            "predicted_s": [1.0, 1.0, 1.0, 1.0]})
    page = reproduction_markdown(results, batches, None, {})
    assert "## Service-time prediction" in page and "| LR1S | constant | 4 |" in page
    assert "## Service-time prediction" not in reproduction_markdown(results, batches.drop(columns="predicted_s"),
                                                                     None, {})


def test_overload_cells_make_claim_1b_fig1_and_their_own_section_but_stay_out_of_the_sweeps_tables():
    import pandas as pd

    from lmstream_kit.report import build_report, claims, reproduction_markdown

    def cell(policy, rate, load, max_lat, within):
        return {"query": "LR2S", "window_kind": "sliding", "policy": policy, "traffic": "constant", "rep": 0,
                "rate": rate, "load": load, "bound_s": 5.0, "max_latency_s": max_lat, "within_bound": within,
                "avg_latency_s": max_lat / 2, "throughput_rows_s": 1000.0, "batches": 10, "rows": 1000}

    results = pd.DataFrame([cell("fixed", 1000.0, "sweep", 9.0, 0.0), cell("lmstream", 1000.0, "sweep", 4.9, 1.0),
                            cell("fixed", 2000.0, "overload", 41.0, 0.05), cell("lmstream", 2000.0, "overload", 4.8, 0.97)])
    table = claims(results).set_index("claim")
    fig1 = table.loc["1b. at a load above the fixed trigger's capacity (Fig. 1)"]
    assert fig1["agrees"] is True and fig1["value"] == 0.97
    assert "LR2S at 2,000 rows/s: fixed's largest latency 41 s (5% within the 5 s bound)" in fig1["ours"]
    # claim 1 compares per rate and names it; claim 3 reads the sweep's cells only
    assert "rows/s" in table.loc["1. average latency vs the throughput-oriented baseline (fixed trigger)", "where"]
    weak = results.assign(within_bound=[0.0, 1.0, 0.05, 0.6])
    assert claims(weak).set_index("claim").loc["1b. at a load above the fixed trigger's capacity (Fig. 1)",
                                                 "agrees"] is False
    page = reproduction_markdown(results, None, None, {})
    assert "## At an overload (Fig. 1)" in page
    batches = pd.DataFrame([{"query": "LR2S", "policy": p, "traffic": "constant", "rep": 0, "t_s": float(t),
                             "max_latency_s": 1.0 + t * (p == "fixed"), "rows": 100, "bound_s": 5.0,
                             "load": "overload", "rate": 2000.0} for p in ("fixed", "lmstream") for t in range(5)])
    html_page = build_report(results, batches, None, {})
    assert "LR2S lmstream" in html_page  # lmstream's dotted line beside fixed's in Fig. 1


def join_gate(**kw):
    # LR1T at speedup 10: 30 s windows, 5 s lateness, results that do not wait for a close; second s
    # arrives at s / 10 s, the target is 3 s
    return window_gate(close_period_s=0.0, window_period_s=30.0, window_target_s=3.0, initial_target_s=3.0,
                       prior_processing_s=0.1, **kw)


def test_evict_horizon_takes_a_joins_window_ends_as_closes():
    plain, evicting = join_gate(evict_horizon=False), join_gate()  # on by default
    for c in (plain, evicting):
        assert c.decide(2.9, fed(0, 29)).reason == "admit"
    # second 35 moves the watermark past the end 30: the batch after it drops [0, 30)'s state
    assert plain.decide(3.6, fed(29, 36)).reason == "wait"
    d = evicting.decide(3.6, fed(29, 36))
    assert (d.admit, d.reason, d.take) == (True, "window", None)
    assert evicting.decide(4.0, fed(36, 40)).reason == "emit"  # the evicting batch goes at once too
    assert evicting.decide(4.5, fed(40, 45)).reason == "wait"  # [30, 60) ends with second 65
    assert evicting.decide(6.55, fed(40, 66)).reason == "window"
    # a live parameter: off, the join's window ends are no closes again
    assert evicting.decide(6.7, fed(66, 67)).reason == "emit"
    evicting.mutate({"evict_horizon": False})
    assert evicting.decide(9.55, fed(80, 96)).reason == "wait"  # second 95 passes the end 90


def test_the_batch_after_data_that_closes_a_window_goes_at_once_whatever_admitted_that_data():
    # LR1T at speedup 10 as above. Second 35 passes the end 30; admitted by the target ("admit"),
    # not by the window rule, the batch after it (which evicts [0, 30)) must go at once all the same:
    # it waited for the target instead, 11 s of data and the eviction in one batch (LR1T, 34,896 rows/s)
    for c, after in ((join_gate(), "emit"), (join_gate(evict_horizon=False), "wait"),
                     (join_gate(tumbling_target="paper"), "wait")):
        assert c.decide(3.5, fed(6, 36)).reason == "admit"  # 2.9 s old, 0.1 s predicted: seconds 6..35 go
        assert c.decide(3.7, fed(36, 37)).reason == after, c
    cm1t = window_gate(window_period_s=60.0, initial_target_s=30.0, prior_processing_s=0.1)
    assert cm1t.decide(30.4, fed(5, 300)).reason == "admit"  # seconds 5..299 close [0, 60) (at 65)
    assert cm1t.decide(30.5, fed(300, 301)).reason == "emit"


def test_cold_evictions_gives_the_batch_that_evicts_a_windows_state_the_cold_margin_until_one_ran():
    # 30 s windows, 5 s lateness, a 10 s target at speedup 1; every 1,000-byte batch took 2 s
    def fed(lo, hi):
        return [ds(s) for s in range(lo, hi)]

    plain = AdmissionController(slide_s=10.0, cold_start=0, window_period_s=30.0, lateness_s=5.0, cold_evictions=0)
    cold = AdmissionController(slide_s=10.0, cold_start=0, window_period_s=30.0, lateness_s=5.0, cold_evictions=1)
    for c in (plain, cold):
        for i in range(1, 5):
            c.observe(BatchObservation(rows=100, nbytes=1000, processing_s=2.0, max_latency_s=5.0, batch_id=i))
        assert c.decide(10.0, fed(0, 10)).reason == "overdue"
        # seconds 36..45 wait, then these admitted ones follow: a batch that moves no watermark past a window's end
        assert c.decide(36.0, fed(10, 36)).reason == "overdue"  # second 35's watermark passes the end 30
    # the next batch drops the window's state: 6.5 s old + 2 s predicted + 0.53 margin + 0.01 poll < 10 waits;
    # with its margin at least its prediction, 6.5 + 2 + 2 + 0.01 >= 10 goes
    d_plain, d_cold = plain.decide(42.5, fed(36, 46)), cold.decide(42.5, fed(36, 46))
    assert d_plain.reason == "wait" and d_plain.margin_s == pytest.approx(0.531, abs=1e-3)
    assert (d_cold.reason, d_cold.margin_s) == ("admit", 2.0)
    # that batch (46..) passes no end: the batch after it is not cold, however near the target
    assert cold.decide(52.5, fed(46, 56)).reason == "wait"
    # once Spark reported an eviction, the model has seen one: the next window's is an ordinary batch
    cold.on_progress({"batch_id": 5, "state_rows": 1000, "state_bytes": 64000, "state_rows_removed": 500})
    assert cold.decide(66.0, fed(46, 66)).reason == "overdue"  # second 65 passes the end 60
    assert cold.decide(72.5, fed(66, 76)).reason == "wait"
    cold.mutate({"cold_evictions": 2})  # live: one more eviction counts as cold
    assert cold.decide(72.5, fed(66, 76)).reason == "admit"
    with pytest.raises(ConfigError, match="cold_evictions"):
        AdmissionController(slide_s=10.0, cold_evictions=-1)
