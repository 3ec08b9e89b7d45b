"""CLI user errors refused before Spark starts (issue 16, item 8).

Each refusal is one ``error: ...`` line naming the bad value, exit status 2, no traceback, and
nothing created or changed on disk.  The commands run in-process through the real entry point
(:func:`lmstream_kit.cli.main`, in click's CliRunner isolation); Spark is replaced by a tripwire,
so a value that is not refused up front fails the test instead of starting a JVM.
"""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from lmstream_kit.cli import main
from lmstream_kit.exceptions import ConfigError
from lmstream_kit.stream_config import MASTER_FORMS, StreamConfig, check_master


class SparkWouldStart(AssertionError):
    """The command got as far as starting Spark: it did not refuse the value up front."""


@pytest.fixture(autouse=True)
def no_spark(monkeypatch):
    def tripwire(*args, **kwargs):
        raise SparkWouldStart("the command went on to start Spark instead of refusing up front")

    monkeypatch.setattr("lmstream_kit.engine.adapter.SparkEngine.open", tripwire)
    monkeypatch.setattr("lmstream_kit.engine.session.build_session", tripwire)


def invoke(*args: str) -> tuple[int, str, str]:
    """``lmstream-kit ARGS`` through the CLI's entry point: (exit status, stdout, stderr)."""
    with CliRunner().isolation() as (stdout, stderr, _):
        code = main([str(a) for a in args])
    return code, stdout.getvalue().decode(), stderr.getvalue().decode()


