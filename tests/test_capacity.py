"""The capacity search: its exact probes on seeded pass/fail functions, its statuses, the wall-clock
budget on an injected clock, the probe rows it writes, and its CLI option.  No Spark."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from lmstream_kit.bench import BenchConfig, CapacitySearch
from lmstream_kit.bench.capacity import PROBE_COLUMNS, STATUSES, _capacity, search_pairs
from lmstream_kit.exceptions import ConfigError
from lmstream_kit.report import capacity_table
from lmstream_kit.report.tables import capacity_brackets

REPO = Path(__file__).resolve().parents[1]


def search(passes, start=1000, **kw) -> CapacitySearch:
    """A search run to its end; ``passes(rate, rep)`` is one probe run's outcome."""
    s = CapacitySearch(start, **kw)
    while (rate := s.next_rate()) is not None:
        s.record(rate, passes(rate, s.runs_at(rate)))
    return s


# ---------------------------------------------------------------- the pure search
def test_search_doubles_bisects_to_ten_percent_then_runs_each_bound_a_second_time():
    s = search(lambda rate, rep: rate <= 5000, max_probes=20, max_rate=1e6)
    assert s.probes == [(1000, 0, True), (2000, 0, True), (4000, 0, True), (8000, 0, False), (5657, 0, False),
                        (4757, 0, True), (5188, 0, False), (4757, 1, True), (5188, 1, False)]
    assert (s.lo, s.hi, s.status, s.bound_reps) == (4757, 5188, "bracketed", 2)
    assert s.hi / s.lo - 1 <= 0.10 and s.capacity == s.lo


def test_search_halves_while_the_start_fails_and_brackets_below_it():
    s = search(lambda rate, rep: rate <= 300, max_probes=20, max_rate=1e6)
    assert [(rate, rep) for rate, rep, _ in s.probes] == [(1000, 0), (500, 0), (250, 0), (354, 0), (297, 0),
                                                          (324, 0), (297, 1), (324, 1)]
    assert (s.lo, s.hi, s.status) == (297, 324, "bracketed")


def test_a_noisy_rate_is_what_most_of_its_runs_say_and_a_tie_runs_once_more():
    def noisy(rate, rep):  # capacity 3000 give or take 10%, drawn per run from its own seed
        return rate <= 3000 * (1 + 0.1 * random.Random(f"8/{rate}/{rep}").gauss(0, 1))

    s = search(noisy, max_probes=12, max_rate=1e5)
    assert s.probes == [(1000, 0, True), (2000, 0, True), (4000, 0, False), (2828, 0, True),
                        (3363, 0, True), (3668, 0, False), (3363, 1, False), (3363, 2, False), (3084, 0, True),
                        (3084, 1, False), (3084, 2, False), (2828, 1, True)]
    # 3363 and then 3084 passed their first run: a failed repetition tied each, and the third run
    # failed too, so they are fails and the bracket moved down
    assert (s.lo, s.hi, s.status, s.bound_reps) == (2828, 3084, "bracketed", 2)
    assert s.runs_at(3363) == 3 and s.runs_at(1000) == 1 and s.verdict(3363) is False


def test_a_failed_first_run_stays_a_fail_when_its_repetition_passes():
    s = search(lambda rate, rep: rate <= 2600 or (rate == 2828 and rep == 1), max_probes=12, max_rate=1e5)
    assert (2828, 0, False) in s.probes and (2828, 1, True) in s.probes
    assert (s.lo, s.hi, s.status) == (2593, 2828, "bracketed")


def test_no_failing_rate_up_to_the_max_is_open_after_the_max_ran_twice():
    s = search(lambda rate, rep: True, max_probes=12, max_rate=3000)
    assert s.probes == [(1000, 0, True), (2000, 0, True), (3000, 0, True), (3000, 1, True)]
    assert (s.lo, s.hi, s.status) == (3000, None, "open")
    # the max's repetition fails once: a tie, and a third run that passes keeps it open
    once = search(lambda rate, rep: not (rate == 3000 and rep == 1), max_probes=12, max_rate=3000)
    assert once.probes[3:] == [(3000, 1, False), (3000, 2, True)] and once.status == "open"
    # it fails twice: no longer open, it bisects below it
    flaky = search(lambda rate, rep: not (rate == 3000 and rep >= 1), max_probes=12, max_rate=3000)
    assert [rate for rate, _, _ in flaky.probes][:6] == [1000, 2000, 3000, 3000, 3000, 2449]
    assert flaky.hi == 3000 and flaky.status == "bracketed"


