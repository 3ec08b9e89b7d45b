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
from typing import Any, Mapping, Optional, Sequence

from .record import FIELD_DOCS, BatchRecord, summarize

__all__ = ["batch_record", "load_metrics", "read_jsonl", "read_run_info", "remove_unused_run_dir", "summarize",
           "write_run_info", "JsonlWriter", "METRICS_FILE", "PROGRESS_FILE", "RUN_FILE"]

METRICS_FILE = "metrics.jsonl"
PROGRESS_FILE = "spark_progress.jsonl"
RUN_FILE = "run.json"

#: the fields every metrics record has (more may follow); see :mod:`lmstream_kit.record`
CORE_FIELDS = tuple(f for f in FIELD_DOCS if f != "extra")


def batch_record(
    *,
    batch_id: int,
    policy: str,
    datasets: Sequence[Any],
    admitted_at: float,
    completed_at: float,
    extra: Optional[Mapping[str, Any]] = None,
) -> dict:
    """One record's JSON form (:meth:`BatchRecord.from_batch`), with ``extra`` keys added.

    >>> from types import SimpleNamespace as D
    >>> r = batch_record(batch_id=3, policy="lmstream", admitted_at=15.0, completed_at=16.0,
    ...                  datasets=[D(arrival=10.0, rows=100, nbytes=1000),
    ...                            D(arrival=14.0, rows=300, nbytes=3000)])
    >>> r["max_latency_s"], r["avg_latency_s"], r["buffering_s"], r["throughput_rows_s"]
    (6.0, 3.0, 5.0, 400.0)
    """
    record = BatchRecord.from_batch(
        batch_id=batch_id, policy=policy, datasets=datasets, admitted_at=admitted_at, completed_at=completed_at
    ).to_dict()
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


#: what a start that fails leaves in a run directory, whatever its size (more is kept when empty)
_START_LEFTOVERS = (RUN_FILE, ".channel.key", "spool/meta.json")
_EMPTY_LEFTOVERS = (METRICS_FILE, PROGRESS_FILE, "spool/index.jsonl")
#: the parts of Spark's checkpoint that hold a query's progress (its ``metadata`` is only the query id)
_CHECKPOINT_PROGRESS = ("offsets", "commits", "sources", "state")


def remove_unused_run_dir(run_dir: os.PathLike | str) -> bool:
    """Remove ``run_dir`` if it holds only what a start that failed leaves behind; True if removed.

    A directory is kept when it holds anything of value: a metrics record, a spooled
    dataset, the checkpoint of a query that planned a batch, query output, or any
    file not named here.

    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp()) / "run"
    >>> (run / "spool").mkdir(parents=True)
    >>> for name in ("metrics.jsonl", "spool/index.jsonl", "run.json"):
    ...     _ = (run / name).write_text("{}" if name == "run.json" else "")
    >>> _ = (run / "metrics.jsonl").write_text('{"batch_id": 0}')  # a record: kept
    >>> remove_unused_run_dir(run), run.exists()
    (False, True)
    >>> _ = (run / "metrics.jsonl").write_text("")
    >>> remove_unused_run_dir(run), run.exists()
    (True, False)
    """
    import shutil

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return False
    for path in run_dir.rglob("*"):
        if path.is_dir():
            continue
        name = path.relative_to(run_dir).as_posix()
        parts = name.split("/")
        if name in _START_LEFTOVERS or (name in _EMPTY_LEFTOVERS and path.stat().st_size == 0):
            continue
        if parts[0] == "checkpoint" and len(parts) > 1 and parts[1] not in _CHECKPOINT_PROGRESS:
            continue
        return False
    shutil.rmtree(run_dir)
    return True


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
