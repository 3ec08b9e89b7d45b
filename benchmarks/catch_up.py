"""How fast a backlog drains after a restart: the controller's catch-up chunks against admitting it all.

    .venv/bin/python benchmarks/catch_up.py                                # LR2S, 120 s backlog, 2 reps
    .venv/bin/python benchmarks/catch_up.py --workload CM1S --backlog 240 --rate 2000 --reps 3

The scenario of issue 15: a stream ran for ``--history`` simulated seconds, was down while its
input kept landing, and restarts on its run directory with ``--backlog`` simulated seconds of
data waiting in its spool (arrivals spread over that time, as files landing would be), while the
traffic goes on at ``--rate``.  The restarted controller starts with the service-time model the
run's records teach it (``learned_batches``); ``--history 0`` starts a fresh stream on the
backlog instead, whose model is empty.  Under LMStream's rule
(``catch_up="all"``) the first batch holds the whole backlog; with ``catch_up="chunks"`` the
controller admits it oldest first, in chunks its model predicts to finish within the bound.  The
two rules run side by side, in turn, on the same seeded rows, ``--reps`` times each.

Per run it writes:

* ``drain_s``: from the stream's start to the completion of the batch that held the backlog's last
  dataset (how long the backlog took);
* ``catch_up_s``: the controller's own record of it (chunks only: first chunk's admission to the
  completion of the batch that drained the backlog);
* ``first_batch_s``: the first data batch's processing time, and ``backlog_batches``: the
  batches that held backlog;
* ``new_max_latency_s`` / ``new_within_bound``: the largest latency, and the share of batches
  within the bound, of the batches that hold only data that arrived after the restart (what the
  stream's users wait for while it catches up), over the first ``--after`` wall seconds;
* the rows and the backlog's rows, to check both rules processed the same.

Every number is **measured** on the machine named in the file (``catch-up-<host>-<date>.json`` and
``.csv``); the summary prints the ratio of the two rules' medians.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmstream_kit.bench.outputs import write_run_results  # noqa: E402
from lmstream_kit.feed.make import write_backlog  # noqa: E402


def one_run(args, rule: str, rep: int, spark, root: Path) -> dict:
    from lmstream_kit.live import LiveStream
    from lmstream_kit.workloads import load_workload

    workload = load_workload(args.workload)
    run_dir = root / f"{rule}-{rep}"

    def stream_of(duration_s):
        return LiveStream(workload, policy="lmstream", traffic="constant", rate=args.rate, speedup=args.speedup,
                          seed=args.seed + rep, duration_s=duration_s, run_dir=run_dir, spark=spark, output="noop",
                          controller={"catch_up": rule})

    learned = 0
    if args.history > 0:  # the run before the stop: its records are what the restarted controller learns from
        before = stream_of(args.history).start()
        try:
            before.wait(until=lambda s: s.feed_finished(), timeout=args.timeout)
        finally:
            before.stop(drain=True)
        learned = min(sum(1 for r in before.records if r["rows"] > 0), before.controller.history)
    from lmstream_kit.feed.spool import Spool

    start_seq = Spool(run_dir / "spool", schema=workload.schema).end_seq if args.history > 0 else 0
    backlog = start_seq + write_backlog(run_dir / "spool", workload, seconds=args.backlog, rate=int(args.rate),
                                        speedup=args.speedup, seed=args.seed + rep)
    stream = stream_of(args.backlog + args.after * args.speedup)
    started = time.time()
    stream.start()
    try:
        stream.wait(until=lambda s: s.loop.book.caught_up(backlog), timeout=args.timeout)
        stream.wait(until=lambda s: time.time() - started >= args.after, timeout=args.after + 60)
    finally:
        stream.stop(drain=False)
    data = [r for r in stream.records if r["rows"] > 0]
    old = [r for r in data if r["start_seq"] < backlog]  # the restarted run's batches: backlog first
    new = [r for r in data if r["start_seq"] >= backlog]
    drained = next(r for r in data if r["end_seq"] >= backlog)
    bound = data[0]["bound_s"]
    shutil.rmtree(run_dir / "spool", ignore_errors=True)
    return {
        "workload": workload.name, "rule": rule, "rep": rep, "backlog_s": args.backlog, "history_s": args.history,
        "learned_batches": learned,
        "rate": args.rate,
        "speedup": args.speedup, "bound_s": bound, "backlog_rows": sum(r["rows"] for r in old),
        "drain_s": round(drained["completed_at"] - started, 3),
        "catch_up_s": next((round(r["catch_up_s"], 3) for r in data if r.get("catch_up_s") is not None), None),
        "first_batch_s": round(data[0]["processing_s"], 3), "backlog_batches": len(old),
        "largest_batch_s": round(max(r["processing_s"] for r in old), 3),
        "new_batches": len(new),
        "new_max_latency_s": round(max((r["max_latency_s"] for r in new), default=float("nan")), 3),
        "new_within_bound": round(sum(r["max_latency_s"] <= bound for r in new) / len(new), 3) if new else None,
        "rows": sum(r["rows"] for r in data),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="LR2S")
    ap.add_argument("--backlog", type=int, default=120, help="simulated seconds of data waiting at the start")
    ap.add_argument("--rate", type=float, default=1000.0, help="rows per simulated second")
    ap.add_argument("--speedup", type=float, default=2.0)
    ap.add_argument("--after", type=float, default=45.0, help="wall seconds each run lasts from its start")
    ap.add_argument("--history", type=int, default=60,
                    help="simulated seconds the stream runs before it is stopped and the backlog lands; the "
                         "restarted controller learns from that run's records (0: a fresh stream on the backlog)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--rules", default="chunks,all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=float, default=20.0,
                    help="simulated seconds of a discarded run first (a cold JVM's batches are several times slower)")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--driver-memory", default="4g",
                    help="the local session's heap (spark.driver.memory); at Spark's 1g a 120k-row LR1S batch ran out")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)

    from lmstream_kit.engine.session import build_session

    spark = build_session(master="local[2]", app_name="lmstream_kit-catch-up",
                          conf={"spark.driver.memory": args.driver_memory})
    runs = []
    root = Path(tempfile.mkdtemp(prefix="catch-up-"))
    rules = [r.strip() for r in args.rules.split(",") if r.strip()]
    total = args.reps * len(rules)
    try:
        if args.warmup > 0:
            from lmstream_kit.live import LiveStream

            print(f"warm-up: {args.warmup:g} simulated s of {args.workload} ...", flush=True)
            warm = LiveStream(args.workload, policy="asap", traffic="constant", rate=args.rate, speedup=args.speedup,
                              duration_s=args.warmup, run_dir=root / "warmup", spark=spark, output="noop")
            warm.start()
            try:
                warm.wait(until=lambda s: s.feed_finished(), timeout=args.timeout)
            finally:
                warm.stop(drain=False)
        for rep in range(args.reps):
            for rule in (rules if rep % 2 == 0 else rules[::-1]):  # side by side, in turn, order alternating
                print(f"[{len(runs) + 1}/{total}] {args.workload} catch_up={rule} rep {rep} ...", flush=True)
                run = one_run(args, rule, rep, spark, root)
                runs.append(run)
                print(f"    drained in {run['drain_s']} s over {run['backlog_batches']} batches "
                      f"(largest {run['largest_batch_s']} s); new data: max latency {run['new_max_latency_s']} s, "
                      f"{run['new_within_bound']} within the {run['bound_s']} s bound", flush=True)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    path = write_run_results(args.out, "catch-up", {"workload": args.workload, "backlog_s": args.backlog,
                                                    "history_s": args.history,
                                                    "driver_memory": args.driver_memory,
                                                    "rate": args.rate, "speedup": args.speedup,
                                                    "after_s": args.after, "reps": args.reps}, runs)
    for key in ("drain_s", "new_max_latency_s", "largest_batch_s"):
        med = {rule: statistics.median(r[key] for r in runs if r["rule"] == rule) for rule in rules}
        if len(rules) == 2 and med[rules[1]]:
            print(f"{key}: median {rules[0]} {med[rules[0]]} s, {rules[1]} {med[rules[1]]} s, "
                  f"ratio {med[rules[0]] / med[rules[1]]:.2f}")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
