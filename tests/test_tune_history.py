"""The history store across runs (lmstream_kit.tune.history): rows of (run, batch, operator) appended
to a Parquet directory, read back as one dataset; DAG fingerprints; the HistoryRecorder plug-in.  No Spark."""

from __future__ import annotations

import os
import threading
from datetime import datetime, timezone
from types import SimpleNamespace as NS

import pyarrow as pa
import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.policies import AdmitAll
from lmstream_kit.protocol import BatchController, ChangeLog
from lmstream_kit.record import BatchRecord, Dataset
from lmstream_kit.runloop import BatchSettings, RunLoop
from lmstream_kit.tune import (
    History,
    HistoryRecorder,
    HistoryWriter,
    OperatorMetrics,
    dag_fingerprint,
    default_store,
    operator_samples,
    read_history,
    stage_dag,
)
from lmstream_kit.tune.history import SCHEMA, data_dir, history_rows

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def _op(key="j0.s0", **kw):
    job, position = (int(part[1:]) for part in key.split("."))
    base = {"key": key, "job": job, "position": position, "stage_id": 3 + position, "status": "COMPLETE",
            "tasks": 4, "records_in": 1000, "records_out": 20, "run_s": 2.0, "cpu_s": 1.5, "useful_s": 1.6,
            "wall_s": 0.8, "true_rate": 625.0, "load": 0.4, "bottleneck": False}
    return {**base, **kw}


def _record(batch_id, operators=None, *, workload="LR2S", rows=(100, 300), processing_s=2.0, bound_s=5.0):
    extra = {} if operators is None else {"operators": operators}
    return BatchRecord.from_batch(batch_id=batch_id, policy="lmstream", admitted_at=10.0,
                                  completed_at=10.0 + processing_s, bound_s=bound_s, workload=workload,
                                  datasets=[Dataset(9.0, r, 10 * r) for r in rows], **extra)


def _clock(start=T0, step=1.0):
    ticks = iter(start + i * step for i in range(10_000))
    return lambda: next(ticks)


TWO = [_op("j0.s0"), _op("j0.s1", tasks=2, records_in=20, records_out=5, true_rate=None, load=0.9, bottleneck=True)]


# --------------------------------------------------------------------------- round trip and filters


def test_appended_rows_read_back_with_their_exact_values_and_types(tmp_path):
    with HistoryWriter(tmp_path, "run-a", clock=_clock()) as w:
        assert w.add(_record(0, TWO)) == 2
        assert w.add(_record(1, TWO[:1], processing_s=4.0, bound_s=None)) == 1
    t = read_history(tmp_path)
    assert t.schema == SCHEMA
    fp2, fp1 = dag_fingerprint(TWO), dag_fingerprint(TWO[:1])
    assert t.to_pylist() == [
        {"run_id": "run-a", "workload": "LR2S", "fingerprint": fp2, "batch_id": 0, "operator": "j0.s0", "job": 0,
         "position": 0, "stage_id": 3, "status": "COMPLETE", "tasks": 4, "records_in": 1000, "records_out": 20,
         "run_s": 2.0, "cpu_s": 1.5, "useful_s": 1.6, "wall_s": 0.8, "true_rate": 625.0, "load": 0.4,
         "bottleneck": False, "batch_rows": 400, "bound_s": 5.0, "stream_rate": 200.0,
         "written_at": datetime.fromtimestamp(T0, tz=timezone.utc)},
        {"run_id": "run-a", "workload": "LR2S", "fingerprint": fp2, "batch_id": 0, "operator": "j0.s1", "job": 0,
         "position": 1, "stage_id": 4, "status": "COMPLETE", "tasks": 2, "records_in": 20, "records_out": 5,
         "run_s": 2.0, "cpu_s": 1.5, "useful_s": 1.6, "wall_s": 0.8, "true_rate": None, "load": 0.9,
         "bottleneck": True, "batch_rows": 400, "bound_s": 5.0, "stream_rate": 200.0,
         "written_at": datetime.fromtimestamp(T0, tz=timezone.utc)},
        {"run_id": "run-a", "workload": "LR2S", "fingerprint": fp1, "batch_id": 1, "operator": "j0.s0", "job": 0,
         "position": 0, "stage_id": 3, "status": "COMPLETE", "tasks": 4, "records_in": 1000, "records_out": 20,
         "run_s": 2.0, "cpu_s": 1.5, "useful_s": 1.6, "wall_s": 0.8, "true_rate": 625.0, "load": 0.4,
         "bottleneck": False, "batch_rows": 400, "bound_s": None, "stream_rate": 100.0,
         "written_at": datetime.fromtimestamp(T0 + 1, tz=timezone.utc)},
    ]
    assert [str(f.type) for f in t.schema][:6] == ["string", "string", "string", "int64", "string", "int32"]
    assert str(t.schema.field("written_at").type) == "timestamp[us, tz=UTC]"


