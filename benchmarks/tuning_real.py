"""Parallelism tuners on real Spark over a parallelism range: the simulator's comparison, for a bigger machine.

    .venv/bin/python benchmarks/tuning_real.py --workload LR2S --parallelism 1-2            # this 2-core VM
    .venv/bin/python benchmarks/tuning_real.py --master spark://host:7077 --parallelism 1-32 --rate 80000

For one workload, each repetition runs the same stream (``read="executors"``, fixed trigger, random
traffic around ``--rate``, raised ``--step`` times for the middle third of its batches) under:

* ``static-<p>`` for every ``p`` of the range: the source's input partitions held at ``p``;
* ``ds2``: ``ParallelismTuner(policy="ds2")``, bounded by the range, starting at its low end;
* ``learned``: ``ParallelismTuner(policy="learned")`` (the cost model and the bottleneck predictor,
  pre-trained from ``--history``, default the kit's seed history), the same bounds and start.

On Spark a stream's tunable parallelism without a restart is the source stage's (the input
partitions); the stateful stages keep ``spark.sql.shuffle.partitions`` from their checkpoint.  Per
run it writes: reconfigurations (the tuner's changes of the partitions), seconds in violation of the
latency bound (for each late batch, the time since the previous batch completed), mean and final
partitions, the 95th percentile of the batches' max latency, the share within the bound, and the
tuner's own milliseconds per batch.  Every number is **measured** on the machine named in the file
(``tuning-real-<host>-<date>.json`` and ``.csv``); on this 2-core VM the range is 1-2 (or up to 4,
with waves), so the comparison that matters needs a bigger machine or a cluster.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmstream_kit.bench.outputs import write_run_results  # noqa: E402
from lmstream_kit.record import summarize  # noqa: E402


def parse_range(text: str) -> list[int]:
    """``"1-4"`` or ``"1,2,8"`` as a sorted list of parallelisms (>= 1)."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = (int(x) for x in part.split("-", 1))
            out.update(range(lo, hi + 1))
        elif part:
            out.add(int(part))
    if not out or min(out) < 1:
        raise ValueError(f"a parallelism range of integers >= 1, like 1-8 or 1,2,4, got {text!r}")
    return sorted(out)


def violation_s(records: list[dict]) -> float:
    """For every data batch over its bound, the seconds since the previous batch completed."""
    data = [r for r in records if r.get("rows")]
    total, before = 0.0, None
    for r in data:
        if r.get("within_bound") is False and before is not None:
            total += r["completed_at"] - before
        before = r["completed_at"]
    return round(total, 2)


