"""The comparison benchmark: queries x policies x traffic, repeated, on one SparkSession.

``lmstream-kit bench`` (and :func:`run_bench`) runs every cell of the sweep as a
:class:`~lmstream_kit.live.LiveStream` to the end of its traffic, one after the
other on one SparkSession, and writes into ``out``:

``runs/<query>-<policy>-<traffic>-r<rep>/``
    each cell's run directory (metrics.jsonl, spark_progress.jsonl, run.json, spool);
``cells.jsonl``
    one line per finished cell, appended as it finishes (a crash keeps them);
``results.parquet`` (or ``.csv``)
    one row per cell and repetition (see :func:`cell_row` for the columns);
``batches.parquet``
    one row per data micro-batch of every cell (Figs. 1, 8, 9);
``capacity.parquet``
    one row per probe of the capacity search (with ``--capacity``);
``bench.json``
    the configuration, machine and versions;
``report.html``
    the self-contained report (:mod:`lmstream_kit.report`).

Fairness: cells with the same traffic and repetition get the same seed, so every
policy sees the same offered rows; the policies of one (query, traffic, rep) run
back to back, so drift of a noisy machine hits them alike; each query first runs
a short discarded warm-up, so no measured cell pays for the JVM's cold code.

Time is compressed by ``speedup``: windows, slides, the fixed trigger and the
offered rate are in simulated seconds; latencies are measured in wall seconds,
where the bound of a sliding query is ``slide / speedup``.  For tumbling
queries the bound used for ``within_bound`` and the capacity search is the
window's length (a tumbling window's slide), ``range / speedup``; the
controller's own tumbling target (the running mean of past maximum latencies)
is a moving target that a steady run exceeds about half of the time, so it
cannot serve as a pass/fail bound.

CPU per cell is read from the OS (:mod:`lmstream_kit.cpu`): the driver JVM, the
Python workers it spawns and the kit's own process.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from .devices import check_device_mode
from .exceptions import ConfigError
from .policies import POLICIES
from .record import latency_bound, summarize
from .workloads import get_workload

ProgressFn = Callable[[dict], None]

#: the paper's six queries (Table III)
ALL_QUERIES = ("LR1S", "LR1T", "LR2S", "CM1S", "CM1T", "CM2S")
#: share of batches that must meet the bound for a rate to count as sustained
CAPACITY_SHARE = 0.95


@dataclass
class BenchConfig:
    """What one ``bench`` run sweeps.

    Parameters
    ----------
    queries, policies, traffic : sequence of str
        The sweep's axes (workload names, policy names, traffic patterns).
    duration_s : float
        Simulated seconds of traffic per cell.
    repeat : int
        Repetitions of each cell (repetition ``r`` uses seed ``seed + r``).
    speedup : float
        Simulated seconds per wall second (time compression).
    rate : float
        Offered rows per simulated second (the mean for random traffic).
    spread : float, optional
        Standard deviation of random traffic (default 25% of the rate).
    trigger_s : float
        The fixed policy's interval, simulated seconds (the paper's 10 s).
    output : {"noop", "parquet"}
        The sink of every cell (noop computes the result and drops it).
    warmup_s : float
        Simulated seconds of a discarded asap run of each query before its cells
        (0: none).
    capacity : bool
        Also search each policy's and query's capacity.
    capacity_duration_s : float
        Simulated seconds of each capacity probe.
    capacity_start : float, optional
        First probed rate (default: ``rate``).
    capacity_probes : int
        Most probes per (query, policy).
    capacity_max_rate : float
        Highest rate the search tries.
    device_mode : str
        Device mode of every stream (see :mod:`lmstream_kit.devices`; default ``advisory``).
    optimizer : bool, optional
        Run the inflection-point optimizer (default: for the ``lmstream`` policy).
    spark_conf : dict
        Extra Spark confs of the bench's session (e.g. the RAPIDS plugin's).
    """

    queries: Sequence[str] = ALL_QUERIES
    policies: Sequence[str] = ("lmstream", "fixed", "asap")
    traffic: Sequence[str] = ("constant", "random")
    duration_s: float = 300.0
    repeat: int = 1
    speedup: float = 4.0
    rate: float = 1000.0
    spread: Optional[float] = None
    seed: int = 0
    trigger_s: float = 10.0
    master: str = "local[2]"
    output: str = "noop"
    read: str = "auto"
    warmup_s: float = 20.0
    capacity: bool = False
    capacity_duration_s: float = 60.0
    capacity_start: Optional[float] = None
    capacity_probes: int = 6
    capacity_max_rate: float = 64000.0
    results_format: str = "parquet"
    spark_conf: dict = field(default_factory=dict)
    device_mode: str = "advisory"
    optimizer: Optional[bool] = None

    def __post_init__(self) -> None:
        check_device_mode(self.device_mode)
        self.queries = tuple(get_workload(q).name for q in _names(self.queries, "queries"))
        self.policies = tuple(POLICIES.get(p).name for p in _names(self.policies, "policies"))
        self.traffic = tuple(_names(self.traffic, "traffic"))
        for t in self.traffic:
            if t not in ("constant", "random"):
                raise ConfigError(f"bench traffic must be 'constant' or 'random', got {t!r}")
        for name in ("duration_s", "speedup", "rate", "trigger_s", "capacity_duration_s", "capacity_max_rate"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{name.replace('_s', '')} must be > 0, got {value!r}")
        if not (isinstance(self.repeat, int) and self.repeat >= 1):
            raise ConfigError(f"repeat must be an integer >= 1, got {self.repeat!r}")
        if not (isinstance(self.capacity_probes, int) and self.capacity_probes >= 1):
            raise ConfigError(f"capacity probes must be an integer >= 1, got {self.capacity_probes!r}")
        if self.warmup_s < 0:
            raise ConfigError(f"warmup must be >= 0 seconds, got {self.warmup_s!r}")
        if self.output not in ("noop", "parquet"):
            raise ConfigError(f"output must be 'noop' or 'parquet', got {self.output!r}")
        if self.results_format not in ("parquet", "csv"):
            raise ConfigError(f"results format must be 'parquet' or 'csv', got {self.results_format!r}")
        if self.capacity_start is not None and not self.capacity_start > 0:
            raise ConfigError(f"capacity start rate must be > 0, got {self.capacity_start!r}")

    def cells(self) -> list[dict]:
        """The sweep's cells in run order: policies of one (query, traffic, rep) back to back."""
        return [
            {"query": q, "traffic": t, "rep": r, "policy": p}
            for q in self.queries
            for r in range(self.repeat)
            for t in self.traffic
            for p in self.policies
        ]


