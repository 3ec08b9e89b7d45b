"""Measure the kit's per-micro-batch overhead and Spark's own per-batch floor.

    .venv/bin/python benchmarks/overhead.py --seconds 60 --out benchmarks/results
    .venv/bin/python benchmarks/overhead.py --decide-only      # 1 and 1b, no Spark, about 20 s

Writes ``overhead-<host>-<date>.json`` and prints a table.  What it measures:

1. ``decide()`` of the AdmissionController for 10 and 100 pending datasets (µs);
1b. ``decide()`` as a stream's gate calls it: every millisecond, beside a busy Python thread, with a
   learned heap forecast, ``heap_admit`` off and on (mean, median and p99 µs);
2. the channel round trip between two processes on 127.0.0.1, the way Spark's
   source runner reaches the driver (µs, p50 and p99);
3. a real LR2S stream under ``lmstream`` on embedded Spark: per batch, the
   critical-path overhead (the admitting decision plus one round trip) as a
   share of the batch's processing time, and all decisions made while the batch
   was buffering (every poll) as a share of the run's wall time;
4. Spark's floor: the processing time of near-empty batches (PASSTHROUGH, asap,
   noop output), i.e. what a micro-batch over the lmstream source costs on this
   machine regardless of data, and the same for Spark alone (the built-in
   ``rate`` source into a noop foreachBatch).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmstream_kit.controller import AdmissionController, BatchObservation  # noqa: E402
from lmstream_kit.engine.channel import LATEST, ChannelClient, ChannelServer  # noqa: E402


def pct(values, q):
    xs = sorted(values)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def bench_decide(n_pending: int, repeat: int = 20000) -> dict:
    ctl = AdmissionController(slide_s=10.0)
    for i in range(20):
        ctl.observe(BatchObservation(rows=1000 * (i + 1), nbytes=60_000 * (i + 1), processing_s=0.1 + 0.01 * i, max_latency_s=5.0))
    now = time.time()
    pending = [SimpleNamespace(arrival=now - i, rows=1000, nbytes=60_000) for i in range(n_pending)]
    t0 = time.perf_counter()
    for _ in range(repeat):
        ctl.decide(now, pending)
    return {"n_pending": n_pending, "decide_us": (time.perf_counter() - t0) / repeat * 1e6}


def bench_decide_beside_a_thread(heap_admit: bool, repeat: int = 3000) -> dict:
    """``decide()`` as the gate calls it in a stream: one poll every millisecond, while another Python
    thread of the process runs (in a stream, the channel's server, the progress listener, the
    optimizer), with a heap forecast learned from 30 batches' progress (what ``heap_admit`` asks at
    each poll).  Wall µs per call: mean, median and 99th percentile."""
    import threading

    mb = 2**20
    ctl = AdmissionController(slide_s=5.0, poll_interval_s=0.05, heap_admit=heap_admit)
    for i in range(30):
        ctl.observe(BatchObservation(rows=6000, nbytes=400_000, processing_s=0.3, max_latency_s=4.5, batch_id=i))
        ctl.on_progress({"batchId": i, "numInputRows": 6000, "eden_used_bytes": (100 + i) * mb,
                         "eden_committed_bytes": 245 * mb, "old_used_bytes": (400 + i) * mb,
                         "old_committed_bytes": 2700 * mb, "survivor_used_bytes": mb,
                         "survivor_committed_bytes": 10 * mb, "jvm_gc_count": 1, "jvm_full_gc_count": 0,
                         "jvm_gc_ms": 10})
    now = time.time()
    pending = [SimpleNamespace(arrival=now - 0.01 * i, rows=20, nbytes=1500) for i in range(300)]
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(200))

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    times = []
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            ctl.decide(now, pending)
            times.append(time.perf_counter() - t0)
            time.sleep(0.001)
    finally:
        stop.set()
        thread.join()
    return {"heap_admit": heap_admit, "n_pending": len(pending), "repeat": repeat,
            "mean_us": statistics.fmean(times) * 1e6, "p50_us": pct(times, 0.5) * 1e6,
            "p99_us": pct(times, 0.99) * 1e6}


class _Echo:
    def on_initial(self):
        return 0

    def on_latest(self, start):
        return 0 if start is None else start

    def on_planned(self, start, end, split=True):
        return None

    def on_commit(self, end):
        return None


def _client_proc(port, key_file, n, q):
    client = ChannelClient("127.0.0.1", port, key_file)
    client.call(LATEST, 0)  # connect
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.call(LATEST, 0)
        times.append(time.perf_counter() - t0)
    client.close()
    q.put(times)


def bench_channel(n: int = 5000) -> dict:
    tmp = Path(tempfile.mkdtemp())
    server = ChannelServer(_Echo(), key_file=tmp / "key")
    q = mp.get_context("spawn").Queue()
    p = mp.get_context("spawn").Process(target=_client_proc, args=(server.port, str(server.key_file), n, q))
    p.start()
    times = q.get(timeout=120)
    p.join()
    server.close()
    return {
        "round_trips": n,
        "rtt_p50_us": pct(times, 0.5) * 1e6,
        "rtt_p99_us": pct(times, 0.99) * 1e6,
        "rtt_mean_us": statistics.fmean(times) * 1e6,
    }


def bench_stream(seconds: float, speedup: float, run_root: Path, rtt_s: float) -> dict:
    from lmstream_kit.live import LiveStream

    run_dir = run_root / "lr2s-lmstream"
    t0 = time.time()
    # read="auto": the source runner reads batches (local master)
    s = LiveStream("LR2S", policy="lmstream", traffic="random", rate=1000, speedup=speedup,
                   duration_s=seconds * speedup, run_dir=run_dir, seed=1)
    s.start()
    try:
        s.wait(until=lambda st: st.feed_finished(), timeout=seconds * 3 + 120)
    finally:
        s.stop()
    wall = time.time() - t0
    # skip JIT warm-up batches and the final drain (admitted by stop(), not the controller)
    recs = [r for r in s.records if r["rows"] > 0 and r["decision_reason"] != "drain"][3:]
    crit = []
    for r in recs:
        per_poll = r["decision_s"] / max(r["polls"], 1)
        crit.append((per_poll + rtt_s) / r["processing_s"])
    total_decide = sum(r["decision_s"] for r in s.records)
    total_polls = sum(r["polls"] for r in s.records)
    return {
        "batches": len(recs),
        "processing_s_median": statistics.median(r["processing_s"] for r in recs),
        "rows_per_batch_median": statistics.median(r["rows"] for r in recs),
        "critical_overhead_share_median": statistics.median(crit),
        "critical_overhead_share_max": max(crit),
        "polls": total_polls,
        "all_polls_share_of_wall": (total_decide + total_polls * rtt_s) / wall,
        "bound_s": 10 / speedup,
        "within_bound_after_warmup": sum(r["max_latency_s"] <= 10 / speedup for r in recs) / len(recs),
        "max_latency_s_median": statistics.median(r["max_latency_s"] for r in recs),
        "max_latency_s_max": max(r["max_latency_s"] for r in recs),
        "run_dir": str(run_dir),
        "read": s.read_mode,
    }


def bench_floor(seconds: float, run_root: Path, read: str) -> dict:
    from lmstream_kit.live import LiveStream

    run_dir = run_root / f"floor-{read}"
    s = LiveStream("PASSTHROUGH", policy="asap", traffic="constant", rate=10, speedup=20,
                   duration_s=seconds * 20, run_dir=run_dir, output="noop", read=read)
    s.start()
    try:
        s.wait(until=lambda st: st.feed_finished(), timeout=seconds * 3 + 120)
    finally:
        s.stop()
    df = s.metrics()
    df = df[df["rows"] > 0].iloc[5:]
    out = {
        "read": read,
        "batches": int(len(df)),
        "processing_s_median": float(df["processing_s"].median()),
        "foreach_s_median": float(df["foreach_s"].median()),
    }
    for col in ("spark_triggerExecution_ms", "spark_addBatch_ms", "spark_walCommit_ms", "spark_commitOffsets_ms", "spark_queryPlanning_ms"):
        if col in df:
            out[col.replace("spark_", "") + "_median"] = float(df[col].median())
    return out


def bench_builtin_floor(spark, seconds: float) -> dict:
    """Spark alone: the built-in rate source into a foreachBatch noop, 1 s trigger."""
    import shutil

    progress = []
    chk = Path(tempfile.mkdtemp(prefix="lmstream-floor-chk-"))
    q = (
        spark.readStream.format("rate").option("rowsPerSecond", 10).load()
        .writeStream.foreachBatch(lambda df, i: df.write.format("noop").mode("overwrite").save())
        .option("checkpointLocation", str(chk)).trigger(processingTime="1 second").start()
    )
    deadline = time.time() + seconds
    while time.time() < deadline:
        time.sleep(0.5)
    progress = [p for p in q.recentProgress if p.numInputRows > 0][3:]
    q.stop()
    shutil.rmtree(chk, ignore_errors=True)
    def med(key):
        vals = [p.durationMs.get(key) for p in progress if p.durationMs.get(key) is not None]
        return statistics.median(vals) if vals else None
    return {"batches": len(progress), "triggerExecution_ms_median": med("triggerExecution"),
            "addBatch_ms_median": med("addBatch"), "walCommit_ms_median": med("walCommit"),
            "commitOffsets_ms_median": med("commitOffsets")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60, help="wall seconds of each stream")
    ap.add_argument("--speedup", type=float, default=2.0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--decide-only", action="store_true",
                    help="only decide(), alone and beside a busy thread with heap_admit off and on (no Spark)")
    args = ap.parse_args()
    machine = {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
               "platform": platform.platform()}
    if args.decide_only:
        result = {
            "machine": machine,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "decide": [bench_decide(10), bench_decide(100)],
            # in turn, twice each: the machine's noise shows as the spread of a pair
            "decide_beside_a_thread": [bench_decide_beside_a_thread(heap) for heap in (False, True, False, True)],
        }
        for row in result["decide_beside_a_thread"]:
            print(f"heap_admit={row['heap_admit']!s:5}  mean {row['mean_us']:6.0f} us  median {row['p50_us']:5.0f} us"
                  f"  p99 {row['p99_us']:6.0f} us")
        _write(result, args.out, "overhead-decide")
        return
    import pyspark

    result = {
        "machine": {**machine, "pyspark": pyspark.__version__},
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "decide": [bench_decide(10), bench_decide(100)],
        "channel": bench_channel(),
    }
    print(json.dumps(result["decide"]), json.dumps(result["channel"]), flush=True)
    root = Path(tempfile.mkdtemp(prefix="lmstream-overhead-"))
    result["stream"] = bench_stream(args.seconds, args.speedup, root, result["channel"]["rtt_p50_us"] / 1e6)
    print(json.dumps(result["stream"]), flush=True)
    result["spark_floor"] = [bench_floor(min(args.seconds, 30), root, read) for read in ("driver", "executors")]
    print(json.dumps(result["spark_floor"]), flush=True)
    from lmstream_kit.engine.session import build_session

    spark = build_session()
    result["spark_builtin_floor"] = bench_builtin_floor(spark, min(args.seconds, 30))
    spark.stop()
    print(json.dumps(result["spark_builtin_floor"]), flush=True)
    _write(result, args.out, "overhead")


def _write(result: dict, out: Path, stem: str) -> None:
    """``result`` as ``<stem>-<host>-<time>.json`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}-{platform.node()}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
