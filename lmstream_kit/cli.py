"""The ``lmstream-kit`` command line.

User errors (bad names or values, Java missing, an unwritable directory) print
one ``error: ...`` line and exit with status 2; they never show a traceback.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Optional

import click

from .units import format_value
from .exceptions import KitError

EPILOG = """\b
Examples:
  lmstream-kit run --duration 60                       # the demo: LR2S, random traffic, lmstream
  lmstream-kit run --policy fixed --out runs/fixed     # the paper's 10 s trigger baseline
  lmstream-kit run --traffic constant --speedup 5      # 5 simulated seconds per wall second
  lmstream-kit run --input landing/ --duration 30      # your own CSV/JSON/Parquet files
  lmstream-kit compare runs/lmstream runs/fixed        # latency side by side
  lmstream-kit bench --queries LR2S,CM2S --duration 120 --out bench/   # policies side by side
"""


def _console(**kw):
    """A rich console; when output is not a terminal, wide enough that tables don't fold."""
    from rich.console import Console

    stream = sys.stderr if kw.get("stderr") else sys.stdout
    if not stream.isatty():
        kw.setdefault("width", 200)
    return Console(**kw)


_fmt = format_value


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lmstream_kit", prog_name="lmstream-kit")
def cli() -> None:
    """Analyse and tune micro-batch stream processing on Apache Spark.

    `run` starts a stream (a Linear Road workload on embedded Spark by
    default) under an admission policy and writes per-batch metrics to a run
    directory; `compare` prints the latency of several runs side by side.
    """


TUNE_CHOICES = ("off", "recommend", "ds2", "learned")


def _seconds(name: str, value: float | None, *, hint: str = "") -> float | None:
    """``value`` (seconds; None: not given) when it is finite and > 0, else a one-line KitError naming it.

    Caught here, before Spark starts: an infinite trigger would end in an OverflowError once the
    query starts, an infinite slide or watch in a stream that never closes a window or stops.
    """
    if value is None:
        return None
    if not math.isfinite(value):
        raise KitError(f"{name} must be a finite number of seconds, got {value:g}")
    if not value > 0:
        raise KitError(f"{name} must be > 0 seconds, got {value:g}{hint}")
    return value


def _check_run_dir(out: Path, workload: str) -> None:
    """Refuse a run directory that holds another workload's run: its checkpoint and run.json are that run's.

    Nothing in ``out`` is created or changed; without the refusal Spark would fail on the other
    query's checkpoint after it started, and run.json would be overwritten.
    """
    from .runinfo import recorded_workload

    recorded = recorded_workload(out)
    if recorded is not None and recorded != workload:
        raise KitError(f"--out {out} holds a run of workload {recorded}, not {workload}: give another --out "
                       f"(or --workload {recorded} to resume that run)")


def _tuning_controllers(tune: str, partitions: int, history: Path | None) -> tuple:
    """The plug-ins of ``run --tune``: the tuner (or the stage metrics alone) and the history recorder."""
    if tune == "off":
        return ()
    from .tune import HistoryRecorder, ParallelismTuner

    policy = "learned" if tune in ("learned", "recommend") else "ds2"
    tuner = ParallelismTuner(policy=policy, mode="recommend" if tune == "recommend" else "apply",
                             partitions=partitions, history=[history if history is not None else _default_history(),
                                                             "seed"])
    return (tuner, HistoryRecorder(history))  # a bad store is a ConfigError: one line, no traceback


def _default_history():
    from .tune.history import default_store

    return default_store()


