"""How much sooner a kit session is ready with the driver's class-data archive.  Side by side.

    .venv/bin/python benchmarks/jvm_start.py                 # 5 starts each way, in turn
    .venv/bin/python benchmarks/jvm_start.py --reps 10 --stream

Each start is a fresh interpreter that opens a session with the kit's defaults
(:func:`lmstream_kit.engine.session.build_session`), runs one small query, and with ``--stream``
also a short LR2S stream under lmstream to its third data batch; then it stops Spark.  The two
ways (``LMSTREAM_CLASS_ARCHIVE=1``, the archive mapped; ``=0``, Spark's jars read the ordinary way)
alternate, so that the machine's drift falls on both.  Per start it records:

* ``ready_s``: from the interpreter's first line to a session that answers;
* ``first_query_s``: the small query's wall time;
* ``stream_s``: with ``--stream``, the stream's start to its third data batch;
* ``total_s``: the whole child process, stop included, and ``cpu_s``: its CPU time and its
  children's (the JVM's included, once it exited).

The archive is built first where it is missing (``lmstream-kit class-archive``).  Every number is
**measured**, on the machine named in the result file (``jvm-start-<host>-<date>.json`` and
``.csv``); the summary gives the median of each way and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmstream_kit.bench.outputs import write_run_results  # noqa: E402

CHILD = r"""
import json, sys, tempfile, time
t0 = float(sys.argv[1])
from lmstream_kit.engine.session import build_session
spark = build_session(app_name="lmstream_kit-jvm-start")
ready = time.time()
spark.range(100_000).selectExpr("sum(id)").collect()
query = time.time()
out = {"ready_s": ready - t0, "first_query_s": query - ready}
if sys.argv[2] == "1":
    from lmstream_kit.live import LiveStream
    s = LiveStream("LR2S", policy="lmstream", traffic="constant", rate=500, speedup=8, duration_s=600,
                   run_dir=tempfile.mkdtemp(prefix="jvm-start-"), spark=spark, output="noop").start()
    try:
        s.wait(until=lambda st: sum(1 for r in st.records if r["rows"]) >= 3, timeout=300)
        out["stream_s"] = time.time() - query
    finally:
        s.stop(drain=False)
proc = spark.sparkContext._gateway.proc
spark.stop()
proc.stdin.close()
proc.wait(timeout=120)
print("RESULT " + json.dumps(out), flush=True)
"""


def one_start(archive: bool, stream: bool) -> dict:
    env = {**os.environ, "LMSTREAM_CLASS_ARCHIVE": "1" if archive else "0"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-c", CHILD, repr(t0), "1" if stream else "0"], capture_output=True,
                          text=True, env=env, timeout=900, check=False)
    total = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"a start failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    row = {"archive": archive, **json.loads(line[len("RESULT "):]), "total_s": total,
           "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="starts each way")
    ap.add_argument("--stream", action="store_true", help="also run a short stream in each start")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    from lmstream_kit.engine.classarchive import build_archive

    archive = build_archive()
    runs = []
    for rep in range(args.reps):
        for way in ((True, False) if rep % 2 == 0 else (False, True)):  # in turn, order alternating
            print(f"[{len(runs) + 1}/{2 * args.reps}] {'with' if way else 'without'} the archive ...", flush=True)
            row = {"rep": rep, **one_start(way, args.stream)}
            runs.append(row)
            print("    " + ", ".join(f"{k} {v}" for k, v in row.items() if k.endswith("_s")), flush=True)
    summary = {}
    for key in ("ready_s", "first_query_s", "stream_s", "total_s", "cpu_s"):
        with_ = [r[key] for r in runs if r["archive"] and key in r]
        without = [r[key] for r in runs if not r["archive"] and key in r]
        if with_ and without:
            a, b = statistics.median(with_), statistics.median(without)
            summary[key] = {"with": a, "without": b, "ratio": round(a / b, 3) if b else None}
    meta = {"reps": args.reps, "stream": args.stream, "archive": str(archive),
            "archive_mib": round(archive.stat().st_size / 2**20), "summary": summary}
    path = write_run_results(args.out, "jvm-start", meta, runs)
    for key, s in summary.items():
        print(f"{key}: median {s['with']} s with the archive, {s['without']} s without (x{s['ratio']})")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
