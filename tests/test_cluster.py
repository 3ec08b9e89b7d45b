"""The same run on a standalone Spark cluster started from the installed PySpark."""

from __future__ import annotations

import json
import re
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
    # the scale-down killed the newest of the two executors (Spark numbers them as they register); the
    # scale-up added one to the survivor
    before_down, before_up = applied[1]["before"], applied[2]["before"]
    assert len(before_down) == 2 and applied[1]["killed"] == [max(before_down, key=int)], applied[1]
    assert before_up == [min(before_down, key=int)] and not applied[2]["killed"], applied[2]
    assert applied[1]["seconds"] > 0 and applied[2]["seconds"] > 0
    asked = [(t["old"], t["value"]) for t in txns if t["state"] == "requested"]
    assert asked == [(2, 1), (1, 2)], txns
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


def test_executors_refuse_a_total_below_one_before_asking_spark():
    from lmstream_kit.engine.executors import Executors
    from lmstream_kit.exceptions import ConfigError

    class OnACluster:
        class sparkContext:  # noqa: N801  (scale_to refuses before it reaches Spark)
            master = "spark://127.0.0.1:7077"

            @staticmethod
            def getConf():
                return {"spark.dynamicAllocation.enabled": "false"}

    ex = Executors(OnACluster())
    for bad in (0, -1, 1.5, "2"):
        with pytest.raises(ConfigError, match="^" + re.escape(f"executors must be an integer >= 1, got {bad!r}") + "$"):
            ex.scale_to(bad)