@cli.command()
@click.option("--workload", default="LR2S", show_default=True, help="Workload: a built-in (see `lmstream-kit workloads`) or your own query, path/to/file.py:NAME or package.module:NAME.")
@click.option(
    "--traffic",
    default="random",
    show_default=True,
    help="constant | random | FILE.csv (rows per second).",
)
@click.option("--rate", default=1000.0, show_default=True, type=float, help="Rows per simulated second.")
@click.option("--spread", default=None, type=float, help="Std. dev. of random traffic [default: 25% of rate].")
@click.option("--policy", default="lmstream", show_default=True, help="lmstream | fixed | asap.")
@click.option("--trigger", "trigger_s", default=None, type=float, help="Interval of the fixed policy, simulated s [default: 10].")
@click.option("--slide", "slide_s", default=None, type=float, help="Override the window slide (the latency bound), simulated s, > 0.")
@click.option("--tumbling", is_flag=True, help="Tumbling-window target: the running mean of past batches' max latency.")
@click.option("--tumbling-target", default="window", show_default=True, type=click.Choice(["window", "paper"]), help="A tumbling window's target: batch up to the window's length and admit at once the data that closes a window (window), or LMStream's running mean of past batches' max latency (paper).")
@click.option("--service-model", default="bytes", show_default=True, type=click.Choice(["bytes", "features"]), help="What predicts a batch's processing time: its bytes, or also the windows it closes, the state's size and the time since state was last evicted (fitted in the background).")
@click.option("--catch-up", "catch_up", default="chunks", show_default=True, type=click.Choice(["chunks", "all"]), help="A backlog that cannot meet the target in one batch (a restart, a burst): admit it in chunks the model predicts to fit the target, oldest first, or all at once (LMStream's rule).")
@click.option("--duration", default=60.0, show_default=True, type=float, help="Simulated seconds of traffic (with --input: seconds to watch the directory).")
@click.option("--speedup", default=1.0, show_default=True, type=float, help="Simulated seconds per wall second.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the traffic and the data.")
@click.option("--out", "out", default=None, type=click.Path(path_type=Path), help="Run directory [default: runs/WORKLOAD-POLICY-TIME].")
@click.option("--input", "input_dir", default=None, type=click.Path(path_type=Path), help="Read rows from CSV/JSON/Parquet files landing in this directory.")
@click.option("--spool", default=None, help="Spool location (path or pyarrow URI, e.g. file:///shared/spool) [default: RUN/spool].")
@click.option("--feed", "feed", default=None, metavar="kafka://HOST:PORT/TOPIC", help="Send the generated traffic through this Kafka topic (created with --kafka-partitions where missing) and stream from it; ?format=avro writes Avro values instead of JSON.")
@click.option("--kafka", "kafka", default=None, metavar="kafka://HOST:PORT/TOPIC", help="Stream from a Kafka topic that others write to (values of the workload's columns: JSON, or ?format=avro / avro-confluent); --duration is the seconds to watch it.")
@click.option("--kafka-partitions", default=2, show_default=True, type=int, help="Partitions of a topic --feed creates.")
@click.option("--fail-on-data-loss/--skip-data-loss", default=True, show_default=True, help="When Kafka no longer has records a batch should read (retention removed them): stop with the offsets named, or go on without them (each lost range in dead_letter.jsonl).")
@click.option("--master", default="local[2]", show_default=True, help="Spark master: local[N] or spark://host:port.")
@click.option("--read", "read_mode", default="auto", show_default=True, type=click.Choice(["auto", "driver", "executors"]), help="Where batches are read: in the driver (no Python task per batch) or on executors; auto = driver for local masters.")
@click.option("--output", default="parquet", show_default=True, type=click.Choice(["parquet", "noop"]), help="Write query results to RUN/output, or drop them.")
@click.option("--device-mode", default="auto", show_default=True, help="auto | advisory | rapids | twin: carry out each batch's CPU/GPU plan with RAPIDS confs, the cudf/pandas twin executor, or record it only (advisory); auto picks the first that works.")
@click.option("--inflection-point", default=None, type=float, help="Device mapper's inflection point, bytes per partition [default: 153600 = 150 KiB].")
@click.option("--optimizer/--no-optimizer", default=None, help="Re-tune the inflection point online [default: on for --policy lmstream].")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Extra Spark conf (repeatable), e.g. --conf spark.plugins=com.nvidia.spark.SQLPlugin.")
@click.option("--jars", default=None, help="Comma-separated jars for Spark (spark.jars), e.g. the RAPIDS Accelerator jar.")
@click.option("--tune", default="off", show_default=True, help="off | recommend | ds2 | learned. Parallelism tuning: record each batch's Spark stages and propose each one's parallelism (recommend), or set the source stage's input partitions by DS2's rule or the learned, monotone predictor (StreamTune).")
@click.option("--partitions", default=2, show_default=True, type=int, help="Input partitions per batch (where the source splits batches: --read executors; the tuner starts here).")
@click.option("--history", "history", default=None, type=click.Path(path_type=Path), help="With --tune: the tuning history store to pre-train from (with the kit's seed history) and to add this run to [default: the kit's data directory].")
@click.option("--state-store", default="default", show_default=True, help="default | rocksdb. State store of the query's stateful operators at its first start (the checkpoint keeps it); rocksdb lets Spark 4.2+ repartition the state live.")
@click.option("--state-partitions", default=None, type=int, help="State-store partitions at the query's first start [default: the session's spark.sql.shuffle.partitions, 2].")
@click.option("--restore-config", is_flag=True, help="Resuming --out: start with the policy, window slide, target, Flumina workers and source partitions the run's journal last committed (live reconfigurations), not the options given.")
@click.option("--retention", default="default", show_default=True, metavar="SPEC", help="Spool retention: default (committed data older than 1 h goes, 100 batches kept behind the committed offset, dead letters rotate at 64 MiB and are kept 7 days, metrics journals rotate at 64 MiB and are kept 30 days), off, or settings such as age=2h,size=5GiB,batches=50 (also dead-letter-size, dead-letter-age, journal-size, journal-age).")
def run(workload, traffic, rate, spread, policy, trigger_s, slide_s, tumbling, tumbling_target, service_model, catch_up, duration, speedup, seed, out, input_dir, spool, feed, kafka, kafka_partitions, fail_on_data_loss, master, read_mode, output, device_mode, inflection_point, optimizer, confs, jars, tune, partitions, history, state_store, state_partitions, restore_config, retention):
    """Run a stream under an admission policy and record its metrics.

    Shows a live progress line (batches, rows, current maximum latency) and a
    summary table at the end.  The run directory holds metrics.jsonl (one
    record per micro-batch), spark_progress.jsonl, run.json, the spool of input
    datasets, the checkpoint and the query output.
    """
    from .live import LiveStream
    from .stream_config import check_master
    from .workloads import load_workload

    _seconds("duration", duration)
    _seconds("slide", slide_s, hint=" (use --tumbling for a tumbling-window target)")
    _seconds("trigger", trigger_s)  # refused whatever the policy: no interval is infinite
    check_master(master)
    from .retention import retention_from_spec

    retention = retention_from_spec(retention)  # a bad spec is said now, before Spark starts
    if tumbling:
        if slide_s is not None:
            raise KitError("--slide and --tumbling exclude each other")
        slide_s = 0.0
    if tune not in TUNE_CHOICES:
        raise KitError(f"unknown --tune {tune!r} (use {', '.join(TUNE_CHOICES)})")
    if not 1 <= partitions <= 4096:
        raise KitError(f"--partitions must be between 1 and 4096, got {partitions}")
    if feed is not None and kafka is not None:
        raise KitError("--feed and --kafka exclude each other (--feed: the generator writes the topic; "
                       "--kafka: others do)")
    if feed is not None and not str(feed).startswith("kafka://"):
        raise KitError(f"--feed takes a Kafka topic, kafka://HOST:PORT/TOPIC, got {feed!r}")
    topic = feed if feed is not None else kafka
    watch = input_dir is not None or kafka is not None  # no generator: --duration is wall seconds to watch
    workload = load_workload(workload)
    if out is not None:
        _check_run_dir(out, workload.name)
    controllers = _tuning_controllers(tune, partitions, history)
    if master is not None and not master.startswith("local"):  # a cluster: its executors are a live control
        from .tune.executors import ClusterExecutors

        controllers = (*controllers, ClusterExecutors())
    if tune in ("ds2", "learned") and read_mode == "auto":
        read_mode = "executors"  # the tuner's knob: the source splits each batch into partitions
    if out is None:
        out = Path("runs") / f"{workload.name}-{policy}-{datetime.now():%Y%m%d-%H%M%S}"
    stream = LiveStream(
        workload,
        policy=policy,
        traffic=None if kafka is not None else traffic,
        rate=rate,
        spread=spread,
        speedup=speedup,
        seed=seed,
        duration_s=None if watch else duration,
        run_dir=out,
        input_dir=input_dir,
        spool=spool,
        master=master,
        trigger_s=trigger_s,
        slide_s=slide_s,
        controller={"catch_up": catch_up, "service_model": service_model,
                    **({"tumbling_target": "paper"} if tumbling_target == "paper" else {})},
        output=output,
        read=read_mode,
        spark_conf=_spark_conf(confs, jars),
        device_mode=device_mode,
        mapper={"inflection_point": inflection_point} if inflection_point is not None else None,
        optimizer=optimizer,
        partitions=partitions,
        controllers=controllers,
        state_store=state_store,
        state_partitions=state_partitions,
        restore_config=restore_config,
        kafka=topic,
        kafka_partitions=kafka_partitions,
        fail_on_data_loss=fail_on_data_loss,
        retention=retention,
    )
    source = ("input " + str(input_dir) if input_dir else f"topic {kafka}" if kafka
              else stream.traffic_spec + " traffic" + (f" through {feed}" if feed else ""))
    click.echo(
        f"lmstream-kit: {stream.workload.name} under {stream.policy.name}, {source}, "
        f"speedup {speedup:g}x, run directory {out}"
    )
    click.echo("starting Spark ...")
    from .signals import StopSignal, deferred_stop

    _quiet_py4j()
    stopped = None  # a stop (Ctrl-C, SIGTERM, SIGHUP) during start-up is held until Spark is up
    try:
        with deferred_stop(lambda name: click.echo(f"{name}: stopping once Spark has started ...")):
            stream.start()
    except KeyboardInterrupt as exc:
        stopped = exc
    interrupted = stopped is not None
    try:
        if stopped is not None:
            raise stopped
        click.echo(f"device mode: {stream.device_mode.mode} ({stream.device_mode.reason})")
        _progress(stream, duration=duration, watch_input=watch)
    except KeyboardInterrupt as exc:
        interrupted = True
        click.echo(f"{exc.name if isinstance(exc, StopSignal) else 'interrupted'}: stopping cleanly ...")
    except Exception:
        interrupted = True  # failed: what is pending waits for the next run in this directory
        raise
    finally:
        if not interrupted:
            click.echo("draining pending datasets and stopping ...")
        summary = stream.stop(drain=not interrupted)
    _summary_table(stream, summary)


