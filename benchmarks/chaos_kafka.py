"""kill -9 a stream's driver at random points while a producer keeps writing to its Kafka topic; every record once.

    .venv/bin/python benchmarks/chaos_kafka.py                        # 10 kills
    .venv/bin/python benchmarks/chaos_kafka.py --kills 2 --seed 1     # the short run the tests use

One broker (the kit's, KRaft), one topic (``--partitions``), one run directory.  A producer in this
process writes PASSTHROUGH rows to the topic all along (``--rate`` rows per wall second, every row
unique: its ``vehicle`` is a running number), whatever happens to the stream.  One ``lmstream-kit
run --workload PASSTHROUGH --kafka URI`` after another (each on the same ``--out``: it resumes the
checkpoint and the topic's index) streams from the topic until its whole process group (the
driver's Python and Spark's JVM) gets SIGKILL at a random moment.  Then the producer stops, and a
last run watches the topic for ``--last`` seconds, drains what is indexed and stops by itself.

Then it checks what the Kafka issue asks:

* **0 lost, 0 duplicated**: the output's rows are the rows the producer wrote, once each (Kafka
  acknowledged each one);
* every indexed offset range went into exactly one batch: the batches' spans tile the index, and
  the index holds every record the topic received, once.

It writes ``chaos-kafka-<host>-<time>.json`` and ``.csv`` (one row per run) and prints the verdict;
exit status 1 where a check failed.  Every number is **measured** on the machine named in the file.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_reconfigure import batches, span_problems  # noqa: E402

from lmstream_kit.bench.outputs import write_run_results  # noqa: E402

KIT = [sys.executable, "-m", "lmstream_kit"]


class Producer(threading.Thread):
    """Writes unique PASSTHROUGH rows to the topic until stopped; ``sent`` holds what Kafka acknowledged."""

    def __init__(self, ref, rate: float, seed: int) -> None:
        super().__init__(daemon=True, name="chaos-producer")
        from lmstream_kit.feed.kafka import TopicWriter

        self.writer = TopicWriter(ref)
        self.rate, self.seed = rate, seed
        self.sent: list = []
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        import numpy as np
        import pyarrow as pa

        from lmstream_kit.workloads import load_workload

        make_rows = load_workload("PASSTHROUGH").make_rows
        tick, second, n = 0.1, 0, 0
        try:
            while not self.stop_event.is_set():
                rows = max(1, int(self.rate * tick))
                table = make_rows(second, rows, np.random.default_rng([self.seed, second]))
                ids = pa.array(range(n, n + rows), pa.int32())
                table = table.set_column(table.column_names.index("vehicle"), "vehicle", ids)
                self.writer.write(table)  # returns once Kafka has every row
                self.sent.append(table)
                n, second = n + rows, second + 1
                self.stop_event.wait(tick)
        except BaseException as exc:  # noqa: BLE001  (reported in the verdict)
            self.error = exc

    def rows(self):
        import pyarrow as pa

        return pa.concat_tables(self.sent) if self.sent else None


def start_run(run: Path, uri: str, duration: float, speedup: float, log) -> subprocess.Popen:
    cmd = [*KIT, "run", "--workload", "PASSTHROUGH", "--kafka", uri, "--speedup", str(speedup), "--out", str(run),
           "--output", "parquet", "--duration", f"{duration:g}"]
    return subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)


def wait_up(proc: subprocess.Popen, run: Path, old_batches: int, timeout: float) -> None:
    """Until the new run completed a batch of its own."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the run exited with {proc.returncode} before it was up")
        if batches(run) > old_batches:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the run was not up within {timeout:g} s")