def assert_user_error(result, *needles: str) -> str:
    code, out, err = result
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err
    assert out == "", out
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def snapshot(root: Path) -> dict:
    """Every file and directory under ``root``: the digest of its bytes and its modification time."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir",
                                       p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


# -- 1. non-finite or non-positive floats ------------------------------------------------------------

@pytest.mark.parametrize(
    "args, needles",
    [
        (["--policy", "fixed", "--trigger", "inf"], ["trigger", "finite", "got inf"]),
        (["--policy", "fixed", "--trigger", "-inf"], ["trigger", "got -inf"]),
        (["--policy", "fixed", "--trigger", "nan"], ["trigger", "got nan"]),
        (["--policy", "fixed", "--trigger", "0"], ["trigger must be > 0", "got 0"]),
        (["--policy", "fixed", "--trigger", "-2"], ["trigger must be > 0", "got -2"]),
        (["--policy", "lmstream", "--trigger", "inf"], ["trigger", "got inf"]),  # unused, still wrong
        (["--slide", "inf"], ["slide", "finite", "got inf"]),
        (["--slide", "nan"], ["slide", "got nan"]),
        (["--duration", "inf"], ["duration", "finite", "got inf"]),
        (["--duration", "nan"], ["duration", "got nan"]),
        (["--rate", "inf"], ["rate", "got inf"]),
        (["--rate", "nan"], ["rate", "got nan"]),
        (["--speedup", "inf"], ["speedup", "got inf"]),
        (["--spread", "nan"], ["spread", "got nan"]),
        (["--spread", "inf"], ["spread", "got inf"]),
        (["--inflection-point", "inf"], ["inflection_point", "inf"]),
        (["--inflection-point", "nan"], ["inflection_point", "nan"]),
        (["--retention", "age=soon"], ["retention age", "got 'soon'"]),
        (["--retention", "size=lots"], ["retention size", "got 'lots'"]),
        (["--retention", "keep=3"], ["retention: unknown setting 'keep'"]),
    ],
)
def test_a_float_option_that_is_not_finite_and_positive_is_refused(tmp_path, args, needles):
    out = tmp_path / "r"
    assert_user_error(invoke("run", "--out", out, *args), *needles)
    assert not out.exists()


def test_watching_an_input_directory_for_infinite_seconds_is_refused(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    out = tmp_path / "r"
    assert_user_error(invoke("run", "--input", landing, "--duration", "inf", "--out", out),
                      "duration", "got inf")
    assert not out.exists()
    assert list(landing.iterdir()) == []


@pytest.mark.parametrize("option, value", [("--target", "inf"), ("--target", "nan"), ("--slide", "inf"),
                                           ("--slide", "nan"), ("--rate-scale", "inf"),
                                           ("--rate-scale", "nan")])
def test_reconfigure_refuses_a_non_finite_value_before_reaching_the_stream(tmp_path, option, value):
    server, run, handler = _serve_fake_stream(tmp_path)
    try:
        before = snapshot(run)
        assert_user_error(invoke("reconfigure", run, option, value), option,
                          f"got {value}")
        assert handler.calls == []
        assert snapshot(run) == before
    finally:
        server.close()


def test_reconfigure_refuses_a_non_finite_setting_before_reaching_the_stream(tmp_path):
    server, run, handler = _serve_fake_stream(tmp_path)
    try:
        assert_user_error(invoke("reconfigure", run, "--set", "inflection_point=Infinity"),
                          "inflection_point", "got Infinity")
        assert handler.calls == []
    finally:
        server.close()


# -- 2. the master URL ------------------------------------------------------------------------------

GOOD_MASTERS = [
    "local", "local[1]", "local[2]", "local[16]", "local[*]",
    "local[2,3]", "local[2,0]", "local[*, 4]", "local[2 , 3]",  # F: task failures tolerated (Spark takes 0)
    "local-cluster[2,1,1024]", "local-cluster[ 2 , 1 , 1024 ]",
    "spark://127.0.0.1:7077", "spark://master-1.example.com:7077", "spark://h1:7077,h2:7078",
    "spark://[::1]:7077", "yarn",
    "k8s://https://10.0.0.1:6443", "k8s://10.0.0.1:6443", "k8s://http://kube.local:8080",
]

BAD_MASTERS = [
    ("garbage", ""), ("", ""), (" local[2]", ""), ("local[2] ", ""), ("LOCAL[2]", ""), ("Local", ""),
    ("local[0]", "at least 1 thread"), ("local[00]", "at least 1 thread"),
    ("local[0,3]", "at least 1 thread"),
    ("local[-1]", ""), ("local[]", ""), ("local[x]", ""), ("local[2", ""), ("local2", ""), ("local[*,x]", ""),
    ("local[ 2]", ""), ("local[ 2 , 3 ]", ""),  # Spark's regexes take spaces only around local[N,F]'s comma
    ("local-cluster", ""), ("local-cluster[2,1]", ""),
    ("local-cluster[0,1,1024]", "at least 1"), ("local-cluster[2,0,1024]", "at least 1"),
    ("spark://", ""), ("spark://host", ""), ("spark://host:", ""), ("spark://host:0", ""),
    ("spark://host:99999", ""), ("spark://host:7077/", ""), ("spark://host:7077,", ""),
    ("spark://bad_host:7077", ""), ("spark://user@host:7077", ""), ("spark://host:7077?x=1", ""),
    ("spark:host:7077", ""), ("yarn-client", "yarn"), ("yarn-cluster", "yarn"), ("k8s://", ""),
    ("k8s://ftp://host:21", "http"), ("mesos://host:5050", "Mesos"), ("nosuch://host", ""),
    ("sc://localhost:15002", ""),
]


@pytest.mark.parametrize("master", GOOD_MASTERS)
def test_check_master_accepts_the_forms_spark_accepts(master):
    assert check_master(master) == master


@pytest.mark.parametrize("master, why", BAD_MASTERS)
def test_check_master_refuses_anything_else_in_one_line_naming_it(master, why):
    with pytest.raises(ConfigError) as info:
        check_master(master)
    text = str(info.value)
    assert "\n" not in text
    assert MASTER_FORMS in text and why in text
    # named as given (quoted where it is empty or has spaces), in the wording test_cli.py's Spark test expects
    shown = master if master.split() == [master] else repr(master)
    assert text.startswith(f"could not start Spark (master {shown}): ")


def test_check_master_is_importable_without_pyspark():
    import subprocess
    import sys

    code = ("import sys; from lmstream_kit.stream_config import check_master; check_master('local[2]'); "
            "sys.exit(1 if any(m.split('.')[0] in ('pyspark', 'py4j') for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False, timeout=120).returncode == 0


@pytest.mark.parametrize("master, why", [("garbage", ""), ("local[0]", "at least 1 thread"),
                                         ("mesos://host:5050", "Mesos")])
def test_run_refuses_a_bad_master_before_spark(tmp_path, master, why):
    out = tmp_path / "r"
    line = assert_user_error(invoke("run", "--master", master, "--out", out),
                             f"(master {master})", "local[N]", why)
    assert "spark://HOST:PORT" in line
    assert not out.exists()


def test_bench_refuses_a_bad_master_before_spark(tmp_path):
    out = tmp_path / "b"
    assert_user_error(invoke("bench", "--queries", "LR2S", "--master", "local[0]", "--out", out),
                      "(master local[0])")
    assert not out.exists()


# -- 3. a run directory that holds a run of another workload --------------------------------------

def _other_run(path: Path, workload: str = "CM2S") -> Path:
    """A run directory as an earlier ``run --workload WORKLOAD`` leaves it."""
    (path / "checkpoint" / "offsets").mkdir(parents=True)
    (path / "checkpoint" / "offsets" / "0").write_text("v1\n{}\n")
    (path / "spool").mkdir()
    (path / "spool" / "index.jsonl").write_text('{"seq": 0}\n')
    (path / "run.json").write_text(json.dumps({"workload": workload, "policy": "lmstream", "target_s": 10.0,
                                               "channel": "127.0.0.1:1"}, indent=2))
    (path / "metrics.jsonl").write_text(json.dumps({"batch_id": 0, "rows": 5}) + "\n")
    return path


def test_run_into_a_directory_of_another_workload_is_refused_and_leaves_it_as_it_was(tmp_path):
    run = _other_run(tmp_path / "cm2s")
    before, raw = snapshot(run), (run / "run.json").read_bytes()
    line = assert_user_error(invoke("run", "--workload", "LR2S", "--out", run), str(run), "CM2S", "LR2S")
    assert "--out" in line
    assert snapshot(run) == before and (run / "run.json").read_bytes() == raw


def test_a_workload_of_your_own_is_compared_by_its_name(tmp_path):
    run = _other_run(tmp_path / "mine", workload="MyQuery")
    before = snapshot(run)
    assert_user_error(invoke("run", "--workload", "LR2S", "--out", run), "MyQuery", "LR2S", str(run))
    assert snapshot(run) == before


def test_the_same_workload_goes_on_to_resume_the_run(tmp_path):
    run = _other_run(tmp_path / "lr2s", workload="LR2S")
    with pytest.raises(SparkWouldStart):  # not refused: the start goes as far as Spark
        invoke("run", "--workload", "LR2S", "--out", run)


@pytest.mark.parametrize("text, needle", [("{not json", "not valid JSON"), ("[1, 2]", "not a JSON object"),
                                          ('{"workload": 3}', "3")])
def test_a_run_directory_with_an_unreadable_run_json_is_refused(tmp_path, text, needle):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(text)
    before = snapshot(run)
    assert_user_error(invoke("run", "--out", run), str(run / "run.json"), needle)
    assert snapshot(run) == before


def test_a_run_directory_whose_run_json_is_a_directory_is_refused(tmp_path):
    run = tmp_path / "run"
    (run / "run.json").mkdir(parents=True)
    assert_user_error(invoke("run", "--out", run), str(run / "run.json"))


# -- 4. --input that is a file -----------------------------------------------------------------------

def test_input_that_is_a_file_says_so(tmp_path):
    landing = tmp_path / "rows.csv"
    landing.write_text("a,b\n1,2\n")
    out = tmp_path / "r"
    line = assert_user_error(invoke("run", "--input", landing, "--out", out), str(landing),
                             "is a file, not a directory")
    assert "does not exist" not in line
    assert not out.exists() and landing.read_text() == "a,b\n1,2\n"


def test_input_that_does_not_exist_still_says_so(tmp_path):
    assert_user_error(invoke("run", "--input", tmp_path / "nowhere", "--out", tmp_path / "r"),
                      str(tmp_path / "nowhere"), "does not exist")


def test_stream_config_says_an_input_file_is_not_a_directory(tmp_path):
    landing = tmp_path / "rows.csv"
    landing.write_text("")
    with pytest.raises(ConfigError, match="is a file, not a directory"):
        StreamConfig.build("LR2S", input_dir=landing, run_dir=tmp_path / "r")


def test_stream_config_refuses_an_infinite_trigger(tmp_path):
    with pytest.raises(ConfigError, match="trigger .*got inf"):
        StreamConfig.build("LR2S", policy="fixed", trigger_s=float("inf"), run_dir=tmp_path / "r")


# -- 5. run.json records the channel: reconfigure reaches a stream through it (no Spark) -------------

class _FakeStream:
    """What a LiveStream's channel answers to ``reconfigure``."""

    def __init__(self):
        self.calls = []

    def on_reconfigure(self, op, value):
        self.calls.append((op, value))
        return {"transaction": {"txn": 1, "state": "applied"}, "now": {op: value}}