#: named sweeps of ``bench --preset`` (option names as the command's parameters)
BENCH_PRESETS = {
    # a probe as long as a cell: at 40 simulated s LR1S under lmstream made 10 batches, so one batch
    # over the bound failed a probe at a rate whose 120 s cell kept 97.6% within it
    # up to 256,000 rows/s: at 64,000 asap (and lmstream, from cold_start=3) passed LR2S, CM1S and CM1T, and at
    # 128,000 CM1T and CM2S under both and LR2S under lmstream (paper-collected-heap), so their brackets stayed
    # open and the capacity ratio unknown; 16 probes: doubling from 1,000 to 256,000 takes 9, three bisections to
    # 10% 3 more, the bracket's two bounds a second run each, and room for the third run of a tied rate
    "paper": {"duration": 120.0, "speedup": 2.0, "rate": 1000.0, "capacity": True, "capacity_duration": 120.0,
              "capacity_probes": 16, "capacity_max_rate": 256000.0, "capacity_budget": 6 * 3600.0,
              # Fig. 1's load: LR2S at 256,000 rows/s is above the fixed trigger's limit (its 5 wall-s
              # batches of 2.56 M rows took 6.0 s, and more as they grew: 2.1 us a row at 2.24 M, 2.3 us
              # past 3 M, the collector's share growing), where its latency grows batch after batch; at
              # 192,000 and 224,000 its batches took 3.8-5.1 s and it kept up (scratch runs, 2026-12-05).
              # LR1S at 2,000 misses the bound and keeps up
              "overloads": ("LR2S=256000", "LR1S=2000"), "at_capacity": 0.8,
              # at Spark's 1 GiB the fixed trigger's growing LR1S batches at 2,000 rows/s ran out of heap
              "confs": ("spark.driver.memory=4g",),
              # the reproduction's margin rule, given by hand to every part of paper-collected-heap: the 0.97
              # quantile of the model's errors, at least 0.5 s; a --controller given adds to it (a given key wins)
              "controller_params": ("quantile=0.97", "min_margin_s=0.5")},
}


def _given_options(ctx) -> set:
    """The parameters of ``ctx`` that the command line (or the environment) set, not their defaults."""
    from click.core import ParameterSource

    return {name for name in ctx.params
            if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)}


def _overloads(items) -> dict:
    """``--overload QUERY=RATE`` options as ``{query: rate}``; a malformed one is a one-line error."""
    out = {}
    for item in items:
        query, sep, rate = str(item).partition("=")
        try:
            value = float(rate)
        except ValueError:
            value = None
        if not sep or not query.strip() or value is None:
            raise KitError(f"--overload takes QUERY=RATE (rows per simulated second), got {item!r}")
        out[query.strip()] = value
    return out


def _controller_params(items) -> dict:
    """``--controller KEY=VALUE`` options as a dict, each value a number, true/false or none where it reads
    as one (the bench checks names and values); a malformed one is a one-line error.

    >>> _controller_params(["quantile=0.97", "history=50", "interval_margin=false", "prior_processing_s=none"])
    {'quantile': 0.97, 'history': 50, 'interval_margin': False, 'prior_processing_s': None}
    """
    out: dict = {}
    for item in items:
        key, sep, text = str(item).partition("=")
        key, text = key.strip(), text.strip()
        if not sep or not key or not text:
            raise KitError(f"--controller takes KEY=VALUE, got {item!r}")
        words = {"true": True, "false": False, "none": None}
        if text.lower() in words:
            value = words[text.lower()]
        else:
            try:
                value = int(text)
            except ValueError:
                try:
                    value = float(text)
                except ValueError:
                    value = text
        out[key] = value
    return out


