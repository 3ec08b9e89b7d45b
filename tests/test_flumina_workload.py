"""A Flumina spec as a workload of the kit: generated events, admitted by every policy, each micro-batch
run on Spark in fork/join passes; the outputs equal the sequential run over everything ingested, also
across a restart of the stream."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.feed.spool import Spool
from lmstream_kit.flumina import EXAMPLES, run_sequential
from lmstream_kit.flumina.tables import table_events
from lmstream_kit.workloads.flumina import FLUMINA_EXAMPLES, flumina_workload


def _outputs(run):
    files = sorted((run / "output").glob("part-*.parquet"))
    return [out for f in files for out in pq.read_table(f).column("output").to_pylist()]


def _sequential(run, example, parts):
    rows = Spool(run / "spool", create=False).read_table()
    events = table_events(rows, codec=FLUMINA_EXAMPLES[example].codec)
    return run_sequential(EXAMPLES.get(example).spec(parts), events), rows.num_rows


def _stream(spark, run, workload, *, policy="lmstream", rate=1000, duration_s=8):
    """Run ``workload`` until its generated traffic has been fed and processed; the stream."""
    from lmstream_kit.live import LiveStream

    s = LiveStream(workload, policy=policy, traffic="constant", rate=rate, speedup=4, duration_s=duration_s,
                   trigger_s=1, run_dir=run, spark=spark)
    s.start()
    try:
        s.wait(until=lambda st: st.feed_finished(), timeout=180)
    finally:
        s.stop()
    return s


def test_the_workload_generates_the_examples_events():
    w = flumina_workload("fraud_detection", parallelism=2, sync_every=50)
    table = w.make_rows(7, 1000, np.random.default_rng(1))
    assert table.schema == w.schema and table.num_rows == 1000
    tags = table.column("tag").to_pylist()
    assert set(tags) == {"tx0", "tx1", "refresh"} and 5 <= tags.count("refresh") <= 40
    assert table.column("seq").to_pylist() == list(range(70_000_000, 70_001_000))
    with pytest.raises(ConfigError, match=r"^unknown Flumina workload example 'page_views' \(known: value_barrier, "):
        flumina_workload("page_views")
    with pytest.raises(ConfigError, match=r"^parallelism must be an integer >= 1, got 0$"):
        flumina_workload(parallelism=0)


def test_logics_declared_by_name_give_the_stream_a_logic_menu_and_a_runner_that_knows_them(tmp_path):
    from lmstream_kit.flumina.examples import labelled

    update = EXAMPLES.get("value_barrier").spec(2).update
    w = flumina_workload("value_barrier", logics={"v2": labelled(update, "v2"), "v3": (labelled(update, "v3"), abs)})
    [make] = w.controllers
    assert make().param("logic").choices == ("initial", "v2", "v3")
    runner = w.batch_program(tmp_path).runner
    assert (runner.logic, list(runner.logics), runner.logics["v3"][1]) == ("initial", ["initial", "v2", "v3"], abs)
    started = flumina_workload("value_barrier", logic="v2", logics={"v2": labelled(update, "v2")})
    assert started.batch_program(tmp_path / "s").runner.logic == "v2"
    with pytest.raises(ConfigError, match=r"^a logic's name must be a non-empty string other than 'initial' "):
        flumina_workload(logics={"initial": update})
    with pytest.raises(ConfigError, match=r"^logic 'v2' must be an update function \(state, event\) -> "):
        flumina_workload(logics={"v2": 3})
    with pytest.raises(ConfigError, match="logic 'v2' is declared in logics= too"):
        flumina_workload(update=abs, logic="v2", logics={"v2": update})


@pytest.mark.spark
@pytest.mark.parametrize("policy", ["lmstream", "fixed", "asap"])
def test_fraud_detection_runs_under_every_policy_and_equals_the_sequential_run(spark, tmp_path, policy):
    run = tmp_path / policy
    s = _stream(spark, run, flumina_workload("fraud_detection", parallelism=2, sync_every=300, bound_s=4.0),
                policy=policy, rate=1500, duration_s=16)
    (state, outputs), ingested = _sequential(run, "fraud_detection", 2)
    assert ingested == 16 * 1500 == sum(r["rows"] for r in s.records)
    assert _outputs(run) == [repr(o) for o in outputs] and len(outputs) > 20
    data = [r for r in s.records if r["rows"]]
    assert all(r["flumina_passes"] == (2 if r["flumina_epochs"] > 1 else 1) for r in data)
    assert sum(r["flumina_epochs"] - 1 for r in data) == len(outputs)
    written = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["flumina_passes"] for m in written if m.get("rows")] == [r["flumina_passes"] for r in data]


@pytest.mark.spark
def test_a_restarted_stream_continues_from_the_workers_states_on_another_parallelism(spark, tmp_path):
    run = tmp_path / "vb"
    for parallelism in (2, 1):  # the second stream resumes the first's run directory, on one worker
        _stream(spark, run, flumina_workload("value_barrier", parallelism=parallelism, shards=2, sync_every=400,
                                             bound_s=4.0, name="FLUMINA_vb"))
    (state, outputs), ingested = _sequential(run, "value_barrier", 2)
    assert ingested == 16 * 1000
    assert _outputs(run) == [repr(o) for o in outputs]
    kept = sorted(p.name for p in (run / "workload_state").iterdir())
    assert kept[-1] == "flumina_plan.json" and len(kept) == 3 and all(k.endswith(".pkl") for k in kept[:2])
    plan = json.loads((run / "workload_state" / "flumina_plan.json").read_text())
    assert plan["children"] == [] and sorted(plan["tags"]) == ["a0", "a1", "b"]  # the sequential plan


def test_page_view_rows_carry_views_and_table_updates():
    w = flumina_workload("page_view", parallelism=2, sync_every=20)
    table = w.make_rows(0, 400, np.random.default_rng(2))
    rows = list(zip(table.column("tag").to_pylist(), table.column("payload").to_pylist()))
    assert {t for t, _ in rows} == {"view0", "view1", "update"}
    assert all(len(p) == (2 if t == "update" else 1) for t, p in rows)


@pytest.mark.spark
def test_page_view_joins_with_the_changing_table_like_the_sequential_run(spark, tmp_path):
    run = tmp_path / "pv"
    s = _stream(spark, run, flumina_workload("page_view", parallelism=2, sync_every=200, bound_s=4.0),
                policy="asap", rate=800, duration_s=8)
    (state, outputs), ingested = _sequential(run, "page_view", 2)
    assert ingested == 8 * 800 == sum(r["rows"] for r in s.records)
    # views emit, so the workers' outputs interleave: equal up to the dependence (each worker in order)
    got = _outputs(run)
    assert sorted(got) == sorted(repr(o) for o in outputs) and len(outputs) > 5000
    assert all(r["flumina_passes"] == 1 for r in s.records if r["rows"])


def _doubled(total, event):
    """An update of this test module, which Spark's Python workers cannot import."""
    return total, []