def test_records_from_operator_samples_and_in_their_dict_form_give_the_same_rows(tmp_path):
    stage = {"job": 0, "position": 1, "stageId": 7, "status": "COMPLETE", "numTasks": 4, "executorRunTime": 2000,
             "executorCpuTime": 1_500_000_000, "inputRecords": 0, "shuffleReadRecords": 40_000,
             "outputRecords": 10, "shuffleWriteRecords": 0, "shuffleFetchWaitTime": 400, "shuffleWriteTime": 0,
             "submissionTime": "2026-11-23T10:00:00.000GMT", "completionTime": "2026-11-23T10:00:01.000GMT"}
    ops = [s.to_dict() for s in operator_samples([stage], budget_s=1.0)]
    record = _record(5, ops)
    as_obj, _ = history_rows(record, run_id="r", written_at=T0)
    as_dict, _ = history_rows(record.to_dict(), run_id="r", written_at=T0)
    assert as_obj == as_dict
    row, = as_obj
    assert (row["operator"], row["stage_id"], row["tasks"], row["records_in"], row["useful_s"], row["true_rate"],
            row["load"], row["wall_s"]) == ("j0.s1", 7, 4, 40000, 1.6, 25000.0, 0.4, 1.0)
    assert row["fingerprint"] == dag_fingerprint(operator_samples([stage], budget_s=1.0))


def test_a_record_without_throughput_gets_the_rate_from_rows_and_processing():
    (row,), _ = history_rows({"batch_id": 1, "rows": 300, "processing_s": 1.5, "operators": [_op()]},
                             run_id="r", written_at=T0)
    assert (row["stream_rate"], row["batch_rows"], row["bound_s"], row["workload"]) == (200.0, 300, None, None)
    (row,), _ = history_rows({"batch_id": 1, "rows": 0, "processing_s": 0.0, "operators": [_op()]}, run_id="r",
                             workload="W", written_at=T0)
    assert (row["stream_rate"], row["workload"]) == (None, "W")


def test_reads_filter_by_workload_and_fingerprint(tmp_path):
    with HistoryWriter(tmp_path, "r1", clock=_clock()) as w:
        w.add(_record(0, TWO, workload="LR2S"))
        w.add(_record(1, TWO[:1], workload="LR2S"))
        w.add(_record(0, TWO, workload="CM1"))
    fp2 = dag_fingerprint(TWO)
    assert read_history(tmp_path).num_rows == 5
    lr = read_history(tmp_path, workload="LR2S")
    assert (lr.num_rows, set(lr["workload"].to_pylist())) == (3, {"LR2S"})
    same_dag = read_history(tmp_path, fingerprint=fp2)
    assert same_dag["workload"].to_pylist() == ["LR2S", "LR2S", "CM1", "CM1"]
    both = read_history(tmp_path, workload="CM1", fingerprint=fp2)
    assert both["operator"].to_pylist() == ["j0.s0", "j0.s1"]
    assert read_history(tmp_path, workload="nope").num_rows == 0
    assert History(tmp_path).read(workload="LR2S", fingerprint=fp2).num_rows == 2