def _spark_conf(confs, jars) -> dict:
    """``--conf KEY=VALUE`` options (and ``--jars``) as a dict; a malformed one is a user error."""
    out = {}
    for item in confs:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise KitError(f"--conf must be KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    if jars:
        out["spark.jars"] = jars
    return out


def _progress(stream, *, duration: float, watch_input: bool) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = _console(stderr=True)
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TextColumn("batches {task.fields[batches]}"),
        TextColumn("rows {task.fields[rows]}"),
        TextColumn("max latency {task.fields[maxlat]}"),
        TimeElapsedColumn(),
    ]
    started = time.monotonic()
    waiting = None
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("streaming", total=duration, batches=0, rows=0, maxlat="-")
        while True:
            stream.check_health()
            now_waiting = stream.waiting
            if bool(now_waiting) != bool(waiting):  # a line when the stream starts or stops waiting (a full disk)
                bar.console.print(now_waiting if now_waiting else "going on: the wait is over", markup=False,
                                  highlight=False)
                waiting = now_waiting
            records = [r for r in stream.records if r["rows"] > 0]
            last = records[-1]["max_latency_s"] if records else None
            if watch_input:
                done_units = min(time.monotonic() - started, duration)
            else:
                done_units = float(getattr(stream.feed, "seconds_done", 0))
            bar.update(
                task,
                completed=done_units,
                batches=len(records),
                rows=f"{sum(r['rows'] for r in records):,}",
                maxlat=_fmt(last, " s"),
            )
            if done_units >= duration or stream.feed_finished():
                break
            time.sleep(0.25)


def _summary_table(stream, summary: dict) -> None:
    from rich.table import Table

    table = Table(title=f"{stream.workload.name} / {stream.policy.name}: summary", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("micro-batches with data", _fmt(summary["batches"])),
        ("rows processed", _fmt(summary["rows"])),
        ("latency bound (slide, or a tumbling window's length, / speedup)", _fmt(stream.bound_s, " s")),
        ("max latency per batch: mean", _fmt(summary["max_latency_mean_s"], " s")),
        ("max latency per batch: p50", _fmt(summary["max_latency_p50_s"], " s")),
        ("max latency per batch: p99", _fmt(summary["max_latency_p99_s"], " s")),
        ("max latency per batch: max", _fmt(summary["max_latency_max_s"], " s")),
        ("mean latency (row-weighted)", _fmt(summary["latency_mean_s"], " s")),
        ("throughput (rows / processing s)", _fmt(summary["throughput_rows_s"], " rows/s", 0)),
    ]
    if "within_bound" in summary:
        rows.append(("batches within the bound", _fmt(100 * summary["within_bound"], " %", 1)))
    placed = [r for r in stream.records if r.get("device_plan")]
    if placed and stream.device_mode is not None:
        last = placed[-1]
        rows.append(("device mode", stream.device_mode.mode + (
            f" ({stream.device_mode.gpu_backend})" if stream.device_mode.gpu_backend else "")))
        rows.append(("last device plan", f"{last['gpu_ops']} GPU ops at "
                     f"{last['partition_bytes'] / 1024:,.0f} KiB per partition"))
        rows.append(("inflection point: first / last", f"{placed[0]['inflection_point'] / 1024:,.0f} / "
                     f"{last['inflection_point'] / 1024:,.0f} KiB"))
        if summary["processing_s"] > 0:
            inside = summary["mapping_s"] + summary["optimizer_s"]
            rows.append(("device mapping + optimizer wait", _fmt(100 * inside / summary["processing_s"],
                                                                 " % of processing", 3)))
    for name, value in rows:
        table.add_row(name, value)
    console = _console()
    console.print(table)
    console.print(f"metrics: {stream.run_dir / 'metrics.jsonl'}  (load with lmstream_kit.load_metrics)")


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--slide", "slide_s", type=float, default=None, help="The window slide, simulated s (restarts the query).")
@click.option("--target", "target_s", type=float, default=None, help="The latency bound, simulated s (0: the running mean).")
@click.option("--policy", default=None, help="lmstream | fixed | asap (a switch to or from fixed restarts the query).")
@click.option("--rate-scale", type=float, default=None, help="Factor on the generated traffic's rate.")
@click.option("--state-partitions", type=int, default=None, help="Repartition the query's state (Spark 4.2+, RocksDB): stop, repartition, restart.")
@click.option("--restart", is_flag=True, help="Restart the query from its checkpoint, changing nothing.")
@click.option("--set", "setting", default=None, metavar="KEY=VALUE",
              help="Any other live control by its key, e.g. flumina.workers=3, flumina.logic=v2 or inflection_point=65536.")
def reconfigure(run_dir, slide_s, target_s, policy, rate_scale, state_partitions, restart, setting):
    """Change a running stream from another shell: one change per call, journaled.

    RUN_DIR is the run directory of a stream running now (`lmstream-kit run --out RUN_DIR`, or a
    LiveStream in a notebook). The request goes over the stream's authenticated channel (its key
    is RUN_DIR/.channel.key), takes effect at a batch boundary, and returns once it is in force.
    The change is a transaction in RUN_DIR/reconfig.jsonl.

    \b
    Examples:
      lmstream-kit reconfigure runs/LR2S-lmstream-20261124 --target 4
      lmstream-kit reconfigure runs/LR2S-lmstream-20261124 --state-partitions 4
      lmstream-kit reconfigure runs/flumina-run --set flumina.workers=3
      lmstream-kit reconfigure runs/flumina-run --set "flumina.move=a2 -> w1"
      lmstream-kit reconfigure runs/flumina-run --set flumina.logic=v2
      lmstream-kit reconfigure runs/on-a-cluster --set cluster.executors=3
    """
    from .engine.channel import RECONFIGURE, ChannelClient
    from .exceptions import ChannelError
    from .metrics import read_run_info

    for option, number in (("--slide", slide_s), ("--target", target_s), ("--rate-scale", rate_scale)):
        if number is not None and not math.isfinite(number):
            raise KitError(f"{option} must be a finite number, got {number:g}")
    asked = {"slide_s": slide_s, "target_s": target_s, "policy": policy, "rate_scale": rate_scale,
             "state_partitions": state_partitions, "restart": True if restart else None}
    asked = {k: v for k, v in asked.items() if v is not None}
    if setting is not None:
        key, sep, text = setting.partition("=")
        if not sep or not key.strip():
            raise KitError(f"--set takes KEY=VALUE, got {setting!r}")
        try:
            value = json.loads(text)  # 3, 0.5, true, "text"
        except ValueError:
            value = text
        if isinstance(value, float) and not math.isfinite(value):  # json reads Infinity and NaN
            raise KitError(f"--set {key.strip()} must be a finite number, got {text.strip()}")
        asked[key.strip()] = value
    if len(asked) != 1:
        raise KitError("give exactly one change: --slide, --target, --policy, --rate-scale, --state-partitions, "
                       f"--restart or --set (got {len(asked)})")
    [(op, value)] = asked.items()
    info = read_run_info(run_dir) if (run_dir / "run.json").is_file() else {}
    channel, key = info.get("channel"), run_dir / ".channel.key"
    if not channel or not key.is_file():
        raise KitError(f"no stream is running in {run_dir} (no channel in its run.json, or no {key.name}: "
                       "the stream stopped)")
    host, port = str(channel).rsplit(":", 1)
    client = ChannelClient(host, int(port), str(key), timeout_s=600.0)
    try:
        result = client.call(RECONFIGURE, op, value)
    except ChannelError as exc:
        text = str(exc)
        refused = "refused 'reconfigure': "
        text = text.split(refused, 1)[1].split(": ", 1)[-1] if refused in text else text
        raise KitError(f"{text} (stream in {run_dir})") from None
    finally:
        client.close()
    txn = result.get("transaction") or {}
    state = f", transaction {txn.get('txn')} {txn.get('state')}" if txn else ""
    # a controller's change (flumina.workers) waits for the next batch boundary; a restart is done
    when = "in force from the next batch" if txn.get("state") in ("requested", "prepared") else "in force"
    click.echo(f"{op} -> {value}: {when}{state}; now {json.dumps(result.get('now'))}")


