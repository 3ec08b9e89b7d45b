"""Flumina on Spark: throughput of fork/join plans against the sequential plan and the Spark idioms.

    .venv/bin/python benchmarks/flumina.py --out benchmarks/results
    .venv/bin/python benchmarks/flumina.py --parallelism 2,4,8 --master 'local[8]'   # a bigger machine

For each example (value barrier, fraud detection) and each barrier frequency (one synchronising
event per 10^3, 10^4 and 10^5 events) it writes one micro-batch of ``--events`` events to Parquet
(two files, so Spark reads it in two tasks) and runs it, side by side and ``--repeat`` times in
rotation, as

* ``flumina-p<N>``: the greedy plan for N workers, one Spark job per pass (``spark_workers``);
* ``flumina-p<N>-cached`` (with ``--cache``): the same, the routed events kept in Spark's memory
  after the first pass, so that later passes do not read and shuffle the batch again;
* ``sequential-plan``: the sequential plan through the same executor (one worker);
* ``coalesce(1)`` and ``global-key``: what a Spark user writes otherwise (``spark_sequential``).

``--work`` adds per-event work to every parallel update (``with_work``: rounds of integer arithmetic,
about 45 ns each here; a stand-in for real per-event work such as scoring with a model); the spec's
own updates (a sum, a comparison) cost well under a microsecond.  The first run of every runner is a
warm-up and is not counted.

Every run's outputs and final state are compared with the sequential run in one Python process
(``run_sequential``) and the differences counted.  Writes ``flumina-<host>-<date>.json`` (every run)
and ``.csv`` (the medians), and prints the table.  The synchronisation overhead per barrier is the
slope of a parallel run's time over its number of synchronising events (10^3 against 10^5), and the
driver's own share (replaying the syncs, pickling) per synchronising event.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmstream_kit.bench.outputs import machine_info  # noqa: E402
from lmstream_kit.flumina import EXAMPLES, greedy_plan, join_states, run_sequential, sequential_plan  # noqa: E402
from lmstream_kit.flumina.examples import with_work  # noqa: E402
from lmstream_kit.workloads.flumina import FLUMINA_EXAMPLES  # noqa: E402

BENCH_EXAMPLES = ("value_barrier", "fraud_detection")
from lmstream_kit.flumina.speculate import run_batch  # noqa: E402

def write_events(path: Path, events, payload, codec=None, files: int = 2) -> None:
    import pyarrow.parquet as pq

    from lmstream_kit.flumina.tables import events_table

    path.mkdir(parents=True, exist_ok=True)
    table = events_table(events, payload, codec=codec)
    step = -(-table.num_rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * step, step), path / f"part-{i}.parquet")


def differences(got_outputs, got_state, want_outputs, want_state) -> int:
    """Positions where the outputs differ, plus the length difference, plus 1 for a different state."""
    diff = sum(1 for a, b in zip(got_outputs, want_outputs) if a != b) + abs(len(got_outputs) - len(want_outputs))
    return diff + (0 if got_state == want_state else 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", default=",".join(BENCH_EXAMPLES))
    ap.add_argument("--events", type=int, default=1_000_000, help="events per micro-batch")
    ap.add_argument("--barriers", default="1000,10000,100000", help="events per synchronising event")
    ap.add_argument("--parallelism", default="2", help="worker counts for the fork/join plans")
    ap.add_argument("--work", default="0,100", help="rounds of extra work per parallel update (0: none)")
    ap.add_argument("--shards", type=int, default=0, help="input shards per example (default: max parallelism)")
    ap.add_argument("--cache", action="store_true",
                    help="also run each fork/join plan with the routed events cached between passes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from tqdm import tqdm

    from lmstream_kit.engine.flumina import spark_sequential, spark_workers
    from lmstream_kit.engine.session import build_session, spark_version

    examples = [e.strip() for e in args.examples.split(",") if e.strip()]
    for name in examples:
        if name not in FLUMINA_EXAMPLES:
            print(f"error: unknown example {name!r} (use {', '.join(FLUMINA_EXAMPLES)})", file=sys.stderr)
            return 2
    barriers = [int(b) for b in args.barriers.split(",")]
    ps = [int(p) for p in args.parallelism.split(",")]
    works = [int(w) for w in args.work.split(",")]
    shards = args.shards or max(ps)
    spark = build_session(master=args.master, app_name="flumina-bench")
    runs: list[dict] = []
    tmp = Path(tempfile.mkdtemp(prefix="flumina-bench-"))
    settings = [(name, every, work) for name in examples for every in barriers for work in works]
    bar = tqdm(total=len(settings) * (args.repeat + 1) * (len(ps) * (2 if args.cache else 1) + 3),
               desc="flumina bench", unit="run")
    us_per_event = {}
    for name in examples:
        sample = FLUMINA_EXAMPLES[name][0](100_000, shards, 10_000, args.seed + 1)
        for work in works:
            spec = with_work(EXAMPLES.get(name).spec(shards), work)
            t0 = time.perf_counter()
            run_sequential(spec, sample)
            us_per_event[(name, work)] = (time.perf_counter() - t0) / len(sample) * 1e6
    generated = None
    for name, every, work in settings:
        path = tmp / f"{name}-{every}"
        if generated != (name, every):
            bar.set_postfix_str(f"{name} 1/{every}: generating")
            generate, payload, codec = FLUMINA_EXAMPLES[name]
            events = generate(args.events, shards, every, args.seed)
            want_state, want_outputs = run_sequential(EXAMPLES.get(name).spec(shards), events)
            syncs = sum(1 for e in events if not e.tag[-1].isdigit())
            write_events(path, events, payload, codec)
            del events
            generated = (name, every)
        spec = with_work(EXAMPLES.get(name).spec(shards), work)
        plans = {f"flumina-p{p}": greedy_plan(spec, p) for p in ps}
        if args.cache:
            plans.update({f"flumina-p{p}-cached": plans[f"flumina-p{p}"] for p in ps})
        plans["sequential-plan"] = sequential_plan(spec)
        runners = [*plans, "coalesce(1)", "global-key"]
        for rep in range(-1, args.repeat):  # -1: the warm-up
            for runner in runners:
                bar.set_postfix_str(f"{name} 1/{every} work {work}: {runner}")
                df = spark.read.parquet(str(path))
                t0 = time.perf_counter()
                job_s = [0.0]
                passes = epochs = None
                if runner in plans:
                    plan = plans[runner]
                    on_spark = spark_workers(df, codec=codec, cache=runner.endswith("-cached"))

                    def timed(s, p, tasks, on_spark=on_spark):
                        t = time.perf_counter()
                        try:
                            return on_spark(s, p, tasks)
                        finally:
                            job_s[0] += time.perf_counter() - t

                    result = run_batch(spec, plan, map_workers=timed)
                    on_spark.release()
                    wall = time.perf_counter() - t0
                    state, outputs = join_states(spec, plan, result.states), [o for _, o in result.outputs]
                    passes, epochs = result.passes, result.epochs
                else:
                    idiom = "coalesce" if runner == "coalesce(1)" else "global_key"
                    state, outputs = spark_sequential(df, spec, idiom=idiom, codec=codec)
                    wall = time.perf_counter() - t0
                    job_s[0] = wall
                bar.update()
                if rep < 0:
                    continue
                runs.append({
                    "example": name, "barrier_every": every, "work": work,
                    "work_us_per_event": round(us_per_event[(name, work)], 3), "syncs": syncs, "events": args.events,
                    "runner": runner, "repeat": rep, "wall_s": wall, "events_per_s": args.events / wall,
                    "job_s": job_s[0], "driver_s": wall - job_s[0], "passes": passes, "epochs": epochs,
                    "differences": differences(outputs, state, want_outputs, want_state),
                })
    bar.close()

    summary = []
    for name, every, work in settings:
        rows = [r for r in runs if r["example"] == name and r["barrier_every"] == every and r["work"] == work]
        med = {}
        for runner in dict.fromkeys(r["runner"] for r in rows):
            mine = [r for r in rows if r["runner"] == runner]
            med[runner] = {
                "wall_s": statistics.median(r["wall_s"] for r in mine),
                "driver_s": statistics.median(r["driver_s"] for r in mine),
                "passes": mine[0]["passes"], "differences": max(r["differences"] for r in mine),
            }
        base = med["sequential-plan"]["wall_s"]
        for runner, m in med.items():
            summary.append({
                "example": name, "barrier_every": every, "work": work,
                "us_per_event_in_python": rows[0]["work_us_per_event"], "syncs": rows[0]["syncs"], "runner": runner,
                "median_wall_s": round(m["wall_s"], 3), "events_per_s": round(args.events / m["wall_s"]),
                "speedup_vs_sequential_plan": round(base / m["wall_s"], 3),
                "passes": m["passes"], "driver_s": round(m["driver_s"], 3),
                "driver_ms_per_sync": round(1000 * m["driver_s"] / max(1, rows[0]["syncs"]), 3),
                "differences": m["differences"],
            })
    overhead = []
    for name in examples:
        for p, work in ((p, w) for p in ps for w in works):
            runner = f"flumina-p{p}"
            pts = {s["barrier_every"]: s for s in summary
                   if s["example"] == name and s["runner"] == runner and s["work"] == work}
            if len(pts) >= 2:
                lo, hi = pts[max(pts)], pts[min(pts)]
                if hi["syncs"] > lo["syncs"]:
                    overhead.append({"example": name, "runner": runner, "work": work,
                                     "ms_per_sync": round(1000 * (hi["median_wall_s"] - lo["median_wall_s"])
                                                          / (hi["syncs"] - lo["syncs"]), 3)})

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    host = socket.gethostname().split(".")[0] or "host"
    meta = {"machine": machine_info(), "python": platform.python_version(), "spark": spark_version(),
            "master": args.master, "events": args.events, "shards": shards, "repeat": args.repeat,
            "argv": sys.argv[1:], "when": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    (out / f"flumina-{host}-{stamp}.json").write_text(json.dumps(
        {"meta": meta, "summary": summary, "sync_overhead": overhead, "runs": runs}, indent=1))
    with open(out / f"flumina-{host}-{stamp}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(summary[0]))
        writer.writeheader()
        writer.writerows(summary)

    print(f"\n{args.events:,} events per micro-batch, {args.master}, Spark {meta['spark']}, "
          f"{meta['machine']['cores']} cores; medians of {args.repeat}")
    print(f"{'example':16} {'barrier':>8} {'us/ev':>6} {'runner':16} {'wall s':>7} {'events/s':>10} {'x seq':>6} "
          f"{'passes':>6} {'diffs':>5}")
    for s in summary:
        print(f"{s['example']:16} {'1/' + str(s['barrier_every']):>8} {s['us_per_event_in_python']:6.2f} "
              f"{s['runner']:16} {s['median_wall_s']:7.2f} "
              f"{s['events_per_s']:10,} {s['speedup_vs_sequential_plan']:6.2f} {s['passes'] or '':>6} "
              f"{s['differences']:5}")
    for o in overhead:
        print(f"sync overhead {o['example']} {o['runner']} work {o['work']}: {o['ms_per_sync']} ms per synchronising event")
    print(f"results: {out / f'flumina-{host}-{stamp}.json'}")
    spark.stop()
    os.system(f"rm -rf {tmp}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