def one_run(kind: str, p_range: list[int], args, spark, run_dir: Path, rep: int) -> dict:
    from lmstream_kit.live import LiveStream
    from lmstream_kit.tune import InputPartitions, ParallelismTuner

    low, high = p_range[0], p_range[-1]
    if kind.startswith("static-"):
        controller = InputPartitions(int(kind.split("-", 1)[1]))
    else:
        controller = ParallelismTuner(policy="ds2" if kind == "ds2" else "learned", partitions=low, low=low,
                                      high=high, cooldown=args.cooldown, cores=args.cores,
                                      history=args.history if kind == "learned" else None, seed=rep)
    stream = LiveStream(args.workload, policy="fixed", rate=args.rate, speedup=args.speedup,
                        duration_s=args.duration_s, trigger_s=args.trigger_s, read="executors", seed=rep,
                        run_dir=run_dir, spark=spark, controllers=(controller,))
    batches = max(3, round(args.duration_s / args.trigger_s))
    stream.start()
    try:
        stream.wait(batches=batches // 3, timeout=900)
        stream.set_param("rate_scale", args.step)
        stream.wait(batches=2 * batches // 3, timeout=900)
        stream.set_param("rate_scale", 1.0)
        stream.wait(until=lambda st: st.feed_finished(), timeout=900)
    finally:
        stream.stop()
    records = stream.records
    data = [r for r in records if r.get("rows")]
    parts = [r.get("input_partitions") for r in data if r.get("input_partitions") is not None]
    changes = sum(1 for r in records for c in r.get("changes") or [] if c.get("param") == "tuner.partitions")
    s = summarize(records)
    tuner_s = [r["tuner_s"] for r in records if r.get("tuner_s") is not None]
    return {"tuner": kind, "rep": rep, "batches": len(data), "reconfigurations": changes,
            "violation_s": violation_s(records), "within_bound": round(s.get("within_bound", float("nan")), 3),
            "max_latency_p95_s": round(s["max_latency_p95_s"], 3), "mean_partitions":
            round(statistics.mean(parts), 2) if parts else None, "final_partitions": parts[-1] if parts else None,
            "tuner_ms_per_batch": round(1000 * statistics.mean(tuner_s), 2) if tuner_s else None,
            "rows": s["rows"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="LR2S")
    ap.add_argument("--master", default="local[2]", help="local[N] or a cluster's spark://host:port")
    ap.add_argument("--cores", type=int, default=None, help="the cores the tasks share [default: from --master]")
    ap.add_argument("--parallelism", default="1-2", help="the range the tuners may use, and the static runs")
    ap.add_argument("--tuners", default="static,ds2,learned", help="static (one run per p), ds2, learned")
    ap.add_argument("--rate", type=float, default=8000, help="offered rows/s (simulated time)")
    ap.add_argument("--step", type=float, default=3.0, help="the rate's factor for the middle third")
    ap.add_argument("--duration-s", type=float, default=72.0, help="simulated seconds of traffic per run")
    ap.add_argument("--speedup", type=float, default=4.0)
    ap.add_argument("--trigger-s", type=float, default=4.0)
    ap.add_argument("--cooldown", type=int, default=2)
    ap.add_argument("--history", default="seed", help="the learned tuner's history store [default: the seed]")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    try:
        p_range = parse_range(args.parallelism)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kinds = []
    for t in (x.strip() for x in args.tuners.split(",") if x.strip()):
        if t == "static":
            kinds += [f"static-{p}" for p in p_range]
        elif t in ("ds2", "learned"):
            kinds.append(t)
        else:
            print(f"error: unknown tuner {t!r} (use static, ds2, learned)", file=sys.stderr)
            return 2
    if args.cores is None and args.master.startswith("local["):
        inner = args.master[6:-1]
        args.cores = None if inner == "*" else int(inner)

    from tqdm import tqdm

    from lmstream_kit.engine.session import build_session, spark_version

    spark = build_session(master=args.master, app_name="lmstream_kit-tuning-real", conf={})
    tmp = Path(tempfile.mkdtemp(prefix="tuning-real-"))
    runs = []
    try:
        with tqdm(total=len(kinds) * args.reps, unit="run", desc=f"tuning {args.workload} (real)") as bar:
            for rep in range(args.reps):
                for kind in kinds:
                    bar.set_postfix_str(f"{kind} rep {rep}")
                    runs.append(one_run(kind, p_range, args, spark, tmp / f"{kind}-{rep}", rep))
                    bar.update(1)
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    meta = {"simulated": False, "spark": spark_version(), "argv": sys.argv[1:], "workload": args.workload,
            "master": args.master,
            "parallelism": p_range, "rate": args.rate, "step": args.step, "duration_s": args.duration_s,
            "speedup": args.speedup, "trigger_s": args.trigger_s, "reps": args.reps}
    path = write_run_results(args.out, "tuning-real", meta, runs)
    host = json.loads(path.read_text())["meta"]["machine"]["host"]
    print(f"\nMEASURED on {host} ({args.master}), {args.workload}, partitions {p_range[0]}-{p_range[-1]}, "
          f"x{args.step:g} step")
    print(f"{'tuner':10} {'rep':>3} {'reconf':>6} {'viol s':>7} {'in bound':>8} {'p95 lat':>7} {'mean p':>6} "
          f"{'final p':>7} {'ms/batch':>8}")
    for r in runs:
        print(f"{r['tuner']:10} {r['rep']:3} {r['reconfigurations']:6} {r['violation_s']:7} {r['within_bound']:8} "
              f"{r['max_latency_p95_s']:7} {r['mean_partitions']!s:>6} {r['final_partitions']!s:>7} "
              f"{r['tuner_ms_per_batch']!s:>8}")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