def _names(value, what: str) -> list[str]:
    if isinstance(value, str):
        value = value.split(",")
    names = [str(v).strip() for v in value if str(v).strip()]
    if not names:
        raise ConfigError(f"bench needs at least one of {what}")
    return names


# ---------------------------------------------------------------------- capacity search
class CapacitySearch:
    """Find the highest sustained rate by doubling, halving and geometric bisection.

    Pure logic: ask :meth:`next_rate`, run a probe at that rate, tell the outcome
    with :meth:`record`; :attr:`capacity` is the highest rate that passed (None if
    none did).  The search starts at ``start``; doubles while probes pass (up to
    ``max_rate``); halves while they fail (down to ``start / 8``); then bisects
    (geometric midpoint) between the highest pass and the lowest fail until they
    are within ``resolution`` (relative) or ``max_probes`` probes ran.

    >>> s = CapacitySearch(1000, max_probes=10, max_rate=100000)
    >>> while (r := s.next_rate()) is not None:
    ...     s.record(r, r <= 3000)
    >>> s.capacity, [p for p, _ in s.probes]
    (2828, [1000, 2000, 4000, 2828, 3363, 3084])
    """

    def __init__(
        self,
        start: float,
        *,
        max_probes: int = 6,
        max_rate: float = 64000.0,
        factor: float = 2.0,
        resolution: float = 0.1,
    ) -> None:
        if not start > 0:
            raise ConfigError(f"capacity start rate must be > 0, got {start!r}")
        self.start = float(start)
        self.max_probes = int(max_probes)
        self.max_rate = float(max_rate)
        self.factor = float(factor)
        self.resolution = float(resolution)
        self.floor = self.start / 8.0
        self.probes: list[tuple[int, bool]] = []
        self.lo: Optional[int] = None  # highest rate that passed
        self.hi: Optional[int] = None  # lowest rate that failed

    @property
    def capacity(self) -> Optional[int]:
        return self.lo

    def next_rate(self) -> Optional[int]:
        if len(self.probes) >= self.max_probes:
            return None
        if self.lo is None and self.hi is None:
            return int(round(self.start))
        if self.hi is None:
            if self.lo >= self.max_rate:
                return None
            return int(round(min(self.lo * self.factor, self.max_rate)))
        if self.lo is None:
            rate = self.hi / self.factor
            return None if rate < self.floor else int(round(rate))
        if self.hi / self.lo - 1.0 <= self.resolution:
            return None
        rate = int(round(math.sqrt(self.lo * self.hi)))
        return None if rate in (self.lo, self.hi) else rate

    def record(self, rate: float, passed: bool) -> None:
        rate = int(round(rate))
        self.probes.append((rate, bool(passed)))
        if passed:
            self.lo = rate if self.lo is None else max(self.lo, rate)
        else:
            self.hi = rate if self.hi is None else min(self.hi, rate)