def record_problems(run: Path, sent) -> tuple[list[str], int]:
    """The producer's rows missing from the output, or there twice; and from the index."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lmstream_kit.feed.spool import Spool

    files = sorted((run / "output").glob("part-*.parquet"))
    out = pa.concat_tables([pq.read_table(f) for f in files]).select(sent.column_names) if files else sent.slice(0, 0)

    def rows(table):
        return Counter(zip(*(table.column(c).to_pylist() for c in table.column_names)))

    want, got = rows(sent), rows(out)
    missing, extra = sum((want - got).values()), sum((got - want).values())
    problems = ([f"{missing} record(s) the producer wrote are not in the output"] if missing else []) + \
               ([f"{extra} output row(s) are duplicates or were never written"] if extra else [])
    indexed = Spool(run / "spool", create=False).total_rows()
    if indexed != sent.num_rows:
        problems.append(f"the index holds {indexed} records, the producer wrote {sent.num_rows}")
    return problems, sent.num_rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=10, help="kill -9s of the driver (then one clean stop)")
    ap.add_argument("--rate", type=float, default=2000.0, help="rows per wall second the producer writes")
    ap.add_argument("--partitions", type=int, default=3, help="partitions of the topic")
    ap.add_argument("--speedup", type=float, default=2.5, help="the runs' speedup (their latency bound is 10 s / it)")
    ap.add_argument("--last", dest="last_s", type=float, default=30.0, help="wall seconds the last run watches")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-dir", type=Path, default=None, help="the run directory [default: a temporary one]")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)

    from lmstream_kit.feed.kafka import TopicRef, create_topic
    from lmstream_kit.kafka import KafkaBroker

    tmp = None
    if args.run_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="chaos-kafka-"))
        args.run_dir = tmp / "run"
    run = args.run_dir
    run.parent.mkdir(parents=True, exist_ok=True)
    broker = KafkaBroker(data_dir=run.parent / "broker").start()
    ref = TopicRef(broker.bootstrap, "chaos")
    create_topic(ref, args.partitions)
    producer = Producer(ref, args.rate, args.seed)
    log = open(run.parent / f"{run.name}.log", "ab")
    runs, t_start = [], time.time()
    try:
        producer.start()
        for i in range(args.kills + 1):
            final = i == args.kills
            before = batches(run)
            if final:
                producer.stop_event.set()
                producer.join(timeout=600)
            proc = start_run(run, ref.uri, args.last_s if final else 1e6, args.speedup, log)
            wait_up(proc, run, before, timeout=180)
            if not final:
                time.sleep(rng.uniform(0.0, 8.0))
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                ended = "killed"
            else:
                proc.wait(timeout=600)
                ended = f"drained and stopped (exit {proc.returncode})"
            print(f"run {i + 1}/{args.kills + 1}: {batches(run) - before} batch record(s), {ended}", flush=True)
            runs.append({"run": i + 1, "ended": ended, "batches": batches(run) - before})
        sent = producer.rows()
        if sent is not None:  # what Kafka acknowledged, kept next to the run directory
            import pyarrow.parquet as pq

            pq.write_table(sent, run.parent / "sent.parquet")
        problems = [] if producer.error is None else [f"the producer failed: {producer.error}"]
        problems += span_problems(run)
        lost, records = record_problems(run, sent) if sent is not None else (["the producer wrote nothing"], 0)
        problems += lost
        if not runs[-1]["ended"].endswith("(exit 0)"):
            problems.append(f"the last run did not stop cleanly: {runs[-1]['ended']}")
        meta = {"benchmark": "chaos-kafka", "kills": args.kills, "seed": args.seed, "rate": args.rate,
                "partitions": args.partitions, "speedup": args.speedup, "wall_s": round(time.time() - t_start, 1),
                "records": records, "problems": problems, "verdict": "pass" if not problems else "FAIL"}
        path = write_run_results(args.out, "chaos-kafka", meta, runs)
        print(f"{records} records written while the driver was killed {args.kills} times: "
              f"{'0 lost, 0 duplicated' if not problems else '; '.join(problems)}")
        print(f"results: {path}")
        return 0 if not problems else 1
    finally:
        producer.stop_event.set()
        log.close()
        broker.stop()
        if tmp is not None and not os.environ.get("LMSTREAM_KEEP_CHAOS"):
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