def test_every_rate_down_to_an_eighth_of_the_start_failing_is_none_passed():
    s = search(lambda rate, rep: False, max_probes=12)
    assert s.probes == [(1000, 0, False), (500, 0, False), (250, 0, False), (125, 0, False), (125, 1, False)]
    assert (s.lo, s.hi, s.status, s.bound_reps) == (None, 125, "none-passed", 2)


def test_the_probe_limit_leaves_the_search_not_converged_with_its_bracket():
    s = search(lambda rate, rep: rate <= 3000, max_probes=5, max_rate=1e5)
    assert [rate for rate, _, _ in s.probes] == [1000, 2000, 4000, 2828, 3363]
    assert (s.lo, s.hi, s.status, s.bound_reps) == (2828, 3363, "not-converged", 1)
    # within 10% but a bound ran once: not bracketed yet
    one_short = search(lambda rate, rep: rate <= 3000, max_probes=7, max_rate=1e5)
    assert (one_short.lo, one_short.hi, one_short.status) == (2828, 3084, "not-converged")
    assert CapacitySearch(1000).status == "not-converged" and set(STATUSES) >= {s.status, one_short.status}


def test_a_bad_start_rate_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="-5"):
        CapacitySearch(-5)


def pooled(runs, min_batches=20):
    """The verdict of one rate whose runs made ``runs`` = [(batches, late) or None (fell behind)]."""
    s = CapacitySearch(1000, min_batches=min_batches)
    for counts in runs:
        if counts is None:
            s.record(1000, False)
        else:
            batches, late = counts
            s.record(1000, late <= 0.05 * batches, batches=batches, late=late)
    return s.verdict(1000)


def test_a_pooled_rate_fails_only_on_enough_batches_and_one_late_batch_of_a_few_runs_again():
    assert pooled([(18, 0)]) is True
    assert pooled([(18, 1)]) is None  # 94.4%, but 18 batches cannot hold one late: run again
    assert pooled([(18, 1), (18, 0)]) is True  # 1 of 36
    assert pooled([(18, 1), (18, 1)]) is False  # 2 of 36: 94.4% of enough batches
    assert pooled([(18, 2)]) is False  # 2 late are more than 5% of any 20
    assert pooled([(6, 1), (6, 1)]) is False  # LR1T's lmstream at 12,338: 10 of 12
    assert pooled([(6, 1), (6, 0), (6, 0)]) is None and pooled([(6, 1), (6, 0), (6, 0), (6, 0)]) is True
    assert pooled([(120, 6)]) is True and pooled([(120, 7)]) is False  # many batches: the 95% rule alone
    assert pooled([(18, 0), None]) is False  # a run that fell behind fails its rate
    # without pooling, most runs decide: one late batch of 18 fails a run, two such runs the rate
    assert pooled([(18, 1)], min_batches=0) is False and pooled([(18, 1), (18, 0)], min_batches=0) is None


# ---------------------------------------------------------------- the loop, its budget and progress
class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def probing(clock: FakeClock, capacities: dict, seconds: float = 10.0):
    """A probe that takes ``seconds`` of the fake clock and passes up to its policy's capacity."""

    def probe(pair, rate, rep):
        clock.now += seconds
        return {"passed": rate <= capacities[pair[1]]}

    return probe


def test_without_a_budget_every_pair_converges_and_the_progress_total_shrinks_to_the_runs():
    events = []
    rows = search_pairs([("Q", "a"), ("Q", "b")], probing(FakeClock(), {"a": 2999, "b": 1e9}),
                        lambda pair: CapacitySearch(1000, max_probes=12, max_rate=3000), notify=events.append)
    last = {(r["policy"]): r for r in rows}
    assert (last["a"]["lo"], last["a"]["hi"], last["a"]["status"]) == (2852, 3000, "bracketed")
    assert (last["b"]["lo"], last["b"]["hi"], last["b"]["status"]) == (3000, None, "open")
    totals = [(e["done"], e["total"]) for e in events]
    # an upper bound from the start (2 pairs x 12), cut to the runs a pair made when it finishes
    assert totals[0] == (0, 24) and totals[-1] == (len(rows), len(rows)) == (12, 12)
    assert all(later <= earlier for (_, earlier), (_, later) in zip(totals, totals[1:]))
    assert all(done <= total for done, total in totals)
    assert {e["phase"] for e in events} == {"capacity"}
    assert events[0]["label"] == "capacity Q a @ 1000 rows/s, run 1"
    assert events[1]["label"] == "capacity Q b @ 1000 rows/s, run 1"  # the query's policies take turns
    said = [(e["done"], e["total"], e["label"]) for e in events]
    # b was done (open) after its 4th run, the 8th; a went on alone to its 8th
    assert (8, 16, "capacity Q b: >= 3000 rows/s (open, 4 runs)") in said
    assert said[-2] == (12, 12, "capacity Q a: 2852-3000 rows/s (bracketed, 8 runs)")


