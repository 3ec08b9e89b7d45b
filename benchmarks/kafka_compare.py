"""Spark's own Kafka source against the kit's ``lmstream`` source, on one topic's traffic, side by side.

    .venv/bin/python benchmarks/kafka_compare.py                      # this VM: 3 configurations, 2 rounds
    .venv/bin/python benchmarks/kafka_compare.py --rate 2000 --rounds 3

One broker (the kit's, KRaft) and one Spark session.  Each run gets a fresh topic that the kit's
generator writes in real time (the same seeded traffic every run: ``--traffic`` at ``--rate`` rows
per simulated second for ``--duration`` simulated seconds, ``--speedup``), while one consumer
reads it with the PASSTHROUGH query (JSON values decoded to Linear Road's columns) into Spark's
noop sink:

* ``spark-fixed``: Spark's Kafka source with the paper's fixed trigger (``--trigger`` simulated s);
* ``spark-maxoffsets``: Spark's Kafka source as fast as it can go (``processingTime=0``), each batch
  capped by ``maxOffsetsPerTrigger`` at one slide's worth of rows at the offered rate;
* ``kit-lmstream``: the kit's source over the topic under the ``lmstream`` admission controller;
* ``kit-spool``: the same controller on the kit's spool, the same generator writing to it instead
  of the topic (no Kafka at all): where the two kit runs differ, Kafka is why.

For the kit's runs each row also splits the latency of the batches that missed the bound (and of
all batches) into where it went: ``wait`` (the oldest record's arrival to the admission: the
controller buffering), ``start`` (the admission to the batch's ``foreachBatch``: Spark planning
it, and the read on executors where it reads there), ``run`` (``foreachBatch``: the read in the
driver, decoding and the query), and the controller's ``predicted`` processing time against the
measured one (``admitted`` to completion).

The configurations take turns, in a rotated order each round.  The traffic starts when the
consumer has run its first (empty) batch, so that Spark's start-up is not in any latency.  Per run: the share of batches
whose maximum latency is within the bound (the window's slide over the speedup), the row-weighted
mean latency, and the CPU seconds of the driver (the Python process, Spark's JVM and its Python
workers, not the broker) per row.  Spark's runs get their latencies from Spark's own progress
(``attach`` with the Kafka records' timestamp as the event time: completion minus the oldest and
the mean record time of the batch); the kit's from its records (completion minus the oldest
record's time).  Both count from the broker's ``LogAppendTime``.  Every number is **measured** on
the machine named in the result file (``kafka-compare-<host>-<time>.json`` and ``.csv``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmstream_kit.bench.outputs import write_run_results  # noqa: E402

CONFIGS = ("spark-fixed", "spark-maxoffsets", "kit-lmstream", "kit-spool")


def driver_cpu_s(exclude: set[int]) -> float:
    """CPU seconds so far of this process and its children (Spark's JVM, Python workers), less ``exclude``."""
    import psutil

    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    skip = set(exclude)
    for p in list(procs):
        if p.pid in exclude:
            try:
                skip |= {c.pid for c in p.children(recursive=True)}
            except psutil.Error:
                pass
    total = 0.0
    for p in procs:
        if p.pid in skip:
            continue
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def generator(ref, args, seed: int):
    from lmstream_kit.feed.kafka import TopicSink, TopicWriter
    from lmstream_kit.feed.traffic import FeedGenerator, traffic_from_spec
    from lmstream_kit.workloads import load_workload

    sink = TopicSink(TopicWriter(ref))
    traffic = traffic_from_spec(args.traffic, rate=args.rate, seed=seed)
    return FeedGenerator(sink, traffic, load_workload("PASSTHROUGH").make_rows, speedup=args.speedup, seed=seed,
                         duration_s=args.duration), sink


def run_spark(spark, ref, args, config: str, run_dir: Path, bound_s: float, seed: int, exclude: set[int]) -> dict:
    from lmstream_kit.attached import attach
    from lmstream_kit.engine.schema import spark_ddl
    from lmstream_kit.record import summarize
    from lmstream_kit.workloads import load_workload

    ddl = spark_ddl(load_workload("PASSTHROUGH").schema).replace("'", "")
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", ref.bootstrap)
              .option("subscribe", ref.topic).option("startingOffsets", "earliest"))
    if config == "spark-maxoffsets":
        reader = reader.option("maxOffsetsPerTrigger", int(args.rate * args.slide))
        trigger = "0 seconds"
    else:
        trigger = f"{int(round(args.trigger / args.speedup * 1000))} milliseconds"
    df = (reader.load().withWatermark("timestamp", "1 hour")
          .selectExpr("timestamp", f"from_json(CAST(value AS STRING), '{ddl}') AS r").select("timestamp", "r.*"))
    gen, sink = generator(ref, args, seed)
    cpu0, t0 = driver_cpu_s(exclude), time.monotonic()
    query = (df.writeStream.format("noop").queryName(config.replace("-", "_")).trigger(processingTime=trigger)
             .option("checkpointLocation", str(run_dir / "checkpoint")).start())
    watched = attach(query, event_time="timestamp", bound_s=bound_s, run_dir=run_dir)
    while query.lastProgress is None:  # the traffic starts once the query ran its first (empty) batch
        time.sleep(0.05)
    gen.start()
    try:
        while not gen.finished:
            time.sleep(0.2)
        deadline = time.monotonic() + 300
        while sum(r["rows"] for r in watched.records) < sink.rows and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        gen.stop()
        watched.stop()
    cpu, wall = driver_cpu_s(exclude) - cpu0, time.monotonic() - t0
    return {**summarize(watched.records, bound_s=bound_s), "cpu_s": cpu, "wall_s": wall, "produced": sink.rows}


