"""Measure per-stage costs on real Spark and fit the stage simulator's calibration (lmstream_kit.tune.stagesim).

    .venv/bin/python benchmarks/calibrate_stages.py                 # about 3 minutes on 2 cores
    .venv/bin/python benchmarks/calibrate_stages.py --ship          # and copy it to lmstream_kit/resources/
    .venv/bin/python benchmarks/calibrate_stages.py --refit FILE    # fit again from FILE's samples, no Spark

For each workload (default the kit's six) and each parallelism p (default 1 and 2), one real stream on
``local[2]`` (``read="executors"``; the source split into p input partitions by
``tune.InputPartitions(p)``; ``spark.sql.shuffle.partitions`` = p, so the stateful stages run p tasks
too), its offered rate raised ``--rate-factor`` times after half its data batches: two rates per run.
Every data batch's stages are read from Spark's status store (``tune.OperatorMetrics``, plus each
stage's submission and completion time); the first data batch of each run (Spark compiles the
query's code then) is kept in the file but left out of the fit.

The fit (:func:`lmstream_kit.tune.stagesim.fit_calibration`, pure): per workload and stage key,
``useful_s = per_task_s * tasks + per_record_s * records_in`` by non-negative least squares,
``per_batch_s`` from the stage's wall time less its waves of tasks, the stage's selectivity (or, for a
partial aggregation, its rows out per task), and the batch's engine overhead (processing time less
the modelled stages).  Writes ``stage-calibration-<host>-<date>.json`` (the machine, the setup, the
fitted costs with their errors and the raw samples) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmstream_kit.bench.outputs import machine_info  # noqa: E402
from lmstream_kit.tune.stagesim import CALIBRATION_FORMAT, fit_calibration  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ("LR1S", "LR1T", "LR2S", "CM1S", "CM1T", "CM2S")
#: the lower rate of each workload (simulated rows/s): the self-joins cost ~10-20x more per row
LOW_RATE = {"LR1S": 250, "LR1T": 1000, "LR2S": 5000, "CM1S": 5000, "CM1T": 5000, "CM2S": 5000}
CORES = 2  # local[2]


class _Recording:
    """The batch's engine handle, keeping the raw stage dicts its ``stages()`` returned."""

    def __init__(self, engine, sink: list) -> None:
        self._engine, self._sink = engine, sink

    def stages(self, timeout: float = 1.0) -> list[dict]:
        got = self._engine.stages(timeout=timeout)
        self._sink.append(got)
        return got


def _stage_capture():
    """An OperatorMetrics that also records each stage's submission and completion time."""
    from lmstream_kit.tune import OperatorMetrics
    from lmstream_kit.tune.operators import _time

    class StageCapture(OperatorMetrics):
        FIELDS = {**OperatorMetrics.FIELDS, "stage_times": "each stage's [submission, completion] (epoch s)"}

        def __init__(self) -> None:
            super().__init__(timeout_s=2.0)
            self._raw: list = []

        def before_batch(self, ctx):
            engine = ctx.engine if hasattr(ctx.engine, "stages") else None
            self._raw = []
            wrapped = _Recording(engine, self._raw) if engine is not None else None
            return super().before_batch(SimpleNamespace(engine=wrapped))

        def after_batch(self, record):
            out = super().after_batch(record)
            if out is None or not self._raw:
                return out
            kept = [s for s in self._raw[-1] if str(s.get("status")) != "SKIPPED" and (s.get("numTasks") or 0) > 0]
            times = [[_time(s.get("submissionTime")), _time(s.get("completionTime"))] for s in kept]
            return {**out, "stage_times": times}

    return StageCapture()


def measure(args, bar) -> list[dict]:
    from lmstream_kit.engine.session import build_session
    from lmstream_kit.live import LiveStream
    from lmstream_kit.tune import InputPartitions

    spark = build_session(master="local[2]", app_name="lmstream_kit-calibrate-stages", conf={})
    tmp = Path(tempfile.mkdtemp(prefix="calibrate-stages-"))
    samples: list[dict] = []
    try:
        if args.warmup:  # a short run first, not kept: the JVM's JIT warms up on it
            warm = LiveStream(args.workloads[0], policy="fixed", rate=3000, speedup=args.speedup, duration_s=12,
                              trigger_s=args.trigger_s, read="executors", run_dir=tmp / "warmup", spark=spark)
            warm.start()
            try:
                warm.wait(until=lambda st: st.feed_finished(), timeout=300)
            finally:
                warm.stop()
        for workload in args.workloads:
            for p in args.parallelism:
                rate = args.rate.get(workload, 3000) if isinstance(args.rate, dict) else args.rate
                # the state store's partitions are fixed when a query first runs: set before each start
                spark.conf.set("spark.sql.shuffle.partitions", str(p))
                capture = _stage_capture()
                stream = LiveStream(workload, policy="fixed", rate=rate, speedup=args.speedup,
                                    duration_s=args.duration_s, trigger_s=args.trigger_s, read="executors",
                                    run_dir=tmp / f"{workload}-p{p}", spark=spark,
                                    controllers=(InputPartitions(p), capture))
                half = max(1, round(args.duration_s / args.trigger_s / 2))
                stream.start()
                try:
                    stream.wait(batches=half, timeout=300)
                    switched_after = max(r["batch_id"] for r in stream.records)
                    stream.set_param("rate_scale", args.rate_factor)
                    stream.wait(until=lambda st: st.feed_finished(), timeout=300)
                finally:
                    stream.stop()
                first = True
                for r in stream.records:
                    if not r["rows"] or not r.get("operators"):
                        continue
                    samples.append({
                        "workload": workload, "parallelism": p,
                        "rate": rate * (args.rate_factor if r["batch_id"] > switched_after else 1.0),
                        "batch_id": r["batch_id"], "warm": not first, "rows": r["rows"],
                        "processing_s": r["processing_s"], "input_partitions": r.get("input_partitions"),
                        "operators": r["operators"], "stage_times": r.get("stage_times"),
                    })
                    first = False
                # the machine's load while this run ran (2 cores: other work here slows the stages)
                for sample in samples:
                    if sample["workload"] == workload and sample["parallelism"] == p:
                        sample.setdefault("load_1min", round(os.getloadavg()[0], 2))
                bar.update(1)
                bar.set_postfix_str(f"{workload} p={p}: {sum(1 for s in samples if s['workload'] == workload)} batches")
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return samples


