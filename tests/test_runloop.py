"""The run loop on plain objects: admissions, hooks, records and changes, without Spark."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from lmstream_kit.admission import DRAIN, HOLD
from lmstream_kit.controller import AdmissionController
from lmstream_kit.exceptions import ConfigError
from lmstream_kit.policies import AdmitAll
from lmstream_kit.protocol import BATCH, BatchController, ChangeLog, Param
from lmstream_kit.runloop import BatchSettings, RunLoop


class FakeSpool:
    """Datasets 0..n-1, one second apart, 10 rows / 1000 bytes each."""

    def __init__(self, n: int, t0: float = 1000.0) -> None:
        self.items = [NS(seq=i, arrival=t0 + i, rows=10, nbytes=1000) for i in range(n)]

    def datasets(self, start: int, end: int | None = None):
        return self.items[start:end]


class Runner(BatchController):
    """The placement's role: run the batch (here: count its rows) and report a field."""

    def run_batch(self, ctx, output_dir):
        return ctx.rows, {"device_mode": "advisory"}


class Tracer(BatchController):
    prefix = "tracer"
    change_phase = BATCH
    PARAMS = (Param("level", int, low=0),)

    def __init__(self) -> None:
        super().__init__()
        self.level = 0
        self.calls: list[tuple] = []

    def on_admit(self, pending):
        self.calls.append(("admit", len(pending)))
        return {"traced": True}

    def before_batch(self, ctx):
        self.calls.append(("before", ctx.batch_id, ctx.rows, ctx.admission.get("traced")))
        return {"level_seen": self.level}

    def after_batch(self, record):
        self.calls.append(("after", record.batch_id))
        return {"traced_rows": record.rows}


def make(gate, n=6, clock=None):
    log = ChangeLog()
    gate.bind_changelog(log)
    loop = RunLoop(gate, Runner(), log, settings=lambda: BatchSettings("TOY", "lmstream", 5.0, 2.5, None),
                   **({"clock": clock} if clock else {}))
    loop.spool = FakeSpool(n)
    return loop


def run(loop, start, batch_id):
    """What Spark does for one batch: ask for the end offset, plan it, run it."""
    end = loop.on_latest(start)
    loop.on_planned(start, end)
    return end, loop.run_batch(NS(batch_id=batch_id))


def test_each_batch_gets_one_record_with_its_span_admission_and_hooks_in_order():
    loop = make(AdmitAll("asap"))
    tracer = loop.add_controller(Tracer())
    end, record = run(loop, 0, batch_id=1)
    assert end == 6 and loop.book.completed_end == 6
    assert (record["start_seq"], record["end_seq"], record["rows"], record["output_rows"]) == (0, 6, 60, 60)
    assert (record["decision_reason"], record["polls"], record["policy"], record["bound_s"]) == ("asap", 1, "lmstream", 5.0)
    assert (record["level_seen"], record["traced_rows"], record["device_mode"]) == (0, 60, "advisory")
    assert tracer.calls == [("admit", 6), ("before", 1, 60, True), ("after", 1)]
    assert loop.records == [record]


def test_the_initial_offset_of_a_query_stays_where_it_started_until_the_query_restarts():
    # PySpark 4.3 asks initialOffset again when it plans the first batch: the answer must not
    # have moved to the end of the first admission (that batch then planned as empty)
    loop = make(AdmitAll("asap"))
    assert loop.on_initial() == 0
    assert loop.on_latest(0) == 6
    assert loop.on_initial() == 0
    loop.on_planned(0, 6)
    loop.run_batch(NS(batch_id=0))
    loop.book.forget_planned()  # a live restart starts a new query from what was admitted
    assert loop.on_initial() == 6


def test_a_gate_that_waits_holds_the_offset_and_counts_the_polls():
    times = iter([1005.5, 1006.0, 1100.0, 1100.1, 1100.2, 1101.0])  # the oldest dataset arrived at 1000
    loop = make(AdmissionController(slide_s=100.0, prior_processing_s=1.0), clock=lambda: next(times))
    assert loop.on_latest(0) == 0 and loop.on_latest(0) == 0  # far from the 100 s bound: wait
    assert loop.on_latest(0) == 6  # overdue: admit all
    loop.on_planned(0, 6)
    record = loop.run_batch(NS(batch_id=1))
    assert (record["polls"], record["decision_reason"], record["target_s"]) == (3, "overdue", 100.0)
    assert (record["admitted_at"], record["completed_at"], record["max_latency_s"]) == (1100.0, 1101.0, 101.0)