def test_the_summary_counts_runs_batches_and_bottlenecks_per_workload_fingerprint_and_operator(tmp_path):
    store = History(tmp_path)
    for run in ("r1", "r2"):
        with store.writer(run, clock=_clock()) as w:
            w.add(_record(0, TWO))
            w.add(_record(1, [TWO[0], {**TWO[1], "tasks": 8, "bottleneck": False, "true_rate": 50.0}]))
    w = store.writer("r3", "CM1", clock=_clock())
    w.add(_record(0, TWO[:1]))
    w.close()
    fp2, fp1 = dag_fingerprint(TWO), dag_fingerprint(TWO[:1])
    s = store.summary()
    assert s.column_names == ["workload", "fingerprint", "operator", "runs", "batches", "bottlenecks",
                              "tasks_min", "tasks_max", "true_rate_mean"]
    assert s.to_pylist() == [
        {"workload": "CM1", "fingerprint": fp1, "operator": "j0.s0", "runs": 1, "batches": 1, "bottlenecks": 0,
         "tasks_min": 4, "tasks_max": 4, "true_rate_mean": 625.0},
        {"workload": "LR2S", "fingerprint": fp2, "operator": "j0.s0", "runs": 2, "batches": 4, "bottlenecks": 0,
         "tasks_min": 4, "tasks_max": 4, "true_rate_mean": 625.0},
        {"workload": "LR2S", "fingerprint": fp2, "operator": "j0.s1", "runs": 2, "batches": 4, "bottlenecks": 2,
         "tasks_min": 2, "tasks_max": 8, "true_rate_mean": 50.0},
    ]
    assert store.summary(workload="CM1").num_rows == 1
    assert History(tmp_path / "none").summary().num_rows == 0


# --------------------------------------------------------------------------- the DAG


def test_the_fingerprint_depends_on_the_structure_only_and_is_stable_across_processes():
    again = [{**op, "tasks": 99, "records_in": 1, "useful_s": 0.0} for op in reversed(TWO)]
    assert dag_fingerprint(TWO) == dag_fingerprint(again) == dag_fingerprint(operator_samples([], budget_s=1) + TWO)
    assert dag_fingerprint(TWO) == "c7a078da0e8d"  # sha256 of {"stages":[["j0.s0",0],["j0.s1",1]]}
    three = [*TWO, _op("j0.s2")]
    assert len({dag_fingerprint(TWO), dag_fingerprint(TWO[:1]), dag_fingerprint(three), dag_fingerprint([])}) == 4
    assert dag_fingerprint(TWO, ["Scan", "HashAggregate"]) != dag_fingerprint(TWO, ["Scan", "Project"])
    assert dag_fingerprint(TWO, ["Scan"]) != dag_fingerprint(TWO) == dag_fingerprint(TWO, []) == dag_fingerprint(
        TWO, None)
    assert dag_fingerprint([*TWO, {"key": "j0.s9"}, "junk"]) == dag_fingerprint(TWO)  # malformed: left out


def test_the_stage_dag_chains_the_stages_of_each_job():
    ops = [_op("j1.s1"), _op("j0.s0"), _op("j0.s1"), _op("j0.s2"), _op("j1.s0"), _op("j2.s0")]
    assert stage_dag(ops) == [("j0.s0", "j0.s1"), ("j0.s1", "j0.s2"), ("j1.s0", "j1.s1")]
    assert stage_dag([_op("j0.s0"), _op("j0.s3")]) == [("j0.s0", "j0.s3")]  # a skipped stage left a gap
    assert stage_dag([]) == [] and stage_dag([{"key": "j0.s0"}, _op("j0.s1")]) == []


# --------------------------------------------------------------------------- buffering and files


def test_rows_are_buffered_and_written_every_n_batches_and_on_close(tmp_path):
    w = HistoryWriter(tmp_path, "run/1", flush_every=2, clock=_clock())
    w.add(_record(0, TWO))
    assert (w.pending, os.listdir(tmp_path)) == (2, [])
    assert w.add(_record(1)) == 0  # no operators: not a batch of the history
    assert (w.pending, os.listdir(tmp_path)) == (2, [])
    w.add(_record(2, TWO[:1]))
    assert (w.pending, sorted(os.listdir(tmp_path))) == (0, ["part-run_1-000000.parquet"])
    w.add(_record(3, TWO))
    assert read_history(tmp_path).num_rows == 3
    assert w.flush() is not None and w.flush() is None
    w.close()
    assert sorted(os.listdir(tmp_path)) == ["part-run_1-000000.parquet", "part-run_1-000001.parquet"]
    assert (w.rows_written, read_history(tmp_path)["run_id"].unique().to_pylist()) == (5, ["run/1"])
    assert read_history(tmp_path)["batch_id"].to_pylist() == [0, 0, 2, 3, 3]