@cli.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
def compare(run_dirs):
    """Print per-batch latency statistics of several runs side by side.

    Paths that are not run directories (e.g. runs/notebooks in `compare runs/*`)
    are skipped with a note; it is an error only when none is a run.
    """
    from rich.table import Table

    from .metrics import METRICS_FILE, has_journal, read_journal, read_run_info, summarize

    runs = [d for d in run_dirs if has_journal(d / METRICS_FILE)]  # rotated away for now: still a run
    if not runs:
        if len(run_dirs) == 1:
            raise KitError(f"{run_dirs[0]} is not a run directory (no {METRICS_FILE})")
        shown = ", ".join(str(d) for d in run_dirs[:3]) + (", ..." if len(run_dirs) > 3 else "")
        raise KitError(f"none of the {len(run_dirs)} paths is a run directory (no {METRICS_FILE}): {shown}")
    for path in run_dirs:
        if path not in runs:
            click.echo(f"skipped {path}: not a run directory (no {METRICS_FILE})", err=True)
    table = Table(title="per-micro-batch maximum latency (s) and throughput")
    for col in ("run", "workload", "policy", "batches", "rows", "mean", "p50", "p99", "max", "mean latency", "rows/s", "within bound"):
        table.add_column(col, justify="left" if col in ("run", "workload", "policy") else "right")
    for run_dir in runs:
        info = read_run_info(run_dir)
        records = read_journal(run_dir / METRICS_FILE)  # every rotated part too
        if not records:  # a run still starting, or one left by a failed start (the kit now removes those)
            table.add_row(str(run_dir), str(info.get("workload", "?")), str(info.get("policy", "?")), "0", "0",
                          "no batches", *["-"] * 6)
            continue
        # each record carries its bound; runs recorded before it did are judged by run.json's target
        legacy = not any("bound_s" in r for r in records)
        s = summarize(records, bound_s=info.get("target_s") if legacy else None)
        table.add_row(
            str(run_dir),
            str(info.get("workload", "?")),
            str(info.get("policy", "?")),
            _fmt(s["batches"]),
            _fmt(s["rows"]),
            _fmt(s["max_latency_mean_s"]),
            _fmt(s["max_latency_p50_s"]),
            _fmt(s["max_latency_p99_s"]),
            _fmt(s["max_latency_max_s"]),
            _fmt(s["latency_mean_s"]),
            _fmt(s["throughput_rows_s"], digits=0),
            _fmt(100 * s["within_bound"], " %", 1) if "within_bound" in s else "-",
        )
    _console().print(table)