def test_the_budget_shares_the_time_and_leaves_each_cut_pair_not_converged_with_its_bracket():
    clock = FakeClock()
    events = []
    three = {"a": 3000, "b": 3000, "c": 3000}
    rows = search_pairs([("Q", "a"), ("Q", "b"), ("Q", "c")], probing(clock, three),
                        lambda pair: CapacitySearch(1000, max_probes=12), budget_s=100, clock=clock,
                        notify=events.append)
    # one query: its three policies take turns (a, b, c, a, ...) at 10 s a probe for the whole 100 s
    assert [sum(r["policy"] == p for r in rows) for p in "abc"] == [4, 3, 3]
    assert clock.now == 100  # no probe started at or after the budget
    last = {r["policy"]: r for r in rows}
    assert [(last[p]["lo"], last[p]["hi"], last[p]["status"]) for p in "abc"] == [
        (2828, 4000, "not-converged"), (2000, 4000, "not-converged"), (2000, 4000, "not-converged")]
    last_event = (events[-1]["done"], events[-1]["total"], events[-1]["label"])
    assert last_event == (10, 10, "capacity: budget spent")


def test_time_a_pair_leaves_unused_goes_to_the_pair_its_share_cut_short():
    clock = FakeClock()
    rows = search_pairs([("Q", "a"), ("Q", "b")], probing(clock, {"a": 3000, "b": 10}),
                        lambda pair: CapacitySearch(1000, max_probes=12, max_rate=1e5), budget_s=130, clock=clock)
    a = [r for r in rows if r["policy"] == "a"]
    b = [r for r in rows if r["policy"] == "b"]
    # a and b took turns until b's search was done (5 runs, at 100 s); a ran alone after it
    assert [r["rate"] for r in a] == [1000, 2000, 4000, 2828, 3363, 3084, 2828, 3084]
    assert (a[-1]["status"], a[-1]["lo"], a[-1]["hi"]) == ("bracketed", 2828, 3084)
    assert (len(b), b[-1]["status"]) == (5, "none-passed")
    assert clock.now == 130


def test_each_query_gets_an_equal_share_its_policies_take_turns_and_time_left_goes_back():
    clock = FakeClock()
    ran: list = []
    rows = search_pairs([("Q1", "a"), ("Q1", "b"), ("Q2", "c"), ("Q2", "d")],
                        probing(clock, {"a": 3000, "b": 3000, "c": 10, "d": 10}),
                        lambda pair: CapacitySearch(1000, max_probes=12), budget_s=240, clock=clock, on_row=ran.append)
    # Q1's share, 120 s of 240, is 12 runs in turn; Q2 needs 100 s of its 120 (c and d: none passed
    # after 5 runs each); the 20 s left go back to Q1, its policies still in turn
    assert "".join(r["policy"] for r in ran) == "ab" * 6 + "cd" * 5 + "ab"
    assert clock.now == 240
    last = {r["policy"]: r for r in rows}
    assert [last[p]["status"] for p in "abcd"] == ["not-converged", "not-converged", "none-passed", "none-passed"]
    assert [r["policy"] for r in rows] == ["a"] * 7 + ["b"] * 7 + ["c"] * 5 + ["d"] * 5  # each pair's rows together


def test_time_given_back_runs_only_the_unfinished_pairs_of_a_query():
    clock = FakeClock()
    events: list = []
    ran: list = []
    search_pairs([("Q1", "a"), ("Q1", "b"), ("Q2", "c")], probing(clock, {"a": 3000, "b": 10, "c": 10}),
                 lambda pair: CapacitySearch(1000, max_probes=12), budget_s=200, clock=clock, notify=events.append,
                 on_row=ran.append)
    # Q1's 100 s: a and b in turn, b done (none passed) after 5 runs, a not; Q2's c needs 50 s of its 100;
    # the 50 s left go to a alone, which needs 3 more runs to be done
    assert "".join(r["policy"] for r in ran) == "ab" * 5 + "c" * 5 + "a" * 3
    said = [e["label"] for e in events]
    assert sum(label.startswith("capacity Q1 b: ") for label in said) == 1  # b's bracket said once
    assert sum(label.startswith("capacity Q1 a: ") for label in said) == 2  # cut by its share, then done


