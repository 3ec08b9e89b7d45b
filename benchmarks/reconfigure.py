"""What a live reconfiguration of a running stream costs, side by side with stop-and-restart.

    .venv-spark43/bin/python benchmarks/reconfigure.py                      # LR1S, 3 rates, this VM
    .venv-spark43/bin/python benchmarks/reconfigure.py --master spark://host:7077 --rates 1000,4000,16000
    .venv/bin/python benchmarks/reconfigure.py --ops swap,restart            # Spark 4.1: no repartition

For each offered rate (more rows in the join's or window's state), one stream (RocksDB state store,
``--from`` state partitions, fixed trigger) runs ``--warm`` batches before each of these changes:

* ``swap``: ``LiveStream.set_batch_function(...)``, a new per-batch function from the next batch,
  with no restart (the live path of a logic change);
* ``restart``: ``LiveStream.restart()``, a stop and a start from the checkpoint that changes
  nothing: what a change costs that Spark takes only on a restart, a new foreachBatch function
  included (the stop-and-restart baseline);
* ``repartition`` (Spark 4.2+): ``LiveStream.set_state_partitions(--to)``: stop, Spark's offline
  state repartition, start (``lmstream_kit.engine.state``).

With ``--workload flumina:EXAMPLE`` (a Flumina program, whose state the kit keeps) the changes are:

* ``rescale``: ``FluminaControl`` workers ``--from`` -> ``--to`` at the next batch, a join and a fork
  of the workers' states, with no restart; Spark is readied for the new workers first (their
  partition keys, a Python worker each with the pass's modules loaded);
* ``rescale_cold``: the same without readying Spark first (``FluminaControl.warm = False``);
* ``logic`` (``value_barrier`` only): a new update function with a state transformer, no restart;
* ``restart``: as above, the stop-and-restart baseline (a restart with another parallelism costs
  the same: the snapshot is re-forked on the new plan when the runner starts).

``--ops`` may hold groups separated by ``;`` that take turns over the streams: ``--rates
4000,4000,4000,4000 --ops "rescale_cold,restart;rescale,restart"`` compares both rescales side by
side, each beside its own restart.

Per change it writes: the state's rows (Spark's ``numRowsTotal``) and bytes on disk, the whole
change's seconds where the query restarts (admission held, the admitted batches committed, stop,
[repartition,] start), Spark's repartition alone, the *downtime* (the gap between the completions
of the batch before and the batch after the change, less the trigger interval), the *latency
spike* (the largest batch latency of the next five batches, less the median before the change),
and the *rows processed during the change* (by the batches that completed from the request to the
first batch under it, that one included).
Every number is **measured** on the machine named in the file (``reconfigure-<host>-<date>.json``
and ``.csv``).
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


def state_bytes(checkpoint: Path) -> int:
    """Bytes of the checkpoint's state directory (every version RocksDB keeps)."""
    return sum(p.stat().st_size for p in (checkpoint / "state").rglob("*") if p.is_file())


def change_costs(records: list[dict], param: str, trigger_s: float) -> dict:
    """Downtime and latency spike around the first ``param`` change (records in batch order)."""
    from lmstream_kit.plots.reconfig import downtime_s

    data = [r for r in records if r.get("rows")]
    at = next(i for i, r in enumerate(data) if any(c.get("param") == param for c in r.get("changes") or []))
    change = next(c for c in data[at]["changes"] if c.get("param") == param)
    before, after = data[:at], data[at:at + 5]
    steady = statistics.median(r["max_latency_s"] for r in before[-5:])
    # from the request (a restart-based change is logged when the query runs again) to the first
    # batch under the change: the rows the stream processed while it changed
    asked = float(change.get("at", 0.0)) - float(change.get("restart_s") or 0.0)
    during = sum(int(r["rows"]) for r in data if asked <= r["completed_at"] <= data[at]["completed_at"])
    return {"downtime_s": round(downtime_s(records, data[at]["batch_id"], usual_s=trigger_s), 3),
            "latency_spike_s": round(max(r["max_latency_s"] for r in after) - steady, 3),
            "steady_latency_s": round(steady, 3), "rows_during_change": during}


