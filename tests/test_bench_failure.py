"""A bench whose cell's stream fails keeps what it measured and says so (no Spark: the engine is faked)."""

from __future__ import annotations

import json

import pandas as pd

from lmstream_kit.bench import BenchConfig, run_bench
from lmstream_kit.exceptions import EngineError


class FakeEngine:
    master = "local[2]"
    spark = None

    def __init__(self, **kwargs):
        pass

    def open(self):
        return self

    def close(self):
        pass

    def query_window(self, workload):
        return workload.window_range_s, workload.slide_s

    def driver_pid(self):
        return None

    def spark_version(self):
        return "fake"

    def java_version(self):
        return "fake"

    def jvm_exited(self):
        return None  # the JVM runs on: a failure of the stream's

    def session_lost(self):
        return self.jvm_exited()

    def jvm_exit_code(self):
        return None


def fake_run(self, query, policy, traffic, *, rate, seed, duration_s, run_dir, catch_up_s=None):
    """Writes two batches to the run's metrics (as a stream does as it goes); fixed then fails."""
    run_dir.mkdir(parents=True, exist_ok=True)
    batches = [{"batch_id": i, "rows": 100, "max_latency_s": 4.0 + 3 * i, "avg_latency_s": 2.0, "processing_s": 0.5,
                "oldest_arrival": 10.0 * i, "completed_at": 10.0 * i + 4.0, "admitted_at": 10.0 * i + 3.5,
                "bytes": 6400, "buffering_s": 3.5, "bound_s": 5.0, "policy": policy} for i in (1, 2)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(b) + "\n" for b in batches))
    if policy == "fixed" and rate > 1000:
        if isinstance(self.engine, ExitingEngine):
            self.engine.exited = True
        raise EngineError("stream LR2S-fixed failed: java.lang.OutOfMemoryError: Java heap space")
    from lmstream_kit.metrics import load_metrics

    return load_metrics(run_dir), None, True


def test_a_failed_cell_stops_the_bench_keeping_its_batches_and_the_cells_before(tmp_path, monkeypatch):
    monkeypatch.setattr("lmstream_kit.engine.adapter.SparkEngine", FakeEngine)
    monkeypatch.setattr("lmstream_kit.bench.run._Runner.run", fake_run)
    cfg = BenchConfig(queries=["LR2S"], policies=["lmstream", "fixed", "asap"], traffic=["constant"],
                      warmup_s=0, duration_s=20, overload={"LR2S": 2000}, capacity=True)
    result = run_bench(cfg, tmp_path / "b")
    rows = result.results
    assert list(zip(rows["policy"], rows["load"])) == [("lmstream", "sweep"), ("fixed", "sweep"), ("asap", "sweep"),
                                                       ("lmstream", "overload"), ("fixed", "overload")]
    assert rows["failed"].tolist()[:4] == [None] * 4
    assert "OutOfMemoryError" in rows["failed"].iloc[-1]
    assert result.meta["failed"].startswith("LR2S fixed constant r0 overload 2000 rows/s failed: ")
    over = result.batches[(result.batches["load"] == "overload") & (result.batches["policy"] == "fixed")]
    assert over["max_latency_s"].tolist() == [7.0, 10.0]  # what the failed cell measured is kept
    assert result.capacity.empty  # the search does not start on a session that may be gone
    assert (tmp_path / "b" / "results.parquet").exists() and (tmp_path / "b" / "report.html").exists()
    assert pd.read_parquet(tmp_path / "b" / "results.parquet")["failed"].notna().sum() == 1


class ExitingEngine(FakeEngine):
    """A FakeEngine whose JVM exits with the failing cell (out of heap) and restarts when asked."""

    restarts = 0

    def __init__(self, **kwargs):
        self.exited = False

    def jvm_exited(self):
        return "Spark's JVM exited (pid 9): killed, or out of memory" if self.exited else None

    def restart(self):
        why, self.exited = self.jvm_exited(), False
        ExitingEngine.restarts += 1
        return why


def test_a_cell_whose_jvm_exited_is_failed_and_the_bench_goes_on_on_a_new_session(tmp_path, monkeypatch):
    monkeypatch.setattr("lmstream_kit.engine.adapter.SparkEngine", ExitingEngine)
    monkeypatch.setattr("lmstream_kit.bench.run._Runner.run", fake_run)
    cfg = BenchConfig(queries=["LR2S"], policies=["lmstream", "fixed", "asap"], traffic=["constant"],
                      warmup_s=0, duration_s=20, overload={"LR2S": 2000})
    result = run_bench(cfg, tmp_path / "b")
    rows = result.results
    assert list(zip(rows["policy"], rows["load"]))[3:] == [("lmstream", "overload"), ("fixed", "overload"),
                                                           ("asap", "overload")]
    assert rows["failed"].notna().tolist() == [False, False, False, False, True, False]
    assert ExitingEngine.restarts == 1 and "failed" not in result.meta
    assert result.meta["restarts"] == [
        "LR2S fixed constant r0 overload 2000 rows/s: Spark's JVM exited (pid 9): killed, or out of memory"]


def test_the_paper_preset_fills_the_sweep_and_explicit_options_win(tmp_path, bench_cli):
    _, seen = bench_cli("--preset", "paper", "--duration", "60", "--out", str(tmp_path / "b"))
    cfg = seen["cfg"]
    assert (cfg.duration_s, cfg.speedup, cfg.rate, cfg.capacity, cfg.capacity_duration_s) == (60.0, 2.0, 1000.0, True, 120.0)
    assert cfg.overload == {"LR2S": 256000.0, "LR1S": 2000.0} and cfg.capacity_budget_s == 6 * 3600.0
    assert (cfg.capacity_probes, cfg.capacity_max_rate) == (16, 256000.0)
    _, seen = bench_cli("--preset", "paper", "--capacity-max-rate", "90000", "--out", str(tmp_path / "m"))
    assert seen["cfg"].capacity_max_rate == 90000.0
    _, seen = bench_cli("--capacity", "--out", str(tmp_path / "p"))
    assert seen["cfg"].capacity_max_rate == 64000.0
    bad_rate, _ = bench_cli("--capacity-max-rate", "0", "--out", str(tmp_path / "z"), reach=False)
    assert str(bad_rate.exception) == "capacity_max_rate must be > 0, got 0.0"  # main() prints it in one line
    assert len(cfg.queries) == 6 and cfg.policies == ("lmstream", "fixed", "asap")
    bad, _ = bench_cli("--preset", "fast", "--out", str(tmp_path / "c"), reach=False)
    assert bad.exit_code == 2 and "'fast' is not 'paper'" in bad.output