def test_a_query_is_told_done_as_soon_as_its_search_is_and_its_hook_spends_none_of_the_budget():
    clock = FakeClock()
    ran: list = []
    told: list = []

    def done(query, rows):  # the bench's cells at capacity: 500 s of the clock, not the search's budget
        told.append((query, len(ran), sorted({r["policy"] for r in rows}), len(rows)))
        clock.now += 500.0

    search_pairs([("Q1", "a"), ("Q1", "b"), ("Q2", "c")], probing(clock, {"a": 3000, "b": 10, "c": 10}),
                 lambda pair: CapacitySearch(1000, max_probes=12), budget_s=200, clock=clock, on_row=ran.append,
                 on_query_done=done)
    # the same runs as without the hook (see the test above): Q1's share cut a short, so Q1 is told once the
    # time left went back to a; Q2 (done in its share) is told at once, before that
    assert "".join(r["policy"] for r in ran) == "ab" * 5 + "c" * 5 + "a" * 3
    assert told == [("Q2", 15, ["c"], 5), ("Q1", 18, ["a", "b"], 13)]


def test_a_pair_the_budget_left_without_a_probe_gets_a_row_without_a_rate():
    clock = FakeClock()
    both = {"lmstream": 3000, "fixed": 3000}
    rows = search_pairs([("Q", "lmstream"), ("Q", "fixed")], probing(clock, both),
                        lambda pair: CapacitySearch(1000), budget_s=5, clock=clock)
    assert [(r["policy"], r["rate"], r["status"]) for r in rows][0] == ("lmstream", 1000.0, "not-converged")
    unprobed = rows[1]
    assert unprobed["policy"] == "fixed" and math.isnan(unprobed["rate"])
    assert unprobed["status"] == "not-converged"
    brackets = capacity_brackets(pd.DataFrame(rows)).set_index("policy")
    assert brackets.loc["fixed", "probes"] == 0
    assert brackets.loc["fixed", "text"] == "no probe (the budget ran out first)"
    assert brackets.loc["lmstream", "text"] == "≥ 1,000 (not converged: no rate failed yet, 1 rep)"


# ---------------------------------------------------------------- the bench's probes (a fake runner)
class FakeRunner:
    """Stands in for the bench's Spark runner: a probe passes up to ``capacity`` and takes 10 s."""

    def __init__(self, clock: FakeClock, capacity: float) -> None:
        self.clock, self.capacity, self.calls = clock, capacity, []
        self.warmed: set = set()
        self.stuck = None  # the real runner's: why the last run's query did not stop

    def warm(self, query, announce=None):  # the real one runs a discarded stream where the JVM is cold
        self.calls.append(("warm", query, query not in self.warmed, None))
        self.warmed.add(query)

    def run(self, query, policy, traffic, *, rate, seed, duration_s, run_dir, catch_up_s):
        self.calls.append((policy, rate, seed, run_dir.name))
        self.clock.now += 10.0
        latency = 0.1 if rate <= self.capacity else 1e6
        return pd.DataFrame({"rows": [rate, rate], "max_latency_s": [latency, latency],
                             "avg_latency_s": [latency / 2] * 2, "processing_s": [0.5, 0.5]}), None, True


def test_the_bench_probes_seed_each_repetition_and_write_rows_that_render_as_brackets(tmp_path):
    cfg = BenchConfig(queries=["LR2S"], policies=["lmstream", "fixed"], capacity=True, seed=7,
                      capacity_duration_s=30, capacity_budget_s=1000)
    clock = FakeClock()
    runner = FakeRunner(clock, 3000)
    rows = _capacity(cfg, runner, tmp_path, lambda event: None, clock=clock)
    # every probe asks for its query's warm-up first: only the first finds the JVM cold
    assert [c[2] for c in runner.calls[::2] if c[0] == "warm"] == [True] + [False] * 15
    runner.calls = [c for c in runner.calls if c[0] != "warm"]
    lm = [call for call in runner.calls if call[0] == "lmstream"]
    assert [(rate, seed) for _, rate, seed, _ in lm] == [(1000, 7), (2000, 7), (4000, 7), (2828, 7),
                                                        (3363, 7), (3084, 7), (2828, 8), (3084, 8)]
    assert len({name for *_, name in runner.calls}) == len(runner.calls)  # a run directory per run
    assert lm[-1][3] == "capacity-LR2S-lmstream-3084-r1"
    logged = [json.loads(line) for line in (tmp_path / "capacity.jsonl").read_text().splitlines()]
    assert len(logged) == len(rows) == 16
    assert [r["policy"] for r in logged] == ["lmstream", "fixed"] * 8  # side by side, in turn
    last = logged[14]
    assert (last["probe"], last["rate"], last["seed"], last["status"]) == (7, 3084.0, 8, "bracketed")
    # with its batches' size, latency and speed, read from its metrics as a cell's are
    assert (last["mean_rows_per_batch"], last["mean_max_latency_s"], last["throughput_rows_s"]) == (3084, 1e6, 6168)
    from lmstream_kit.bench.outputs import machine_boot

    assert {r["boot"] for r in logged} == {machine_boot()}  # the machine each probe ran on
    # through capacity.parquet as run_bench writes it, and back
    pd.DataFrame(rows, columns=PROBE_COLUMNS).to_parquet(tmp_path / "capacity.parquet", index=False)
    stored = pd.read_parquet(tmp_path / "capacity.parquet")
    assert list(stored.columns) == PROBE_COLUMNS and stored["rep"].tolist()[6:8] == [1, 1]
    table = capacity_table(stored).iloc[0]
    assert table["capacity_lmstream"] == table["capacity_fixed"] == "2,828–3,084 (bracketed, 2 reps)"
    assert table["probes_lmstream"] == 8 and table["lmstream/fixed"] == "0.92–1.09×"
    assert table["note"] == ""


