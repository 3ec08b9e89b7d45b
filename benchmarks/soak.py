"""Soak: does one long-running stream keep its memory, open files and disk flat?  (Issue 16, item 2.)

    .venv/bin/python benchmarks/soak.py                                   # LR2S, lmstream, 1000 rows/s, 30 min
    .venv/bin/python benchmarks/soak.py --minutes 240 --retention "age=30m" --every 30
    .venv/bin/python benchmarks/soak.py --workload CM1S --rate 2000 --minutes 60 --warmup-minutes 10

One :class:`~lmstream_kit.live.LiveStream` runs ``--workload`` under ``--policy`` on constant
traffic at ``--rate`` rows per second for ``--minutes`` wall minutes, with the dashboard's record
consumer attached (a :class:`widgets.sources.RecordBuffer` fed through the stream's ``on_batch``,
merged at every sample as the dashboard's redraw would) and the spool's retention set by
``--retention`` (default ``age=5m``, so that the spool's plateau shows within a 30-minute run).

Every ``--every`` seconds it samples, and appends to ``samples.jsonl`` as it goes:

* the resident memory (RSS) of the driver's Python process (this one), of the driver JVM and the
  sum over the Python worker processes (and their count);
* open files (file descriptors) and threads of the driver's Python process and of the JVM;
* the spool's and the run directory's size on disk (every file's ``st_size``) and file count;
* the records held in memory: the run loop's list, the RecordBuffer's records, the inflection
  optimizer's history and the spool's in-memory index;
* the batches and rows processed so far, and the backlog (spool datasets not yet processed);
* the driver's Python heap: the blocks its allocator holds (:func:`sys.getallocatedblocks`), the objects
  the garbage collector tracks, with ``--tracemalloc FRAMES`` the bytes :mod:`tracemalloc` traces, and the
  bytes Arrow's memory pool holds.

``--tracemalloc FRAMES`` (a diagnosis, slower) also snapshots the traced allocations at the warm-up's end
and at the end, and writes ``tracemalloc.txt``: what grew in between, grouped by the allocating line and
by its call stack.  ``--records-kept N`` caps the in-memory histories at ``N`` instead of their defaults
(1,000), so that a short diagnosis reaches the caps within its warm-up.

Processes: the JVM is the pid the JVM itself reports through py4j, checked against the local
process table (:func:`lmstream_kit.engine.procs.driver_jvm_pid`), else this process's ``java``
child.  The Python workers are the JVM's descendant processes: ``pyspark.daemon``, the workers it
forks (which carry the daemon's command line) and the Python data-source runner.  The workers'
RSS is a plain sum: pages the forked workers share with the daemon count once per process.

At the end (also after Ctrl-C, with what was sampled) it writes ``summary.json`` and ``summary.md``:
per quantity its value at the end of the warm-up (``--warmup-minutes``) and at the end, its
least-squares slope per hour after the warm-up, and that slope relative to the quantity's mean
after the warm-up (% per hour, with its standard error).  The goal: the three RSS quantities grow
less than ``--goal`` % per hour after the warm-up (PASS / FAIL each), and the spool stays bounded
(its slope over the last half of the run less than ``--goal`` % per hour of its mean there).

Results go to ``<--out>/soak-<host>-<time>/``: ``settings.json`` (settings, machine, versions; at
the start), ``samples.jsonl``, ``summary.json``, ``summary.md`` and the stream's own ``run.json``
and ``metrics.jsonl``.  Every number is **measured** on the machine named there.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import shutil
import socket
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # lmstream_kit and widgets are top-level packages of the repo

# ======================================================================================== analysis
# Pure functions of a list of sample dicts (``t_s``: seconds since the stream started, then one key
# per quantity; a quantity that could not be read is None or missing).  No Spark, no processes.

#: every sampled quantity: its key and its unit (``bytes`` are shown in MiB in summary.md)
QUANTITIES: dict[str, str] = {
    "driver_rss_bytes": "bytes",
    "jvm_rss_bytes": "bytes",
    "workers_rss_bytes": "bytes",
    "workers": "processes",
    "driver_fds": "files",
    "driver_threads": "threads",
    "jvm_fds": "files",
    "jvm_threads": "threads",
    "spool_bytes": "bytes",
    "spool_data_bytes": "bytes",
    "spool_index_bytes": "bytes",
    "metrics_bytes": "bytes",
    "spool_files": "files",
    "run_dir_bytes": "bytes",
    "run_dir_files": "files",
    "loop_records": "records",
    "buffer_records": "records",
    "optimizer_history": "samples",
    "py_blocks": "blocks",
    "gc_objects": "objects",
    "traced_bytes": "bytes",
    "arrow_bytes": "bytes",
    "spool_index": "datasets",
    "backlog_datasets": "datasets",
    "batches": "batches",
    "rows": "rows",
}

#: the quantities the memory goal is about
MEMORY_KEYS: tuple[str, ...] = ("driver_rss_bytes", "jvm_rss_bytes", "workers_rss_bytes")

#: the goal: growth after the warm-up under this many percent per hour (memory flat, spool bounded)
GOAL_PCT_PER_HOUR = 1.0


def _value(sample: Mapping[str, Any], key: str) -> float | None:
    """The sample's value of ``key`` as a float, or None (missing, None, NaN, not a number)."""
    v = sample.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def series(samples: Sequence[Mapping[str, Any]], key: str, *, start_s: float = 0.0,
           end_s: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(hours, values)`` of the samples with ``start_s <= t_s <= end_s`` that have a value of ``key``.

    >>> series([{"t_s": 0, "x": 1}, {"t_s": 1800, "x": None}, {"t_s": 3600, "x": 3}], "x")
    (array([0., 1.]), array([1., 3.]))
    """
    hours, values = [], []
    for s in samples:
        t, v = _value(s, "t_s"), _value(s, key)
        if t is None or v is None or t < start_s or (end_s is not None and t > end_s):
            continue
        hours.append(t / 3600.0)
        values.append(v)
    return np.asarray(hours, dtype=float), np.asarray(values, dtype=float)


def fit_slope(hours: np.ndarray, values: np.ndarray) -> tuple[float | None, float | None]:
    """Least-squares slope of ``values`` over ``hours`` (units per hour, :func:`numpy.polyfit`) and its
    standard error; ``(None, None)`` with fewer than two distinct times, the error None with fewer than three.

    >>> slope, se = fit_slope(np.array([0.0, 0.5, 1.0]), np.array([10.0, 11.0, 12.0]))
    >>> round(slope, 9), round(se, 9)
    (2.0, 0.0)
    """
    if len(hours) < 2 or np.ptp(hours) == 0:
        return None, None
    slope, intercept = np.polyfit(hours, values, 1)
    slope = float(slope)
    if len(hours) < 3:
        return slope, None
    residuals = values - (slope * hours + intercept)
    sxx = float(np.sum((hours - hours.mean()) ** 2))
    se = math.sqrt(float(np.sum(residuals ** 2)) / (len(hours) - 2) / sxx)
    return slope, se


def relative_pct(per_hour: float | None, mean: float | None) -> float | None:
    """``per_hour`` as a percentage of ``mean`` (% per hour); 0 for a zero slope on a zero mean, else None
    where the mean is zero or unknown.

    >>> relative_pct(20.0, 1000.0), relative_pct(0.0, 0.0), relative_pct(5.0, 0.0)
    (2.0, 0.0, None)
    """
    if per_hour is None or mean is None:
        return None
    if mean == 0:
        return 0.0 if per_hour == 0 else None
    return 100.0 * per_hour / abs(mean)


def analyze(samples: Sequence[Mapping[str, Any]], key: str, *, warmup_s: float) -> dict:
    """One quantity after the warm-up: its value at the warm-up's end (the first sample at or after
    ``warmup_s``) and at the end, the mean, the slope per hour and the growth in % per hour (with the
    standard errors) of the samples at or after ``warmup_s``."""
    hours, values = series(samples, key, start_s=warmup_s)
    slope, se = fit_slope(hours, values)
    mean = float(values.mean()) if len(values) else None
    return {
        "n": len(values),
        "at_warmup_end": float(values[0]) if len(values) else None,
        "at_end": float(values[-1]) if len(values) else None,
        "mean": mean,
        "slope_per_hour": slope,
        "slope_se_per_hour": se,
        "growth_pct_per_hour": relative_pct(slope, mean),
        "growth_se_pct_per_hour": relative_pct(se, mean),
    }


def verdict(growth_pct_per_hour: float | None, goal_pct: float = GOAL_PCT_PER_HOUR) -> str:
    """``PASS`` where the growth is under ``goal_pct`` % per hour (shrinking passes), ``FAIL`` where not,
    ``n/a`` where it is unknown (too few samples after the warm-up).

    >>> verdict(0.4), verdict(-3.0), verdict(1.0), verdict(None)
    ('PASS', 'PASS', 'FAIL', 'n/a')
    """
    if growth_pct_per_hour is None:
        return "n/a"
    return "PASS" if growth_pct_per_hour < goal_pct else "FAIL"


def last_half(samples: Sequence[Mapping[str, Any]], key: str = "spool_bytes", *,
              goal_pct: float = GOAL_PCT_PER_HOUR) -> dict:
    """Whether ``key`` (the spool's size) stayed bounded: its slope over the last half of the run (from
    halfway between the first and the last sample on) under ``goal_pct`` % per hour of its mean there.

    ``verdict``: ``BOUNDED``, ``GROWING`` or ``n/a``.
    """
    times = [t for t in (_value(s, "t_s") for s in samples) if t is not None]
    if not times:
        return {"from_s": None, "n": 0, "mean": None, "slope_per_hour": None, "growth_pct_per_hour": None,
                "growth_se_pct_per_hour": None, "max": None, "verdict": "n/a"}
    start = (min(times) + max(times)) / 2
    hours, values = series(samples, key, start_s=start)
    slope, se = fit_slope(hours, values)
    mean = float(values.mean()) if len(values) else None
    growth = relative_pct(slope, mean)
    result = {"from_s": start, "n": len(values), "mean": mean, "slope_per_hour": slope,
              "growth_pct_per_hour": growth, "growth_se_pct_per_hour": relative_pct(se, mean),
              "max": float(values.max()) if len(values) else None}
    v = verdict(growth, goal_pct)
    result["verdict"] = {"PASS": "BOUNDED", "FAIL": "GROWING"}.get(v, v)
    return result


def summarize(samples: Sequence[Mapping[str, Any]], *, warmup_s: float, goal_pct: float = GOAL_PCT_PER_HOUR,
              keys: Sequence[str] | None = None) -> dict:
    """The soak's analysis: every quantity's :func:`analyze`, the memory goal's verdict per RSS quantity,
    the spool's :func:`last_half`, and ``verdict``: PASS when every memory quantity passes and the spool
    stayed bounded, FAIL when one of them does not, ``n/a`` when one is unknown and none failed."""
    keys = list(QUANTITIES) if keys is None else list(keys)
    quantities = {k: analyze(samples, k, warmup_s=warmup_s) for k in keys}
    memory = {k: verdict((quantities.get(k) or analyze(samples, k, warmup_s=warmup_s))["growth_pct_per_hour"],
                         goal_pct) for k in MEMORY_KEYS}
    # the spool's data files are what retention bounds; its index (one line per dataset) is a journal
    spool_key = "spool_data_bytes" if any(_value(s, "spool_data_bytes") is not None for s in samples) \
        else "spool_bytes"  # results sampled before the index was told apart
    spool = {**last_half(samples, spool_key, goal_pct=goal_pct), "key": spool_key}
    verdicts = [*memory.values(), {"BOUNDED": "PASS", "GROWING": "FAIL"}.get(spool["verdict"], "n/a")]
    overall = "FAIL" if "FAIL" in verdicts else ("n/a" if "n/a" in verdicts else "PASS")
    times = [t for t in (_value(s, "t_s") for s in samples) if t is not None]
    return {
        "samples": len(samples),
        "duration_s": (max(times) - min(times)) if times else 0.0,
        "warmup_s": warmup_s,
        "samples_after_warmup": sum(1 for t in times if t >= warmup_s),
        "goal_pct_per_hour": goal_pct,
        "quantities": quantities,
        "memory": memory,
        "spool": spool,
        "journals": {k: per_batch(samples, k, warmup_s=warmup_s) for k in JOURNAL_KEYS},
        "verdict": overall,
    }


#: the append-only files that grow with every dataset or batch (retention does not shorten them)
JOURNAL_KEYS: tuple[str, ...] = ("spool_index_bytes", "metrics_bytes")


def per_batch(samples: Sequence[Mapping[str, Any]], key: str, *, warmup_s: float) -> dict:
    """How ``key`` grows per batch after the warm-up: its slope over the batches' slope (bytes per batch),
    and per day at the run's batch rate; Nones where it was not sampled.

    >>> s = [{"t_s": 3600 * h, "batches": 100 * h, "x": 500 * h} for h in range(3)]
    >>> {k: round(v, 6) for k, v in per_batch(s, "x", warmup_s=0).items()}
    {'per_batch': 5.0, 'per_day': 12000.0}
    """
    slope, _ = fit_slope(*series(samples, key, start_s=warmup_s))
    batches, _ = fit_slope(*series(samples, "batches", start_s=warmup_s))
    if slope is None or not batches:
        return {"per_batch": None, "per_day": None}
    return {"per_batch": slope / batches, "per_day": slope * 24}


def _fmt(value: float | None, unit: str, *, signed: bool = False) -> str:
    """A value for summary.md: bytes in MiB with one decimal, others whole (or two decimals when small).

    >>> _fmt(3 * 2**20, "bytes", signed=True), _fmt(1800.0, "records"), _fmt(0.25, "files"), _fmt(None, "x")
    ('+3.0 MiB', '1800 records', '0.25 files', '–')
    """
    if value is None:
        return "–"
    sign = "+" if signed and value > 0 else ""
    if unit == "bytes":
        return f"{sign}{value / 2**20:.1f} MiB"
    text = f"{value:.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.2f}"
    return f"{sign}{text} {unit}"


def summary_markdown(summary: Mapping[str, Any], settings: Mapping[str, Any] | None = None,
                     machine: Mapping[str, Any] | None = None, notes: Sequence[str] = ()) -> str:
    """summary.md: the verdicts, one table row per quantity, then the settings and the machine."""
    goal = summary["goal_pct_per_hour"]
    lines = [f"# Soak: {summary['verdict']}", ""]
    lines.append(f"{summary['samples']} samples over {summary['duration_s'] / 60:.1f} min; warm-up "
                 f"{summary['warmup_s'] / 60:.1f} min ({summary['samples_after_warmup']} samples after it).  "
                 f"Goal: memory grows less than {goal:g} % per hour after the warm-up; the spool stays bounded.  "
                 f"The verdicts compare the least-squares growth itself with the goal; ± is its standard error "
                 f"(a growth within about two of them of the goal is not told apart from noise by this run).")
    lines.append("")
    for note in notes:
        lines.append(f"* {note}")
    if notes:
        lines.append("")
    lines += ["| quantity | at warm-up end | at end | slope per hour | growth %/h (± se) | goal |",
              "|---|---|---|---|---|---|"]
    for key, a in summary["quantities"].items():
        unit = QUANTITIES.get(key, "")
        growth = a["growth_pct_per_hour"]
        se = a.get("growth_se_pct_per_hour")
        g = "–" if growth is None else f"{growth:+.2f}" + ("" if se is None else f" ± {se:.2f}")
        goal_cell = summary["memory"].get(key, "")
        lines.append(f"| {key} | {_fmt(a['at_warmup_end'], unit)} | {_fmt(a['at_end'], unit)} | "
                     f"{_fmt(a['slope_per_hour'], unit, signed=True)} | {g} | {goal_cell} |")
    sp = summary["spool"]
    lines.append("")
    if sp["from_s"] is not None and sp["growth_pct_per_hour"] is not None:
        lines.append(f"Spool ({sp.get('key', 'spool_bytes')}) over the last half of the run (from {sp['from_s'] / 60:.1f} min, {sp['n']} samples): "
                     f"mean {_fmt(sp['mean'], 'bytes')}, max {_fmt(sp['max'], 'bytes')}, slope "
                     f"{_fmt(sp['slope_per_hour'], 'bytes', signed=True)} per hour = "
                     f"{sp['growth_pct_per_hour']:+.2f}"
                     + ("" if sp.get("growth_se_pct_per_hour") is None else f" ± {sp['growth_se_pct_per_hour']:.2f}")
                     + f" % of its mean per hour: **{sp['verdict']}**.")
    else:
        lines.append(f"Spool over the last half of the run: {sp['verdict']} (too few samples).")
    journals = summary.get("journals") or {}
    grown = {k: j for k, j in journals.items() if j.get("per_batch") is not None}
    if grown:
        lines.append("")
        lines.append("Journals (append-only; retention does not shorten them): " + "; ".join(
            f"{k} {j['per_batch']:,.0f} bytes a batch ({_fmt(j['per_day'], 'bytes')} a day at this run's batch rate)"
            for k, j in grown.items()) + ".")
    lines.append("")
    mem = ", ".join(f"{k} {v}" for k, v in summary["memory"].items())
    lines.append(f"Memory: {mem}.")
    for title, block in (("Settings", settings), ("Machine", machine)):
        if block:
            lines += ["", f"## {title}", ""]
            lines += [f"* {k}: {json.dumps(v, default=str) if isinstance(v, (dict, list)) else v}"
                      for k, v in block.items()]
    return "\n".join(lines) + "\n"


def _jsonable(obj: Any) -> Any:
    """NaN and infinities as None, paths as text: strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (np.floating, np.integer)):
        return _jsonable(obj.item())
    return obj


