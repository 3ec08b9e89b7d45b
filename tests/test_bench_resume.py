"""An interrupted bench goes on where it stopped (``bench --resume``): the bookkeeping, with the engine
faked as in test_bench_failure (the cells' streams run on Spark in test_bench_spark)."""

from __future__ import annotations

import json

import pytest
from test_bench_failure import FakeEngine

import lmstream_kit.live  # noqa: F401 - bound to the real SparkEngine before a test patches the adapter's
from lmstream_kit.bench import BenchConfig, run_bench
from lmstream_kit.bench.capacity import CapacitySearch, search_pairs
from lmstream_kit.exceptions import ConfigError


class Interrupted(BaseException):
    """What a laptop going to sleep or a session cut off does to a bench: not an error of a cell."""


def make_run(calls, stop_at=None, capacity=3000):
    """A cell that writes its batches' metrics as a stream does; ``stop_at``: interrupt that run (0-based).

    A capacity probe passes below ``capacity`` rows/s (every batch within its bound) and fails above it.
    """
    def run(self, query, policy, traffic, *, rate, seed, duration_s, run_dir, catch_up_s=None):
        if stop_at is not None and len(calls) == stop_at:
            raise Interrupted
        calls.append((run_dir.name, rate))
        run_dir.mkdir(parents=True, exist_ok=True)
        latency = 1.0 if rate <= capacity else 9.0
        batches = [{"batch_id": i, "rows": 100, "max_latency_s": latency + i / 10, "avg_latency_s": 0.5,
                    "processing_s": 0.4, "oldest_arrival": 5.0 * i, "completed_at": 5.0 * i + 1.0,
                    "admitted_at": 5.0 * i + 0.6, "bytes": 6400, "buffering_s": 0.6, "bound_s": 5.0,
                    "policy": policy} for i in (1, 2, 3)]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(b) + "\n" for b in batches))
        from lmstream_kit.metrics import load_metrics

        return load_metrics(run_dir), {"jvm_s": 1.0 + len(calls)}, rate <= capacity

    return run


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr("lmstream_kit.engine.adapter.SparkEngine", FakeEngine)

    def use(run):
        monkeypatch.setattr("lmstream_kit.bench.run._Runner.run", run)

    return use


def config(**kw):
    kw = {"queries": ["LR2S"], "policies": ["lmstream", "fixed", "asap"], "traffic": ["constant", "random"],
          "warmup_s": 5.0, "duration_s": 20.0, "speedup": 2.0, **kw}
    return BenchConfig(**kw)


def test_a_resumed_sweep_keeps_the_finished_cells_and_runs_only_the_rest(tmp_path, fake):
    out = tmp_path / "b"
    calls: list = []
    fake(make_run(calls, stop_at=4))  # the warm-up, three cells, then the interruption
    with pytest.raises(Interrupted):
        run_bench(config(), out)
    assert [c[0] for c in calls] == ["warmup-LR2S", "LR2S-lmstream-constant-r0", "LR2S-fixed-constant-r0",
                                    "LR2S-asap-constant-r0"]
    first = [json.loads(line) for line in (out / "cells.jsonl").read_text().splitlines()]

    again: list = []
    fake(make_run(again))
    result = run_bench(config(), out, resume=True)
    # the warm-up again (a fresh JVM pays for its cold code), then only the random-traffic cells
    assert [c[0] for c in again] == ["warmup-LR2S", "LR2S-lmstream-random-r0", "LR2S-fixed-random-r0",
                                    "LR2S-asap-random-r0"]
    rows = result.results
    assert list(zip(rows["policy"], rows["traffic"])) == [(p, t) for t in ("constant", "random")
                                                          for p in ("lmstream", "fixed", "asap")]
    assert rows["cpu_jvm_s"].tolist()[:3] == [r["cpu_jvm_s"] for r in first] == [3.0, 4.0, 5.0]  # kept as measured, not re-run
    assert result.batches.groupby(["policy", "traffic"]).size().tolist() == [3] * 6  # kept cells' batches too
    saved = json.loads((out / "bench-config.json").read_text())
    assert len(saved["resumed_at"]) == 1 and result.meta["started_at"] == saved["started_at"]
    assert result.meta["resumed_at"] == saved["resumed_at"] and len(result.meta["commits"]) == 2  # a part each


