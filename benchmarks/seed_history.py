"""Make the kit's seed tuning history: real Spark runs of the six workloads at random source partitions.

    .venv/bin/python benchmarks/seed_history.py                       # about 5 minutes on 2 cores
    .venv/bin/python benchmarks/seed_history.py --workloads LR2S --duration-s 24 --out /tmp/h

A fresh install has no history of its own, so a learned tuner would start cold.  This script runs
each workload (default the kit's six) once on ``local[2]`` (``read="executors"``, random traffic
around its rate), with ``tune.ExplorePartitions`` drawing the source's input partitions at random
for every batch (seeded, between ``--low`` and ``--high``), and appends every batch's Spark stages
to a history store (``tune.HistoryRecorder``), one run per workload.  Default store:
``lmstream_kit/resources/seed-history``, the one the kit ships and that ``--history seed`` (CLI)
or ``ParallelismTuner(history="seed")`` reads.  The store is append-only: pass ``--fresh`` to
replace it.

Every row is a real measurement on the machine that ran the script (its ``run.json`` in the store
names it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmstream_kit.bench.outputs import machine_info  # noqa: E402
from lmstream_kit.tune.history import SEED_STORE  # noqa: E402

WORKLOADS = ("LR1S", "LR1T", "LR2S", "CM1S", "CM1T", "CM2S")
#: each workload's offered rate (simulated rows/s): the self-joins cost ~10-20x more per row
RATE = {"LR1S": 400, "LR1T": 1500, "LR2S": 8000, "CM1S": 8000, "CM1T": 8000, "CM2S": 8000}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    ap.add_argument("--low", type=int, default=1, help="fewest input partitions drawn")
    ap.add_argument("--high", type=int, default=8, help="most input partitions drawn")
    ap.add_argument("--duration-s", type=float, default=60.0, help="simulated seconds of traffic per workload")
    ap.add_argument("--speedup", type=float, default=4.0)
    ap.add_argument("--trigger-s", type=float, default=4.0, help="the fixed trigger (simulated s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=SEED_STORE, help="the history store to append to")
    ap.add_argument("--fresh", action="store_true", help="empty the store first")
    args = ap.parse_args(argv)
    unknown = [w for w in args.workloads if w not in RATE]
    if unknown:
        print(f"error: unknown workload {unknown[0]!r} (use {', '.join(WORKLOADS)})", file=sys.stderr)
        return 2
    if not 1 <= args.low <= args.high:
        print(f"error: need 1 <= --low <= --high, got {args.low}, {args.high}", file=sys.stderr)
        return 2

    from tqdm import tqdm

    from lmstream_kit.engine.session import build_session, spark_version
    from lmstream_kit.live import LiveStream
    from lmstream_kit.tune import ExplorePartitions, HistoryRecorder, OperatorMetrics
    from lmstream_kit.tune.history import read_history

    if args.fresh and args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    spark = build_session(master="local[2]", app_name="lmstream_kit-seed-history", conf={})
    tmp = Path(tempfile.mkdtemp(prefix="seed-history-"))
    t0 = time.monotonic()
    runs = []
    try:
        with tqdm(total=len(args.workloads), unit="run", desc="seed history") as bar:
            for i, workload in enumerate(args.workloads):
                recorder = HistoryRecorder(args.out, run_id=f"seed-{workload}-{int(time.time())}", flush_every=10)
                stream = LiveStream(workload, policy="fixed", rate=RATE[workload], speedup=args.speedup,
                                    duration_s=args.duration_s, trigger_s=args.trigger_s, read="executors",
                                    seed=args.seed + i, run_dir=tmp / workload, spark=spark,
                                    controllers=(ExplorePartitions(low=args.low, high=args.high, seed=args.seed + i),
                                                 OperatorMetrics(timeout_s=2.0), recorder))
                stream.start()
                try:
                    stream.wait(until=lambda st: st.feed_finished(), timeout=600)
                finally:
                    stream.stop()
                batches = [r for r in stream.records if r["rows"] and r.get("operators")]
                runs.append({"workload": workload, "run_id": recorder.run_id, "batches": len(batches),
                             "partitions": sorted({r.get("input_partitions") for r in batches} - {None})})
                bar.update(1)
                bar.set_postfix_str(f"{workload}: {len(batches)} batches")
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    table = read_history(args.out)
    info = {"made_by": "benchmarks/seed_history.py", "argv": sys.argv[1:], "spark": spark_version(),
            "machine": {"host": socket.gethostname().split(".")[0] or "host", **machine_info()},
            "setup": {"master": "local[2]", "read": "executors", "policy": "fixed", "traffic": "random",
                      "rates": {w: RATE[w] for w in args.workloads}, "speedup": args.speedup,
                      "trigger_s": args.trigger_s, "duration_s": args.duration_s,
                      "partitions": [args.low, args.high], "seed": args.seed},
            "runs": runs, "rows": table.num_rows, "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "took_s": round(time.monotonic() - t0, 1)}
    (args.out / "run.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"{table.num_rows} operator rows of {len(runs)} runs in {args.out}")
    for r in runs:
        print(f"  {r['workload']:5} {r['batches']:3} batches at partitions {r['partitions']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
