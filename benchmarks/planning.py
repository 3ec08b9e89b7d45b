"""Device-mapping costs per micro-batch: planning with and without the DAG cache, and Table IV's rows.

    .venv/bin/python benchmarks/planning.py --seconds 60 --out benchmarks/results

For each query, two ``lmstream`` streams run back to back on one SparkSession
with the same seed (advisory device mode, the online optimizer on): one caches
the operator DAG per query shape (the default), one extracts it from Spark's
plan every batch.  Per data batch it records

* ``planning_s``: reading the DAG of the micro-batch from Spark's executed plan
  (py4j), 0 on a cache hit;
* ``mapping_s``: planning plus DeviceMapper.map (Algorithm 2) plus applying the
  plan;
* ``optimizer_s``: time the batch waited for the inflection-point optimizer;
* ``decision_s``: the admission decisions.

It writes ``planning-<host>-<date>.json`` with per-query means and Table IV's
shares (buffering, decision, device mapping, processing, blocked on optimizer)
of the cached run, and prints a table.  It also times ``DeviceMapper.map`` on
each query's real DAG in a tight loop, and the optimizer's background fit.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmstream_kit.bench import machine_info  # noqa: E402
from lmstream_kit.live import LiveStream  # noqa: E402
from lmstream_kit.mapper import DeviceMapper  # noqa: E402
from lmstream_kit.report import TIME_COMPONENTS, time_shares  # noqa: E402

QUERIES = ("LR1S", "LR1T", "LR2S", "CM1S", "CM1T", "CM2S")


def run_stream(spark, query: str, *, cache: bool, seconds: float, speedup: float, rate: float, seed: int,
               root: Path):
    stream = LiveStream(query, policy="lmstream", traffic="random", rate=rate, speedup=speedup, seed=seed,
                        duration_s=seconds, run_dir=root / f"{query}-{'cache' if cache else 'nocache'}",
                        spark=spark, output="noop", device_mode="advisory", plan_cache=cache)
    stream.start()
    try:
        stream.wait(until=lambda s: s.feed_finished(), timeout=seconds / speedup * 4 + 120)
    finally:
        stream.stop(drain=True)
    data = [r for r in stream.records if r["rows"] > 0]
    opt = stream.optimizer.snapshot() if stream.optimizer is not None else {}
    return data, stream, opt


def mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else float("nan")


def summarize(data: list[dict]) -> dict:
    # Table IV's shares, computed as the bench report computes them
    frame = pd.DataFrame([{"query": "q", "policy": "lmstream",
                           **{k: r.get(k) for k in TIME_COMPONENTS}} for r in data])
    table = time_shares(frame)
    row = table.iloc[0] if len(table) else None
    shares = {label: float(row[label]) for label in TIME_COMPONENTS.values()} if row is not None else {}
    return {
        "batches": len(data),
        "rows": sum(r["rows"] for r in data),
        "planning_ms_mean": 1e3 * mean([r.get("planning_s") for r in data]),
        "planning_ms_first": 1e3 * (data[0].get("planning_s") or 0.0) if data else float("nan"),
        "mapping_ms_mean": 1e3 * mean([r.get("mapping_s") for r in data]),
        "optimizer_ms_mean": 1e3 * mean([r.get("optimizer_s") for r in data]),
        "processing_ms_mean": 1e3 * mean([r.get("processing_s") for r in data]),
        "cache_hits": sum(1 for r in data if r.get("plan_cache") == "hit"),
        "shares_pct": shares,
        "overhead_pct": float(row["overhead"]) if row is not None else float("nan"),
        "inflection_points": sorted({round(r["inflection_point"]) for r in data if r.get("inflection_point")})[:5],
    }


def map_loop(dag, repeat: int = 2000) -> float:
    mapper = DeviceMapper()
    t0 = time.perf_counter()
    for i in range(repeat):
        mapper.map(dag, partition_bytes=10_000 + 100 * i)
    return (time.perf_counter() - t0) / repeat * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--seconds", type=float, default=60.0, help="simulated seconds of traffic per stream")
    ap.add_argument("--speedup", type=float, default=2.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args()

    from lmstream_kit.engine.plan import streaming_plan_dag  # noqa: F401  (import check before Spark starts)
    from lmstream_kit.engine.session import build_session, spark_version
    from lmstream_kit.record import plan_of

    spark = build_session(master="local[2]", app_name="lmstream_kit-planning-bench")
    results = {}
    try:
        with tempfile.TemporaryDirectory(prefix="lmstream-planning-") as tmp:
            for i, query in enumerate(q.strip() for q in args.queries.split(",")):
                arms = (True, False) if i % 2 == 0 else (False, True)  # alternate the order
                per = {}
                for cache in arms:
                    print(f"{query}: cache={'on' if cache else 'off'} ...", file=sys.stderr, flush=True)
                    data, stream, opt = run_stream(spark, query, cache=cache, seconds=args.seconds,
                                                   speedup=args.speedup, rate=args.rate, seed=args.seed,
                                                   root=Path(tmp))
                    per["cache" if cache else "nocache"] = summarize(data)
                    if cache:
                        plan = next((plan_of(r) for r in data if r.get("device_plan")), None)
                        per["operators"] = len(plan["entries"]) if plan else 0
                        per["optimizer"] = {k: opt.get(k) for k in (
                            "fits_requested", "fits_run", "fits_skipped", "fits_coalesced", "skip_reasons",
                            "blocked_s_total", "inflection_point") if k in opt}
                        cached = stream.plan_cache.peek(("spark", query))
                        per["map_us"] = map_loop(cached) if cached is not None else float("nan")
                results[query] = per
    finally:
        spark.stop()

    info = {
        "benchmark": "planning",
        "args": vars(args) | {"out": str(args.out)},
        "machine": machine_info(),
        "spark_version": spark_version(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"planning-{platform.node() or 'host'}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(info, indent=2, default=float))

    print(f"{'query':6} {'ops':>4} {'plan ms (no cache)':>19} {'plan ms (cache)':>16} {'map us':>8} "
          f"{'mapping %':>10} {'optimizer %':>12} {'overhead %':>11}")
    for query, per in results.items():
        c, n = per["cache"], per["nocache"]
        print(f"{query:6} {per.get('operators', 0):>4} {n['planning_ms_mean']:>19.2f} {c['planning_ms_mean']:>16.3f} "
              f"{per.get('map_us', float('nan')):>8.1f} {c['shares_pct'].get('device mapping', float('nan')):>10.3f} "
              f"{c['shares_pct'].get('blocked on optimizer', float('nan')):>12.4f} {c['overhead_pct']:>11.3f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