def table(fit: dict) -> str:
    lines = [f"{'workload':8} {'stage':6} {'n':>3} {'tasks':>5} {'records in':>17} {'us/record':>9} "
             f"{'ms/task':>8} {'ms/batch':>8} {'sel':>7} {'groups':>6} {'rel rmse':>8} {'mape':>6}"]
    for name, w in fit["workloads"].items():
        for key, s in w["stages"].items():
            lo, hi = s["records_in_range"]
            lines.append(
                f"{name:8} {key:6} {s['samples']:3d} {'/'.join(map(str, s['tasks_seen'])):>5} "
                f"{lo:8,}-{hi:<8,} {s['per_record_s'] * 1e6:9.3f} {s['per_task_s'] * 1e3:8.2f} "
                f"{s['per_batch_s'] * 1e3:8.1f} {s['selectivity']:7.3f} {s['groups'] or '':>6} "
                f"{s['rel_rmse']:8.3f} {s['mape']:6.3f}")
        lines.append(f"{name:8} {'batch':6} {w['batches']:3d} overhead {w['overhead_s'] * 1e3:.0f} ms, "
                     f"modelled processing time: mape {w['batch_mape']:.3f}, noise (sd of log ratio) {w['noise']:.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    ap.add_argument("--parallelism", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rate", type=float, default=None,
                    help="the lower offered rate (simulated rows/s) of every workload; default per workload")
    ap.add_argument("--rate-factor", type=float, default=10.0, help="the rate is raised this many times halfway")
    ap.add_argument("--duration-s", type=float, default=32.0, help="simulated seconds of traffic per run")
    ap.add_argument("--speedup", type=float, default=4.0)
    ap.add_argument("--trigger-s", type=float, default=4.0, help="the fixed trigger (simulated s)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--refit", type=Path, default=None, help="fit again from this calibration file's samples")
    ap.add_argument("--ship", action="store_true", help="also copy the file to lmstream_kit/resources/")
    ap.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the JIT warm-up run")
    args = ap.parse_args(argv)
    args.rate = dict(LOW_RATE) if args.rate is None else args.rate

    if args.refit is not None:
        old = json.loads(args.refit.read_text())
        samples, meta = old["samples"], {k: old[k] for k in ("machine", "python", "spark", "setup", "created")}
        path = args.refit
    else:
        from tqdm import tqdm

        from lmstream_kit.engine.session import spark_version

        t0 = time.monotonic()
        with tqdm(total=len(args.workloads) * len(args.parallelism), unit="run", desc="calibrating") as bar:
            samples = measure(args, bar)
        host = socket.gethostname().split(".")[0] or "host"
        meta = {
            "machine": {"host": host, **machine_info()}, "python": platform.python_version(), "spark": spark_version(),
            "setup": {"master": "local[2]", "cores": CORES, "read": "executors", "policy": "fixed",
                      "trigger_s": args.trigger_s, "speedup": args.speedup, "duration_s": args.duration_s,
                      "parallelism": args.parallelism, "rates": args.rate, "rate_factor": args.rate_factor,
                      "traffic": "random", "measured_s": round(time.monotonic() - t0, 1), "argv": sys.argv[1:]},
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"stage-calibration-{host}-{time.strftime('%Y%m%d')}.json"
    fit = fit_calibration(samples, cores=CORES)
    doc = {"format": CALIBRATION_FORMAT, "measured": True, **meta, "method": fit["method"],
           "workloads": fit["workloads"], "samples": samples}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\nSpark {meta['spark']}, {meta['setup']['master']}, {meta['machine']['cpu']}; "
          f"{sum(1 for s in samples if s['warm'])} warm batches fitted of {len(samples)}")
    print(table(fit))
    print(f"calibration: {path}")
    if args.ship:
        target = ROOT / "lmstream_kit" / "resources" / path.name
        shutil.copyfile(path, target)
        print(f"shipped: {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
