"""The same run on a standalone Spark cluster started from the installed PySpark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lmstream_kit.engine.cluster import StandaloneCluster

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One standalone cluster (two one-core workers) for the module's applications, one after another:
    each starts its own application and ends it; starting a master and workers once saves a minute of CI."""
    with StandaloneCluster(workers=2, cores=1, memory="1g", log_dir=tmp_path_factory.mktemp("cluster")) as started:
        yield started


SCALE_SCRIPT = r"""
import json, sys, time
from lmstream_kit.engine.executors import Executors
from lmstream_kit.engine.session import build_session

spark = build_session(master=sys.argv[1], app_name="executors-test",
                      conf={"spark.executor.cores": "1", "spark.executor.memory": "512m"})
ex = Executors(spark)
deadline = time.monotonic() + 60
while ex.count() < 2 and time.monotonic() < deadline:
    time.sleep(0.2)
out = {"start": ex.ids()}
query = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
         .writeStream.format("memory").queryName("scaled").trigger(processingTime="500 milliseconds").start())


def advances(timeout=60):
    seen = (query.lastProgress or {}).get("batchId", -1)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if (query.lastProgress or {}).get("batchId", -1) > seen + 1:
            return True
        time.sleep(0.2)
    return False


out["ran_before"] = advances()
out["down"] = ex.scale_to(1)
out["after_down"] = {"ids": ex.ids(), "advances": advances(), "active": query.isActive}
out["up"] = ex.scale_to(2)
out["after_up"] = {"ids": ex.ids(), "advances": advances(), "active": query.isActive}
try:
    ex.scale_to(0)
except ValueError as exc:
    out["zero"] = str(exc)
query.stop()
spark.stop()
print("RESULT " + json.dumps(out))
"""


def test_executors_scale_down_and_up_while_a_streaming_query_runs(cluster):
    proc = subprocess.run([sys.executable, "-c", SCALE_SCRIPT, cluster.master_url], capture_output=True,
                          text=True, timeout=400, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert len(out["start"]) == 2 and out["ran_before"]
    assert out["down"]["from"] == 2 and out["down"]["to"] == 1 and out["down"]["killed"] == [out["start"][-1]]
    assert out["after_down"] == {"ids": [out["start"][0]], "advances": True, "active": True}
    assert out["up"]["to"] == 2 and len(out["after_up"]["ids"]) == 2
    assert out["after_up"]["advances"] and out["after_up"]["active"]
    assert out["zero"] == "executors must be an integer >= 1, got 0"


def test_executors_scale_live_from_another_shell_as_journal_transactions(cluster, tmp_path):
    import time

    assert cluster.master_url.startswith("spark://127.0.0.1:")
    master_log = cluster.log_dir / "master.log"
    apps_before = master_log.read_text().count("Registering app")
    out = tmp_path / "run"
    run = subprocess.Popen(
        [sys.executable, "-m", "lmstream_kit", "run", "--master", cluster.master_url, "--duration", "400",
         "--speedup", "5", "--rate", "200", "--traffic", "constant", "--out", str(out),
         "--conf", "spark.executor.cores=1", "--conf", "spark.executor.memory=512m"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        deadline = time.monotonic() + 240
        while not ((out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").read_text().count("\n") >= 2):
            assert run.poll() is None and time.monotonic() < deadline, run.stderr.read()[-3000:] if run.poll() else ""
            time.sleep(0.5)
        # first the refusal, while the stream surely runs (80 s of traffic: the scales fit in it on a loaded CI)
        refused = subprocess.run([sys.executable, "-m", "lmstream_kit", "reconfigure", str(out), "--set",
                                  "cluster.executors=0"], capture_output=True, text=True, timeout=60, cwd=REPO)
        said = []
        for total in (1, 2):
            asked = subprocess.run([sys.executable, "-m", "lmstream_kit", "reconfigure", str(out), "--set",
                                    f"cluster.executors={total}"], capture_output=True, text=True, timeout=200,
                                   cwd=REPO)
            assert asked.returncode == 0, asked.stderr[-2000:]
            said.append(asked.stdout.strip())
            time.sleep(6)
        _, err = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err[-3000:]
    # the run ran on the cluster's workers: the master's log shows one more application, the run's
    assert json.loads((out / "run.json").read_text())["master"] == cluster.master_url
    assert master_log.read_text().count("Registering app") == apps_before + 1
    assert said[0].startswith("cluster.executors -> 1: in force") and "transaction 1 prepared" in said[0]
    assert refused.returncode == 2 and refused.stderr.strip().endswith(
        f"cluster.executors must be >= 1, got 0 (stream in {out})")
    txns = [json.loads(line) for line in (out / "reconfig.jsonl").read_text().splitlines()]
    ends = {t["txn"]: t for t in txns if t["state"] in ("committed", "aborted")}
    assert [(t["op"], t["state"]) for t in ends.values()] == [("cluster_executors", "committed")] * 2
    applied = {t["txn"]: t for t in txns if t["state"] == "applied"}
    assert applied[1]["killed"] and applied[1]["seconds"] > 0 and applied[2]["seconds"] > 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    by_batch = {r["batch_id"]: r for r in records}
    assert by_batch[applied[1]["batch_id"]]["executors"] == 1 and by_batch[applied[2]["batch_id"]]["executors"] == 2
    assert sum(r["rows"] for r in records) == 400 * 200  # every row once, across both scales


def test_executors_refuse_a_local_master():
    from lmstream_kit.engine.executors import Executors
    from lmstream_kit.exceptions import ConfigError

    class Local:
        class sparkContext:  # noqa: N801
            master = "local[2]"

    with pytest.raises(ConfigError, match=r"^master local\[2\] runs one executor"):
        Executors(Local())
