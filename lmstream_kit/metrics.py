"""Per-micro-batch metrics: written as each batch completes, loaded back with one call.

A run directory holds

``metrics.jsonl``
    one record per micro-batch, appended (and fsynced) when the batch completes,
    so nothing is lost if the driver dies;
``spark_progress.jsonl``
    Spark's own timings for each batch, from the StreamingQueryListener, which
    arrive 0.1-0.4 s after the batch;
``run.json``
    what was run: workload, policy, traffic, seed, Spark version, master, ...

:func:`load_metrics` joins the first two into one pandas DataFrame.  Nothing in
this module imports pyspark.
"""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

METRICS_FILE = "metrics.jsonl"
PROGRESS_FILE = "spark_progress.jsonl"
RUN_FILE = "run.json"

#: the fields every metrics record has (more may follow)
CORE_FIELDS = (
    "batch_id",
    "policy",
    "n_datasets",
    "rows",
    "bytes",
    "oldest_arrival",
    "admitted_at",
    "completed_at",
    "buffering_s",
    "processing_s",
    "max_latency_s",
    "avg_latency_s",
    "throughput_rows_s",
)


def batch_record(
    *,
    batch_id: int,
    policy: str,
    datasets: Sequence[Any],
    admitted_at: float,
    completed_at: float,
    extra: Optional[Mapping[str, Any]] = None,
) -> dict:
    """Compute one metrics record from the batch's datasets and its timestamps.

    ``datasets`` are objects with ``arrival`` (epoch s), ``rows`` and ``nbytes``.
    ``max_latency_s`` is completion minus the oldest arrival, ``avg_latency_s``
    the row-weighted mean of completion minus arrival, ``buffering_s`` admission
    minus the oldest arrival, ``processing_s`` completion minus admission, and
    ``throughput_rows_s`` rows over processing time.

    >>> from types import SimpleNamespace as D
    >>> r = batch_record(batch_id=3, policy="lmstream", admitted_at=15.0, completed_at=16.0,
    ...                  datasets=[D(arrival=10.0, rows=100, nbytes=1000),
    ...                            D(arrival=14.0, rows=300, nbytes=3000)])
    >>> r["max_latency_s"], r["avg_latency_s"], r["buffering_s"], r["throughput_rows_s"]
    (6.0, 3.0, 5.0, 400.0)
    """
    rows = sum(int(d.rows) for d in datasets)
    nbytes = sum(int(d.nbytes) for d in datasets)
    processing = completed_at - admitted_at
    if datasets:
        oldest = min(float(d.arrival) for d in datasets)
        max_latency = completed_at - oldest
        weighted = sum(int(d.rows) * (completed_at - float(d.arrival)) for d in datasets)
        avg_latency = weighted / rows if rows else max_latency
        buffering = admitted_at - oldest
    else:
        oldest = max_latency = avg_latency = buffering = None
    record = {
        "batch_id": int(batch_id),
        "policy": policy,
        "n_datasets": len(datasets),
        "rows": rows,
        "bytes": nbytes,
        "oldest_arrival": oldest,
        "admitted_at": admitted_at,
        "completed_at": completed_at,
        "buffering_s": buffering,
        "processing_s": processing,
        "max_latency_s": max_latency,
        "avg_latency_s": avg_latency,
        "throughput_rows_s": rows / processing if processing > 0 else None,
    }
    if extra:
        record.update(extra)
    return record


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlWriter:
    """Append JSON lines to a file, one flushed (and optionally fsynced) line per call.

    Thread-safe.  Each line is written with a single ``write`` so that a crash
    leaves at most one partial trailing line, which the loaders skip.
    """

    def __init__(self, path: os.PathLike | str, *, durable: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.durable = durable
        self._lock = threading.Lock()
        self._fh = open(self.path, "a", encoding="utf-8")

    def append(self, record: Mapping[str, Any]) -> None:
        line = json.dumps({k: _jsonable(v) for k, v in record.items()}, default=str) + "\n"
        with self._lock:
            if self._fh.closed:
                raise ValueError(f"{self.path} is closed")
            self._fh.write(line)
            self._fh.flush()
            if self.durable:
                os.fsync(self._fh.fileno())

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def read_jsonl(path: os.PathLike | str) -> list[dict]:
    """Records of a JSON-lines file; a partial or corrupt trailing line is skipped."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break  # written by a process that died mid-line
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def write_run_info(run_dir: os.PathLike | str, info: Mapping[str, Any]) -> None:
    """Write ``run.json`` atomically (temp file + rename)."""
    path = Path(run_dir) / RUN_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(dict(info), indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def read_run_info(run_dir: os.PathLike | str) -> dict:
    path = Path(run_dir) / RUN_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def load_metrics(run_dir: os.PathLike | str):
    """The run's per-batch metrics as a pandas DataFrame, one row per micro-batch.

    Spark's listener timings are joined on ``batch_id`` with a ``spark_`` prefix
    (``spark_addBatch_ms``, ``spark_walCommit_ms``, ``spark_numInputRows``, ...).
    """
    import pandas as pd

    run_dir = Path(run_dir)
    records = read_jsonl(run_dir / METRICS_FILE)
    df = pd.DataFrame.from_records(records) if records else pd.DataFrame(columns=list(CORE_FIELDS))
    progress = read_jsonl(run_dir / PROGRESS_FILE)
    if progress and len(df):
        pdf = pd.DataFrame.from_records(progress)
        pdf = pdf.drop_duplicates("batch_id", keep="last")
        pdf = pdf.rename(columns={c: f"spark_{c}" for c in pdf.columns if c != "batch_id"})
        df = df.merge(pdf, on="batch_id", how="left")
    if len(df):
        df = df.sort_values("batch_id", kind="stable").reset_index(drop=True)
    return df


def _quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default method), stdlib only."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(records: Iterable[Mapping[str, Any]], *, bound_s: Optional[float] = None) -> dict:
    """Summary of a run's data batches (batches with rows).

    Returns batches, rows, mean/p50/p99/max of the per-batch maximum latency,
    the row-weighted mean latency, throughput (rows over summed processing time)
    and, with ``bound_s``, the share of batches whose maximum latency is within it.

    >>> s = summarize([{"rows": 10, "max_latency_s": 1.0, "avg_latency_s": 0.5, "processing_s": 0.1},
    ...                {"rows": 30, "max_latency_s": 3.0, "avg_latency_s": 1.5, "processing_s": 0.3}],
    ...               bound_s=2.0)
    >>> s["batches"], s["rows"], s["max_latency_mean_s"], s["latency_mean_s"], s["within_bound"]
    (2, 40, 2.0, 1.25, 0.5)
    """
    data = [r for r in records if (r.get("rows") or 0) > 0 and r.get("max_latency_s") is not None]
    maxlat = [float(r["max_latency_s"]) for r in data]
    rows = sum(int(r["rows"]) for r in data)
    proc = sum(float(r["processing_s"]) for r in data if r.get("processing_s") is not None)
    out = {
        "batches": len(data),
        "rows": rows,
        "max_latency_mean_s": sum(maxlat) / len(maxlat) if maxlat else float("nan"),
        "max_latency_p50_s": _quantile(maxlat, 0.50),
        "max_latency_p99_s": _quantile(maxlat, 0.99),
        "max_latency_max_s": max(maxlat) if maxlat else float("nan"),
        "latency_mean_s": (
            sum(float(r["avg_latency_s"]) * int(r["rows"]) for r in data) / rows if rows else float("nan")
        ),
        "throughput_rows_s": rows / proc if proc > 0 else float("nan"),
    }
    if bound_s is not None:
        out["within_bound"] = (
            sum(1 for x in maxlat if x <= bound_s) / len(maxlat) if maxlat else float("nan")
        )
    return out