class FewBatchesRunner(FakeRunner):
    """A policy that makes 18 batches a probe: from 2,500 rows/s every other run at a rate (the first,
    the third) has one of them late, from 3,500 every run has two."""

    def run(self, query, policy, traffic, *, rate, seed, duration_s, run_dir, catch_up_s):
        before = sum(c[0] == policy and c[1] == rate for c in self.calls)
        self.calls.append((policy, rate, seed, run_dir.name))
        self.clock.now += 10.0
        late = 0 if rate < 2500 else (1 - before % 2) if rate < 3500 else 2
        latency = [1e6] * late + [0.1] * (18 - late)
        return pd.DataFrame({"rows": [rate] * 18, "max_latency_s": latency}), None, True


@pytest.mark.parametrize("min_batches, bracket", [(20, "3,363–3,668"), (0, "2,378–2,593")])
def test_the_bench_pools_the_runs_at_a_rate_so_one_late_batch_of_few_runs_again(tmp_path, min_batches, bracket):
    cfg = BenchConfig(queries=["LR2S"], policies=["lmstream"], capacity=True, capacity_duration_s=30,
                      capacity_probes=20, capacity_min_batches=min_batches)
    runner = FewBatchesRunner(FakeClock(), 0)
    rows = _capacity(cfg, runner, tmp_path, lambda event: None, clock=runner.clock)
    table = capacity_table(pd.DataFrame(rows, columns=PROBE_COLUMNS)).iloc[0]
    assert table["capacity_lmstream"] == f"{bracket} (bracketed, 2 reps)"
    runs = [(r["rate"], r["rep"], r["passed"]) for r in rows]
    if min_batches:  # 2,828 ran again after one late batch of 18, and passed on 1 of 36
        assert runs[3:5] == [(2828.0, 0, False), (2828.0, 1, True)]
    else:  # most runs: 2,828's first run fails it, and 2,593's third run (one late of 18) fails it too
        assert runs[3:] == [(2828.0, 0, False), (2378.0, 0, True), (2593.0, 0, False), (2378.0, 1, True),
                            (2593.0, 1, True), (2593.0, 2, False)]


class StuckRunner(FakeRunner):
    """Above ``capacity`` a probe falls behind and its batch outlives the stop's bound: the real runner
    then puts a new JVM in place and says why in ``stuck``."""

    def run(self, query, policy, traffic, *, rate, seed, duration_s, run_dir, catch_up_s):
        metrics, cpu, _ = super().run(query, policy, traffic, rate=rate, seed=seed, duration_s=duration_s,
                                      run_dir=run_dir, catch_up_s=catch_up_s)
        self.stuck = "its batch in flight did not stop within the stop's bound" if rate > self.capacity else None
        return metrics, cpu, rate <= self.capacity


def test_a_probe_whose_query_outlived_its_stop_says_so_and_the_search_goes_on(tmp_path):
    cfg = BenchConfig(queries=["LR2S"], policies=["asap"], capacity=True, capacity_duration_s=30)
    runner = StuckRunner(FakeClock(), capacity=3000)
    rows = _capacity(cfg, runner, tmp_path, lambda event: None, clock=runner.clock)
    stuck = [(r["rate"], r["passed"]) for r in rows if r.get("error")]
    assert stuck and all(rate > 3000 and not passed for rate, passed in stuck)
    assert {r["error"] for r in rows if r.get("error")} == {
        "the query did not stop: its batch in flight did not stop within the stop's bound; "
        "a new JVM runs the next probe"}
    assert all("error" not in r for r in rows if r["rate"] <= 3000)
    assert (rows[-1]["status"], rows[-1]["lo"], rows[-1]["hi"]) == ("bracketed", 2828.0, 3084.0)