def _doubled(total, event):
    """value_barrier's update with a-values counted twice (pickled by value: this is __main__)."""
    if event.tag == "b":
        return 0, [("b", event.ts, total)]
    return total + 2 * event.payload, []


def _times_ten(total):
    return total * 10


def workload_for(args):
    """The workload: a name, or ``flumina:EXAMPLE`` for a Flumina program on ``--from`` workers."""
    if not args.workload.startswith("flumina:"):
        return args.workload
    from lmstream_kit.workloads.flumina import flumina_workload

    return flumina_workload(args.workload.split(":", 1)[1], parallelism=args.from_partitions,
                            shards=max(args.from_partitions, args.to_partitions), sync_every=500,
                            bound_s=args.trigger_s, work=args.work)


def one_rate(rate: float, args, spark, run_dir: Path, ops: list[str]) -> list[dict]:
    from lmstream_kit.flumina.live import FluminaControl
    from lmstream_kit.live import LiveStream

    s = LiveStream(workload_for(args), policy="fixed", trigger_s=args.trigger_s, rate=rate, speedup=args.speedup,
                   traffic="constant", run_dir=run_dir, spark=spark, state_store="rocksdb",
                   state_partitions=args.from_partitions)
    wall_trigger = args.trigger_s / args.speedup
    rows = []
    s.start()
    try:
        for kind in ops:
            n = len([r for r in s.records if r.get("rows")])
            s.wait(until=lambda st: len([r for r in st.records if r.get("rows")]) >= n + args.warm, timeout=600)
            progress = s.query.lastProgress or {}
            size = {"state_rows": sum(int(op.get("numRowsTotal") or 0) for op in progress.get("stateOperators") or []),
                    "state_bytes": state_bytes(run_dir / "checkpoint")}
            param = {"swap": "batch.function", "restart": "restart", "repartition": "state_partitions",
                     "rescale": "flumina.workers", "rescale_cold": "flumina.workers", "logic": "flumina.logic"}[kind]
            flumina = next((c for c in s.controllers if isinstance(c, FluminaControl)), None)
            if kind in ("rescale", "rescale_cold"):
                size["flumina_events_per_batch"] = round(statistics.mean(
                    r.get("flumina_events") or 0 for r in s.records[-args.warm:]), 1)
                flumina.warm = kind == "rescale"
                flumina.set_param("workers", args.to_partitions)
                warmed = next((t.get("warm_s") for t in reversed(s.journal.transactions())
                               if t["op"] == "flumina_workers"), None)
                size["warm_s"] = warmed
            elif kind == "logic":
                flumina.set_update(_doubled, transform=_times_ten, name="doubled")
            elif kind == "swap":  # a new per-batch function: the result's first column renamed
                s.set_batch_function(lambda df: df.withColumnRenamed(df.columns[0], df.columns[0] + "_v2"),
                                     name="renamed")
            elif kind == "restart":
                s.restart()
            else:
                s.set_state_partitions(args.to_partitions)
            n = len([r for r in s.records if r.get("rows")])
            s.wait(until=lambda st: len([r for r in st.records if r.get("rows")]) >= n + 6, timeout=600)
            change = next(c for r in s.records for c in r.get("changes") or [] if c.get("param") == param)
            rows.append({"rate": rate, "change": kind, **size,
                         "partitions": f"{args.from_partitions}->{args.to_partitions}"
                         if kind in ("repartition", "rescale", "rescale_cold") else str(args.from_partitions),
                         "change_s": change.get("restart_s"), "repartition_s": change.get("repartition_s"),
                         **change_costs(s.records, param, wall_trigger)})
    finally:
        s.stop()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="LR1S", help="a stateful workload [LR1S: a self-join, whose state grows with "
                    "the rate; about 250 rows/s fill this 2-core VM]")
    ap.add_argument("--rates", default="60,120,240", help="offered rows/s (simulated time), one stream each")
    ap.add_argument("--from", dest="from_partitions", type=int, default=2, help="state partitions at the start")
    ap.add_argument("--to", dest="to_partitions", type=int, default=4, help="state partitions after the change")
    ap.add_argument("--warm", type=int, default=5, help="batches before each change")
    ap.add_argument("--ops", default=None, help="the changes, in order: swap, restart, repartition; for a Flumina "
                    "workload rescale, rescale_cold, logic, restart [default: all but rescale_cold, in that order]; "
                    "groups separated by ';' take turns over the streams")
    ap.add_argument("--work", type=int, default=0, help="a Flumina workload's extra per-event work (rounds)")
    ap.add_argument("--speedup", type=float, default=4.0)
    ap.add_argument("--trigger-s", type=float, default=8.0, help="the fixed trigger, simulated seconds")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args(argv)
    try:
        rates = [float(x) for x in args.rates.split(",") if x.strip()]
        if not rates or min(rates) <= 0 or args.from_partitions < 1 or args.to_partitions < 1:
            raise ValueError
    except ValueError:
        print(f"error: --rates must be positive numbers and --from/--to >= 1, got {args.rates!r}", file=sys.stderr)
        return 2
    flumina = args.workload.startswith("flumina:")
    known = ("rescale", "rescale_cold", "logic", "restart") if flumina else ("swap", "restart", "repartition")
    default = ",".join(k for k in known if k != "rescale_cold")
    groups = [[x.strip() for x in group.split(",") if x.strip()] for group in (args.ops or default).split(";")]
    args.ops = [x for group in groups for x in group]
    unknown = [x for x in args.ops if x not in known]
    if unknown or not all(groups):
        print(f"error: --ops takes {', '.join(known)} for {args.workload}, got {args.ops!r}", file=sys.stderr)
        return 2
    if flumina and "logic" in args.ops and args.workload != "flumina:value_barrier":
        print(f"error: the logic change is value_barrier's, got {args.workload}", file=sys.stderr)
        return 2
    if args.from_partitions == args.to_partitions:
        print(f"error: --from and --to must differ, got {args.from_partitions} both", file=sys.stderr)
        return 2

    try:
        from tqdm import tqdm
    except ImportError:  # the 4.3 line's environment has the test tools only
        def tqdm(items, **_):
            return items

    from lmstream_kit.engine.session import build_session, spark_version

    spark = build_session(master=args.master, app_name="lmstream_kit-reconfigure", conf={})
    if "repartition" in args.ops and tuple(int(p) for p in spark.version.split(".")[:2]) < (4, 2):
        print(f"error: Spark {spark.version} has no offline state repartition (run it with the 4.3 line, "
              ".venv-spark43/bin/python, or leave repartition out of --ops)", file=sys.stderr)
        spark.stop()
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="reconfigure-"))
    runs = []
    try:
        for i, rate in enumerate(tqdm(rates, unit="stream", desc=f"reconfigure {args.workload}")):
            runs += one_rate(rate, args, spark, tmp / f"s{i}-r{rate:g}", groups[i % len(groups)])
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    meta = {"simulated": False, "spark": spark_version(), "argv": sys.argv[1:], "workload": args.workload,
            "work": args.work,
            "master": args.master,
            "speedup": args.speedup, "trigger_s": args.trigger_s}
    path = write_run_results(args.out, "reconfigure", meta, runs)
    host = json.loads(path.read_text())["meta"]["machine"]["host"]
    print(f"\nMEASURED on {host} ({args.master}), Spark {spark_version()}, {args.workload}")
    print(f"{'rate':>6} {'change':12} {'state rows':>10} {'state MB':>8} {'change s':>8} {'repart s':>8} "
          f"{'downtime s':>10} {'spike s':>7} {'rows during':>11}")
    for r in runs:
        print(f"{r['rate']:6g} {r['change']:12} {r.get('state_rows')!s:>10} {r['state_bytes'] / 1e6:8.2f} "
              f"{r['change_s']!s:>8} {r['repartition_s']!s:>8} {r['downtime_s']:10.2f} {r['latency_spike_s']:7.2f} "
              f"{r['rows_during_change']:>11}")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