def _serve_fake_stream(tmp_path: Path):
    from lmstream_kit.engine.channel import ChannelServer

    run = tmp_path / "live"
    run.mkdir()
    handler = _FakeStream()
    server = ChannelServer(handler, key_file=run / ".channel.key")
    (run / "run.json").write_text(json.dumps({"workload": "LR2S", "channel": f"127.0.0.1:{server.port}"}))
    return server, run, handler


def test_reconfigure_finds_the_stream_at_the_channel_its_run_json_records(tmp_path):
    server, run, handler = _serve_fake_stream(tmp_path)
    try:
        code, out, err = invoke("reconfigure", run, "--target", "3")
    finally:
        server.close()
    assert (code, err) == (0, ""), (code, out, err)
    assert handler.calls == [("target_s", 3.0)]
    assert out.strip() == 'target_s -> 3.0: in force, transaction 1 applied; now {"target_s": 3.0}'


def test_reconfigure_of_a_stream_that_is_gone_is_one_line(tmp_path):
    run = tmp_path / "gone"
    run.mkdir()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (run / "run.json").write_text(json.dumps({"workload": "LR2S", "channel": f"127.0.0.1:{port}"}))
    (run / ".channel.key").write_bytes(b"k" * 32)
    assert_user_error(invoke("reconfigure", run, "--target", "3"), f"127.0.0.1:{port}", str(run))