def breakdown(records: list[dict], bound_s: float) -> dict:
    """Mean seconds of each part of the latency, over the batches that missed the bound (``miss_``)
    and over all data batches (``all_``): see the module."""
    import math

    data = [r for r in records if r["rows"] > 0]
    out: dict = {}
    for prefix, group in (("miss", [r for r in data if r["max_latency_s"] > bound_s]), ("all", data)):
        parts = {
            "wait_s": [r["admitted_at"] - r["oldest_arrival"] for r in group],
            "start_s": [r["batch_started_at"] - r["admitted_at"] for r in group if r.get("batch_started_at")],
            "run_s": [r["completed_at"] - r["batch_started_at"] for r in group if r.get("batch_started_at")],
            "predicted_s": [r["predicted_s"] for r in group if r.get("predicted_s") is not None],
            "measured_s": [r["completed_at"] - r["admitted_at"] for r in group if r.get("predicted_s") is not None],
        }
        out[f"{prefix}_batches"] = len(group)
        for name, values in parts.items():
            out[f"{prefix}_{name}"] = round(sum(values) / len(values), 3) if values else math.nan
    return out


def run_kit(spark, ref, args, run_dir: Path, seed: int, exclude: set[int], *, spool: bool = False) -> dict:
    from lmstream_kit.feed.traffic import traffic_from_spec
    from lmstream_kit.live import LiveStream
    from lmstream_kit.record import summarize

    if spool:  # the same seeded traffic, into the kit's spool; the generator starts after the first batch
        s = LiveStream("PASSTHROUGH", policy="lmstream", traffic=traffic_from_spec(args.traffic, rate=args.rate, seed=seed),
                       seed=seed, duration_s=args.duration, speedup=args.speedup, output="noop", run_dir=run_dir,
                       spark=spark)
        cpu0, t0 = driver_cpu_s(exclude), time.monotonic()
        s.start()
        try:
            s.wait(until=lambda st: st.feed_finished(), timeout=args.duration / args.speedup * 3 + 120)
            s.stop(drain=True, timeout=300)
        finally:
            s.stop(drain=False)
        produced = int(sum(r["rows"] for r in s.records))
    else:
        gen, sink = generator(ref, args, seed)
        cpu0, t0 = driver_cpu_s(exclude), time.monotonic()
        s = LiveStream("PASSTHROUGH", policy="lmstream", traffic=None, kafka=ref.uri, speedup=args.speedup,
                       output="noop", run_dir=run_dir, spark=spark).start()
        while s.feed is None:  # the traffic starts once the stream ran its first (empty) batch and reads the topic
            time.sleep(0.05)
        gen.start()
        try:
            while not gen.finished:
                time.sleep(0.2)
            s.wait(rows=sink.rows, timeout=300)
        finally:
            gen.stop()
            s.stop()
        produced = sink.rows
    cpu, wall = driver_cpu_s(exclude) - cpu0, time.monotonic() - t0
    return {**summarize(s.records, bound_s=s.bound_s), **breakdown(s.records, s.bound_s), "cpu_s": cpu,
            "wall_s": wall, "produced": produced}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=1000.0, help="offered rows per simulated second")
    ap.add_argument("--traffic", default="random", help="constant | random | FILE.csv")
    ap.add_argument("--duration", type=int, default=120, help="simulated seconds of traffic per run")
    ap.add_argument("--speedup", type=float, default=4.0)
    ap.add_argument("--trigger", type=float, default=10.0, help="spark-fixed's trigger, simulated s (the paper's 10 s)")
    ap.add_argument("--slide", type=float, default=10.0, help="the window slide, simulated s: the bound is slide/speedup")
    ap.add_argument("--partitions", type=int, default=2, help="partitions of each topic")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        print(f"error: unknown configuration {unknown[0]!r}; known: {', '.join(CONFIGS)}", file=sys.stderr)
        return 2

    from rich.progress import Progress

    from lmstream_kit.engine.session import build_session
    from lmstream_kit.feed.kafka import TopicRef, create_topic
    from lmstream_kit.jars import resolve, spark_kafka
    from lmstream_kit.kafka import KafkaBroker

    work = Path(tempfile.mkdtemp(prefix="kafka-compare-"))
    broker = KafkaBroker(data_dir=work / "broker", heap="768m").start()
    spark = build_session(jars=resolve(spark_kafka()), conf={"spark.sql.shuffle.partitions": "2"})
    bound_s = args.slide / args.speedup
    exclude = {broker.proc.pid}
    runs = []
    try:
        with Progress() as bar:
            task = bar.add_task("runs", total=args.rounds * len(configs))
            for round_ in range(args.rounds):
                order = configs[round_ % len(configs):] + configs[:round_ % len(configs)]
                for config in order:
                    bar.update(task, description=f"round {round_ + 1}: {config}")
                    ref = TopicRef(broker.bootstrap, f"{config}-{round_}")
                    create_topic(ref, args.partitions)
                    run_dir = work / f"{config}-{round_}"
                    if config.startswith("kit-"):
                        got = run_kit(spark, ref, args, run_dir, args.seed, exclude, spool=config == "kit-spool")
                    else:
                        got = run_spark(spark, ref, args, config, run_dir, bound_s, args.seed, exclude)
                    row = {"config": config, "round": round_, "bound_s": bound_s, "batches": got["batches"],
                           "rows": got["rows"], "produced": got["produced"],
                           "within_bound": round(got.get("within_bound", float("nan")), 4),
                           "latency_mean_s": round(got["latency_mean_s"], 3),
                           "max_latency_mean_s": round(got["max_latency_mean_s"], 3),
                           "max_latency_p99_s": round(got["max_latency_p99_s"], 3),
                           "cpu_s": round(got["cpu_s"], 2), "wall_s": round(got["wall_s"], 2),
                           "cpu_us_per_row": round(got["cpu_s"] / got["rows"] * 1e6, 2) if got["rows"] else None,
                           **{k: v for k, v in got.items() if k.startswith(("miss_", "all_"))}}
                    runs.append(row)
                    bar.console.print(row)
                    bar.advance(task)
    finally:
        spark.stop()
        broker.stop()
    meta = {"benchmark": "kafka_compare", "args": {k: str(v) for k, v in vars(args).items()},
            "spark_version": spark.version, "kafka": "4.3.1 (the kit's single-node KRaft broker)",
            "connector": [p.name for p in resolve(spark_kafka()) if p.name.startswith("spark-sql-kafka")],
            "measured": True}
    path = write_run_results(args.out, "kafka-compare", meta, runs)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