# ======================================================================================== measuring
def dir_usage(path: str | os.PathLike) -> tuple[int, int]:
    """``(bytes, files)`` under ``path``: every regular file's ``st_size`` (links not followed); files
    deleted while it walks (retention runs meanwhile) are skipped, a missing ``path`` is ``(0, 0)``."""
    total, files = 0, 0
    stack = [os.fspath(path)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
                    files += 1
            except (FileNotFoundError, PermissionError):
                continue
    return total, files


def file_size(path: str | os.PathLike) -> int:
    """``path``'s size in bytes, 0 where it does not exist."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


#: what a Python worker's command line says it is
WORKER_ROLES = (("pyspark.daemon", "daemon"), ("pyspark.worker", "worker"),
                ("streaming_source_runner", "source_runner"), ("source_runner", "source_runner"))


def worker_role(cmdline: Sequence[str]) -> str | None:
    """``daemon``, ``worker``, ``source_runner`` or ``python`` for a Python process's command line; None for
    one that is not Python.

    >>> worker_role(["/usr/bin/python3", "-m", "pyspark.daemon"]), worker_role(["java", "-cp", "x"])
    ('daemon', None)
    """
    text = " ".join(cmdline)
    for needle, role in WORKER_ROLES:
        if needle in text:
            return role
    first = os.path.basename(cmdline[0]) if cmdline else ""
    return "python" if "python" in first.lower() or "pyspark" in text else None


class ProcessProbe:
    """The driver's Python process (this one), its JVM and the JVM's Python workers, read with psutil."""

    def __init__(self, stream: Any) -> None:
        import psutil

        self.psutil = psutil
        self.stream = stream
        self.driver = psutil.Process(os.getpid())
        self.jvm = None
        self.jvm_found_by: str | None = None

    def find_jvm(self):
        """The JVM's process: the pid py4j reports (checked locally), else this process's ``java`` child."""
        ps = self.psutil
        if self.jvm is not None and self.jvm.is_running():
            return self.jvm
        self.jvm = None
        pid = None
        try:
            pid = self.stream.engine.driver_pid()
            self.jvm_found_by = "py4j"
        except Exception:  # noqa: BLE001 - a stopped session or a dead gateway: look for the java child
            pid = None
        if pid is None:
            for child in self.driver.children(recursive=True):
                try:
                    if child.name().lower().startswith("java"):
                        pid = child.pid
                        self.jvm_found_by = "java child"
                        break
                except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess):
                    continue
        if pid is not None:
            try:
                self.jvm = ps.Process(pid)
            except ps.NoSuchProcess:
                self.jvm = None
        return self.jvm

    def _read(self, proc) -> dict:
        ps = self.psutil
        try:
            with proc.oneshot():
                return {"rss": proc.memory_info().rss, "fds": proc.num_fds(), "threads": proc.num_threads()}
        except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess):
            return {"rss": None, "fds": None, "threads": None}

    def sample(self) -> dict:
        ps = self.psutil
        out: dict[str, Any] = {}
        d = self._read(self.driver)
        out.update(driver_rss_bytes=d["rss"], driver_fds=d["fds"], driver_threads=d["threads"])
        jvm = self.find_jvm()
        if jvm is None:
            out.update(jvm_pid=None, jvm_rss_bytes=None, jvm_fds=None, jvm_threads=None, workers=None,
                       workers_rss_bytes=None, worker_roles=None)
            return out
        j = self._read(jvm)
        out.update(jvm_pid=jvm.pid, jvm_rss_bytes=j["rss"], jvm_fds=j["fds"], jvm_threads=j["threads"])
        rss, roles = 0, {}
        try:
            children = jvm.children(recursive=True)
        except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess):
            children = []
        for child in children:
            try:
                role = worker_role(child.cmdline())
                if role is None:
                    continue
                rss += child.memory_info().rss
            except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess):
                continue  # a worker that exited meanwhile
            roles[role] = roles.get(role, 0) + 1
        out.update(workers=sum(roles.values()), workers_rss_bytes=rss, worker_roles=roles)
        return out


class BatchCounter:
    """An ``on_batch`` callback that counts batches and rows (no copy of the records)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches = 0
        self.data_batches = 0
        self.rows = 0

    def __call__(self, record: dict) -> None:
        rows = int(record.get("rows") or 0)
        with self.lock:
            self.batches += 1
            self.data_batches += rows > 0
            self.rows += rows


def take_sample(stream: Any, probe: ProcessProbe, buffer: Any, counter: BatchCounter, t0: float,
                spool_dir: Path | None) -> dict:
    """One sample of every quantity (cheap reads: lengths, not copies)."""
    sample: dict[str, Any] = {"t_s": round(time.monotonic() - t0, 3), "at": round(time.time(), 3)}
    sample.update(probe.sample())
    if spool_dir is not None:
        sample["spool_bytes"], sample["spool_files"] = dir_usage(spool_dir)
        sample["spool_index_bytes"] = file_size(spool_dir / "index.jsonl")
        sample["spool_data_bytes"] = sample["spool_bytes"] - sample["spool_index_bytes"]
    run_bytes, run_files = dir_usage(stream.run_dir)
    sample.update(run_dir_bytes=run_bytes, run_dir_files=run_files,
                  metrics_bytes=file_size(Path(stream.run_dir) / "metrics.jsonl"))
    spool = stream.spool
    if spool is not None:
        sample["spool_kept_bytes"] = spool.kept_bytes  # the spool's own accounting, next to the walk's
        sample["spool_first_seq"] = spool.first_seq
        sample["spool_index"] = len(getattr(spool, "_infos", ()))  # entries in memory (retention trims them)
        sample["backlog_datasets"] = spool.end_seq - int(stream.loop.book.completed_end)
    sample["loop_records"] = len(stream.loop._records)  # len of the run loop's list, no copy
    with buffer.lock:  # as the dashboard's redraw does: merge what was pushed, then count
        buffer.merge_locked()
        sample["buffer_records"] = len(buffer._by_id)
    optimizer = getattr(stream.placement, "optimizer", None)
    if optimizer is not None:
        history = getattr(optimizer, "_history", None)
        sample["optimizer_history"] = len(history) if history is not None else len(optimizer.history)
    with counter.lock:
        sample.update(batches=counter.batches, data_batches=counter.data_batches, rows=counter.rows)
    sample["py_blocks"] = sys.getallocatedblocks()
    sample["gc_objects"] = len(gc.get_objects())
    if tracemalloc.is_tracing():
        sample["traced_bytes"] = tracemalloc.get_traced_memory()[0]
    pa = sys.modules.get("pyarrow")
    if pa is not None:  # what Arrow's memory pool holds (the spool's datasets are Arrow tables)
        sample["arrow_bytes"] = pa.total_allocated_bytes()
    return sample


def growth_report(before: "tracemalloc.Snapshot", after: "tracemalloc.Snapshot", *, top: int = 25) -> str:
    """tracemalloc.txt: what the traced allocations grew by between two snapshots, by line and by stack."""
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>")]
    before, after = before.filter_traces(ignore), after.filter_traces(ignore)
    lines = []
    for key_type in ("lineno", "traceback"):
        stats = after.compare_to(before, key_type)
        total = sum(s.size_diff for s in stats)
        lines += [f"## grouped by {key_type}: {total / 1024:+.1f} KiB in all, {sum(s.count_diff for s in stats):+d} blocks",
                  ""]
        for stat in sorted(stats, key=lambda s: s.size_diff, reverse=True)[:top]:
            if stat.size_diff <= 0:
                break
            lines.append(f"{stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks "
                         f"(now {stat.size / 1024:.1f} KiB in {stat.count})")
            frames = stat.traceback.format(limit=None if key_type == "traceback" else 1, most_recent_first=True)
            lines += ["    " + f.strip() for f in frames if f.strip()]
        lines.append("")
    return "\n".join(lines) + "\n"


def _mib(v: float | None) -> str:
    return "?" if v is None else f"{v / 2**20:.0f}"


def status_line(sample: Mapping[str, Any], total_s: float) -> str:
    """The progress line printed after every sample."""
    def clock(s: float) -> str:
        return f"{int(s) // 60:02d}:{int(s) % 60:02d}"

    return (f"[{clock(sample['t_s'])}/{clock(total_s)}] batches {sample.get('batches')} rows {sample.get('rows')} "
            f"| RSS MiB driver {_mib(sample.get('driver_rss_bytes'))} JVM {_mib(sample.get('jvm_rss_bytes'))} "
            f"workers({sample.get('workers')}) {_mib(sample.get('workers_rss_bytes'))} "
            f"| fds {sample.get('driver_fds')}/{sample.get('jvm_fds')} "
            f"| spool {_mib(sample.get('spool_bytes'))} MiB run dir {_mib(sample.get('run_dir_bytes'))} MiB "
            f"| records {sample.get('loop_records')}/{sample.get('buffer_records')} "
            f"backlog {sample.get('backlog_datasets')}")


def machine_facts() -> dict:
    """Host, CPU, cores, memory, OS and the versions that matter (no Spark started)."""
    from importlib.metadata import PackageNotFoundError, version

    from lmstream_kit.bench.outputs import machine_info

    versions = {}
    for pkg in ("pyspark", "psutil", "numpy", "pyarrow"):
        try:
            versions[pkg] = version(pkg)
        except PackageNotFoundError:
            versions[pkg] = None
    return {"host": socket.gethostname().split(".")[0] or "host", **machine_info(),
            "python": platform.python_version(), **versions}


def write_summary(out_dir: Path, samples: list[dict], settings: dict, machine: dict, extra: dict) -> dict:
    """summary.json and summary.md of what was sampled (after an interruption too)."""
    summary = summarize(samples, warmup_s=settings["warmup_minutes"] * 60, goal_pct=settings["goal"])
    notes = list(extra.get("notes", ()))
    full = {**summary, **{k: v for k, v in extra.items() if k != "notes"}, "notes": notes,
            "settings": settings, "machine": machine}
    (out_dir / "summary.json").write_text(json.dumps(_jsonable(full), indent=1) + "\n")
    (out_dir / "summary.md").write_text(summary_markdown(summary, settings, machine, notes))
    return full


def run(args) -> int:
    from lmstream_kit.exceptions import KitError
    from lmstream_kit.live import LiveStream
    from widgets.sources import RecordBuffer, attach_live

    host = socket.gethostname().split(".")[0] or "host"
    out_dir = Path(args.out) / f"soak-{host}-{time.strftime('%Y%m%d-%H%M%S')}"
    out_dir.mkdir(parents=True, exist_ok=True)
    own_run_dir = args.run_dir is None
    run_dir = Path(tempfile.mkdtemp(prefix="soak-")) / "run" if own_run_dir else Path(args.run_dir)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    settings["run_dir"] = str(run_dir)
    if args.records_kept is not None:  # before the stream is made: the deques read their caps when built
        from lmstream_kit import controller, runloop

        runloop.RECORDS_KEPT = controller.CHANGES_KEPT = int(args.records_kept)
    if args.tracemalloc:
        tracemalloc.start(int(args.tracemalloc))
    machine = machine_facts()
    (out_dir / "settings.json").write_text(json.dumps(_jsonable({"settings": settings, "machine": machine,
                                                                 "when": time.strftime("%Y-%m-%d %H:%M:%S %Z")}),
                                                      indent=1) + "\n")
    stream = LiveStream(args.workload, policy=args.policy, traffic="constant", rate=args.rate, speedup=args.speedup,
                        seed=args.seed, duration_s=None, run_dir=run_dir, master=args.master, output=args.output,
                        spark_conf={"spark.driver.memory": args.driver_memory}, retention=args.retention)
    buffer = RecordBuffer() if args.records_kept is None else RecordBuffer(kept=int(args.records_kept))
    counter = BatchCounter()
    stream.on_batch(counter)
    attach_live(stream, buffer)

    samples: list[dict] = []
    notes: list[str] = []
    extra: dict[str, Any] = {"interrupted": False, "error": None}
    total_s = args.minutes * 60.0
    print(f"soak: {args.workload} {args.policy}, {args.rate:g} rows/s x{args.speedup:g}, {args.minutes:g} min, "
          f"sample every {args.every:g} s, warm-up {args.warmup_minutes:g} min, retention {args.retention!r}\n"
          f"results: {out_dir}\nrun dir: {run_dir}", flush=True)
    exit_code = 0
    try:
        try:
            stream.start()
            t0 = time.monotonic()
            probe = ProcessProbe(stream)
            spool_dir = Path(stream.spool.root) if "://" not in stream.spool.uri or \
                stream.spool.uri.startswith("file://") else None
            extra["jvm_found_by"] = None
            snapshots: dict[str, Any] = {}
            with open(out_dir / "samples.jsonl", "a", encoding="utf-8") as fh:
                k = 0
                while True:
                    sample = take_sample(stream, probe, buffer, counter, t0, spool_dir)
                    if tracemalloc.is_tracing() and "warmup" not in snapshots and \
                            sample["t_s"] >= args.warmup_minutes * 60:
                        snapshots["warmup"] = tracemalloc.take_snapshot()
                    extra["jvm_found_by"] = probe.jvm_found_by
                    samples.append(sample)
                    fh.write(json.dumps(_jsonable(sample)) + "\n")
                    fh.flush()
                    print(status_line(sample, total_s), flush=True)
                    if sample["t_s"] >= total_s - 1e-6:
                        if "warmup" in snapshots:
                            (out_dir / "tracemalloc.txt").write_text(
                                growth_report(snapshots["warmup"], tracemalloc.take_snapshot()))
                        break
                    k += 1
                    next_at = min(k * args.every, total_s)
                    while (left := next_at - (time.monotonic() - t0)) > 0:
                        stream.check_health()
                        time.sleep(min(1.0, left))
                    stream.check_health()
        except KeyboardInterrupt:
            extra["interrupted"] = True
            notes.append(f"interrupted (Ctrl-C) after {samples[-1]['t_s'] / 60 if samples else 0:.1f} min")
            print("\ninterrupted: stopping the stream and writing the summary of what was sampled ...", flush=True)
        except KitError as exc:
            extra["error"] = str(exc)
            notes.append(f"the stream failed: {exc}")
            print(f"error: {exc}", file=sys.stderr, flush=True)
            exit_code = 1
        finally:
            try:
                extra["stream_summary"] = stream.stop(drain=False, timeout=60)
            except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - a second Ctrl-C too: the summary is written
                notes.append(f"stopping the stream failed: {type(exc).__name__}: {exc}")
            retention = getattr(stream, "retention", None)
            status = getattr(retention, "status", None)
            extra["retention_status"] = status() if callable(status) else None
            extra["retention"] = None if retention is None else \
                {p.name: getattr(retention, p.name, None) for p in getattr(retention, "PARAMS", ())}
    finally:
        if args.tracemalloc:
            tracemalloc.stop()
        full = write_summary(out_dir, samples, settings, machine, {"notes": notes, **extra})
        for name in ("run.json", "metrics.jsonl"):
            if (run_dir / name).exists():
                shutil.copy2(run_dir / name, out_dir / name)
        if own_run_dir and not args.keep_run_dir:
            shutil.rmtree(run_dir.parent, ignore_errors=True)
    print(f"\nverdict: {full['verdict']}  (memory: "
          + ", ".join(f"{k} {v}" for k, v in full["memory"].items())
          + f"; spool {full['spool']['verdict']})")
    for key in MEMORY_KEYS:
        g = full["quantities"][key]["growth_pct_per_hour"]
        print(f"    {key}: {'?' if g is None else f'{g:+.2f}'} %/h after the warm-up")
    print(f"results: {out_dir}")
    return exit_code if not extra["interrupted"] else 130


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Writes settings.json, samples.jsonl, summary.json, summary.md, run.json "
                                        "and metrics.jsonl into <out>/soak-<host>-<time>/.")
    ap.add_argument("--workload", default="LR2S")
    ap.add_argument("--policy", default="lmstream")
    ap.add_argument("--rate", type=float, default=1000.0, help="rows per simulated second (constant traffic)")
    ap.add_argument("--speedup", type=float, default=1.0, help="simulated seconds per wall second")
    ap.add_argument("--minutes", type=float, default=30.0, help="wall minutes the stream runs")
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--warmup-minutes", type=float, default=5.0,
                    help="minutes whose samples the slopes leave out (the JVM's heap and caches fill)")
    ap.add_argument("--retention", default="age=5m",
                    help='spool retention spec ("age=5m", "age=1h,size=1GiB", "default", "off")')
    ap.add_argument("--goal", type=float, default=GOAL_PCT_PER_HOUR,
                    help="memory flat / spool bounded: growth after the warm-up under this %% per hour")
    ap.add_argument("--output", default="noop", choices=["noop", "parquet"],
                    help="the batches' results: dropped, or written to the run directory (which then grows)")
    ap.add_argument("--driver-memory", default="2g", help="the local session's heap (spark.driver.memory)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                    help="trace the driver's Python allocations with this many frames and write what grew after "
                         "the warm-up to tracemalloc.txt (a diagnosis: slower; 0, the default, is off)")
    ap.add_argument("--records-kept", type=int, default=None, metavar="N",
                    help="cap the in-memory histories (records, dashboard buffer, controller changes) at N "
                         "instead of 1000, so that a short run reaches the caps within its warm-up")
    ap.add_argument("--run-dir", type=Path, default=None,
                    help="the stream's run directory (default: a temporary one, removed at the end)")
    ap.add_argument("--keep-run-dir", action="store_true", help="keep the temporary run directory")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.every <= 0 or args.minutes <= 0 or args.warmup_minutes < 0:
        print("error: --every and --minutes must be > 0, --warmup-minutes >= 0", file=sys.stderr)
        return 2
    if args.warmup_minutes >= args.minutes:
        print("error: --warmup-minutes must be shorter than --minutes (no samples would be left to fit)",
              file=sys.stderr)
        return 2
    try:
        from lmstream_kit.retention import retention_from_spec

        retention_from_spec(args.retention)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
