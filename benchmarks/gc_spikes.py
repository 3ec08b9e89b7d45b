"""Are a query's processing spikes the driver JVM's garbage collection?  Per batch, side by side.

    .venv/bin/python benchmarks/gc_spikes.py                          # LR1S, lmstream, 4g, serial vs parallel
    .venv/bin/python benchmarks/gc_spikes.py --heaps 1g,4g --collectors serial,parallel,g1
    .venv/bin/python benchmarks/gc_spikes.py --rate 2000 --collectors parallel,parallel-fixed   # -Xms = -Xmx
    .venv/bin/python benchmarks/gc_spikes.py --workload CM1S --heaps 1g --reps 1
    .venv/bin/python benchmarks/gc_spikes.py --rate 2000 --collectors parallel-fixed,g1-fixed --state-stores default,rocksdb
    .venv/bin/python benchmarks/gc_spikes.py --rate 2000 --duration 480 --collectors parallel-fixed --gc-margins off,on \
        --controller quantile=0.97 --controller min_margin_s=0.5       # the controller's gc_margin, side by side

Issue 15 found LR1S's batches about twice as slow as usual once every 7 or so, in Spark's
``addBatch`` and ``queryPlanning``, and no model of the batch's bytes, windows or state predicted
them.  The kit's driver then ran Java's serial collector, which stops every thread while it runs;
in local mode the driver runs the tasks too.  Each batch's Spark progress carries the driver JVM's
collection since the batch before (``jvm_gc_ms``) and its heap after it.  This script's runs
showed the spikes to be that collector's, and the kit's driver now runs the parallel one
(:data:`lmstream_kit.engine.session.DRIVER_COLLECTOR`).

Each run is a fresh process (the heap and the collector are fixed when the JVM starts): a
discarded warm-up, then ``--duration`` simulated seconds of the workload under ``--policy``.
Every heap with every collector (``--collectors``: serial, parallel, the kit's since this
script, and G1) and every state store (``--state-stores``: Spark's default HDFS-backed one, which
keeps the state's recent versions in the heap, or RocksDB, which keeps it off the heap) and every
setting of the lmstream controller's ``gc_margin`` (``--gc-margins``: off, on; other controller
parameters with ``--controller KEY=VALUE``, as the bench takes them) runs in turn, order
alternating, ``--reps`` times.  A batch is a *spike* where its processing time exceeds
``--spike`` times the run's median.  Per run it writes:

* ``batches``, ``spikes`` and the median processing time;
* ``gc_ms_spike`` / ``gc_ms_other``: the mean collection time of spike batches and of the others;
* ``spikes_with_gc``: the share of spikes during which the JVM collected for at least half of the
  spike's excess over the median;
* ``excess_explained``: the spikes' collection time over their excess processing time (1.0: the
  collector accounts for all of it);
* ``corr``: the correlation of each batch's processing time with its collection time;
* ``full_gcs``: collections of the old generation (the serial collector's "MarkSweepCompact");
* ``within_bound``: the share of batches whose largest latency met the query's bound;
* ``cpu_s_per_mrows``: CPU seconds of the measured run (driver JVM with its collector's threads,
  its Python workers, this process) per million rows, as the bench counts them.

On LR1S at 2,000 rows/s (2026-11-28, ``gc-spikes-vm-20261128-160902``) RocksDB is no remedy: its
batches took a median 6.4-6.5 s against 0.95-1.03 s, none met the bound, at about twice the CPU
per row (862-934 against 394-472 s per million rows).

Every number is **measured** on the machine named in the result file
(``gc-spikes-<host>-<date>.json`` and ``.csv``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmstream_kit.bench.outputs import write_run_results  # noqa: E402
from lmstream_kit.engine.state import STATE_STORES  # noqa: E402


#: the collectors a run may name, as the JVM options that select each ("{heap}": the run's heap).  A
#: "-fixed" one starts the heap at its maximum (-Xms): a heap that grows from its small initial size
#: collects all of it each time its old generation's committed part fills, and the kit's probes saw
#: two or three such full collections a minute, most of lmstream's late batches
COLLECTORS = {"serial": "-XX:+UseSerialGC", "parallel": "-XX:+UseParallelGC", "g1": "-XX:+UseG1GC",
              "parallel-fixed": "-XX:+UseParallelGC -Xms{heap}", "g1-fixed": "-XX:+UseG1GC -Xms{heap}"}
#: the settings of the lmstream controller's gc_margin a run may name
GC_MARGINS = ("off", "on")


def one_run(args) -> dict:
    """One heap setting in this process: warm-up, the measured run, its per-batch numbers."""
    from lmstream_kit.engine.procs import driver_cpu_meter
    from lmstream_kit.engine.session import build_session
    from lmstream_kit.live import LiveStream
    from lmstream_kit.metrics import load_metrics

    conf = {"spark.driver.memory": args.one,
            "spark.driver.extraJavaOptions": COLLECTORS[args.collector].format(heap=args.one)}
    spark = build_session(master="local[2]", app_name="lmstream_kit-gc-spikes", conf=conf)
    root = Path(tempfile.mkdtemp(prefix="gc-spikes-"))
    try:
        def stream(name, policy, duration):
            controller = {**json.loads(args.controller_json), "gc_margin": args.gc_margin == "on"}
            return LiveStream(args.workload, policy=policy, traffic="constant", rate=args.rate, speedup=args.speedup,
                              seed=args.seed, duration_s=duration, run_dir=root / name, spark=spark, output="noop",
                              state_store=args.state_store, controller=controller if policy == "lmstream" else None)

        if args.warmup > 0:
            warm = stream("warmup", "asap", args.warmup).start()
            try:
                warm.wait(until=lambda s: s.feed_finished(), timeout=600)
            finally:
                warm.stop(drain=False)
        beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
        full_before = {str(b.getName()): int(b.getCollectionCount()) for b in beans}
        meter = driver_cpu_meter(spark)
        meter.start()
        s = stream("run", args.policy, args.duration).start()
        try:
            s.wait(until=lambda st: st.feed_finished(), timeout=3 * args.duration / args.speedup + 300)
        finally:
            s.stop(drain=True, timeout=300)
        cpu = meter.stop()
        beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
        collections = {str(b.getName()): int(b.getCollectionCount()) - full_before.get(str(b.getName()), 0)
                       for b in beans}
        df = load_metrics(root / "run")
    finally:
        spark.stop()
    data = df[df["rows"] > 0]
    cols = ["batch_id", "rows", "processing_s", "max_latency_s", "bound_s", "spark_jvm_gc_ms", "spark_jvm_gc_count",
            "spark_jvm_full_gc_count", "spark_heap_used_bytes", "spark_addBatch_ms", "spark_queryPlanning_ms",
            "spark_triggerExecution_ms", "predicted_s", "margin_s", "decision_reason"]
    batches = data[[c for c in cols if c in data.columns]].to_dict("records")
    return {"collections": collections, "batches": batches, "cpu_s": cpu.total_s, "rows": int(data["rows"].sum())}


def summarize(heap: str, collector: str, rep: int, result: dict, spike: float, state_store: str = "default",
              gc_margin: str = "off") -> dict:
    batches = [b for b in result["batches"] if b.get("spark_jvm_gc_ms") == b.get("spark_jvm_gc_ms")]  # not NaN
    proc = [float(b["processing_s"]) for b in batches]
    gc = [float(b["spark_jvm_gc_ms"]) / 1000 for b in batches]
    med = statistics.median(proc) if proc else float("nan")
    spikes = [(p, g) for p, g in zip(proc, gc) if p > spike * med]
    others = [g for p, g in zip(proc, gc) if p <= spike * med]
    excess = sum(p - med for p, _ in spikes)
    def is_full(name: str) -> bool:  # serial: MarkSweepCompact; parallel: PS MarkSweep; G1: G1 Old Generation
        return "MarkSweep" in name or "Old" in name

    full = sum(n for name, n in result["collections"].items() if is_full(name))
    young = sum(n for name, n in result["collections"].items() if not is_full(name) and "Concurrent" not in name)
    corr = statistics.correlation(proc, gc) if len(proc) > 2 and len(set(gc)) > 1 else float("nan")
    return {
        "heap": heap, "collector": collector, "state_store": state_store, "gc_margin": gc_margin, "rep": rep,
        "batches": len(proc),
        "spikes": len(spikes),
        "median_processing_s": round(med, 3),
        "gc_ms_spike": round(1000 * statistics.fmean([g for _, g in spikes]), 1) if spikes else None,
        "gc_ms_other": round(1000 * statistics.fmean(others), 1) if others else None,
        "spikes_with_gc": round(sum(1 for p, g in spikes if g >= 0.5 * (p - med)) / len(spikes), 3) if spikes else None,
        "excess_explained": round(sum(g for _, g in spikes) / excess, 3) if excess > 0 else None,
        "corr": round(corr, 3), "young_gcs": young, "full_gcs": full,
        "gc_s_total": round(sum(gc), 2), "processing_s_total": round(sum(proc), 2),
        "within_bound": _within_bound(result["batches"]),
        "cpu_s_per_mrows": _per_mrows(result.get("cpu_s"), result.get("rows")),
    }


def _per_mrows(cpu_s, rows) -> float | None:
    """CPU seconds (driver JVM, its Python workers and this process) per million rows (None: unmeasured).

    >>> _per_mrows(12.5, 250_000), _per_mrows(float("nan"), 10), _per_mrows(None, 10), _per_mrows(3.0, 0)
    (50.0, None, None, None)
    """
    if cpu_s is None or rows is None or not rows > 0 or math.isnan(cpu_s):
        return None
    return round(cpu_s / rows * 1e6, 1)


def _within_bound(batches: list) -> float | None:
    """The share of batches whose largest latency met their bound (None: a run that recorded neither)."""
    judged = [b for b in batches if isinstance(b.get("max_latency_s"), (int, float))
              and isinstance(b.get("bound_s"), (int, float)) and b["bound_s"] == b["bound_s"]]
    return round(sum(b["max_latency_s"] <= b["bound_s"] for b in judged) / len(judged), 3) if judged else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="LR1S")
    ap.add_argument("--policy", default="lmstream")
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--speedup", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=120.0, help="simulated seconds of each measured run")
    ap.add_argument("--warmup", type=float, default=20.0, help="simulated seconds of a discarded run first")
    ap.add_argument("--heaps", default="4g", help="driver heaps (spark.driver.memory), comma-separated")
    ap.add_argument("--collectors", default="serial,parallel", help=f"driver collectors: {', '.join(COLLECTORS)}")
    ap.add_argument("--collector", default="serial", choices=sorted(COLLECTORS), help=argparse.SUPPRESS)
    ap.add_argument("--state-stores", default="default",
                    help="state stores of the workload's query, comma-separated: default (Spark's HDFS-backed, "
                         "in the heap) or rocksdb (off the heap)")
    ap.add_argument("--state-store", default="default", choices=STATE_STORES, help=argparse.SUPPRESS)
    ap.add_argument("--gc-margins", default="off",
                    help="the lmstream controller's gc_margin, comma-separated: off, on")
    ap.add_argument("--gc-margin", default="off", choices=GC_MARGINS, help=argparse.SUPPRESS)
    ap.add_argument("--controller", action="append", default=[], metavar="KEY=VALUE",
                    help="a parameter of the lmstream controller, as bench --controller takes it (repeatable)")
    ap.add_argument("--controller-json", default="{}", help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--spike", type=float, default=1.5, help="a spike: processing time above this times the median")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: one run in this process, JSON out
    args = ap.parse_args(argv)
    if args.one is not None:
        print("RESULT " + json.dumps(one_run(args), default=float), flush=True)
        return 0

    heaps = [h.strip() for h in args.heaps.split(",") if h.strip()]
    collectors = [c.strip() for c in args.collectors.split(",") if c.strip()]
    unknown = [c for c in collectors if c not in COLLECTORS]
    if unknown:
        print(f"error: unknown collector {unknown[0]!r}; known: {', '.join(COLLECTORS)}", file=sys.stderr)
        return 2
    stores = [x.strip() for x in args.state_stores.split(",") if x.strip()]
    bad = [x for x in stores if x not in STATE_STORES]
    if bad:
        print(f"error: unknown state store {bad[0]!r}; known: {', '.join(STATE_STORES)}", file=sys.stderr)
        return 2
    margins = [x.strip() for x in args.gc_margins.split(",") if x.strip()]
    bad = [x for x in margins if x not in GC_MARGINS]
    if bad:
        print(f"error: unknown gc margin {bad[0]!r}; known: {', '.join(GC_MARGINS)}", file=sys.stderr)
        return 2
    from lmstream_kit.bench.config import check_controller_params
    from lmstream_kit.cli import _controller_params
    from lmstream_kit.exceptions import KitError

    try:
        controller = check_controller_params(_controller_params(args.controller))
    except KitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    configs = [(h, c, st, g) for h in heaps for c in collectors for st in stores for g in margins]
    runs, every = [], []
    total = args.reps * len(configs)
    for rep in range(args.reps):
        for heap, collector, store, margin in (configs if rep % 2 == 0 else configs[::-1]):  # in turn, alternating
            print(f"[{len(runs) + 1}/{total}] {args.workload} {args.policy} heap {heap} {collector} state {store} "
                  f"gc_margin {margin} rep {rep} ...", flush=True)
            started = time.time()
            cmd = [sys.executable, __file__, "--one", heap, "--collector", collector, "--workload", args.workload,
                   "--policy", args.policy, "--rate", str(args.rate), "--speedup", str(args.speedup),
                   "--duration", str(args.duration), "--warmup", str(args.warmup), "--seed", str(args.seed),
                   "--state-store", store, "--gc-margin", margin, "--controller-json", json.dumps(controller)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                print(proc.stderr[-3000:], file=sys.stderr)
                print(f"error: the run with heap {heap} failed (exit {proc.returncode})", file=sys.stderr)
                return 1
            result = json.loads(line[len("RESULT "):])
            row = summarize(heap, collector, rep, result, args.spike, store, margin)
            row["wall_s"] = round(time.time() - started, 1)
            runs.append(row)
            every += [{"heap": heap, "collector": collector, "state_store": store, "gc_margin": margin, "rep": rep, **b}
                      for b in result["batches"]]
            print(f"    {row['batches']} batches, {row['spikes']} spikes (median {row['median_processing_s']} s): "
                  f"GC {row['gc_ms_spike']} ms in spikes vs {row['gc_ms_other']} ms in others, "
                  f"{row['spikes_with_gc']} of spikes with GC, excess explained {row['excess_explained']}, "
                  f"corr {row['corr']}, young {row['young_gcs']} / full {row['full_gcs']} collections, "
                  f"{row['within_bound']} within the bound, {row['cpu_s_per_mrows']} CPU s per million rows", flush=True)
    meta = {"workload": args.workload, "policy": args.policy, "rate": args.rate, "speedup": args.speedup,
            "duration_s": args.duration, "spike": args.spike, "reps": args.reps, "warmup_s": args.warmup,
            "controller": controller}
    path = write_run_results(args.out, "gc-spikes", meta, runs)
    batches_path = path.with_name(path.stem + "-batches.csv")
    import csv

    with open(batches_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for b in every for k in b)))
        writer.writeheader()
        writer.writerows(every)
    print(f"results: {path} and {batches_path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
