"""The lmstream-kit CLI as a user runs it: subprocesses, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def kit(*args: str, env: dict | None = None, timeout: float = 300, cwd: Path | None = None):
    return subprocess.run(
        [sys.executable, "-m", "lmstream_kit", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd or REPO,
    )


def assert_user_error(proc, *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ")
    for needle in needles:
        assert needle in err, err


def test_help_explains_the_commands():
    proc = kit("--help")
    assert proc.returncode == 0
    for word in ("run", "compare", "workloads", "cluster", "Examples"):
        assert word in proc.stdout
    run_help = kit("run", "--help").stdout
    for option in ("--workload", "--traffic", "--rate", "--policy", "--duration", "--out", "--master", "--input"):
        assert option in run_help


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--workload", "LR9X"], ["unknown workload 'LR9X'", "LR2S"]),
        (["--policy", "greedy"], ["unknown policy 'greedy'", "lmstream"]),
        (["--rate", "0"], ["rate must be > 0, got 0"]),
        (["--rate", "-5"], ["rate must be > 0, got -5"]),
        (["--duration", "0"], ["duration must be > 0", "got 0"]),
        (["--duration", "-1"], ["duration must be > 0", "got -1"]),
        (["--slide", "-2"], ["slide must be > 0", "got -2"]),
        (["--slide", "0"], ["slide must be > 0", "got 0", "--tumbling"]),
        (["--slide", "5", "--tumbling"], ["--slide and --tumbling"]),
        (["--speedup", "0"], ["speedup must be > 0, got 0"]),
        (["--traffic", "zigzag"], ["zigzag"]),
        (["--input", "/nonexistent/landing"], ["/nonexistent/landing"]),
        (["--conf", "spark.plugins"], ["--conf must be KEY=VALUE", "spark.plugins"]),
        (["--inflection-point", "-3"], ["inflection_point", "-3"]),
        (["--device-mode", "gpu"], ["gpu"]),
        (["--tune", "dhalion"], ["dhalion"]),
        (["--partitions", "0"], ["--partitions", "0"]),
        (["--state-partitions", "0"], ["state_partitions must be an integer >= 1, got 0"]),
        (["--state-store", "lsm"], ["lsm"]),
    ],
)
def test_bad_input_gets_one_line_and_no_traceback(args, needles, tmp_path):
    assert_user_error(kit("run", "--out", str(tmp_path / "r"), *args), *needles)


def test_java_missing_is_a_user_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # python, but no java
    assert_user_error(kit("run", "--out", str(tmp_path / "r"), env=env), "Java not found")


def test_unwritable_run_directory_is_a_user_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    # as root, permissions don't stop writes; a path under a regular file always fails
    assert_user_error(kit("run", "--out", str(blocker / "run")), str(blocker / "run"))


@pytest.mark.parametrize("uri", [False, True])
def test_unwritable_spool_location_is_a_user_error(tmp_path, uri):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    spool = f"file://{blocker}/spool" if uri else str(blocker / "spool")
    proc = kit("run", "--out", str(tmp_path / "run"), "--spool", spool)
    assert_user_error(proc, "spool", str(blocker / "spool"))


def test_a_tuning_history_store_that_is_a_file_is_a_user_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert_user_error(kit("run", "--out", str(tmp_path / "run"), "--tune", "ds2", "--history", str(blocker)),
                      str(blocker))


def test_compare_of_a_non_run_directory_is_a_user_error(tmp_path):
    assert_user_error(kit("compare", str(tmp_path)), "not a run directory")


def _fake_run(path: Path, policy: str, lat: list[float]) -> None:
    path.mkdir()
    (path / "run.json").write_text(json.dumps({"workload": "LR2S", "policy": policy, "target_s": 2.5}))
    with open(path / "metrics.jsonl", "w") as fh:
        for i, x in enumerate(lat):
            fh.write(json.dumps({"batch_id": i, "rows": 100, "max_latency_s": x, "avg_latency_s": x / 2, "processing_s": 0.5}) + "\n")


def test_compare_prints_runs_side_by_side(tmp_path):
    _fake_run(tmp_path / "a", "lmstream", [2.0, 2.2, 2.4])
    _fake_run(tmp_path / "b", "fixed", [10.5, 11.0, 12.5])
    proc = kit("compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "lmstream" in out and "fixed" in out
    assert "12.50" in out and "2.20" in out  # max of b, p50 of a
    assert "100.0 %" in out and "0.0 %" in out  # within the 2.5 s bound


def test_compare_skips_paths_that_are_not_runs_with_one_line_each(tmp_path):
    _fake_run(tmp_path / "a", "lmstream", [2.0, 2.2, 2.4])
    (tmp_path / "notebooks").mkdir()  # what `compare runs/*` meets next to the runs
    (tmp_path / "notes.txt").write_text("not a run")
    proc = kit("compare", str(tmp_path / "a"), str(tmp_path / "notebooks"), str(tmp_path / "notes.txt"))
    assert proc.returncode == 0, proc.stderr
    assert "lmstream" in proc.stdout and "2.20" in proc.stdout
    assert proc.stderr.splitlines() == [
        f"skipped {tmp_path / 'notebooks'}: not a run directory (no metrics.jsonl)",
        f"skipped {tmp_path / 'notes.txt'}: not a run directory (no metrics.jsonl)",
    ]


def test_compare_of_several_paths_none_a_run_is_a_user_error(tmp_path):
    for name in ("notebooks", "scratch"):
        (tmp_path / name).mkdir()
    proc = kit("compare", str(tmp_path / "notebooks"), str(tmp_path / "scratch"))
    assert_user_error(proc, "none of the 2 paths is a run directory", str(tmp_path / "scratch"))


def test_compare_shows_a_run_without_batches_as_such(tmp_path):
    _fake_run(tmp_path / "a", "lmstream", [2.0, 2.2, 2.4])
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text("")
    proc = kit("compare", str(tmp_path / "a"), str(empty))
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if str(empty) in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[1:6] == ["?", "?", "0", "0", "no batches"]


def test_a_start_that_fails_removes_the_run_directory_it_created(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # python, but no java
    assert_user_error(kit("run", "--out", str(tmp_path / "new" / "run"), env=env), "Java not found")
    assert not (tmp_path / "new" / "run").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    assert_user_error(kit("run", "--out", str(existing), env=env), "Java not found")
    assert existing.is_dir(), "a directory that was there before is kept"


@pytest.mark.spark
def test_a_start_with_an_unknown_master_leaves_no_run_directory(tmp_path):
    proc = kit("run", "--master", "nosuch://host", "--duration", "5", "--out", str(tmp_path / "run"))
    assert proc.returncode == 2 and "error: could not start Spark (master nosuch://host)" in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "files, removed",
    [
        ({"run.json": "{}", "metrics.jsonl": "", "spark_progress.jsonl": "", ".channel.key": "k",
          "spool/index.jsonl": "", "spool/meta.json": "{}", "checkpoint/metadata": "{}"}, True),
        ({"metrics.jsonl": '{"batch_id": 0}\n'}, False),
        ({"spool/index.jsonl": '{"seq": 0}\n'}, False),
        ({"spool/data/000000.arrow": "rows"}, False),
        ({"checkpoint/offsets/0": "v1"}, False),
        ({"output/part-0.parquet": "rows"}, False),
        ({"my-notes.txt": ""}, False),
    ],
)
def test_a_failed_start_removes_only_a_run_directory_without_data(tmp_path, files, removed):
    from lmstream_kit.metrics import remove_unused_run_dir

    run = tmp_path / "run"
    run.mkdir()
    for name, text in files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(text)
    assert remove_unused_run_dir(run) is removed
    assert run.exists() is not removed


def test_workloads_lists_lr2s():
    proc = kit("workloads")
    assert proc.returncode == 0 and "LR2S" in proc.stdout and "slide 10 s" in proc.stdout


@pytest.mark.spark
def test_run_writes_metrics_and_prints_a_summary(tmp_path):
    out = tmp_path / "demo"
    shared = tmp_path / "shared" / "spool"  # a pyarrow filesystem URI, as a cluster would use
    proc = kit("run", "--duration", "40", "--speedup", "8", "--rate", "500", "--out", str(out),
               "--spool", f"file://{shared}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "summary" in proc.stdout and "rows processed" in proc.stdout
    info = json.loads((out / "run.json").read_text())
    assert info["workload"] == "LR2S" and info["policy"] == "lmstream" and info["traffic"] == "random"
    assert info["spark_version"] and info["master"] == "local[2]" and info["seed"] == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["rows"] for r in records) == info["feed_rows"] == info["total_rows"]
    assert info["spool"] == f"file://{shared}" and (shared / "index.jsonl").exists()
    assert not (out / "spool").exists()
    assert "Traceback" not in proc.stderr
    # the device plan: auto falls back to advisory on this machine and says so
    assert info["device_mode"] == "advisory" and "device mode: advisory" in proc.stdout
    assert "inflection point" in proc.stdout
    assert all("device_plan" in r for r in records if r["rows"] > 0)


@pytest.mark.spark  # it starts Spark's JVM, which reports the plugin missing
def test_rapids_mode_without_the_plugin_is_a_user_error(tmp_path):
    proc = kit("run", "--duration", "5", "--device-mode", "rapids", "--out", str(tmp_path / "r"))
    # Spark's JVM prints its start-up lines first; the kit's own error is one line, the last
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "Exception" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: device mode 'rapids' needs the RAPIDS Accelerator"), last


def test_bench_progress_prints_one_line_per_step_when_stderr_is_not_a_terminal(capsys, monkeypatch):
    from lmstream_kit.cli import _with_bench_progress

    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):  # they make rich see a terminal
        monkeypatch.delenv(var, raising=False)

    def work(progress):  # the events run_bench sends: a cell when it starts and when it is done
        progress({"phase": "warmup", "done": 0, "total": 3, "label": "warm-up CM2S"})
        for done, label in enumerate(("CM2S lmstream constant r0", "CM2S fixed constant r0"), start=1):
            progress({"phase": "sweep", "done": done, "total": 3, "label": label})
            progress({"phase": "sweep", "done": done + 1, "total": 3, "label": label})
        progress({"phase": "capacity", "done": 0, "total": 1, "label": "capacity CM2S lmstream @ 500 rows/s"})
        return "result"

    assert _with_bench_progress(work) == "result"
    captured = capsys.readouterr()
    lines = [line.split("] ", 1)[1] for line in captured.err.splitlines()]
    assert lines == ["sweep 0/3 warm-up CM2S", "sweep 1/3 CM2S lmstream constant r0",
                     "sweep 2/3 CM2S fixed constant r0", "capacity 0/1 capacity CM2S lmstream @ 500 rows/s"]
    assert captured.out == ""


@pytest.mark.spark
def test_reconfigure_changes_a_running_stream_from_another_process(spark, tmp_path):
    from lmstream_kit.journal import Journal
    from lmstream_kit.live import LiveStream

    run = tmp_path / "live"
    s = LiveStream("LR2S", policy="lmstream", traffic="constant", rate=300, speedup=10, run_dir=run,
                   spark=spark).start()
    try:
        s.wait(batches=2, timeout=120)
        proc = kit("reconfigure", str(run), "--target", "3")
        assert proc.returncode == 0 and "target_s -> 3.0: in force, transaction 1 applied" in proc.stdout, (
            proc.stdout, proc.stderr)
        assert s.target_s == pytest.approx(0.3)  # wall seconds at speedup 10
        proc = kit("reconfigure", str(run), "--restart")
        assert proc.returncode == 0 and "restart -> True: in force, transaction 2 applied" in proc.stdout, proc.stdout
        assert_user_error(kit("reconfigure", str(run), "--policy", "greedy"), "unknown policy 'greedy'", str(run))
        assert_user_error(kit("reconfigure", str(run), "--target", "3", "--restart"), "exactly one change")
        proc = kit("reconfigure", str(run), "--set", "inflection_point=65536")  # a declared control, by its key
        assert proc.returncode == 0 and '"inflection_point": 65536.0' in proc.stdout, (proc.stdout, proc.stderr)
        assert s.mapper.inflection_point == 65536
        assert_user_error(kit("reconfigure", str(run), "--set", "flumina.workers=3"),
                          "unknown reconfiguration 'flumina.workers'", "inflection_point")
        assert_user_error(kit("reconfigure", str(run), "--set", "inflection_point=-1"), "got -1")
        assert_user_error(kit("reconfigure", str(run), "--set", "3"), "--set takes KEY=VALUE, got '3'")
        s.wait(batches=len(s.records) + 2, timeout=120)
        assert s.is_active
    finally:
        s.stop()
    assert [(t["op"], t["state"]) for t in Journal(run).transactions()] == [("target_s", "committed"),
                                                                           ("restart", "committed")]
    assert_user_error(kit("reconfigure", str(run), "--restart"), "no stream is running in")