@cli.command()
@click.option("--queries", default=",".join(("LR1S", "LR1T", "LR2S", "CM1S", "CM1T", "CM2S")), show_default=True, help="Comma-separated workloads: built-ins, or your own as path/to/file.py:NAME or package.module:NAME (with a traffic generator).")
@click.option("--policies", default="lmstream,fixed,asap", show_default=True, help="Comma-separated policies.")
@click.option("--traffic", default="constant,random", show_default=True, help="Comma-separated traffic patterns.")
@click.option("--duration", default=300.0, show_default=True, type=float, help="Simulated seconds of traffic per cell.")
@click.option("--repeat", default=1, show_default=True, type=int, help="Repetitions of each cell.")
@click.option("--speedup", default=4.0, show_default=True, type=float, help="Simulated seconds per wall second.")
@click.option("--rate", default=1000.0, show_default=True, type=float, help="Offered rows per simulated second.")
@click.option("--spread", default=None, type=float, help="Std. dev. of random traffic [default: 25% of rate].")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--trigger", "trigger_s", default=10.0, show_default=True, type=float, help="Interval of the fixed policy, simulated s.")
@click.option("--warmup", "warmup_s", default=20.0, show_default=True, type=float, help="Simulated seconds of a discarded warm-up run per query before its first measured run on a JVM (0: none).")
@click.option("--jvm-warmup", "jvm_warmup_s", default=45.0, show_default=True, type=float, metavar="SECONDS", help="Wall seconds the first warm-up on a fresh JVM (the start, a resume, a new session) lasts at least: Java's compiler is at work that long.")
@click.option("--capacity/--no-capacity", default=False, show_default=True, help="Also search each policy's highest sustained rate.")
@click.option("--capacity-duration", default=60.0, show_default=True, type=float, help="Simulated seconds per capacity probe.")
@click.option("--capacity-start", default=None, type=float, help="First probed rate [default: --rate].")
@click.option("--capacity-probes", default=12, show_default=True, type=int, help="Most probe runs per query and policy, repetitions included: the search bisects until [highest pass, lowest fail] is within 10%, running each bound twice (seeds --seed and --seed + 1).")
@click.option("--capacity-max-rate", default=64000.0, show_default=True, type=float, metavar="RATE", help="Highest rate the capacity search tries (rows per simulated second): a policy that passes it is reported open (>= RATE).")
@click.option("--capacity-min-batches", default=20, show_default=True, type=int, help="Pool a rate's probe runs: it passes where 95% of all their batches met the bound and fails only where more than 5% of at least this many were late; with fewer and one late batch it runs again, so one late batch of a policy's few large ones fails no rate (0: most runs decide).")
@click.option("--overload", "overloads", multiple=True, metavar="QUERY=RATE", help="Also run every policy on QUERY at RATE rows per simulated second (constant traffic): pick a rate above the fixed trigger's capacity for the paper's Fig. 1, where its maximum latency grows batch after batch (repeatable).")
@click.option("--at-capacity", "at_capacity", default=None, type=float, metavar="SHARE", help="With --capacity: then run every policy once per query at SHARE of asap's measured capacity (e.g. 0.8), constant traffic; the report's goals read them.")
@click.option("--tumbling-target", default="window", show_default=True, type=click.Choice(["window", "paper"]), help="lmstream's target on tumbling queries: batch up to the window's length and admit at once what closes a window, or LMStream's running mean of past max latencies (paper).")
@click.option("--service-model", default="bytes", show_default=True, type=click.Choice(["bytes", "features"]), help="lmstream's service-time model: bytes, or bytes, windows closed, state and evictions.")
@click.option("--catch-up", "catch_up", default="chunks", show_default=True, type=click.Choice(["chunks", "all"]), help="lmstream's rule for a backlog that cannot meet the target in one batch: chunks that fit it, or all at once (LMStream's).")
@click.option("--controller", "controller_params", multiple=True, metavar="KEY=VALUE", help="A parameter of the lmstream policy's admission controller, e.g. quantile=0.97 or min_margin_s=0.5, to measure a margin rule (repeatable; keys: quantile, history, min_margin_s, cold_start, interval_margin, prior_processing_s, initial_target_s, poll_interval_s, warmup, gc_margin, heap_admit, idle_collect, close_horizon, row_cap, cold_evictions, evict_horizon, busy_load, cold_target_s, cold_fraction).")
@click.option("--capacity-budget", default=None, type=float, metavar="SECONDS", help="Wall seconds for the whole capacity search; after them no probe starts and each unfinished query and policy is reported as not converged, with its bracket so far [default: no limit].")
@click.option("--output", default="noop", show_default=True, type=click.Choice(["noop", "parquet"]), help="Sink of every cell.")
@click.option("--master", default="local[2]", show_default=True, help="Spark master: local[N] or spark://host:port.")
@click.option("--format", "results_format", default="parquet", show_default=True, type=click.Choice(["parquet", "csv"]), help="Format of results.")
@click.option("--reproduction", default=None, type=click.Path(path_type=Path), help="Also write the reproduction report (Markdown) here.")
@click.option("--notes", default=None, type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Markdown appended to the reproduction report under 'Where we differ and why'.")
@click.option("--device-mode", default="advisory", show_default=True, help="auto | advisory | rapids | twin: device mode of every stream (see `run --help`).")
@click.option("--optimizer/--no-optimizer", default=None, help="Re-tune the inflection point online [default: on for the lmstream policy].")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Extra Spark conf (repeatable).")
@click.option("--jars", default=None, help="Comma-separated jars for Spark (spark.jars).")
@click.option("--feed", default=None, metavar="kafka://HOST:PORT/PREFIX", help="Send every run's traffic through a Kafka topic of its own (PREFIX-RUN-START, created) and stream from it; ?format=avro for Avro values [default: the spool].")
@click.option("--kafka-partitions", default=2, show_default=True, type=int, help="Partitions of each topic of --feed.")
@click.option("--state-store", default="default", show_default=True, type=click.Choice(["default", "rocksdb"]), help="State store of every run's stateful operators: Spark's default keeps the state in the JVM's heap (the driver's, in local mode), rocksdb in native memory and local files.")
@click.option("--preset", default=None, type=click.Choice(sorted(BENCH_PRESETS)), help="Start from a named sweep; options given explicitly override it. paper: the reproduction of docs/reproduction.md (all six queries, three policies, both traffic kinds, 120 simulated s at speedup 2, the capacity search (120 s probes up to 256,000 rows/s, 16 per query and policy) with a 6 h budget, overload cells for Fig. 1 on LR2S at 256,000 rows/s and LR1S at 2,000, cells at 80% of asap's capacity, a 4 GiB driver heap, the controller's margin at quantile=0.97 and min_margin_s=0.5; a --conf or --controller given adds to its own).")
@click.option("--resume", is_flag=True, default=False, help="Go on with the interrupted bench in --out: the cells and capacity probes it finished are kept, the rest run. Give the same options (a setting that changes what a cell measures is refused).")
@click.option("--remeasure", "remeasure", multiple=True, metavar="QUERY", help="With --resume: run QUERY's finished cells again, every policy side by side (repeatable). A resumed bench also runs again every policy of a cell that failed or is new.")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), help="Bench directory.")
def bench(queries, policies, traffic, duration, repeat, speedup, rate, spread, seed, trigger_s, warmup_s, jvm_warmup_s, capacity, capacity_duration, capacity_start, capacity_probes, capacity_max_rate, capacity_min_batches, capacity_budget, overloads, at_capacity, tumbling_target, service_model, catch_up, controller_params, output, master, results_format, reproduction, notes, device_mode, optimizer, confs, jars, feed, kafka_partitions, state_store, preset, resume, remeasure, out):
    """Run queries x policies x traffic and write results.parquet and report.html.

    Every cell runs to the end of its traffic on one SparkSession; the same
    seed gives every policy the same rows.  With --capacity, each policy's
    highest offered rate that keeps 95% of batches within the bound is searched
    too.  A progress bar follows the sweep.
    """
    from .bench import BenchConfig, command_line, run_bench
    from .stream_config import check_master

    check_master(master)
    if preset is not None:  # the preset's values, where the option was not given
        given = _given_options(click.get_current_context())
        values = {k: v for k, v in BENCH_PRESETS[preset].items() if k not in given}
        duration = values.get("duration", duration)
        speedup = values.get("speedup", speedup)
        rate = values.get("rate", rate)
        capacity = values.get("capacity", capacity)
        capacity_duration = values.get("capacity_duration", capacity_duration)
        capacity_budget = values.get("capacity_budget", capacity_budget)
        capacity_probes = values.get("capacity_probes", capacity_probes)
        capacity_max_rate = values.get("capacity_max_rate", capacity_max_rate)
        overloads = values.get("overloads", overloads)
        at_capacity = values.get("at_capacity", at_capacity)
        confs = (*BENCH_PRESETS[preset].get("confs", ()), *confs)  # merged: a given key wins
        controller_params = (*BENCH_PRESETS[preset].get("controller_params", ()), *controller_params)
    cfg = BenchConfig(
        queries=queries, policies=policies, traffic=traffic, duration_s=duration, repeat=repeat,
        speedup=speedup, rate=rate, spread=spread, seed=seed, trigger_s=trigger_s, warmup_s=warmup_s, jvm_warmup_s=jvm_warmup_s,
        capacity=capacity, capacity_duration_s=capacity_duration, capacity_start=capacity_start,
        capacity_probes=capacity_probes, capacity_max_rate=capacity_max_rate, capacity_min_batches=capacity_min_batches, capacity_budget_s=capacity_budget, tumbling_target=tumbling_target, catch_up=catch_up,
        service_model=service_model, controller=_controller_params(controller_params),
        overload=_overloads(overloads), at_capacity=at_capacity, output=output,
        master=master,
        results_format=results_format,
        spark_conf=_spark_conf(confs, jars), device_mode=device_mode, optimizer=optimizer,
        feed=feed, kafka_partitions=kafka_partitions, state_store=state_store,
    )
    notes_text = notes.read_text() if notes is not None else None
    _quiet_py4j()  # a Ctrl-C cancels the batch job: py4j would print the foreachBatch callback's traceback
    result = _with_bench_progress(
        lambda progress: run_bench(cfg, out, progress=progress, command=command_line(),
                                   reproduction=reproduction, notes=notes_text, resume=resume,
                                   remeasure=remeasure)
    )
    _bench_table(result.results)
    console = _console()
    console.print(f"results: {out / ('results.' + results_format)}   report: {result.report}")
    if reproduction is not None:
        console.print(f"reproduction report: {reproduction}")
    if result.meta.get("failed"):
        click.echo(f"error: bench stopped early: {result.meta['failed']}; the cells before it and what it "
                   f"measured are in {out}", err=True)
        sys.exit(1)