def make_gc_run(calls, stop_at=None, capacity=3000):
    """:func:`make_run`, with Spark's progress saying the driver collected 0.12 s in each batch, fully in the third."""
    base = make_run(calls, stop_at, capacity)

    def run(self, query, policy, traffic, *, rate, seed, duration_s, run_dir, catch_up_s=None):
        _, cpu, ok = base(self, query, policy, traffic, rate=rate, seed=seed, duration_s=duration_s,
                          run_dir=run_dir, catch_up_s=catch_up_s)
        (run_dir / "spark_progress.jsonl").write_text("".join(
            json.dumps({"batch_id": i, "jvm_gc_ms": 120.0, "jvm_full_gc_count": int(i == 3)}) + "\n" for i in (1, 2, 3)))
        from lmstream_kit.metrics import load_metrics

        return load_metrics(run_dir), cpu, ok

    return run


def test_cells_and_probes_carry_the_drivers_collections_and_a_resume_reads_them_for_older_cells(tmp_path, fake):
    out = tmp_path / "b"
    calls: list = []
    fake(make_gc_run(calls, stop_at=4))
    with pytest.raises(Interrupted):
        run_bench(config(), out)
    logged = [json.loads(line) for line in (out / "cells.jsonl").read_text().splitlines()]
    # 3 batches of 0.4 s processing, 0.12 s collecting each: 30%, one full collection
    assert [(r["gc_s"], r["gc_share"], r["full_gcs"]) for r in logged] == [(0.36, 0.3, 1.0)] * 3
    # the cells of a bench part from before the kit recorded collections: read from their run directories
    (out / "cells.jsonl").write_text("".join(
        json.dumps({k: v for k, v in r.items() if k not in ("gc_s", "gc_share", "full_gcs")}) + "\n" for r in logged))
    fake(make_gc_run([]))
    result = run_bench(config(capacity=True, capacity_probes=2), out, resume=True)
    cells = result.results
    assert cells["gc_share"].tolist() == [0.3] * 6 and cells["full_gcs"].tolist() == [1.0] * 6
    assert result.capacity["gc_share"].tolist() == [0.3] * 6 and result.capacity["full_gcs"].tolist() == [1.0] * 6


