"""Device mapping on a running stream (real local Spark): the plan of every batch, live changes, modes."""

from __future__ import annotations

import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.live import LiveStream
from lmstream_kit.metrics import load_metrics, read_run_info
from lmstream_kit.record import plan_of

pytestmark = pytest.mark.spark


def data_records(stream):
    return [r for r in stream.records if r["rows"] > 0]


def test_every_batch_records_the_device_plan_of_its_real_streaming_plan(spark, tmp_path):
    run = tmp_path / "lr2s"
    s = LiveStream("LR2S", policy="lmstream", traffic="constant", rate=500, speedup=5, duration_s=200,
                   run_dir=run, spark=spark, device_mode="advisory", optimizer=False)
    s.start()
    try:
        s.wait(batches=3, timeout=120)
        # a person's live change: from the next batch on, every operator with a class goes to the GPU
        s.mapper.set_inflection_point(1024)
        mark = len(s.records)
        s.wait(until=lambda st: len(data_records(st)) >= 3 and len(st.records) >= mark + 2, timeout=120)
    finally:
        s.stop(drain=False)
    records = data_records(s)
    first = plan_of(records[0])
    names = [e["exec_name"] for e in first["entries"]]
    # the micro-batch's IncrementalExecution, not foreachBatch's RDD scan of its result
    for name in ("HashAggregateExec", "ShuffleExchangeExec", "StateStoreSaveExec", "StateStoreRestoreExec",
                 "MicroBatchScanExec", "ExpandExec", "FilterExec"):
        assert name in names, names
    # the edges travel with the plan, so a recorded plan can be drawn as its DAG
    ids = {e["id"] for e in first["entries"]}
    edges = [(c, e["id"]) for e in first["entries"] for c in e["children"]]
    assert len(edges) == len(ids) - 1 and all(c in ids for c, _ in edges)
    assert [e["exec_name"] for e in first["entries"] if not e["children"]] == ["MicroBatchScanExec"]
    state = [e for e in first["entries"] if e["exec_name"].startswith("StateStore")]
    assert all(e["device"] == "CPU" and e["reason"] == "streaming state exec" for e in state)
    # planning happens once per query shape
    assert [r["plan_cache"] for r in records] == ["miss"] + ["hit"] * (len(records) - 1)
    assert records[0]["planning_s"] > 0 and all(r["planning_s"] == 0 for r in records[1:])
    assert all(r["device_mode"] == "advisory" for r in records)
    # the change is recorded once, with the first batch it applies to
    changed = [r for r in s.records if r.get("changes")]
    assert len(changed) == 1
    change = changed[0]["changes"][0]
    assert change["param"] == "mapper.inflection_point" and change["value"] == 1024
    after = [r for r in records if r["batch_id"] >= changed[0]["batch_id"]]
    before = [r for r in records if r["batch_id"] < changed[0]["batch_id"]]
    assert before and after
    assert all(r["inflection_point"] == 150 * 1024 for r in before)
    assert all(r["inflection_point"] == 1024 for r in after)
    for r in after:
        plan = plan_of(r)
        classified = [e for e in plan["entries"] if e["op_class"] is not None]
        assert classified and all(e["device"] == "GPU" for e in classified)
        assert r["gpu_ops"] == len(classified)
    # the same fields load back from disk
    df = load_metrics(run)
    assert {"device_plan", "inflection_point", "mapping_s", "optimizer_s", "planning_s"} <= set(df.columns)
    info = read_run_info(run)
    assert info["device_mode"] == "advisory" and info["mapper"]["inflection_point"] == 150 * 1024


def test_the_optimizer_tunes_the_inflection_point_without_blocking_the_stream(spark, tmp_path):
    s = LiveStream("CM1S", policy="lmstream", traffic="random", rate=500, speedup=5, duration_s=150,
                   run_dir=tmp_path / "cm1s", spark=spark, device_mode="advisory",
                   optimizer={"min_history": 5, "exploration": 0.5, "seed": 1})
    s.start()
    try:
        s.wait(batches=8, timeout=150)
        s.freeze_optimizer()
        frozen_at = len(s.records)
        s.set_inflection_point(64 * 1024)
        s.wait(until=lambda st: len(st.records) >= frozen_at + 3, timeout=120)
    finally:
        s.stop(drain=False)
    records = data_records(s)
    ips = [r["inflection_point"] for r in records]
    assert len(set(ips)) > 1, "the optimizer explores and moves the inflection point"
    assert all(r["optimizer_s"] >= 0 for r in records)
    set_batch = next(r for r in s.records if any(c["param"] == "mapper.inflection_point"
                                                 for c in (r.get("changes") or [])))
    assert all(r["inflection_point"] == 64 * 1024 for r in records if r["batch_id"] >= set_batch["batch_id"])
    # the value set by hand is recorded once (the optimizer's copy of it is not)
    params = [c["param"] for c in set_batch["changes"]]
    assert params.count("mapper.inflection_point") == 1 and "inflection_point" not in params, params


