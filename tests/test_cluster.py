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


def test_short_run_on_a_standalone_cluster(tmp_path):
    with StandaloneCluster(workers=1, cores=2, memory="1g", log_dir=tmp_path / "cluster") as cluster:
        assert cluster.master_url.startswith("spark://127.0.0.1:")
        out = tmp_path / "run"
        proc = subprocess.run(
            [sys.executable, "-m", "lmstream_kit", "run", "--master", cluster.master_url,
             "--duration", "30", "--speedup", "5", "--rate", "500", "--traffic", "constant",
             "--out", str(out)],
            capture_output=True, text=True, timeout=400, cwd=REPO,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads((out / "run.json").read_text())
    assert info["master"] == cluster.master_url
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    data = [r for r in records if r["rows"] > 0]
    assert len(data) >= 2
    assert sum(r["rows"] for r in data) == info["feed_rows"] == 30 * 500
    # the workers were really used: the master's log shows an application that ran
    assert "Registering app" in (tmp_path / "cluster" / "master.log").read_text()