class CrashingRunner(FakeRunner):
    """A FakeRunner whose JVM exits on a run above ``crash_at``; ``recover`` says so once, and restarts."""

    def __init__(self, clock: FakeClock, capacity: float, crash_at: float, jvm_gone: bool = True,
                 spent: int = 0, exit_codes: tuple = (), batches_first: bool = False) -> None:
        super().__init__(clock, capacity)
        self.crash_at, self.jvm_gone, self.restarts = crash_at, jvm_gone, 0
        self.exited = False
        self.spent = spent  # runs that crash before their first batch whatever the rate (a spent heap)
        self.exit_codes = list(exit_codes)  # the lost JVMs' exit codes, in turn (then None: unknown)
        self.batches_first = batches_first  # a crashing run writes two batches first
        self.lost_to_heap = None

    def run(self, query, policy, traffic, *, rate, seed, duration_s, run_dir, catch_up_s):
        if self.spent or rate > self.crash_at:
            self.spent = max(0, self.spent - 1)
            self.calls.append((policy, rate, seed, run_dir.name))
            self.exited = self.jvm_gone
            if self.batches_first:
                run_dir.mkdir(parents=True, exist_ok=True)
                (run_dir / "metrics.jsonl").write_text("".join(
                    json.dumps({"batch_id": i, "rows": 100, "max_latency_s": 0.1}) + "\n" for i in (1, 2)))
            raise RuntimeError("Py4JNetworkError: Error while sending or receiving")
        return super().run(query, policy, traffic, rate=rate, seed=seed, duration_s=duration_s, run_dir=run_dir,
                           catch_up_s=catch_up_s)

    def recover(self):
        if not self.exited:
            return None
        self.exited, self.restarts = False, self.restarts + 1
        self.warmed.clear()  # a new JVM
        code = self.exit_codes.pop(0) if self.exit_codes else None
        self.lost_to_heap = None if code is None else code == 3  # as _Runner.recover tells it
        return "Spark's JVM exited (pid 42): killed, or out of memory"


def test_a_probe_that_takes_the_jvm_down_is_a_failed_run_and_the_search_goes_on(tmp_path):
    cfg = BenchConfig(queries=["LR2S"], policies=["asap"], capacity=True, capacity_duration_s=30,
                      capacity_budget_s=1000, capacity_max_rate=64000)
    runner = CrashingRunner(FakeClock(), capacity=1e9, crash_at=40000)
    rows = _capacity(cfg, runner, tmp_path, lambda event: None, clock=runner.clock)
    crashed = [r for r in rows if r.get("error")]
    # each crash is a failed run (nothing caught up, no batch counted), on a session started anew;
    # a crash before the first batch runs once more on the new session, and crashes again here
    assert [(r["rate"], r["passed"], r["caught_up"], r["batches"]) for r in crashed] == [
        (64000.0, False, False, 0), (45255.0, False, False, 0), (41499.0, False, False, 0), (41499.0, False, False, 0)]
    assert {r["error"] for r in crashed} == {"Spark's JVM exited (pid 42): killed, or out of memory"}
    assert all(r["retried"] == r["error"] for r in crashed)
    assert runner.restarts == 8
    # the search went on below the crashes and bracketed them: 38,055 passed twice, 41,499 crashed twice
    assert (rows[-1]["status"], rows[-1]["lo"], rows[-1]["hi"]) == ("bracketed", 38055.0, 41499.0)
    assert all("error" not in r for r in rows if r["rate"] <= 40000)
    table = capacity_table(pd.DataFrame(rows, columns=PROBE_COLUMNS)).iloc[0]
    assert "asap at 64,000: Spark's JVM exited (pid 42): killed, or out of memory" in table["note"]


def test_a_jvm_that_exits_before_a_probes_first_batch_is_blamed_on_the_runs_before(tmp_path):
    cfg = BenchConfig(queries=["LR2S"], policies=["asap"], capacity=True, capacity_duration_s=30,
                      capacity_probes=1)
    runner = CrashingRunner(FakeClock(), capacity=1e9, crash_at=1e9, spent=1)
    (row,) = _capacity(cfg, runner, tmp_path, lambda event: None, clock=runner.clock)
    # the first run died at once; the same probe on the new session passed, and says it was retried
    assert (row["rate"], row["passed"], row["batches"], runner.restarts) == (1000.0, True, 2, 1)
    assert "error" not in row and row["retried"] == "Spark's JVM exited (pid 42): killed, or out of memory"
    # the retry on the new session warms the new JVM first
    assert [(c[0], c[2]) if c[0] == "warm" else c[3] for c in runner.calls] == [
        ("warm", True), "capacity-LR2S-asap-1000-r0", ("warm", True), "capacity-LR2S-asap-1000-r0"]