class Collecting(BatchController):
    """A gate that asks for a heap collection on every poll, then admits on the third."""

    def __init__(self) -> None:
        super().__init__()
        self.polls = 0

    def decide(self, now, pending):
        self.polls += 1
        admit = self.polls >= 3
        return NS(admit=admit, reason="admit" if admit else "collect", take=None)


def test_a_collect_decision_holds_the_offset_and_runs_one_collection_in_the_background():
    import threading

    release, started = threading.Event(), threading.Semaphore(0)
    calls = []

    def collect():
        calls.append(threading.current_thread().name)
        started.release()
        release.wait(5)  # a collection that takes a while: the poll is answered meanwhile

    loop = make(Collecting())
    assert loop.on_latest(0) == 0  # no collector set: a collect decision is a wait
    loop.collect_heap = collect
    assert loop.on_latest(0) == 0 and started.acquire(timeout=5) and calls == ["lmstream-collect-heap"]
    assert loop.on_latest(0) == 6  # answered while the collection still runs
    loop.gate.polls = 0
    assert loop.on_latest(0) == 0 and len(calls) == 1  # one at a time: the first has not finished
    release.set()
    loop._collecting.join(5)
    assert loop.on_latest(0) == 0 and started.acquire(timeout=5) and len(calls) == 2


def test_a_collection_that_raises_leaves_the_stream_as_it_was():
    def broken():
        raise RuntimeError("the JVM is gone")

    loop = make(Collecting())
    loop.collect_heap = broken
    assert loop.on_latest(0) == 0
    loop._collecting.join(5)
    assert loop.on_latest(0) == 0 and loop.on_latest(0) == 6


def test_hold_admits_nothing_and_drain_admits_everything_without_asking_the_gate():
    loop = make(AdmissionController(slide_s=100.0))
    loop.book.mode = HOLD
    assert loop.on_latest(0) == 0
    loop.book.mode = DRAIN
    assert loop.on_latest(0) == 6
    loop.on_planned(0, 6)
    assert loop.run_batch(NS(batch_id=1))["decision_reason"] == "drain"


def test_changes_are_stamped_with_the_first_batch_they_are_in_force_for():
    loop = make(AdmitAll("asap"), n=4)
    tracer = loop.add_controller(Tracer())
    loop.spool.items = loop.spool.items[:2]
    run(loop, 0, batch_id=1)
    tracer.set_param("level", 3)  # a BATCH-phase change: in force from the next batch that runs
    loop.spool = FakeSpool(4)
    _, second = run(loop, 2, batch_id=2)
    assert second["level_seen"] == 3
    assert [(c["param"], c["old"], c["value"]) for c in second["changes"]] == [("tracer.level", 0, 3)]
    assert [(b, c.param) for b, c in loop.changelog.history()] == [(2, "tracer.level")]
    assert loop.records[0]["changes"] is None


def test_a_change_a_controller_applies_in_before_batch_is_stamped_with_that_batch():
    """A Flumina rescale is logged when its before_batch applies it: the batch starting then carries it,
    also where it was asked in the instant before that batch's hooks ran."""
    from lmstream_kit.flumina.batches import BatchRunner
    from lmstream_kit.flumina.live import FluminaControl
    from lmstream_kit.flumina.plan import greedy_plan
    from lmstream_kit.flumina.spec import value_barrier_spec

    class AsksMidway(BatchController):
        """Asks for the rescale while batch 2's hooks run, before the Flumina control's turn."""

        def before_batch(self, ctx):
            if ctx.batch_id == 2:
                control.set_param("workers", 2)

    spec = value_barrier_spec(3)
    loop = make(AdmitAll("asap"), n=4)
    loop.add_controller(AsksMidway())
    control = loop.add_controller(FluminaControl(BatchRunner(spec, greedy_plan(spec, 3))))
    loop.spool.items = loop.spool.items[:2]
    run(loop, 0, batch_id=1)
    loop.spool = FakeSpool(4)
    _, second = run(loop, 2, batch_id=2)
    assert second["flumina_workers"] == 2
    assert [(c["param"], c["old"], c["value"]) for c in second["changes"]] == [("flumina.workers", 3, 2)]
    assert loop.records[0]["changes"] is None