def test_a_later_writer_of_the_same_run_never_rewrites_a_part(tmp_path):
    with HistoryWriter(tmp_path, "r", clock=_clock()) as w:
        w.add(_record(0, TWO))
    first = tmp_path / "part-r-000000.parquet"
    before = (first.stat().st_ino, first.read_bytes())
    with HistoryWriter(tmp_path, "r", clock=_clock()) as w:
        w.add(_record(1, TWO))
    assert sorted(os.listdir(tmp_path)) == ["part-r-000000.parquet", "part-r-000001.parquet"]
    assert (first.stat().st_ino, first.read_bytes()) == before
    assert read_history(tmp_path)["batch_id"].to_pylist() == [0, 0, 1, 1]


def test_two_runs_appending_to_one_store_at_once_lose_no_row(tmp_path):
    n = 60
    writers = [HistoryWriter(tmp_path, run, "LR2S", flush_every=3) for run in ("a", "b")]
    # and two writers that share a run id, so their part names collide and one must take the next
    writers += [HistoryWriter(tmp_path, "same", "LR2S", flush_every=2) for _ in range(2)]
    start = threading.Barrier(len(writers))

    def go(w, offset):
        start.wait()
        for i in range(n):
            w.add(_record(offset + i, TWO))
        w.close()

    threads = [threading.Thread(target=go, args=(w, 1000 * k)) for k, w in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t = read_history(tmp_path)
    assert t.num_rows == 4 * n * 2
    counts = dict(zip(*t.group_by("run_id").aggregate([("batch_id", "count")]).to_pydict().values()))
    assert counts == {"a": 2 * n, "b": 2 * n, "same": 4 * n}
    assert sorted(set(t["batch_id"].to_pylist())) == sorted(1000 * k + i for k in range(4) for i in range(n))
    assert len([f for f in os.listdir(tmp_path) if f.startswith("part-same-")]) == 2 * (n // 2)
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]  # no temporary file left


def test_a_missing_or_empty_store_reads_as_an_empty_table_and_stray_files_are_ignored(tmp_path):
    for store in (tmp_path / "missing", tmp_path):
        t = read_history(store)
        assert (t.num_rows, t.schema) == (0, SCHEMA)
    (tmp_path / "notes.txt").write_text("not a part")
    (tmp_path / ".tmp-abc.parquet").write_bytes(b"half written")
    assert read_history(tmp_path).num_rows == 0
    with HistoryWriter(tmp_path, "r", clock=_clock()) as w:
        w.add(_record(0, TWO))
    assert read_history(tmp_path).num_rows == 2


def test_the_default_store_is_in_the_users_data_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("LMSTREAM_KIT_HOME", str(tmp_path / "kit"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store() == tmp_path / "kit" / "history"
    monkeypatch.setenv("LMSTREAM_KIT_HOME", "")
    assert default_store() == tmp_path / "xdg" / "lmstream_kit" / "history"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")  # invalid per the XDG spec: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data_dir() == tmp_path / "home" / ".local" / "share" / "lmstream_kit"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_store() == tmp_path / "home" / ".local" / "share" / "lmstream_kit" / "history"
    rec = HistoryRecorder(run_id="r", flush_every=1)
    rec.after_batch(_record(0, TWO))
    assert read_history().num_rows == 2 and rec.path == default_store()


# --------------------------------------------------------------------------- bad input


def test_a_store_that_is_a_file_or_cannot_be_created_is_a_config_error_naming_it(tmp_path):
    f = tmp_path / "store"
    f.write_text("x")
    msg = rf"^history store '{f}' is not a directory$"
    with pytest.raises(ConfigError, match=msg):
        HistoryWriter(f, "r")
    with pytest.raises(ConfigError, match=msg):
        read_history(f)
    with pytest.raises(ConfigError, match=msg):
        HistoryRecorder(f)
    with pytest.raises(ConfigError, match=rf"^history store '{f / 'sub'}' cannot be written: .+$") as info:
        HistoryWriter(f / "sub", "r")
    assert "\n" not in str(info.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_an_unwritable_store_is_a_config_error_naming_it(tmp_path):
    store = tmp_path / "ro"
    store.mkdir()
    store.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match=rf"^history store '{store}' cannot be written: Permission denied$"):
            HistoryWriter(store, "r")
    finally:
        store.chmod(0o700)


def test_a_store_the_probe_cannot_write_to_is_a_config_error(tmp_path, monkeypatch):
    from lmstream_kit.tune import history

    def refuse(**kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(history.tempfile, "mkstemp", refuse)
    with pytest.raises(ConfigError, match=rf"^history store '{tmp_path}' cannot be written: Permission denied$"):
        HistoryWriter(tmp_path, "r")


def test_bad_run_ids_and_flush_counts_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"^history run id must be a non-empty string, got ''$"):
        HistoryWriter(tmp_path, "")
    with pytest.raises(ConfigError, match=r"^history.flush_every must be >= 1, got 0$"):
        HistoryWriter(tmp_path, "r", flush_every=0)
    with pytest.raises(ConfigError, match=r"^history.flush_every must be >= 1, got 0$"):
        HistoryRecorder(tmp_path).set_param("flush_every", 0)


def test_malformed_operators_are_skipped_and_the_rest_kept(tmp_path):
    bad = [
        {k: v for k, v in _op("j0.s1").items() if k != "tasks"},  # missing key
        _op("j0.s2", records_in="many"),  # wrong kind
        _op("j0.s3", bottleneck="no"),
        _op("j0.s4", job=None),
        "j0.s5",
    ]
    good = [_op("j0.s0"), _op("j0.s6", stage_id=None, cpu_s=None, wall_s=None, status=None)]
    w = HistoryWriter(tmp_path, "r", clock=_clock())
    assert w.add(_record(0, [good[0], *bad, good[1]])) == 2
    assert w.add({"operators": TWO}) == 0  # no batch id: the whole record is skipped
    assert w.add(_record(1, bad)) == 0
    w.close()
    assert w.skipped == 5 + 2 + 5
    t = read_history(tmp_path)
    assert t["operator"].to_pylist() == ["j0.s0", "j0.s6"]
    assert t.slice(1).select(["stage_id", "cpu_s", "wall_s", "status"]).to_pylist() == [
        {"stage_id": None, "cpu_s": None, "wall_s": None, "status": None}]
    assert t["fingerprint"].unique().to_pylist() == [dag_fingerprint(good)]


# --------------------------------------------------------------------------- the plug-in


def test_the_recorder_appends_records_with_operators_and_flushes_on_close(tmp_path):
    rec = HistoryRecorder(tmp_path, run_id="run-7", flush_every=2, plan_ops=["Scan", "HashAggregate"])
    assert rec.after_batch(_record(0, TWO)) is None
    rec.after_batch(_record(1))  # the twin, or stages that could not be read: nothing
    rec.after_batch(_record(2, []))
    assert read_history(tmp_path).num_rows == 0 and rec.writer.pending == 2
    rec.set_param("flush_every", 1)
    assert [(c.param, c.old, c.value) for c in rec.changelog.take()] == [("history.flush_every", 2, 1)]
    rec.after_batch(_record(3, TWO[:1], workload="CM1"))
    assert read_history(tmp_path).num_rows == 3
    rec.close()
    t = read_history(tmp_path)
    assert list(zip(t["batch_id"].to_pylist(), t["workload"].to_pylist())) == [(0, "LR2S"), (0, "LR2S"), (3, "CM1")]
    assert t["run_id"].unique().to_pylist() == ["run-7"]
    assert t["fingerprint"][0].as_py() == dag_fingerprint(TWO, ["Scan", "HashAggregate"])
    assert len(HistoryRecorder(tmp_path).run_id) == 32  # a uuid4 hex by default


def test_a_write_failure_never_fails_the_batch_and_the_rows_wait_for_the_next_try(tmp_path):
    store = tmp_path / "h"
    rec = HistoryRecorder(store, run_id="r", flush_every=1)
    store.rmdir()
    store.write_text("now a file")
    assert rec.after_batch(_record(0, TWO)) is None
    assert rec.error is not None and rec.writer.pending == 2
    store.unlink()
    store.mkdir()
    rec.after_batch(_record(1, TWO))
    assert read_history(store)["batch_id"].to_pylist() == [0, 0, 1, 1]


def test_in_the_run_loop_the_recorder_sees_the_operators_an_earlier_plugin_added(tmp_path):
    stage = {"job": 0, "position": 0, "stageId": 1, "status": "COMPLETE", "numTasks": 2, "executorRunTime": 1000,
             "inputRecords": 60, "shuffleWriteRecords": 6}

    class Runner(BatchController):
        def run_batch(self, ctx, output_dir):
            return ctx.rows, {}

    log = ChangeLog()
    gate = AdmitAll("asap")
    gate.bind_changelog(log)
    loop = RunLoop(gate, Runner(), log, settings=lambda: BatchSettings("TOY", "asap", 5.0, 2.5, None))
    loop.spool = NS(datasets=lambda start, end=None: [NS(seq=i, arrival=1000.0 + i, rows=10, nbytes=100)
                                                      for i in range(6)][start:end])
    loop.add_controller(OperatorMetrics())
    rec = loop.add_controller(HistoryRecorder(tmp_path, run_id="loop", flush_every=1))
    end = loop.on_latest(0)
    loop.on_planned(0, end)
    record = loop.run_batch(NS(batch_id=4, stages=lambda timeout: [stage]))
    assert [op["key"] for op in record["operators"]] == ["j0.s0"]
    t = read_history(tmp_path)
    assert t.select(["run_id", "workload", "batch_id", "operator", "tasks", "records_in", "batch_rows",
                     "bound_s"]).to_pylist() == [
        {"run_id": "loop", "workload": "TOY", "batch_id": 4, "operator": "j0.s0", "tasks": 2, "records_in": 60,
         "batch_rows": 60, "bound_s": 5.0}]
    assert t["stream_rate"][0].as_py() == pytest.approx(record["throughput_rows_s"])
    assert rec.error is None and pa.types.is_timestamp(t.schema.field("written_at").type)


def test_the_shipped_seed_history_holds_real_runs_of_the_six_workloads_and_pretrains_a_tuner(tmp_path):
    import json

    from lmstream_kit.tune import SEED_STORE, ParallelismTuner, read_history
    from lmstream_kit.tune.operators import OperatorSample

    seed = read_history("seed")
    assert set(seed.column("workload").to_pylist()) == {"LR1S", "LR1T", "LR2S", "CM1S", "CM1T", "CM2S"}
    info = json.loads((SEED_STORE / "run.json").read_text())
    assert info["made_by"] == "benchmarks/seed_history.py" and info["rows"] == seed.num_rows
    # at random partitions: every workload's source stage ran at several parallelisms
    for w in info["setup"]["rates"]:
        tasks = {t for wl, op, t in zip(*(seed.column(c).to_pylist() for c in ("workload", "operator", "tasks")))
                 if wl == w and op == "j0.s0"}
        assert len(tasks) >= 3, (w, tasks)
    # a store list reads as one: the user's (empty here) and the seed
    assert read_history([tmp_path / "mine", "seed"]).num_rows == seed.num_rows
    # a two-stage chain like LR2S's pre-trains from its cluster of the seed at the first batch

    def op(key, pos, tasks, useful):
        return OperatorSample(key, 0, pos, pos, "COMPLETE", tasks, 40_000, 1_000, useful, useful, useful,
                              useful / tasks, 40_000 / useful, useful / tasks / 4.0, False)

    tuner = ParallelismTuner(history=[tmp_path / "mine", "seed"])
    tuner.observe([op("j0.s0", 0, 2, 1.0), op("j0.s1", 1, 2, 0.2)], rows=40_000, budget_s=4.0, behind=False)
    assert tuner.pretrain_dags and tuner.pretrain and tuner.model.ready