# ---------------------------------------------------------------------- one cell
def bound_s(workload, speedup: float) -> float:
    """The latency bound in wall seconds (:func:`~lmstream_kit.record.latency_bound`) of ``workload``."""
    return latency_bound(workload.slide_s, workload.window_range_s, speedup)


#: the results' columns and the :func:`~lmstream_kit.record.summarize` keys they hold
_CELL_SUMMARY = {
    "wall_s": "wall_s",
    "avg_latency_s": "latency_mean_s",
    "mean_max_latency_s": "max_latency_mean_s",
    "p95_max_latency_s": "max_latency_p95_s",
    "max_latency_s": "max_latency_max_s",
    "within_bound": "within_bound",
    "throughput_rows_s": "throughput_rows_s",
    "sustained_rows_s": "sustained_rows_s",
    "mean_rows_per_batch": "rows_per_batch",
    "buffering_s": "buffering_s",
    "decision_s": "decision_s",
    "mapping_s": "mapping_s",
    "processing_s": "processing_s",
    "optimizer_s": "optimizer_s",
}


def cell_row(metrics, *, workload, policy: str, traffic: str, rep: int, seed: int, rate: float,
             speedup: float, duration_s: float, cpu: Optional[dict] = None) -> dict:
    """Summarise one cell's per-batch metrics (a :func:`~lmstream_kit.metrics.load_metrics` frame).

    Latencies and times are wall seconds.  ``avg_latency_s`` is the row-weighted
    mean latency, ``throughput_rows_s`` the rows over the summed processing
    time, ``sustained_rows_s`` the rows over first arrival to last completion,
    ``within_bound`` the share of data batches whose maximum latency is at most
    ``bound_s``.  The five time components are summed over the data batches
    (Table IV); ``mapping_s`` (DAG lookup, mapping and applying the plan) and ``optimizer_s``
    (waiting for the optimizer) are spent inside ``processing_s``.
    """
    data = metrics[metrics["rows"] > 0] if len(metrics) else metrics
    rows = int(data["rows"].sum()) if len(data) else 0
    bound = bound_s(workload, speedup)
    row: dict[str, Any] = {
        "query": workload.name,
        "window_kind": workload.window_kind,
        "policy": policy,
        "traffic": traffic,
        "rep": int(rep),
        "seed": int(seed),
        "rate": float(rate),
        "speedup": float(speedup),
        "duration_s": float(duration_s),
        "slide_s": float(workload.slide_s),
        "range_s": float(workload.window_range_s),
        "bound_s": bound,
        "batches": int(len(data)),
        "rows": rows,
    }
    nan = float("nan")
    summary = summarize(data.to_dict("records") if len(data) else [], bound_s=bound)
    row.update({column: summary[key] for column, key in _CELL_SUMMARY.items()})
    cpu = cpu or {}
    jvm, workers, kit = (float(cpu.get(k, nan)) for k in ("jvm_s", "workers_s", "kit_s"))
    total = sum(v for v in (jvm, workers, kit) if not math.isnan(v)) if cpu else nan
    row.update(
        cpu_jvm_s=jvm,
        cpu_workers_s=workers,
        cpu_kit_s=kit,
        cpu_total_s=total,
        cpu_s_per_mrows=total / rows * 1e6 if rows and not math.isnan(total) else nan,
    )
    return row