@pytest.mark.parametrize("codes, retried", [((56,), True), ((-9,), True), ((3,), False), ((None,), False),
                                            ((56, 56), True)])
def test_a_probe_whose_jvm_exits_after_batches_is_run_again_unless_it_ran_out_of_heap(tmp_path, codes, retried):
    cfg = BenchConfig(queries=["LR2S"], policies=["asap"], capacity=True, capacity_duration_s=30,
                      capacity_probes=1)
    runner = CrashingRunner(FakeClock(), capacity=1e9, crash_at=1e9, spent=len(codes), exit_codes=codes,
                            batches_first=True)
    (row,) = _capacity(cfg, runner, tmp_path, lambda event: None, clock=runner.clock)
    why = "Spark's JVM exited (pid 42): killed, or out of memory"
    runs = [c for c in runner.calls if c[0] != "warm"]
    if not retried:  # its own heap (or an exit nobody can tell): a failed run of this rate, not repeated
        assert (len(runs), row["passed"], row["batches"], row["error"]) == (1, False, 2, why)
        assert "retried" not in row
    elif len(codes) == 1:  # Spark's exit (heartbeat lost to an earlier probe's collection), a kill: again
        assert (len(runs), row["passed"], row["batches"], row["retried"]) == (2, True, 2, why)
        assert "error" not in row
    else:  # retried once only: the second loss is the run's result
        assert (len(runs), row["passed"], row["error"], row["retried"]) == (2, False, why, why)


def test_a_probe_that_fails_with_the_jvm_running_fails_the_bench(tmp_path):
    cfg = BenchConfig(queries=["LR2S"], policies=["asap"], capacity=True, capacity_duration_s=30)
    runner = CrashingRunner(FakeClock(), capacity=1e9, crash_at=1500, jvm_gone=False)
    with pytest.raises(RuntimeError, match="Py4JNetworkError"):
        _capacity(cfg, runner, tmp_path, lambda event: None, clock=runner.clock)


# ---------------------------------------------------------------- configuration and CLI
def test_bench_config_has_a_probe_limit_for_repeated_bounds_and_validates_the_budget():
    cfg = BenchConfig(queries=["LR2S"])
    assert cfg.capacity_probes == 12 and cfg.capacity_budget_s is None and cfg.capacity_min_batches == 20
    for bad in (-1, 2.5, True):
        with pytest.raises(ConfigError, match=f"capacity min batches must be an integer >= 0, got {bad!r}"):
            BenchConfig(queries=["LR2S"], capacity_min_batches=bad)
    assert BenchConfig(queries=["LR2S"], capacity_budget_s=90).capacity_budget_s == 90
    for bad in (0, -5, math.nan, math.inf):
        with pytest.raises(ConfigError, match=f"capacity budget must be > 0 seconds, got {bad!r}"):
            BenchConfig(queries=["LR2S"], capacity_budget_s=bad)


def kit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lmstream_kit", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


@pytest.mark.parametrize("value", ["0", "-30", "nan"])
def test_a_bad_capacity_budget_is_a_one_line_user_error(tmp_path, value):
    proc = kit("bench", "--queries", "LR2S", "--capacity", "--capacity-budget", value,
               "--out", str(tmp_path / "b"))
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in proc.stderr and len(err.splitlines()) == 1, err
    assert err.startswith("error: capacity budget must be > 0 seconds, got ") and value.lstrip("-") in err
    assert not (tmp_path / "b").exists()  # refused before the bench started


def test_a_bad_capacity_min_batches_is_a_one_line_user_error(tmp_path):
    proc = kit("bench", "--queries", "LR2S", "--capacity", "--capacity-min-batches", "-1",
               "--out", str(tmp_path / "b"))
    err = proc.stderr.strip()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(err.splitlines()) == 1, err
    assert err == "error: capacity min batches must be an integer >= 0, got -1"


def test_bench_help_says_what_the_capacity_options_do():
    help_text = " ".join(kit("bench", "--help").stdout.split())
    assert "--capacity-budget SECONDS" in help_text
    assert "no probe starts" in help_text and "not converged" in help_text
    assert "--capacity-probes INTEGER" in help_text and "within 10%" in help_text
    assert "[default: 12]" in help_text