def test_rapids_mode_without_the_plugin_is_a_clear_error(spark, tmp_path):
    s = LiveStream("LR2S", policy="lmstream", run_dir=tmp_path / "r", spark=spark, device_mode="rapids")
    with pytest.raises(ConfigError, match="RAPIDS"):
        s.start()
    assert not s.is_active


def test_auto_mode_falls_back_to_advisory_here_and_says_why(spark, tmp_path):
    s = LiveStream("LR2S", policy="fixed", traffic="constant", rate=200, speedup=10, duration_s=30,
                   run_dir=tmp_path / "auto", spark=spark)
    s.start()
    try:
        s.wait(batches=1, timeout=120)
    finally:
        s.stop(drain=False)
    info = read_run_info(tmp_path / "auto")
    assert info["device_mode"] == "advisory"
    assert "no RAPIDS plugin" in info["device_mode_reason"]
    assert s.optimizer is None  # baselines have no optimizer by default
    assert all("device_plan" in r for r in data_records(s))


def _output(run_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted((run_dir / "output").glob("part-*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pandas() if files else None


@pytest.mark.slow  # the 4.3 line covers the twin against Spark with test_twin_spark's replays
@pytest.mark.parametrize("query,end_col", [("LR2S", "timestamp"), ("CM1S", "window_end")])
def test_twin_mode_gives_the_results_spark_gives(spark, tmp_path, query, end_col):
    """The same rows through Spark's query and through the twin executor (pandas): the same windows."""
    runs = {}
    for mode in ("advisory", "twin"):
        run = tmp_path / mode
        s = LiveStream(query, policy="lmstream", traffic="random", rate=400, speedup=10, duration_s=100,
                       run_dir=run, spark=spark, seed=5, device_mode=mode, optimizer=False,
                       mapper={"inflection_point": 16 * 1024})
        s.start()
        s.wait(until=lambda st: st.feed_finished(), timeout=180)
        s.stop()
        runs[mode] = (_output(run), s.records, read_run_info(run))
    (spark_out, _, _), (twin_out, twin_records, twin_info) = runs["advisory"], runs["twin"]
    assert twin_info["device_mode"] == "twin" and twin_info["gpu_backend"] == "pandas"
    data = [r for r in twin_records if r["rows"] > 0]
    assert all(r["twin_backend"] == "pandas" and r["twin_s"] > 0 for r in data)
    assert any(r["gpu_ops"] > 0 for r in data), "batches of this size put some operators on the GPU side"
    # batch boundaries differ between the two runs, so the last windows may close in different
    # batches; every window up to the earlier of the two last emitted windows must be identical
    last = min(spark_out[end_col].max(), twin_out[end_col].max())
    keys = [c for c in spark_out.columns if c not in ("avgSpeed", "totalCpu", "avgCpu")]
    a = spark_out[spark_out[end_col] <= last].sort_values(keys).reset_index(drop=True)
    b = twin_out[twin_out[end_col] <= last].sort_values(keys).reset_index(drop=True)
    assert len(a) > 10
    assert list(a.columns) == list(b.columns)
    pd_testing = pytest.importorskip("pandas.testing")
    pd_testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-9)


@pytest.mark.slow
def test_a_twin_run_resumes_from_its_checkpoint_with_its_state(spark, tmp_path):
    run = tmp_path / "twin"
    common = dict(policy="lmstream", traffic="constant", rate=400, speedup=10, run_dir=run, spark=spark,
                  seed=2, device_mode="twin", optimizer=False)
    first = LiveStream("CM1S", duration_s=60, **common)
    first.start()
    first.wait(until=lambda st: st.feed_finished(), timeout=180)
    first.stop()
    second = LiveStream("CM1S", duration_s=60, **common)
    second.start()
    second.wait(until=lambda st: st.feed_finished(), timeout=180)
    second.stop()
    ref = tmp_path / "ref"
    whole = LiveStream("CM1S", duration_s=120, **{**common, "run_dir": ref, "device_mode": "advisory"})
    whole.start()
    whole.wait(until=lambda st: st.feed_finished(), timeout=240)
    whole.stop()
    a, b = _output(ref), _output(run)
    last = min(a["window_end"].max(), b["window_end"].max())
    keys = ["window_start", "window_end", "category"]
    a = a[a["window_end"] <= last].sort_values(keys).reset_index(drop=True)
    b = b[b["window_end"] <= last].sort_values(keys).reset_index(drop=True)
    assert len(a) > 10 and not b.duplicated(keys).any()
    pytest.importorskip("pandas.testing").assert_frame_equal(a, b, check_exact=False, rtol=1e-9)