def batch_rows(metrics, *, workload, policy: str, traffic: str, rep: int, speedup: float) -> list[dict]:
    """The data batches of one cell, for the per-batch figures."""
    data = metrics[metrics["rows"] > 0] if len(metrics) else metrics
    if not len(data):
        return []
    first = float(data["oldest_arrival"].min())
    bound = bound_s(workload, speedup)
    out = []
    for r in data.itertuples(index=False):
        out.append(
            {
                "query": workload.name,
                "window_kind": workload.window_kind,
                "policy": policy,
                "traffic": traffic,
                "rep": int(rep),
                "batch_id": int(r.batch_id),
                "t_s": float(r.completed_at) - first,
                "max_latency_s": float(r.max_latency_s),
                "avg_latency_s": float(r.avg_latency_s),
                "rows": int(r.rows),
                "bytes": int(r.bytes),
                "buffering_s": float(r.buffering_s),
                "processing_s": float(r.processing_s),
                "bound_s": bound,
            }
        )
    return out


class _Runner:
    """Runs cells on one SparkSession and measures their CPU."""

    def __init__(self, cfg: BenchConfig, out: Path, spark, meter) -> None:
        self.cfg = cfg
        self.out = out
        self.spark = spark
        self.meter = meter

    def stream(self, query: str, policy: str, traffic: str, *, rate: float, seed: int, duration_s: float,
               run_dir: Path):
        from .live import LiveStream

        if run_dir.exists():
            shutil.rmtree(run_dir)  # a fresh run, not a resume of an older bench
        return LiveStream(
            query,
            policy=policy,
            traffic=traffic,
            rate=rate,
            spread=self.cfg.spread,
            speedup=self.cfg.speedup,
            seed=seed,
            duration_s=duration_s,
            run_dir=run_dir,
            spark=self.spark,
            trigger_s=self.cfg.trigger_s,
            output=self.cfg.output,
            read=self.cfg.read,
            device_mode=self.cfg.device_mode,
            optimizer=self.cfg.optimizer,
        )

    def run(self, query: str, policy: str, traffic: str, *, rate: float, seed: int, duration_s: float,
            run_dir: Path, catch_up_s: Optional[float] = None):
        """Run one stream to the end of its traffic; returns (metrics frame, cpu dict, caught_up).

        With ``catch_up_s=None`` everything fed is processed (the stream is
        drained).  Otherwise the stream gets ``catch_up_s`` wall seconds after the
        feed ends to process what is pending under its own policy, and is then
        stopped; ``caught_up`` says whether it did.
        """
        from .metrics import load_metrics

        cfg = self.cfg
        stream = self.stream(query, policy, traffic, rate=rate, seed=seed, duration_s=duration_s,
                             run_dir=run_dir)
        before = self.meter.sample() if self.meter is not None else None
        wall = duration_s / cfg.speedup
        caught_up = True
        stream.start()
        try:
            stream.wait(until=lambda s: s.feed_finished(), timeout=3 * wall + 120)
            if catch_up_s is None:
                stream.stop(drain=True, timeout=3 * wall + 120)
            else:
                try:
                    stream.wait(until=lambda s: s.caught_up(), timeout=catch_up_s)
                except TimeoutError:
                    caught_up = False
                stream.stop(drain=False)
        finally:
            stream.stop(drain=False)  # no-op when already stopped
        after = self.meter.sample() if self.meter is not None else None
        cpu = (after - before).to_dict() if before is not None else None
        return load_metrics(run_dir), cpu, caught_up