@pytest.mark.spark
def test_workers_rescale_tags_migrate_and_the_logic_swaps_while_the_stream_runs(spark, tmp_path):
    import dataclasses

    from lmstream_kit.flumina.live import FluminaControl
    from lmstream_kit.journal import Journal
    from lmstream_kit.live import LiveStream

    def doubled(total, event):  # value_barrier's update with a-values counted twice
        if event.tag == "b":
            return 0, [("b", event.ts, total)]
        return total + 2 * event.payload, []

    def times_ten(total):
        return total * 10

    def broken(total, event):
        raise ValueError(f"no update for {event.tag}")

    run = tmp_path / "live"
    # 30 wall s of feed: every change below waits for data batches after it, and on a loaded CI
    # machine the changes outlasted a 16 s feed (the last wait then found no batch to wait for)
    s = LiveStream(flumina_workload("value_barrier", parallelism=2, shards=3, sync_every=300, bound_s=4.0),
                   policy="lmstream", traffic="constant", rate=1000, speedup=4, duration_s=120, trigger_s=1,
                   run_dir=run, spark=spark).start()
    try:
        control = next(c for c in s.controllers if isinstance(c, FluminaControl))
        query = s.query.runId
        def data():
            return sum(1 for r in s.records if r["rows"])

        s.wait(batches=3, timeout=120)
        control.set_param("workers", 3)
        s.wait(batches=data() + 2, timeout=120)
        moved = [t for t in ("a0", "a1", "a2") if control.runner.plan.owner(t) != "w1"][0]
        control.move_tags([moved], to="w1")
        s.wait(batches=data() + 2, timeout=120)
        with pytest.raises(ConfigError, match=r"^update '_doubled' cannot run in Spark's tasks: ModuleNotFoundError: "
                                              r"No module named 'test_flumina_workload'"):
            control.set_update(_doubled)
        control.set_update(doubled, transform=times_ten)  # defined in the test: pickled by value
        s.wait(batches=data() + 2, timeout=120)
        control.set_update(broken)  # fails in its first batch: that batch runs again under 'doubled'
        s.wait(until=lambda st: st.feed_finished(), timeout=180)
        assert s.query.runId == query  # no restart
    finally:
        s.stop()
    txns = Journal(run).transactions()
    assert [(t["op"], t["state"]) for t in txns] == [
        ("flumina_workers", "committed"), ("flumina_plan", "committed"), ("flumina_logic", "aborted"),
        ("flumina_logic", "committed"), ("flumina_logic", "aborted")]
    assert "No module named 'test_flumina_workload'" in txns[2]["reason"]
    assert txns[4]["reason"].startswith(f"logic 'broken' failed on batch {txns[4].get('batch_id')}, which ran again "
                                        "under 'doubled': ") and "no update for" in txns[4]["reason"], txns[4]
    del txns[2]
    swap_batch = txns[2]["batch_id"]
    by_batch = {r["batch_id"]: r for r in s.records}
    assert by_batch[txns[0]["batch_id"]]["flumina_workers"] == 3
    assert by_batch[txns[1]["batch_id"]]["flumina_workers"] == 2  # the moved tag's worker joined w1
    assert {r["flumina_logic"] for r in s.records if r["batch_id"] >= swap_batch} == {"doubled"}
    # the outputs equal the sequential run: the old logic up to the swap, the state times ten, then the new
    before = sum(r["n_datasets"] for r in s.records if r["batch_id"] < swap_batch)
    spool = Spool(run / "spool", create=False)

    spec = EXAMPLES.get("value_barrier").spec(3)
    mid, first = run_sequential(spec, table_events(spool.read_table(0, before)))
    _, second = run_sequential(dataclasses.replace(spec, update=doubled), table_events(spool.read_table(before)),
                               state=times_ten(mid))
    assert len(first) > 5 and len(second) > 5
    assert _outputs(run) == [repr(o) for o in first + second]
