"""The soak benchmark's analysis (benchmarks/soak.py, issue 16 item 2), without Spark.

The script's pure functions on synthetic, seeded samples (slopes, relative growth, verdicts), its
directory walk and process discovery on real small processes (no JVM), and its sampling loop
end to end on a stand-in stream (files written as they happen; Ctrl-C still writes the summary).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("soak_benchmark", ROOT / "benchmarks" / "soak.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


soak = _load()

WARMUP_S = 300.0  # 5 minutes
MIB = 2**20


def make_samples(minutes: float = 30.0, every: float = 10.0, **series):
    """Samples every ``every`` s over ``minutes``: ``series`` maps a key to ``f(t_s) -> value``."""
    out = []
    for i in range(round(minutes * 60 / every) + 1):
        t = i * every
        out.append({"t_s": t, **{k: f(t) for k, f in series.items()}})
    return out


def linear(start: float, per_hour: float):
    return lambda t: start + per_hour * t / 3600.0


def growth_of(start: float, pct: float, warmup_s: float = WARMUP_S, minutes: float = 30.0):
    """The slope per hour that makes the growth, relative to the mean after the warm-up, exactly ``pct`` %/h."""
    mean_h = (warmup_s / 3600.0 + minutes / 60.0) / 2  # samples evenly spaced: the mean time after the warm-up
    return pct / 100 * start / (1 - pct / 100 * mean_h)


def noisy_flat(level: float, sd: float, seed: int):
    rng = np.random.default_rng(seed)
    noise = {}

    def f(t):
        if t not in noise:
            noise[t] = float(rng.normal(0.0, sd))
        return level * (1 + noise[t])
    return f


# ------------------------------------------------------------------------------------- slopes
def test_a_straight_line_gives_its_slope_in_units_per_hour_and_growth_relative_to_the_mean_after_warmup():
    b = growth_of(1e9, 2.0)
    a = soak.analyze(make_samples(jvm=linear(1e9, b)), "jvm", warmup_s=WARMUP_S)
    assert a["slope_per_hour"] == pytest.approx(b, rel=1e-9)
    assert a["growth_pct_per_hour"] == pytest.approx(2.0, rel=1e-9)
    assert a["slope_se_per_hour"] == pytest.approx(0.0, abs=1e-3 * b)
    # warm-up end: the first sample at or after 300 s; end: the last one (1800 s)
    assert a["at_warmup_end"] == pytest.approx(1e9 + b * 300 / 3600)
    assert a["at_end"] == pytest.approx(1e9 + b * 0.5)
    assert a["n"] == 151  # 300 s .. 1800 s every 10 s
    assert a["mean"] == pytest.approx(1e9 + b * (300 + 1800) / 2 / 3600)


def test_growth_of_two_percent_per_hour_fails_the_memory_goal():
    b = growth_of(800 * MIB, 2.0)
    samples = make_samples(driver_rss_bytes=linear(300 * MIB, 0.0), jvm_rss_bytes=linear(800 * MIB, b),
                           workers_rss_bytes=linear(200 * MIB, 0.0), spool_bytes=linear(50 * MIB, 0.0))
    s = soak.summarize(samples, warmup_s=WARMUP_S)
    assert s["quantities"]["jvm_rss_bytes"]["growth_pct_per_hour"] == pytest.approx(2.0, rel=1e-9)
    assert s["memory"] == {"driver_rss_bytes": "PASS", "jvm_rss_bytes": "FAIL", "workers_rss_bytes": "PASS"}
    assert s["spool"]["verdict"] == "BOUNDED"
    assert s["verdict"] == "FAIL"


def test_a_flat_series_with_seeded_noise_passes():
    samples = make_samples(driver_rss_bytes=noisy_flat(300 * MIB, 0.005, seed=1),
                           jvm_rss_bytes=noisy_flat(1200 * MIB, 0.005, seed=2),
                           workers_rss_bytes=noisy_flat(250 * MIB, 0.005, seed=3),
                           spool_bytes=noisy_flat(40 * MIB, 0.005, seed=4))
    s = soak.summarize(samples, warmup_s=WARMUP_S)
    for key in soak.MEMORY_KEYS:
        q = s["quantities"][key]
        hours = np.array([x["t_s"] for x in samples if x["t_s"] >= WARMUP_S]) / 3600
        values = np.array([x[key] for x in samples if x["t_s"] >= WARMUP_S])
        expected = np.polyfit(hours, values, 1)[0]
        assert q["slope_per_hour"] == pytest.approx(expected, rel=1e-9)
        assert q["growth_pct_per_hour"] == pytest.approx(100 * expected / values.mean(), rel=1e-9)
        assert abs(q["growth_pct_per_hour"]) < 1.0
        assert q["growth_se_pct_per_hour"] > 0  # the noise shows in the standard error
    assert s["memory"] == dict.fromkeys(soak.MEMORY_KEYS, "PASS")
    assert (s["spool"]["verdict"], s["verdict"]) == ("BOUNDED", "PASS")


def test_warmup_samples_are_left_out_of_the_fit():
    def ramp_then_flat(t):  # the JVM's heap fills in the first five minutes, then stays
        return 200 * MIB + 800 * MIB * min(t, WARMUP_S) / WARMUP_S

    samples = make_samples(jvm_rss_bytes=ramp_then_flat)
    after = soak.analyze(samples, "jvm_rss_bytes", warmup_s=WARMUP_S)
    assert after["slope_per_hour"] == pytest.approx(0.0, abs=1e-3)
    assert after["at_warmup_end"] == after["at_end"] == 1000 * MIB
    assert soak.verdict(after["growth_pct_per_hour"]) == "PASS"
    whole = soak.analyze(samples, "jvm_rss_bytes", warmup_s=0.0)  # with the warm-up in, the ramp fails it
    assert whole["growth_pct_per_hour"] > 1.0 and soak.verdict(whole["growth_pct_per_hour"]) == "FAIL"


def test_the_goal_is_strictly_under_one_percent_per_hour_and_shrinking_passes():
    def v(pct):
        a = soak.analyze(make_samples(x=linear(1e9, growth_of(1e9, pct))), "x", warmup_s=WARMUP_S)
        return soak.verdict(a["growth_pct_per_hour"])

    assert (v(0.99), v(1.01), v(-5.0)) == ("PASS", "FAIL", "PASS")
    assert soak.verdict(1.0) == "FAIL" and soak.verdict(0.5, goal_pct=0.25) == "FAIL"


def test_missing_values_are_skipped_and_an_unknown_quantity_is_na():
    samples = make_samples(driver_rss_bytes=linear(100.0, 0.0), jvm_rss_bytes=lambda t: None,
                           workers_rss_bytes=lambda t: float("nan") if t % 20 else 50.0,
                           spool_bytes=linear(10.0, 0.0))
    s = soak.summarize(samples, warmup_s=WARMUP_S)
    assert s["quantities"]["jvm_rss_bytes"]["n"] == 0 and s["memory"]["jvm_rss_bytes"] == "n/a"
    assert s["quantities"]["workers_rss_bytes"]["n"] == 76  # every other sample (NaN ones skipped)
    assert s["memory"]["workers_rss_bytes"] == "PASS"
    assert s["verdict"] == "n/a"  # nothing failed, one is unknown


def test_a_run_interrupted_during_warmup_has_no_verdict():
    samples = make_samples(minutes=3.0, driver_rss_bytes=linear(1.0, 100.0), jvm_rss_bytes=linear(1.0, 0.0),
                           workers_rss_bytes=linear(1.0, 0.0), spool_bytes=linear(1.0, 0.0))
    s = soak.summarize(samples, warmup_s=WARMUP_S)
    assert s["samples_after_warmup"] == 0
    assert s["memory"] == dict.fromkeys(soak.MEMORY_KEYS, "n/a")
    assert s["quantities"]["driver_rss_bytes"]["at_warmup_end"] is None
    assert s["verdict"] == "n/a"
    assert soak.summarize([], warmup_s=WARMUP_S)["verdict"] == "n/a"


def test_relative_growth_edge_cases():
    assert soak.relative_pct(20.0, 1000.0) == 2.0
    assert soak.relative_pct(0.0, 0.0) == 0.0
    assert soak.relative_pct(5.0, 0.0) is None
    assert soak.relative_pct(None, 5.0) is None
    assert soak.fit_slope(np.array([1.0]), np.array([3.0])) == (None, None)
    assert soak.fit_slope(np.array([1.0, 1.0]), np.array([3.0, 4.0])) == (None, None)  # one time only
    slope, se = soak.fit_slope(np.array([0.0, 2.0]), np.array([3.0, 4.0]))
    assert (slope, se) == (pytest.approx(0.5), None)


# ------------------------------------------------------------------------------------- the spool
def test_a_spool_that_fills_then_plateaus_under_retention_is_bounded():
    rng = np.random.default_rng(7)
    # one dataset a second at 1000 rows/s is ~0.1 MiB: a sweep after each batch leaves up to a few of them over
    jitter = {t: float(rng.integers(0, 300 * 1024)) for t in range(0, 1801, 10)}

    def spool(t):  # fills for the retention's 5 minutes, then deletes as fast as it writes (a sawtooth)
        return 30 * MIB * min(t, 300) / 300 + jitter[t]

    s = soak.last_half(make_samples(spool_bytes=spool))
    assert s["from_s"] == 900.0 and s["n"] == 91
    assert abs(s["growth_pct_per_hour"]) < 1.0 and s["verdict"] == "BOUNDED"
    assert 0 < s["growth_se_pct_per_hour"] < 0.5
    assert s["max"] <= 30.3 * MIB


def test_a_noisy_plateau_shows_its_noise_in_the_standard_error():
    """A plateau jittering by 0-2 MiB on 30 MiB over 15 minutes: the fitted growth is noise, and its standard
    error says so (the verdict itself compares only the growth with the goal)."""
    rng = np.random.default_rng(7)
    jitter = {t: float(rng.integers(0, 2 * MIB)) for t in range(0, 1801, 10)}
    s = soak.last_half(make_samples(spool_bytes=lambda t: 30 * MIB + jitter[t]))
    assert abs(s["growth_pct_per_hour"]) < 2 * s["growth_se_pct_per_hour"]
    assert s["growth_se_pct_per_hour"] > 1.0


def test_a_spool_without_retention_grows():
    s = soak.last_half(make_samples(spool_bytes=linear(0.0, 120 * MIB)))  # 1000 rows/s, kept forever
    assert s["slope_per_hour"] == pytest.approx(120 * MIB, rel=1e-9)
    # mean over 15..30 min is 45 MiB: 120 / 45 = 267 %/h
    assert s["growth_pct_per_hour"] == pytest.approx(100 * 120 / 45, rel=1e-9)
    assert s["verdict"] == "GROWING"
    assert soak.last_half([])["verdict"] == "n/a"


def test_the_last_half_is_measured_from_the_first_sample_on():
    samples = make_samples(minutes=20.0, spool_bytes=lambda t: 1.0 if t < 700 else 1.0 + (t - 700))
    shifted = [{**s, "t_s": s["t_s"] + 100} for s in samples]  # sampling started 100 s into the run
    assert soak.last_half(samples)["from_s"] == 600.0
    assert soak.last_half(shifted)["from_s"] == 700.0


# ------------------------------------------------------------------------------------- reports
def test_summary_markdown_has_a_row_per_quantity_and_the_verdicts():
    samples = make_samples(driver_rss_bytes=linear(300 * MIB, 0.0), jvm_rss_bytes=linear(800 * MIB, 16 * MIB),
                           workers_rss_bytes=linear(200 * MIB, 0.0), spool_bytes=linear(40 * MIB, 0.0),
                           loop_records=lambda t: t / 2)
    s = soak.summarize(samples, warmup_s=WARMUP_S)
    text = soak.summary_markdown(s, {"workload": "LR2S", "minutes": 30}, {"cores": 2}, ["a note"])
    assert text.startswith("# Soak: FAIL")
    for key in soak.QUANTITIES:
        assert f"| {key} |" in text
    # 800 MiB + 16 MiB/h: 801.3 MiB at 5 min, 808 MiB at 30 min; 16 / 804.7 = 1.99 %/h
    assert "| jvm_rss_bytes | 801.3 MiB | 808.0 MiB | +16.0 MiB | +1.99 ± 0.00 | FAIL |" in text
    assert "| FAIL |" in text and "| PASS |" in text
    assert "**BOUNDED**" in text and "* a note" in text and "* workload: LR2S" in text and "* cores: 2" in text


def test_write_summary_writes_strict_json_and_markdown(tmp_path):
    samples = make_samples(minutes=10.0, driver_rss_bytes=linear(1e8, 0.0), jvm_rss_bytes=lambda t: float("nan"),
                           workers_rss_bytes=linear(1e8, 0.0), spool_bytes=linear(1e6, 0.0))
    settings = {"warmup_minutes": 5.0, "goal": 1.0, "workload": "LR2S"}
    full = soak.write_summary(tmp_path, samples, settings, {"cores": 2},
                              {"notes": ["n"], "interrupted": True, "retention_status": {"sweeps": 3}})

    def refuse(name):
        raise AssertionError(f"{name} in summary.json")

    data = json.loads((tmp_path / "summary.json").read_text(), parse_constant=refuse)
    assert data["verdict"] == full["verdict"] == "n/a"  # the JVM's RSS is unknown
    assert data["interrupted"] is True and data["retention_status"] == {"sweeps": 3}
    assert data["settings"]["workload"] == "LR2S" and data["notes"] == ["n"]
    assert data["memory"]["driver_rss_bytes"] == "PASS"
    assert (tmp_path / "summary.md").read_text().startswith("# Soak: n/a")


# ------------------------------------------------------------------------------------- measuring
def test_dir_usage_sums_file_sizes_recursively_without_following_links(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").mkdir()
    (tmp_path / "x").write_bytes(b"1" * 100)
    (tmp_path / "a" / "y").write_bytes(b"2" * 30)
    (tmp_path / "a" / "b" / "z").write_bytes(b"")
    os.symlink(tmp_path / "x", tmp_path / "a" / "link")
    os.symlink(tmp_path / "a", tmp_path / "dirlink")
    assert soak.dir_usage(tmp_path) == (130, 3)
    assert soak.dir_usage(tmp_path / "missing") == (0, 0)


def test_worker_roles_from_command_lines():
    assert soak.worker_role(["/v/bin/python3", "-m", "pyspark.daemon"]) == "daemon"
    assert soak.worker_role(["python", "-m", "pyspark.worker"]) == "worker"
    assert soak.worker_role(["python3", "-m", "pyspark.sql.streaming.python_streaming_source_runner"]) \
        == "source_runner"
    assert soak.worker_role(["/usr/bin/python3.12", "x.py"]) == "python"
    assert soak.worker_role(["/usr/lib/jvm/bin/java", "-cp", "a"]) is None
    assert soak.worker_role([]) is None


@pytest.fixture
def fake_jvm():
    """A process standing in for the JVM (plain Python, no Java), with one child named like a Spark worker."""
    # the child says "ready" itself once it runs (it inherits the pipe), so the probe never races its start
    code = ("import subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', "
            "'import time; print(\\'ready\\', flush=True); time.sleep(600)', 'pyspark.daemon']); "
            "time.sleep(600)")
    proc = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        import psutil

        deadline = time.monotonic() + 10
        while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield proc
    finally:
        import psutil

        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        proc.kill()
        proc.wait()
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass


def test_the_probe_reads_the_driver_the_jvm_py4j_names_and_its_python_workers(fake_jvm):
    stream = NS(engine=NS(driver_pid=lambda: fake_jvm.pid))
    probe = soak.ProcessProbe(stream)
    s = probe.sample()
    assert probe.jvm_found_by == "py4j" and s["jvm_pid"] == fake_jvm.pid
    assert s["driver_rss_bytes"] > 0 and s["driver_fds"] > 0 and s["driver_threads"] >= 1
    assert s["jvm_rss_bytes"] > 0 and s["jvm_threads"] >= 1
    import psutil

    seen = [(c.pid, c.status(), c.cmdline()) for c in psutil.Process(fake_jvm.pid).children(recursive=True)]
    assert s["workers"] == 1 and s["worker_roles"] == {"daemon": 1} and s["workers_rss_bytes"] > 0, (s, seen)


def test_the_probe_without_a_jvm_reports_none(monkeypatch):
    import psutil

    monkeypatch.setattr(psutil.Process, "children", lambda self, recursive=False: [])  # pytest's own JVMs
    probe = soak.ProcessProbe(NS(engine=NS(driver_pid=lambda: None)))
    s = probe.sample()
    assert s["driver_rss_bytes"] > 0
    assert (s["jvm_rss_bytes"], s["workers_rss_bytes"], s["workers"]) == (None, None, None)


# ------------------------------------------------------------------------------------- the loop
class FakeStream:
    """Stands in for a LiveStream: a batch per check_health call, a spool directory that fills."""

    def __init__(self, run_dir: Path, jvm_pid=None, interrupt_after=None):
        self.run_dir = run_dir
        self.interrupt_after = interrupt_after
        self.checks = 0
        self.callbacks = []
        self.loop = NS(_records=[], book=NS(completed_end=0))
        self.spool = None
        self.engine = NS(driver_pid=lambda: jvm_pid)
        self.placement = NS(optimizer=NS(_history=[1, 2, 3]))
        self.retention = NS(status=lambda: {"sweeps": 2, "floor": 5},
                            PARAMS=[NS(name="max_age_s")], max_age_s=300.0)
        self.stopped = None

    records = property(lambda self: list(self.loop._records))

    def on_batch(self, cb):
        self.callbacks.append(cb)

    def remove_on_batch(self, cb):
        self.callbacks.remove(cb)

    def start(self):
        (self.run_dir / "spool").mkdir(parents=True)
        self.spool = NS(root=str(self.run_dir / "spool"), uri=str(self.run_dir / "spool"), kept_bytes=0,
                        first_seq=0, _infos=[], end_seq=0)
        return self

    def check_health(self):
        self.checks += 1
        if self.interrupt_after is not None and self.checks > self.interrupt_after:
            raise KeyboardInterrupt
        n = len(self.loop._records)
        record = {"batch_id": n, "rows": 10}
        self.loop._records.append(record)
        self.loop.book.completed_end = n + 1
        self.spool._infos.append(n)
        self.spool.end_seq = n + 1
        (self.run_dir / "spool" / f"{n}.arrow").write_bytes(b"x" * 1000)
        self.spool.kept_bytes += 1000
        for cb in self.callbacks:
            cb(record)

    def stop(self, drain=True, timeout=120.0):
        self.stopped = {"drain": drain}
        (self.run_dir / "run.json").write_text("{}")
        (self.run_dir / "metrics.jsonl").write_text("")
        return {"batches": len(self.loop._records)}


@pytest.fixture
def fake_live(monkeypatch, tmp_path):
    import psutil

    import lmstream_kit.live

    monkeypatch.setattr(psutil.Process, "children", lambda self, recursive=False: [])  # pytest's own JVMs
    made = []

    def factory(interrupt_after=None):
        def make(workload, **kw):
            made.append((workload, kw))
            stream = FakeStream(Path(kw["run_dir"]), jvm_pid=None, interrupt_after=interrupt_after)
            made.append(stream)
            return stream
        monkeypatch.setattr(lmstream_kit.live, "LiveStream", make)
        return made
    return factory


def _args(tmp_path, *extra):
    return ["--minutes", "0.05", "--every", "0.5", "--warmup-minutes", "0.01", "--out", str(tmp_path / "out"),
            "--run-dir", str(tmp_path / "run"), *extra]


def test_the_loop_writes_samples_as_it_goes_and_a_summary(fake_live, tmp_path, capsys):
    made = fake_live()
    assert soak.main(_args(tmp_path)) == 0
    (workload, kw), stream = made
    assert workload == "LR2S" and kw["policy"] == "lmstream" and kw["traffic"] == "constant"
    assert (kw["rate"], kw["speedup"], kw["retention"], kw["duration_s"]) == (1000.0, 1.0, "age=5m", None)
    out = next((tmp_path / "out").glob("soak-*"))
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 7 and samples[-1]["t_s"] >= 3.0  # 0, 0.5, ..., 3 s
    last = samples[-1]
    assert last["loop_records"] == last["buffer_records"] == last["batches"] == last["spool_index"]
    assert last["rows"] == 10 * last["batches"] and last["optimizer_history"] == 3
    assert last["spool_bytes"] == last["spool_kept_bytes"] == 1000 * last["spool_files"]
    assert last["run_dir_bytes"] == last["spool_bytes"] and last["backlog_datasets"] == 0
    assert last["driver_rss_bytes"] > 0 and last["jvm_rss_bytes"] is None
    summary = json.loads((out / "summary.json").read_text())
    assert summary["samples"] == 7 and summary["interrupted"] is False
    assert summary["retention_status"] == {"sweeps": 2, "floor": 5} and summary["retention"] == {"max_age_s": 300.0}
    assert summary["stream_summary"] == {"batches": last["batches"]}
    assert summary["settings"]["minutes"] == 0.05 and summary["machine"]["cores"] == os.cpu_count()
    assert summary["quantities"]["loop_records"]["growth_pct_per_hour"] > 1.0  # records kept grow
    assert stream.stopped == {"drain": False}
    assert {p.name for p in out.iterdir()} == {"settings.json", "samples.jsonl", "summary.json", "summary.md",
                                              "run.json", "metrics.jsonl"}
    assert "verdict:" in capsys.readouterr().out


def test_ctrl_c_stops_the_stream_and_still_writes_the_summary(fake_live, tmp_path):
    made = fake_live(interrupt_after=2)
    assert soak.main(_args(tmp_path)) == 130
    stream = made[1]
    out = next((tmp_path / "out").glob("soak-*"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["samples"] == 2
    assert summary["notes"][0].startswith("interrupted (Ctrl-C)")
    assert len((out / "samples.jsonl").read_text().splitlines()) == 2
    assert stream.stopped == {"drain": False}
    assert "interrupted" in (out / "summary.md").read_text()


def test_bad_settings_are_refused_before_anything_starts(fake_live, tmp_path, capsys):
    made = fake_live()
    assert soak.main(_args(tmp_path, "--retention", "colour=red")) == 2
    assert soak.main(_args(tmp_path, "--warmup-minutes", "1")) == 2  # longer than the run
    assert made == [] and not (tmp_path / "out").exists()
    assert "retention: unknown setting" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        soak.main(["--help"])
    assert exc.value.code == 0


def test_importing_the_script_starts_nothing():
    script = str(ROOT / "benchmarks" / "soak.py")
    code = ("import importlib.util, sys; "
            f"spec = importlib.util.spec_from_file_location('s', {script!r}); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
            "print(*(name in sys.modules for name in ('pyspark', 'widgets.sources', 'lmstream_kit.live')))")
    out = subprocess.run(["nice", "-n", "19", sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "False", "False"]
    assert not math.isnan(soak.GOAL_PCT_PER_HOUR)


def test_the_spool_verdict_is_on_its_data_and_the_journals_are_reported_per_batch():
    """The spool's index grows a line per dataset forever: the verdict is on the data files, and the
    journals (index, metrics.jsonl) are reported in bytes per batch and per day."""
    samples = make_samples(batches=lambda t: t, spool_index_bytes=lambda t: 100.0 * t,
                           spool_data_bytes=lambda t: 10 * MIB, metrics_bytes=lambda t: 3700.0 * t,
                           spool_bytes=lambda t: 10 * MIB + 100.0 * t)
    summary = soak.summarize(samples, warmup_s=WARMUP_S)
    assert summary["spool"]["key"] == "spool_data_bytes" and summary["spool"]["verdict"] == "BOUNDED"
    assert summary["journals"]["spool_index_bytes"]["per_batch"] == pytest.approx(100.0)
    assert summary["journals"]["metrics_bytes"]["per_batch"] == pytest.approx(3700.0)
    assert summary["journals"]["metrics_bytes"]["per_day"] == pytest.approx(3700.0 * 86400)
    text = soak.summary_markdown(summary)
    assert "metrics_bytes 3,700 bytes a batch" in text and "Spool (spool_data_bytes)" in text
    # results sampled before the index was told apart: the verdict stays on the whole spool
    old = [{k: v for k, v in s.items() if k not in ("spool_data_bytes", "spool_index_bytes")} for s in samples]
    summary = soak.summarize(old, warmup_s=WARMUP_S)
    assert summary["spool"]["key"] == "spool_bytes" and summary["spool"]["verdict"] == "GROWING"
    assert summary["journals"]["spool_index_bytes"] == {"per_batch": None, "per_day": None}


def test_tracemalloc_diagnosis_and_smaller_caps(fake_live, tmp_path, monkeypatch):
    import tracemalloc

    from lmstream_kit import controller, runloop

    monkeypatch.setattr(runloop, "RECORDS_KEPT", runloop.RECORDS_KEPT)  # restored after the test
    monkeypatch.setattr(controller, "CHANGES_KEPT", controller.CHANGES_KEPT)
    made = fake_live()
    assert soak.main(_args(tmp_path, "--tracemalloc", "4", "--records-kept", "7")) == 0
    assert not tracemalloc.is_tracing()  # stopped at the end
    assert runloop.RECORDS_KEPT == controller.CHANGES_KEPT == 7
    out = next((tmp_path / "out").glob("soak-*"))
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert all(s["traced_bytes"] > 0 and s["py_blocks"] > 0 and s["gc_objects"] > 0 for s in samples)
    assert samples[-1]["buffer_records"] == 7 < samples[-1]["batches"]  # the dashboard's buffer is capped too
    report = (out / "tracemalloc.txt").read_text()
    assert "## grouped by lineno" in report and "## grouped by traceback" in report
    assert made[0][1]["retention"] == "age=5m"