def test_a_failing_batch_keeps_its_offsets_and_is_raised_for_spark():
    class Broken(Runner):
        def run_batch(self, ctx, output_dir):
            raise RuntimeError("disk full")

    log = ChangeLog()
    loop = RunLoop(AdmitAll("asap"), Broken(), log,
                   settings=lambda: BatchSettings("TOY", "asap", None, float("nan"), None))
    loop.spool = FakeSpool(3)
    loop.on_planned(0, loop.on_latest(0))
    with pytest.raises(RuntimeError, match="disk full"):
        loop.run_batch(NS(batch_id=1))
    assert loop.book.completed_end == 0 and str(loop.failure) == "disk full" and loop.records == []


def test_a_broken_subscriber_does_not_fail_the_batch_and_only_controllers_plug_in():
    loop = make(AdmitAll("asap"))
    seen = []
    loop.on_batch(lambda r: 1 / 0)
    loop.on_batch(seen.append)
    run(loop, 0, batch_id=1)
    assert len(seen) == 1
    with pytest.raises(ConfigError, match="a controller must be a BatchController, got int"):
        loop.add_controller(3)
    assert "traced_rows" not in loop.record_fields() and "max_latency_s" in loop.record_fields()


class Splitter(BatchController):
    """Asks for input partitions when a batch is planned (what tune.knobs.InputPartitions does)."""

    def __init__(self, partitions) -> None:
        super().__init__()
        self.partitions = partitions

    def on_plan(self, start, end):
        return {"partitions": self.partitions}

    def before_batch(self, ctx):
        return {"planned_seen": dict(ctx.admission.get("planned") or {})}


def test_a_controller_sets_the_input_partitions_of_the_batch_being_planned():
    loop = make(AdmitAll("asap"), n=6)
    loop.add_controller(Splitter(4))
    end = loop.on_latest(0)
    assert loop.on_planned(0, end) == 4  # what the source splits the batch into
    record = loop.run_batch(NS(batch_id=1))
    assert record["planned_seen"] == {"partitions_asked": 4, "partitions": 4}
    # at most one partition per dataset; a source that reads in the driver makes one, whatever is asked
    loop.spool.items += [NS(seq=i, arrival=1010.0 + i, rows=10, nbytes=1000) for i in range(6, 8)]
    end = loop.on_latest(6)
    assert loop.on_planned(6, end) == 4
    assert loop.run_batch(NS(batch_id=2))["planned_seen"] == {"partitions_asked": 4, "partitions": 2}
    loop.spool.items += [NS(seq=8, arrival=1020.0, rows=10, nbytes=1000)]
    end = loop.on_latest(8)
    assert loop.on_planned(8, end, split=False) is None
    assert loop.run_batch(NS(batch_id=3))["planned_seen"] == {"partitions_asked": 4, "partitions": 1}
    # nothing asked (or nonsense): the source's own setting
    loop.plugins[0].partitions = 0
    loop.spool.items += [NS(seq=9, arrival=1021.0, rows=10, nbytes=1000)]
    assert loop.on_planned(9, loop.on_latest(9)) is None


class Broken(BatchController):
    def after_batch(self, record):
        raise RuntimeError("cannot learn\nsecond line")


def test_a_plugin_that_fails_after_the_batch_neither_fails_it_nor_stops_the_next_ones():
    loop = make(AdmitAll("asap"), n=6)
    loop.add_controller(Broken())
    tracer = loop.add_controller(Tracer())
    _, record = run(loop, 0, batch_id=1)
    assert record["after_batch_errors"] == {"Broken": "RuntimeError: cannot learn"}
    assert record["traced_rows"] == 60 and loop.book.completed_end == 6 and ("after", 1) in tracer.calls


def test_memory_keeps_the_newest_records_and_the_totals_count_every_batch(monkeypatch):
    import lmstream_kit.runloop as runloop

    monkeypatch.setattr(runloop, "RECORDS_KEPT", 3)
    loop = make(AdmitAll("asap"), n=0)
    for batch_id in range(5):
        loop.spool.items.append(NS(seq=batch_id, arrival=1000.0 + batch_id, rows=10, nbytes=1000))
        run(loop, batch_id, batch_id=batch_id)
    assert [r["batch_id"] for r in loop.records] == [2, 3, 4]
    assert (loop.batches_done, loop.rows_done) == (5, 50)