def machine_info() -> dict:
    """CPU model, cores, memory and OS of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import psutil

        memory = round(psutil.virtual_memory().total / 2**30, 1)
    except Exception:
        memory = None
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": memory, "os": platform.platform()}


@dataclass
class BenchResult:
    results: Any
    batches: Any
    capacity: Any
    meta: dict
    out: Path

    @property
    def report(self) -> Path:
        return self.out / "report.html"


def run_bench(
    cfg: BenchConfig,
    out,
    *,
    spark=None,
    progress: Optional[ProgressFn] = None,
    command: Optional[str] = None,
    reproduction: Optional[Path] = None,
    notes: Optional[str] = None,
) -> BenchResult:
    """Run the sweep (and the capacity search) and write results, figures and report.

    ``progress(event)`` is called before and after every cell/probe with
    ``{"phase", "done", "total", "label"}`` (``phase``: warmup, sweep, capacity).
    """
    import pandas as pd

    from .cpu import CpuMeter
    from .engine.adapter import SparkEngine
    from .metrics import JsonlWriter

    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create bench directory {out}: {exc.strerror}") from None
    notify = progress or (lambda event: None)
    started = datetime.now(timezone.utc)
    engine = SparkEngine(master=cfg.master, spark=spark, conf=cfg.spark_conf, app_name="lmstream_kit-bench")
    engine.open()
    try:
        meter = CpuMeter(engine.driver_pid())
        runner = _Runner(cfg, out, engine.spark, meter)
        meta = {
            "command": command or "run_bench(...)",
            "started_at": started.isoformat(timespec="seconds"),
            "machine": machine_info(),
            "python": platform.python_version(),
            "spark_version": engine.spark_version(),
            "java_version": engine.java_version(),
            "kit_version": _kit_version(),
            "master": engine.master,
            "config": _config_dict(cfg),
            **{k: _config_dict(cfg)[k] for k in ("speedup", "duration_s", "repeat", "rate", "queries",
                                                  "policies", "traffic", "trigger_s", "output")},
        }
        cells_log = JsonlWriter(out / "cells.jsonl")
        rows: list[dict] = []
        batch_records: list[dict] = []
        cells = cfg.cells()
        warm = [q for q in cfg.queries] if cfg.warmup_s > 0 else []
        total = len(cells) + len(warm)
        done = 0
        warmed: set[str] = set()
        for cell in cells:
            workload = get_workload(cell["query"])
            if cfg.warmup_s > 0 and workload.name not in warmed:
                label = f"warm-up {workload.name}"
                notify({"phase": "warmup", "done": done, "total": total, "label": label})
                runner.run(workload.name, "asap", "constant", rate=cfg.rate, seed=cfg.seed,
                           duration_s=cfg.warmup_s, run_dir=out / "runs" / f"warmup-{workload.name}")
                warmed.add(workload.name)
                done += 1
            label = f"{workload.name} {cell['policy']} {cell['traffic']} r{cell['rep']}"
            notify({"phase": "sweep", "done": done, "total": total, "label": label})
            seed = cfg.seed + cell["rep"]
            run_dir = out / "runs" / f"{workload.name}-{cell['policy']}-{cell['traffic']}-r{cell['rep']}"
            metrics, cpu, _ = runner.run(workload.name, cell["policy"], cell["traffic"], rate=cfg.rate,
                                         seed=seed, duration_s=cfg.duration_s, run_dir=run_dir)
            row = cell_row(metrics, workload=workload, policy=cell["policy"], traffic=cell["traffic"],
                           rep=cell["rep"], seed=seed, rate=cfg.rate, speedup=cfg.speedup,
                           duration_s=cfg.duration_s, cpu=cpu)
            row.update(run_dir=str(run_dir.relative_to(out)), spark_version=meta["spark_version"])
            rows.append(row)
            cells_log.append(row)
            batch_records.extend(batch_rows(metrics, workload=workload, policy=cell["policy"],
                                            traffic=cell["traffic"], rep=cell["rep"], speedup=cfg.speedup))
            done += 1
            notify({"phase": "sweep", "done": done, "total": total, "label": label})
        cells_log.close()

        probes: list[dict] = []
        if cfg.capacity:
            probes = _capacity(cfg, runner, out, notify)

        results = pd.DataFrame(rows)
        batches = pd.DataFrame(batch_records)
        capacity = pd.DataFrame(probes, columns=["query", "policy", "probe", "rate", "within_bound",
                                                 "passed", "batches", "caught_up"])
        meta["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        write_outputs(out, results, batches, capacity, meta, cfg.results_format)
        write_reports(out, results, batches, capacity, meta, reproduction=reproduction, notes=notes)
        return BenchResult(results, batches, capacity, meta, out)
    finally:
        engine.close()


def _capacity(cfg: BenchConfig, runner: _Runner, out: Path, notify: ProgressFn) -> list[dict]:
    """Search each (query, policy)'s highest rate that meets the bound for 95% of batches."""
    from .metrics import JsonlWriter

    pairs = [(q, p) for q in cfg.queries for p in cfg.policies]
    total = len(pairs) * cfg.capacity_probes
    done = 0
    probes: list[dict] = []
    log = JsonlWriter(out / "capacity.jsonl")
    for query, policy in pairs:
        workload = get_workload(query)
        bound = bound_s(workload, cfg.speedup)
        # after the feed ends, a policy gets one trigger interval (fixed) plus two
        # bounds to catch up; a stream that cannot is overloaded
        catch_up = 2 * bound + (cfg.trigger_s / cfg.speedup if policy == "fixed" else 0.0) + 2.0
        search = CapacitySearch(cfg.capacity_start or cfg.rate, max_probes=cfg.capacity_probes,
                                max_rate=cfg.capacity_max_rate)
        while (rate := search.next_rate()) is not None:
            label = f"capacity {query} {policy} @ {rate} rows/s"
            notify({"phase": "capacity", "done": done, "total": total, "label": label})
            run_dir = out / "runs" / f"capacity-{query}-{policy}-{rate}"
            metrics, _, caught_up = runner.run(query, policy, "constant", rate=rate, seed=cfg.seed,
                                               duration_s=cfg.capacity_duration_s, run_dir=run_dir,
                                               catch_up_s=catch_up)
            data = metrics[metrics["rows"] > 0] if len(metrics) else metrics
            share = float((data["max_latency_s"] <= bound).mean()) if len(data) else 0.0
            passed = caught_up and share >= CAPACITY_SHARE
            search.record(rate, passed)
            probe = {"query": query, "policy": policy, "probe": len(search.probes) - 1, "rate": float(rate),
                     "within_bound": share, "passed": passed, "batches": int(len(data)),
                     "caught_up": caught_up}
            probes.append(probe)
            log.append(probe)
            shutil.rmtree(run_dir / "spool", ignore_errors=True)  # probes keep metrics, not input
            done += 1
        done = (pairs.index((query, policy)) + 1) * cfg.capacity_probes
        notify({"phase": "capacity", "done": done, "total": total, "label": f"capacity {query} {policy}"})
    log.close()
    return probes