def _journal(run_dir: Path, batches: list[tuple[int, float, float]]) -> None:
    """A probe's metrics journal: (rows, processing_s, max_latency_s) per batch, a no-data batch first."""
    run_dir.mkdir(parents=True)
    records = [{"batch_id": 0, "rows": 0, "processing_s": 0.4, "max_latency_s": None, "avg_latency_s": None}]
    records += [{"batch_id": i + 1, "rows": r, "processing_s": p, "max_latency_s": m, "avg_latency_s": m / 2}
                for i, (r, p, m) in enumerate(batches)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_resumed_probe_logged_without_its_batches_size_and_speed_has_them_from_its_journal(tmp_path):
    from lmstream_kit.bench.capacity import probe_dir, with_batch_fields

    _journal(probe_dir(tmp_path, "LR2S", "lmstream", 197403.0, 1), [(900_000, 2.0, 4.0), (1_100_000, 3.0, 5.0)])
    logged = [{"query": "LR2S", "policy": "lmstream", "probe": 0, "rate": 197403.0, "rep": 1, "passed": False},
              {"query": "LR2S", "policy": "asap", "probe": 0, "rate": 215269.0, "rep": 0, "passed": True},
              {"query": "LR2S", "policy": "asap", "probe": 1, "rate": 234753.0, "rep": 0, "passed": True,
               "mean_rows_per_batch": 5.0, "mean_max_latency_s": 1.0, "throughput_rows_s": 7.0}]
    filled, gone, recorded = with_batch_fields(tmp_path, logged)
    assert probe_dir(tmp_path, "LR2S", "lmstream", 197403.0, 1).name == "capacity-LR2S-lmstream-197403-r1"
    assert (filled["mean_rows_per_batch"], filled["mean_max_latency_s"], filled["throughput_rows_s"]) == (
        1_000_000, 4.5, 400_000)  # 2 M rows in 5 s of processing: the no-data batch counts for neither
    assert gone == logged[1]  # its journal is gone: nothing is made up
    assert recorded is logged[2]  # what the probe recorded is kept, not read again


def test_the_capacity_goal_says_where_lmstreams_larger_batches_bought_no_speed():
    """The goal row's gap beside a failed capacity: lmstream's batches at its lowest failing rate, and asap's
    at the lowest rate above it that asap passed, from the probes' rows."""
    from lmstream_kit.report.goals import goals

    def probe(policy, rate, passed, rows, latency, speed, rep=0):
        return {"query": "LR2S", "policy": policy, "probe": 0, "rate": rate, "rep": rep, "passed": passed,
                "within_bound": 1.0 if passed else 0.8, "batches": 20, "caught_up": True, "wall_s": 60.0,
                "mean_rows_per_batch": rows, "mean_max_latency_s": latency, "throughput_rows_s": speed}

    probes = []
    for rep in (0, 1):
        probes += [probe("lmstream", 181019.0, True, 835_000, 4.0, 400_000, rep),
                   probe("lmstream", 197403.0, False, 900_000 + rep * 20_000, 4.1, 430_000 + rep * 10_000, rep),
                   probe("asap", 234753.0, True, 560_000, 2.0, 455_000, rep),
                   probe("asap", 256000.0, False, 1_600_000, 19.0, 420_000, rep)]
    probes += [probe("asap", 215269.0, True, 437_835, 1.8, 425_555), probe("asap", 181019.0, True, 1, 1, 1)]
    rows = []
    for policy in ("lmstream", "asap"):
        mine = [p for p in probes if p["policy"] == policy]
        lo = max(p["rate"] for p in mine if p["passed"])
        hi = min(p["rate"] for p in mine if not p["passed"])
        rows += [{**p, "lo": lo, "hi": hi, "status": "bracketed"} for p in mine]
    gap = goals(None, pd.DataFrame(rows)).set_index("goal").loc["capacity", "gap"]
    assert gap.startswith("LR2S: at most 0.84×; at 197,403 rows/s lmstream's batches averaged 910,000 rows, "
                          "a maximum latency of 4.1 s and 435,000 rows per second of processing, asap's at "
                          "215,269 437,835 rows, 1.8 s and 425,555"), gap
    # beside what the collector did there, the rate is said once
    collected = pd.DataFrame([{**r, "gc_share": 0.02, "full_gcs": 1.0} for r in rows])
    gap = goals(None, collected).set_index("goal").loc["capacity", "gap"]
    assert gap.startswith("LR2S: at most 0.84×; at 197,403 rows/s the driver's collector took 2% of lmstream's "
                          "processing (2 full collections), 2% of asap's at 234,753; there lmstream's batches "
                          "averaged 910,000 rows"), gap