def test_a_failed_or_vanished_cell_runs_again_beside_its_group_and_a_fresh_bench_forgets_the_old_logs(
        tmp_path, fake):
    out = tmp_path / "b"
    calls: list = []
    fake(make_run(calls))
    run_bench(config(warmup_s=0), out)
    lines = (out / "cells.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    rows[1]["failed"] = "java.lang.OutOfMemoryError: Java heap space"  # fixed failed (constant traffic)
    (out / "cells.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    again: list = []
    fake(make_run(again))
    result = run_bench(config(warmup_s=0), out, resume=True)
    # lmstream and asap ran beside the failed cell: they run again with it, side by side; random stays
    assert [c[0] for c in again] == ["LR2S-lmstream-constant-r0", "LR2S-fixed-constant-r0", "LR2S-asap-constant-r0"]
    assert result.meta["remeasured"] == ["LR2S constant r0 at 1000"]
    assert result.results["cpu_jvm_s"].tolist() == [2.0, 3.0, 4.0] + [r["cpu_jvm_s"] for r in rows[3:]]
    import shutil

    shutil.rmtree(out / rows[5]["run_dir"])  # asap's random run directory is gone
    again.clear()
    run_bench(config(warmup_s=0), out, resume=True)
    assert [c[0] for c in again] == ["LR2S-lmstream-random-r0", "LR2S-fixed-random-r0", "LR2S-asap-random-r0"]

    fresh: list = []
    fake(make_run(fresh))
    result = run_bench(config(traffic=["constant"], warmup_s=0), out)  # not resumed: everything runs
    assert len(fresh) == 3 and len((out / "cells.jsonl").read_text().splitlines()) == 3
    assert "resumed_at" not in result.meta and "remeasured" not in result.meta


def test_a_resume_remeasures_a_query_side_by_side_when_asked_and_names_a_query_it_does_not_run(tmp_path, fake):
    out = tmp_path / "b"
    calls: list = []
    fake(make_run(calls))
    cfg = {"queries": ["LR2S", "CM1S"], "traffic": ["constant"], "warmup_s": 0}
    run_bench(config(**cfg), out)
    again: list = []
    fake(make_run(again))
    result = run_bench(config(**cfg), out, resume=True, remeasure=["lr2s"])
    assert [c[0] for c in again] == ["LR2S-lmstream-constant-r0", "LR2S-fixed-constant-r0", "LR2S-asap-constant-r0"]
    assert result.meta["remeasured"] == ["LR2S constant r0 at 1000"] and len(result.results) == 6
    again.clear()
    # a later part runs nothing again and still says what an earlier part re-measured
    assert run_bench(config(**cfg), out, resume=True).meta["remeasured"] == ["LR2S constant r0 at 1000"]
    assert again == []
    with pytest.raises(ConfigError, match=r"^cannot remeasure 'CM2S': the sweep's queries are LR2S, CM1S$"):
        run_bench(config(**cfg), out, resume=True, remeasure=["CM2S"])
    with pytest.raises(ConfigError, match=r"^remeasure needs resume"):
        run_bench(config(**cfg), tmp_path / "new", remeasure=["LR2S"])
    assert again == [] and not (tmp_path / "new").exists()


def test_a_fresh_jvm_warms_up_longer_and_a_resumed_capacity_search_warms_up_before_its_first_probe(
        tmp_path, fake):
    out = tmp_path / "b"
    runs: list = []
    inner = make_run([])

    def run(self, query, policy, traffic, *, rate, seed, duration_s, run_dir, catch_up_s=None):
        runs.append((run_dir.name, duration_s))
        return inner(self, query, policy, traffic, rate=rate, seed=seed, duration_s=duration_s, run_dir=run_dir,
                     catch_up_s=catch_up_s)

    fake(run)
    cfg = {"queries": ["LR2S", "CM1S"], "policies": ["asap"], "traffic": ["constant"], "capacity": True,
           "capacity_probes": 1, "capacity_duration_s": 10.0, "warmup_s": 5.0, "jvm_warmup_s": 30.0}
    run_bench(config(**cfg), out)
    # the JVM's first warm-up streams 30 wall s (60 simulated s at speedup 2), the next query's 5 s;
    # the capacity search finds both queries warm
    assert [r for r in runs if r[0].startswith("warmup")] == [("warmup-LR2S", 60.0), ("warmup-CM1S", 5.0)]
    assert [r[0] for r in runs[-2:]] == ["capacity-LR2S-asap-1000-r0", "capacity-CM1S-asap-1000-r0"]
    # a resume on a new JVM that has only probes left warms each query before its first probe
    lines = (out / "capacity.jsonl").read_text().splitlines()
    (out / "capacity.jsonl").write_text(lines[0] + "\n")
    runs.clear()
    run_bench(config(**cfg), out, resume=True)
    assert runs == [("warmup-CM1S", 60.0), ("capacity-CM1S-asap-1000-r0", 10.0)]
    with pytest.raises(ConfigError, match=r"^JVM warm-up must be >= 0 seconds, got -1"):
        config(jvm_warmup_s=-1)


def test_a_resume_that_would_measure_differently_is_refused_naming_the_setting(tmp_path, fake):
    out = tmp_path / "b"
    calls: list = []
    fake(make_run(calls, stop_at=2))
    with pytest.raises(Interrupted):
        run_bench(config(), out)
    with pytest.raises(ConfigError, match=r"^cannot resume the bench in .*: its speedup was 2\.0, this command "
                                          r"gives 4\.0 \(give the same options, or start a new bench directory\)$"):
        run_bench(config(speedup=4.0), out, resume=True)
    with pytest.raises(ConfigError, match=r"its spark_conf was \{\}, this command gives "
                                          r"\{'spark.driver.memory': '4g'\}"):
        run_bench(config(spark_conf={"spark.driver.memory": "4g"}), out, resume=True)
    # the sweep's shape may change: a resumed bench with another policy list runs its own cells; the
    # interruption left lmstream's cell without asap's beside it, so it runs again with asap's
    again: list = []
    fake(make_run(again))
    result = run_bench(config(policies=["lmstream", "asap"], traffic=["constant"]), out, resume=True)
    assert [c[0] for c in again] == ["warmup-LR2S", "LR2S-lmstream-constant-r0", "LR2S-asap-constant-r0"]
    assert result.meta["remeasured"] == ["LR2S constant r0 at 1000"]
    assert result.results["policy"].tolist() == ["lmstream", "asap"]


def test_the_capacity_search_goes_on_with_the_probes_it_logged(tmp_path, fake):
    out = tmp_path / "b"
    cfg = {"policies": ["lmstream"], "traffic": ["constant"], "warmup_s": 0, "capacity": True,
           "capacity_duration_s": 10.0}
    whole: list = []
    fake(make_run(whole))
    reference = run_bench(config(**cfg), tmp_path / "whole").capacity

    calls: list = []
    fake(make_run(calls, stop_at=5))  # the cell, then four probes, then the interruption
    with pytest.raises(Interrupted):
        run_bench(config(**cfg), out)
    assert len((out / "capacity.jsonl").read_text().splitlines()) == 4
    again: list = []
    fake(make_run(again))
    resumed = run_bench(config(**cfg), out, resume=True).capacity
    assert len(again) == len(reference) - 4  # the cell was kept; only the probes not logged ran
    cols = ["probe", "rate", "rep", "passed", "lo", "hi", "status"]
    assert resumed[cols].fillna(-1).to_dict("records") == reference[cols].fillna(-1).to_dict("records")
    assert resumed["status"].iloc[-1] == "bracketed" and (resumed["wall_s"] >= 0).all()


def test_the_logged_probes_wall_seconds_count_against_the_budget():
    now = {"t": 0.0}

    def probe(pair, rate, rep):
        now["t"] += 100.0
        return {"passed": rate <= 3000}

    prior = [{"query": "Q", "policy": "a", "probe": i, "rate": r, "rep": 0, "passed": r <= 3000, "wall_s": 100.0}
             for i, r in enumerate((1000, 2000, 4000))]
    rows = search_pairs([("Q", "a")], probe, lambda pair: CapacitySearch(1000, max_probes=12), budget_s=450.0,
                        clock=lambda: now["t"], prior=prior)
    # 300 s of the 450 s budget were spent before the interruption: two more probes start
    assert [r["rate"] for r in rows] == [1000, 2000, 4000, 2828.0, 3363.0]
    assert rows[-1]["status"] == "not-converged" and (rows[-1]["lo"], rows[-1]["hi"]) == (2828, 3363)


def test_the_paper_preset_adds_its_driver_heap_to_the_confs_given(tmp_path, bench_cli):
    _, seen = bench_cli("--preset", "paper", "--conf", "spark.sql.shuffle.partitions=4", "--resume",
                        "--out", str(tmp_path / "b"))
    assert seen["cfg"].spark_conf == {"spark.driver.memory": "4g", "spark.sql.shuffle.partitions": "4"}
    assert seen["resume"] is True and seen["cfg"].at_capacity == 0.8 and seen["cfg"].capacity_probes == 16
    _, seen = bench_cli("--preset", "paper", "--conf", "spark.driver.memory=8g", "--out", str(tmp_path / "b"))
    assert seen["cfg"].spark_conf == {"spark.driver.memory": "8g"} and seen["resume"] is False


def test_the_paper_preset_sets_the_reproductions_margin_and_a_given_controller_key_wins(tmp_path, bench_cli):
    _, seen = bench_cli("--preset", "paper", "--out", str(tmp_path / "b"))
    assert seen["cfg"].controller == {"quantile": 0.97, "min_margin_s": 0.5}
    _, seen = bench_cli("--preset", "paper", "--controller", "quantile=0.99", "--controller", "cold_start=5",
                        "--out", str(tmp_path / "b"))
    assert seen["cfg"].controller == {"quantile": 0.99, "min_margin_s": 0.5, "cold_start": 5}
    _, seen = bench_cli("--queries", "LR2S", "--out", str(tmp_path / "b"))
    assert seen["cfg"].controller == {}


def test_the_cli_says_in_one_line_why_a_bench_cannot_be_resumed(tmp_path, fake, capsys):
    from lmstream_kit.cli import main

    out = tmp_path / "b"
    calls: list = []
    fake(make_run(calls, stop_at=1))
    with pytest.raises(Interrupted):
        run_bench(config(), out)
    code = main(["bench", "--queries", "LR2S", "--duration", "20", "--speedup", "4", "--resume", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: cannot resume the bench in {out}: its speedup was 2.0, this command gives 4.0")


def test_cells_at_a_share_of_asaps_capacity_run_after_the_search_and_feed_the_goals(tmp_path, fake):
    from lmstream_kit.report.goals import goals

    out = tmp_path / "b"
    calls: list = []
    fake(make_run(calls, capacity=3000))
    cfg = {"policies": ["lmstream", "asap"], "traffic": ["constant"], "warmup_s": 0, "capacity": True,
           "capacity_duration_s": 10.0, "at_capacity": 0.8}
    result = run_bench(config(**cfg), out)
    near = result.results[result.results["load"] == "capacity"]
    # asap's search bracketed 2828-3084 rows/s: its cells run at 0.8 x 2828
    assert near["policy"].tolist() == ["lmstream", "asap"] and set(near["rate"]) == {2262.0}
    assert [c[0] for c in calls[-2:]] == ["LR2S-lmstream-constant-r0-at-2262", "LR2S-asap-constant-r0-at-2262"]
    table = goals(result.results, result.capacity, trigger_s=10.0).set_index("goal")
    assert table.loc["bound-capacity", "met"] is True
    assert table.loc["bound-capacity", "measured"].startswith("100.0% of batches within the bound at worst, on LR2S")
    assert table.loc["capacity", "met"] is None  # both bracketed alike: the brackets allow either side of 1x
    again: list = []
    fake(make_run(again))
    run_bench(config(**cfg), out, resume=True)
    assert again == []  # the cells at capacity were logged too: nothing runs again


def test_a_querys_cells_at_capacity_run_right_after_its_own_search_before_the_next_querys(tmp_path, fake):
    """On the machine that searched it: a sweep resumed in a later session may run on a VM of another speed."""
    out = tmp_path / "b"
    calls: list = []
    fake(make_run(calls, capacity=3000))
    cfg = {"queries": ["LR2S", "CM2S"], "policies": ["lmstream", "asap"], "traffic": ["constant"], "warmup_s": 0,
           "capacity": True, "capacity_duration_s": 10.0, "at_capacity": 0.8}
    run_bench(config(**cfg), out)
    names = [c[0] for c in calls]
    lr2s_near = names.index("LR2S-lmstream-constant-r0-at-2262")
    assert names[lr2s_near + 1] == "LR2S-asap-constant-r0-at-2262"
    assert names[:4] == ["LR2S-lmstream-constant-r0", "LR2S-asap-constant-r0", "CM2S-lmstream-constant-r0",
                         "CM2S-asap-constant-r0"]  # the sweep first
    assert all(n.startswith("capacity-LR2S-") for n in names[4:lr2s_near])
    assert names[lr2s_near + 2].startswith("capacity-CM2S-")
    assert names[-2:] == ["CM2S-lmstream-constant-r0-at-2262", "CM2S-asap-constant-r0-at-2262"]
    # interrupted in CM2S's search and resumed: LR2S's cells at capacity are kept, CM2S's search goes on
    cut = next(i for i, n in enumerate(names) if n.startswith("capacity-CM2S-")) + 3
    out2 = tmp_path / "c"
    calls2: list = []
    fake(make_run(calls2, stop_at=cut))
    with pytest.raises(Interrupted):
        run_bench(config(**cfg), out2)
    again: list = []
    fake(make_run(again))
    run_bench(config(**cfg), out2, resume=True)
    assert not any(n[0].startswith("LR2S-") for n in again), again
    assert [n[0] for n in again][-2:] == ["CM2S-lmstream-constant-r0-at-2262", "CM2S-asap-constant-r0-at-2262"]


def test_at_capacity_cells_need_the_capacity_search():
    with pytest.raises(ConfigError, match=r"^at-capacity cells need the capacity search"):
        config(at_capacity=0.8)
    with pytest.raises(ConfigError, match=r"at-capacity share must be > 0 and <= 2 \(of asap's capacity\), got 0"):
        config(at_capacity=0, capacity=True)


def test_a_longer_probe_keeps_the_cells_and_starts_the_search_over(tmp_path, fake):
    out = tmp_path / "b"
    cfg = {"policies": ["lmstream"], "traffic": ["constant"], "warmup_s": 0, "capacity": True}
    calls: list = []
    fake(make_run(calls, stop_at=4))  # the cell, three probes of 10 s, then the interruption
    with pytest.raises(Interrupted):
        run_bench(config(capacity_duration_s=10.0, **cfg), out)
    again: list = []
    fake(make_run(again))
    result = run_bench(config(capacity_duration_s=30.0, **cfg), out, resume=True)
    assert not any(name == "LR2S-lmstream-constant-r0" for name, _ in again)  # the cell is kept
    assert [rate for _, rate in again][:3] == [1000.0, 2000.0, 4000.0]  # the search from its start
    assert set(result.capacity["duration_s"]) == {30.0}
    assert result.meta["capacity_restarted"] == "its capacity_duration_s was 10.0, this command gives 30.0"
    [aside] = list(out.glob("capacity-discarded-*.jsonl"))
    assert len(aside.read_text().splitlines()) == 3


def test_controller_parameters_reach_the_lmstream_controller_and_a_resume_must_keep_them(tmp_path, fake,
                                                                                          monkeypatch):
    from lmstream_kit.bench.run import _Runner

    monkeypatch.setattr(lmstream_kit.live, "SparkEngine", FakeEngine)  # live.py's own name, restored after

    cfg = config(controller={"quantile": 0.97, "min_margin_s": 0.5})
    stream = _Runner(cfg, tmp_path, spark=None, meter=None, stamp="s").stream(
        "LR2S", "lmstream", "constant", rate=1000.0, seed=0, duration_s=20.0, run_dir=tmp_path / "r")
    assert (stream.controller.quantile, stream.controller.min_margin_s) == (0.97, 0.5)
    default = _Runner(config(), tmp_path, spark=None, meter=None, stamp="s").stream(
        "LR2S", "lmstream", "constant", rate=1000.0, seed=0, duration_s=20.0, run_dir=tmp_path / "d")
    assert (default.controller.quantile, default.controller.min_margin_s) == (0.95, 0.0)
    out = tmp_path / "b"
    fake(make_run([], stop_at=1))
    with pytest.raises(Interrupted):
        run_bench(cfg, out)
    with pytest.raises(ConfigError, match=r"its controller was \{'cold_start': 3, 'heap_admit': False, 'cold_evictions': 2, "
                                          r"'evict_horizon': True, 'cold_fraction': 0\.5, 'quantile': 0\.97, "
                                          r"'min_margin_s': 0\.5\}, this command gives \{'cold_start': 3, "
                                          r"'heap_admit': False, 'cold_evictions': 2, 'evict_horizon': True, "
                                          r"'cold_fraction': 0\.5\}"):
        run_bench(config(), out, resume=True)


def test_a_bench_from_before_cold_start_became_3_resumes_only_with_cold_start_0(tmp_path, fake):
    out = tmp_path / "b"
    fake(make_run([], stop_at=1))
    with pytest.raises(Interrupted):
        run_bench(config(controller={"quantile": 0.97}), out)
    settings = json.loads((out / "bench-config.json").read_text())
    assert settings["controller_defaults"] == {"cold_start": 3, "heap_admit": False, "cold_evictions": 2,
                                                     "evict_horizon": True, "cold_fraction": 0.5}
    del settings["controller_defaults"]  # as a settings file written before the default changed
    (out / "bench-config.json").write_text(json.dumps(settings))
    with pytest.raises(ConfigError, match=r"its controller was \{'cold_start': 0, 'heap_admit': False, 'cold_evictions': 0, "
                                          r"'evict_horizon': False, 'cold_fraction': 1\.0, 'quantile': 0\.97\}, this "
                                          r"command gives \{'cold_start': 3, 'heap_admit': False, 'cold_evictions': 2, "
                                          r"'evict_horizon': True, 'cold_fraction': 0\.5, 'quantile': 0\.97\}"):
        run_bench(config(controller={"quantile": 0.97}), out, resume=True)
    fake(make_run([]))
    run_bench(config(controller={"quantile": 0.97, "cold_start": 0, "heap_admit": False, "cold_evictions": 0,
                                 "evict_horizon": False, "cold_fraction": 1.0}), out, resume=True)
    settings = json.loads((out / "bench-config.json").read_text())
    assert settings["controller_defaults"] == {"cold_start": 3, "heap_admit": False, "cold_evictions": 2,
                                                     "evict_horizon": True, "cold_fraction": 0.5}
    assert settings["config"]["controller"] == {"quantile": 0.97, "cold_start": 0, "heap_admit": False,
                                                "cold_evictions": 0, "evict_horizon": False, "cold_fraction": 1.0}


@pytest.mark.parametrize(("written", "was", "override"), [
    # written before heap_admit came on: it reads as False, cold_evictions as 0
    ({"cold_start": 3},
     (r"its controller was \{'cold_start': 3, 'heap_admit': False, 'cold_evictions': 0, 'evict_horizon': False, "
      r"'cold_fraction': 1\.0\}, this command gives \{'cold_start': 3, 'heap_admit': False, 'cold_evictions': 2, "
      r"'evict_horizon': True, 'cold_fraction': 0\.5\}"),
     {"cold_evictions": 0, "evict_horizon": False, "cold_fraction": 1.0}),
    # written before cold_evictions became 2
    ({"cold_start": 3, "heap_admit": True},
     r"its controller was \{'cold_start': 3, 'heap_admit': True, 'cold_evictions': 0, 'evict_horizon': False, "
     r"'cold_fraction': 1\.0\}",
     {"heap_admit": True, "cold_evictions": 0, "evict_horizon": False, "cold_fraction": 1.0}),
    # written before evict_horizon came on
    ({"cold_start": 3, "heap_admit": True, "cold_evictions": 2},
     r"its controller was \{'cold_start': 3, 'heap_admit': True, 'cold_evictions': 2, 'evict_horizon': False, "
     r"'cold_fraction': 1\.0\}",
     {"heap_admit": True, "evict_horizon": False, "cold_fraction": 1.0}),
    # written while heap_admit was on by default, before it went off again
    ({"cold_start": 3, "heap_admit": True, "cold_evictions": 2, "evict_horizon": True},
     r"its controller was \{'cold_start': 3, 'heap_admit': True, 'cold_evictions': 2, 'evict_horizon': True, "
     r"'cold_fraction': 1\.0\}",
     {"heap_admit": True, "cold_fraction": 1.0}),
    # written before a LiveStream's sliding first target was capped at half the slide
    ({"cold_start": 3, "heap_admit": False, "cold_evictions": 2, "evict_horizon": True},
     r"its controller was \{'cold_start': 3, 'heap_admit': False, 'cold_evictions': 2, 'evict_horizon': True, "
     r"'cold_fraction': 1\.0\}",
     {"cold_fraction": 1.0}),
], ids=["heap_admit", "cold_evictions", "evict_horizon", "heap_admit_off", "cold_fraction"])
def test_a_bench_from_before_a_default_changed_resumes_only_with_the_old_value(tmp_path, fake, written, was, override):
    out = tmp_path / "b"
    fake(make_run([], stop_at=1))
    with pytest.raises(Interrupted):
        run_bench(config(), out)
    settings = json.loads((out / "bench-config.json").read_text())
    settings["controller_defaults"] = written  # as a settings file of its day recorded them
    (out / "bench-config.json").write_text(json.dumps(settings))
    with pytest.raises(ConfigError, match=was):
        run_bench(config(), out, resume=True)
    fake(make_run([]))
    run_bench(config(controller=override), out, resume=True)


def test_the_bench_help_lists_the_controller_keys_the_bench_takes():
    from click.testing import CliRunner

    from lmstream_kit.bench.config import CONTROLLER_KEYS
    from lmstream_kit.cli import bench

    [option] = [p for p in bench.params if p.name == "controller_params"]
    listed = option.help.split("keys: ", 1)[1].rstrip(").").split(", ")
    assert listed == list(CONTROLLER_KEYS)
    assert CliRunner().invoke(bench, ["--help"]).exit_code == 0


@pytest.mark.parametrize(("args", "said"), [
    (["--controller", "quantile=1.5"], "error: controller quantile must be < 1, got 1.5"),
    (["--controller", "margin=0.5"], "error: unknown controller parameter 'margin'; known: quantile, history,"),
    (["--controller", "catch_up=all"], "error: controller parameter 'catch_up' has an option of its own"),
    (["--controller", "quantile"], "error: --controller takes KEY=VALUE, got 'quantile'"),
    (["--controller", "history=ten"], "error: controller history must be"),
    (["--controller", "cold_target_s=-1"], "error: controller cold_target_s must be >= 0, got -1"),
])
def test_a_bad_controller_parameter_is_one_line_before_anything_starts(tmp_path, capsys, args, said):
    from lmstream_kit.cli import main

    out = tmp_path / "b"
    code = main(["bench", "--queries", "LR2S", *args, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(said), err[0]
    assert not out.exists()


def test_the_state_store_reaches_every_runs_query_and_a_resume_must_keep_it(tmp_path, fake, monkeypatch):
    from lmstream_kit.bench.run import _Runner
    from lmstream_kit.engine.state import PROVIDER_CONF, ROCKSDB_PROVIDER

    monkeypatch.setattr(lmstream_kit.live, "SparkEngine", FakeEngine)  # live.py's own name, restored after
    for store, provider in (("rocksdb", ROCKSDB_PROVIDER), ("default", None)):
        stream = _Runner(config(state_store=store), tmp_path, spark=None, meter=None, stamp="s").stream(
            "LR2S", "asap", "constant", rate=1000.0, seed=0, duration_s=20.0, run_dir=tmp_path / store)
        assert stream._query_confs.get(PROVIDER_CONF) == provider
    with pytest.raises(ConfigError, match=r"^state_store must be 'default' or 'rocksdb', got 'lsm'$"):
        config(state_store="lsm")
    out = tmp_path / "b"
    fake(make_run([], stop_at=1))
    with pytest.raises(Interrupted):
        run_bench(config(), out)
    with pytest.raises(ConfigError, match=r"its state_store was 'default', this command gives 'rocksdb'"):
        run_bench(config(state_store="rocksdb"), out, resume=True)
    settings = json.loads((out / "bench-config.json").read_text())
    del settings["config"]["state_store"]  # as a settings file written before the option: Spark's default store
    (out / "bench-config.json").write_text(json.dumps(settings))
    with pytest.raises(ConfigError, match=r"its state_store was 'default', this command gives 'rocksdb'"):
        run_bench(config(state_store="rocksdb"), out, resume=True)
    fake(make_run([]))
    run_bench(config(), out, resume=True)


def test_a_resume_on_another_machine_searches_again_the_queries_whose_cells_at_capacity_are_still_to_run(
        tmp_path, fake, monkeypatch):
    """Their share of asap's capacity is measured on the machine that runs them; a finished query stays."""
    out = tmp_path / "b"
    cfg = {"queries": ["LR2S", "CM2S"], "policies": ["lmstream", "asap"], "traffic": ["constant"], "warmup_s": 0,
           "capacity": True, "capacity_duration_s": 10.0, "at_capacity": 0.8}
    calls: list = []
    fake(make_run(calls))
    run_bench(config(**cfg), out)
    cut = next(i for i, (n, _) in enumerate(calls) if n.startswith("capacity-CM2S-")) + 3
    out2 = tmp_path / "c"
    fake(make_run([], stop_at=cut))
    with pytest.raises(Interrupted):  # CM2S: lmstream passed 1000 and 2000, asap 1000
        run_bench(config(**cfg), out2)
    logged = [json.loads(line) for line in (out2 / "capacity.jsonl").read_text().splitlines()]
    assert [(r["query"], r["policy"], r["rate"]) for r in logged if r["query"] == "CM2S"] == [
        ("CM2S", "lmstream", 1000.0), ("CM2S", "asap", 1000.0), ("CM2S", "lmstream", 2000.0)]
    here = logged[0]["boot"]
    for module in ("run", "capacity"):
        monkeypatch.setattr(f"lmstream_kit.bench.{module}.machine_boot", lambda: "0ther0ne")
    again: list = []
    fake(make_run(again))
    result = run_bench(config(**cfg), out2, resume=True)
    assert not any(n.startswith("LR2S-") or n.startswith("capacity-LR2S-") for n, _ in again), again
    [why] = result.meta["capacity_searched_again"]
    assert why.startswith("CM2S (the part of ") and why.endswith(f"its capacity probes ran on machine {here}; "
                                                                  "this one is 0ther0ne")
    assert again[:2] == [("capacity-CM2S-lmstream-2000-r0", 2000.0), ("capacity-CM2S-asap-1000-r0", 1000.0)]
    [aside] = list(out2.glob("capacity-discarded-*.jsonl"))
    assert [json.loads(line)["rate"] for line in aside.read_text().splitlines()] == [1000.0, 1000.0, 2000.0]
    [moved] = list((out2 / "runs").glob("set-aside-*"))  # their journals, not written over by the new search
    assert sorted(p.name for p in moved.iterdir()) == ["capacity-CM2S-asap-1000-r0", "capacity-CM2S-lmstream-1000-r0",
                                                       "capacity-CM2S-lmstream-2000-r0"]
    cm2s = result.capacity[result.capacity["query"] == "CM2S"]
    assert set(cm2s["boot"]) == {"0ther0ne"} and len(cm2s) == len(again) - 2  # its probes, then its two cells
    assert set(result.capacity[result.capacity["query"] == "LR2S"]["boot"]) == {here}
    assert [n for n, _ in again][-2:] == ["CM2S-lmstream-constant-r0-at-2262", "CM2S-asap-constant-r0-at-2262"]
    # on the machine that searched it, an interrupted search goes on (not run again)
    out3 = tmp_path / "d"
    fake(make_run([], stop_at=cut))
    with pytest.raises(Interrupted):
        run_bench(config(**cfg), out3)
    fake(make_run([]))
    assert "capacity_searched_again" not in run_bench(config(**cfg), out3, resume=True).meta
    assert not list(out3.glob("capacity-discarded-*.jsonl"))