def write_outputs(out: Path, results, batches, capacity, meta: dict, fmt: str = "parquet") -> None:
    """Write results, batches, capacity and bench.json into ``out``."""
    if fmt == "csv":
        results.to_csv(out / "results.csv", index=False)
    else:
        results.to_parquet(out / "results.parquet", index=False)
    batches.to_parquet(out / "batches.parquet", index=False)
    capacity.to_parquet(out / "capacity.parquet", index=False)
    tmp = out / "bench.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
    os.replace(tmp, out / "bench.json")


def write_reports(out: Path, results, batches, capacity, meta: dict, *, reproduction: Optional[Path] = None,
                  notes: Optional[str] = None) -> None:
    from . import report

    report.write_report(out / "report.html", results, batches, capacity, meta)
    if reproduction is not None:
        reproduction = Path(reproduction)
        reproduction.parent.mkdir(parents=True, exist_ok=True)
        reproduction.write_text(report.reproduction_markdown(results, batches, capacity, meta, notes=notes))


def load_bench(out) -> tuple:
    """``(results, batches, capacity, meta)`` of a bench directory."""
    import pandas as pd

    out = Path(out)
    if (out / "results.parquet").exists():
        results = pd.read_parquet(out / "results.parquet")
    elif (out / "results.csv").exists():
        results = pd.read_csv(out / "results.csv")
    else:
        raise ConfigError(f"{out} is not a bench directory (no results.parquet or results.csv)")
    batches = pd.read_parquet(out / "batches.parquet") if (out / "batches.parquet").exists() else pd.DataFrame()
    capacity = (pd.read_parquet(out / "capacity.parquet") if (out / "capacity.parquet").exists()
                else pd.DataFrame())
    meta = json.loads((out / "bench.json").read_text()) if (out / "bench.json").exists() else {}
    return results, batches, capacity, meta


def _config_dict(cfg: BenchConfig) -> dict:
    d = asdict(cfg)
    for key in ("queries", "policies", "traffic"):
        d[key] = list(d[key])
    return d


def _kit_version() -> str:
    try:
        from importlib.metadata import version

        return version("lmstream_kit")
    except Exception:
        return "unknown"


def command_line() -> str:
    return " ".join(["lmstream-kit", *sys.argv[1:]])


__all__ = [
    "ALL_QUERIES",
    "BenchConfig",
    "BenchResult",
    "CapacitySearch",
    "batch_rows",
    "bound_s",
    "cell_row",
    "load_bench",
    "machine_info",
    "run_bench",
]