@cli.command()
@click.argument("bench_dir", type=click.Path(path_type=Path))
@click.option("--reproduction", default=None, type=click.Path(path_type=Path), help="Also write the reproduction report (Markdown) here.")
@click.option("--notes", default=None, type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Markdown appended under 'Where we differ and why'.")
def report(bench_dir, reproduction, notes):
    """Rebuild report.html (and a reproduction report) from a bench directory."""
    from .bench import load_bench, write_reports

    results, batches, capacity, meta = load_bench(bench_dir)
    write_reports(bench_dir, results, batches, capacity, meta, reproduction=reproduction,
                  notes=notes.read_text() if notes is not None else None)
    click.echo(f"report: {bench_dir / 'report.html'}")


def _quiet_py4j() -> None:
    """Keep py4j's logging off the terminal: a dead JVM is one line (the kit's own), not 100 (py4j logs
    each failed call, some through the root logger), and a cancelled batch job prints no traceback of
    the foreachBatch callback that saw it."""
    import logging

    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    logging.getLogger().addFilter(lambda record: not record.getMessage().startswith("Exception while sending command"))


def _with_bench_progress(work):
    """``work(progress)`` with the bench's progress on stderr: a live bar on a terminal, else plain lines."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = _console(stderr=True)
    if not console.is_terminal:  # a log file: no bar (rich would print it too), one line per step
        return work(_progress_lines())
    columns = [TextColumn("[bold]{task.description:<9}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[label]}"), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=False) as bar:
        tasks: dict = {}

        def progress(event: dict) -> None:
            phase = "sweep" if event["phase"] == "warmup" else event["phase"]
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=event["total"], label="")
            bar.update(tasks[phase], completed=event["done"], total=event["total"], label=event["label"])

        return work(progress)


def _progress_lines():
    """A bench progress callback that writes one line per step to stderr.

    The bench reports a cell when it starts and again when it is done; the second
    report of the same step is not repeated (the next step's line follows it).
    """
    started = time.monotonic()
    last: list = [None]

    def progress(event: dict) -> None:
        phase = "sweep" if event["phase"] == "warmup" else event["phase"]
        if (phase, event["label"]) == last[0]:
            return
        last[0] = (phase, event["label"])
        elapsed = time.monotonic() - started
        click.echo(f"[{elapsed:7.0f} s] {phase} {event['done']}/{event['total']} {event['label']}", err=True)

    return progress


def _bench_table(results) -> None:
    from rich.table import Table

    table = Table(title="bench: one row per cell (wall seconds)")
    cols = ("query", "policy", "traffic", "rep", "batches", "rows", "avg latency", "p95 max latency",
            "within bound", "rows/s", "CPU s / M rows")
    for col in cols:
        table.add_column(col, justify="left" if col in ("query", "policy", "traffic") else "right")
    for r in results.to_dict("records"):
        table.add_row(
            r["query"], r["policy"], r["traffic"], str(r["rep"]), _fmt(r["batches"]), _fmt(r["rows"]),
            _fmt(r["avg_latency_s"], " s"), _fmt(r["p95_max_latency_s"], " s"),
            _fmt(100 * r["within_bound"], " %", 1), _fmt(r["throughput_rows_s"], "", 0),
            _fmt(r["cpu_s_per_mrows"], "", 1),
        )
    _console().print(table)


@cli.command()
@click.option("--workload", "spec", default=None, help="Describe your own: path/to/file.py[:NAME] or package.module:NAME.")
def workloads(spec):
    """List the available workloads, or describe your own (--workload)."""
    from .workloads import WORKLOADS
    from .workloads.loader import find_workloads

    if spec is None:
        for name in WORKLOADS.names():
            w = WORKLOADS.get(name)
            click.echo(f"{name:12s} {w.window_text:26s} {w.description}")
        return
    found = find_workloads(spec)
    if not found:
        raise KitError(f"{spec} defines no workload (build one with lmstream_kit.define_workload)")
    for w in found:
        click.echo(f"{w.name}: {w.description}")
        click.echo(f"  window:     {w.window_text}")
        click.echo(f"  event time: {w.event_time or w.time_column or '-'}")
        click.echo(f"  schema:     {', '.join(f'{f.name} {f.type}' for f in w.schema)}")
        if w.checks:
            click.echo(f"  checks:     {', '.join(w.checks)}")
        click.echo(f"  traffic:    {'generated (rows=), or --input DIR' if w.generated else 'files only: --input DIR'}")


@cli.command()
@click.option("--workers", default=1, show_default=True, type=int)
@click.option("--cores", default=2, show_default=True, type=int, help="Cores per worker.")
@click.option("--memory", default="2g", show_default=True, help="Memory per worker.")
def cluster(workers, cores, memory):
    """Start a standalone Spark cluster on 127.0.0.1 until Ctrl-C.

    Point runs at it with `lmstream-kit run --master spark://127.0.0.1:PORT`.
    """
    from .engine.cluster import StandaloneCluster

    c = StandaloneCluster(workers=workers, cores=cores, memory=memory)
    click.echo("starting master and workers ...")
    _serve_until_stopped(c, "cluster", lambda: f"master: {c.master_url}   logs: {c.log_dir}   (Ctrl-C stops)")


def _serve_until_stopped(service, what: str, ready: Callable[[], str], *, running: Callable[[], bool] | None = None,
                         exited: Callable[[], str] | None = None) -> None:
    """Start ``service`` (a stop meanwhile is held until it is up: cut in half, it would leave a process
    running with nobody to stop it), print ``ready()``, then wait for Ctrl-C or a stop signal, or until
    ``running()`` is false (then a KitError with ``exited()``); the service is stopped in every case."""
    from .signals import deferred_stop

    try:
        with deferred_stop(lambda name: click.echo(f"{name}: stopping once the {what} has started ...")):
            service.start()
    except KeyboardInterrupt:
        service.stop()
        raise
    try:  # the ready line inside: a Ctrl-C right after it still stops the service cleanly
        click.echo(ready())
        while running is None or running():
            time.sleep(1)
        raise KitError(exited() if exited is not None else f"the {what} exited")
    except KeyboardInterrupt:
        click.echo("stopping ...")
    finally:
        service.stop()


@cli.command()
@click.option("--port", default=9092, show_default=True, type=int, help="The client port on 127.0.0.1.")
@click.option("--dir", "data_dir", type=click.Path(path_type=Path), default=None,
              help="Its storage, configuration and log; kept, so topics survive a restart "
                   "[default: a temporary directory, removed on exit].")
def kafka(port, data_dir):
    """Start a single-node Apache Kafka broker (KRaft) on 127.0.0.1 until Ctrl-C.

    Its jars come from Maven Central the first time (Maven, `mvn`, is needed once; they are kept
    in ~/.cache/lmstream_kit/jars). Producers, consumers and the kit's source reach it at
    127.0.0.1:PORT.
    """
    from .kafka import KafkaBroker

    broker = KafkaBroker(port=port, data_dir=data_dir)
    click.echo("starting Kafka (the first start fetches its jars from Maven Central) ...")
    _serve_until_stopped(broker, "broker",
                         lambda: f"broker: {broker.bootstrap}   data and log: {broker.data_dir}   (Ctrl-C stops)",
                         running=lambda: broker.running,
                         exited=lambda: f"the Kafka broker exited; its log: {broker.log_file}")


@cli.group()
def jars():
    """Jars from Maven Central (a Kafka broker, ...), kept outside the repository."""


@jars.command("fetch")
@click.argument("names", nargs=-1)
def jars_fetch(names):
    """Fetch jar sets with Maven (all of them without NAMES) and print where they are.

    Sets: kafka (the broker), spark-kafka (Spark's Kafka connector for the installed PySpark).
    """
    from .jars import JAR_SETS, cache_dir, jar_set, resolve

    names = names or (*JAR_SETS, "spark-kafka")
    for name in names:  # an unknown name is refused before Maven runs
        jar_set(name)
    for name in names:
        click.echo(f"{name}: resolving with Maven ...")
        found = resolve(name)
        click.echo(f"{name}: {len(found)} jars in {found[0].parent if found else cache_dir()}")


@cli.command("class-archive")
@click.option("--rebuild", is_flag=True, help="Build it again even where it is there.")
@click.option("--remove", is_flag=True, help="Delete it: Spark's driver starts the ordinary way again.")
def class_archive(rebuild, remove):
    """Build the Spark driver's class-data archive: the kit's sessions start about a third sooner.

    Java's class-data sharing keeps Spark's classes parsed and verified in one file (kept in
    ~/.cache/lmstream_kit/jvm, one per Java runtime and PySpark version) that every later driver
    maps instead of reading them from Spark's jars. Building it runs a short stream (about a
    minute). LMSTREAM_CLASS_ARCHIVE=0 turns its use off.
    """
    from .engine.classarchive import build_archive, remove_archive

    if remove:
        gone = remove_archive()
        click.echo(f"removed {gone}" if gone else "no class-data archive to remove")
        return
    build_archive(force=rebuild, say=click.echo)


def main(argv: Optional[list[str]] = None) -> int:
    import signal

    from .signals import StopSignal, stop_received, stop_signals

    try:
        with stop_signals():  # SIGTERM and SIGHUP take Ctrl-C's clean path
            cli.main(args=argv, prog_name="lmstream-kit", standalone_mode=False)
    except KitError as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except StopSignal as exc:
        click.echo(f"stopped ({exc.name})", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception:
        name = stop_received()
        if name is None:
            raise
        # a Ctrl-C (or stop signal) inside a call to Spark's JVM surfaces as that call's py4j error
        stop = StopSignal(signal.Signals[name])
        click.echo("aborted" if stop.signum == signal.SIGINT else f"stopped ({stop.name})", err=True)
        return stop.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
