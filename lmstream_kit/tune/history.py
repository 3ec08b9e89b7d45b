"""A history store across runs: each batch's operators (Spark stages) appended to a Parquet dataset.

StreamTune learns from the stages of earlier runs of the same query.  This module keeps them: one
row per (run, batch, operator) of the ``operators`` field that
:class:`~lmstream_kit.tune.operators.OperatorMetrics` adds to every record, in a directory of
Parquet files that every run appends to and any run reads back as one dataset.

Where
    ``store`` when given, else :func:`default_store`: ``history/`` in the kit's data directory
    (:func:`data_dir`: ``$LMSTREAM_KIT_HOME``, else ``$XDG_DATA_HOME/lmstream_kit``, else
    ``~/.local/share/lmstream_kit``).

Append-only and crash-safe
    A :class:`HistoryWriter` buffers the rows of ``flush_every`` batches and writes them as one new
    file ``part-<run>-<seq>.parquet``: written under a hidden temporary name (``.tmp-...``, which
    readers skip) and then published atomically with ``os.link`` (fails rather than replacing an
    existing file, so a part is never rewritten; ``os.replace`` after checking the name is free where
    the filesystem has no hard links).  A crash loses at most the unflushed batches and leaves at
    most a hidden temporary file.  Writers of different runs (or processes) share a store without
    coordination.  Readers (:func:`read_history`) read every ``part-*.parquet`` as one
    ``pyarrow.dataset`` with :data:`SCHEMA`; a missing or empty store reads as an empty table.

The DAG fingerprint
    :func:`dag_fingerprint` hashes the stage structure of a batch, the sorted ``(key, position)``
    pairs and, when given, the operator names of the query's plan, to 12 hex digits of SHA-256:
    the same for every batch of a query that ran the same stages, in any process.  Skipped stages
    (a reused shuffle) are not in ``operators``, so such a batch has a fingerprint of its own.

The row (:data:`SCHEMA`, in this order; ``?`` = nullable)

============== ====================== ==========================================================
column         type                   meaning
============== ====================== ==========================================================
run_id         string                 the run (a writer's id; default a uuid4 hex)
workload       string ?               the record's workload (the query's registered name)
fingerprint    string                 :func:`dag_fingerprint` of the batch's operators
batch_id       int64                  Spark's batch id
operator       string                 the stage's key, ``j<job>.s<position>``
job            int32                  the job's index in the batch
position       int32                  the stage's index in its job, upstream first
stage_id       int64 ?                Spark's stage id
status         string ?               the stage's status (``COMPLETE``, ``FAILED``...)
tasks          int32                  the stage's parallelism (its task count)
records_in     int64                  records read (source or shuffle)
records_out    int64                  records written (output or shuffle)
run_s          float64                the tasks' run time, seconds
cpu_s          float64 ?              the tasks' CPU time, seconds
useful_s       float64                run time less shuffle waits, seconds
wall_s         float64 ?              the stage's submission to completion, seconds
true_rate      float64 ?              records in per useful task-second
load           float64 ?              one task's useful seconds over the batch's bound
bottleneck     bool                   load above the metric's busy share
batch_rows     int64                  the batch's input rows
bound_s        float64 ?              the batch's latency bound
stream_rate    float64 ?              rows per processing second the stream saw
written_at     timestamp[us, UTC]     when the batch was added to the writer
============== ====================== ==========================================================

An operator dict without one of the non-nullable fields (or with a value of the wrong kind) is
skipped; the batch's other operators are kept (:attr:`HistoryWriter.skipped` counts them).

>>> ops = [{"key": "j0.s0", "job": 0, "position": 0, "tasks": 4, "records_in": 1000, "records_out": 20,
...         "run_s": 2.0, "useful_s": 1.5, "bottleneck": False},
...        {"key": "j0.s1", "job": 0, "position": 1, "tasks": 2, "records_in": 20, "records_out": 5,
...         "run_s": 0.2, "useful_s": 0.1, "bottleneck": False}]
>>> stage_dag(ops)
[('j0.s0', 'j0.s1')]
>>> dag_fingerprint(ops) == dag_fingerprint(list(reversed(ops))), len(dag_fingerprint(ops))
(True, 12)
>>> dag_fingerprint(ops) == dag_fingerprint(ops[:1]), dag_fingerprint(ops) == dag_fingerprint(ops, ["Scan"])
(False, False)
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..exceptions import ConfigError
from ..protocol import BATCH, BatchController, Param

__all__ = [
    "SCHEMA",
    "SEED",
    "SEED_STORE",
    "History",
    "HistoryRecorder",
    "HistoryWriter",
    "dag_fingerprint",
    "data_dir",
    "default_store",
    "history_rows",
    "read_history",
    "stage_dag",
]

#: the environment variable naming the kit's data directory
HOME_ENV = "LMSTREAM_KIT_HOME"

#: one row per (run, batch, operator); see the module's table
SCHEMA = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("workload", pa.string()),
    pa.field("fingerprint", pa.string(), nullable=False),
    pa.field("batch_id", pa.int64(), nullable=False),
    pa.field("operator", pa.string(), nullable=False),
    pa.field("job", pa.int32(), nullable=False),
    pa.field("position", pa.int32(), nullable=False),
    pa.field("stage_id", pa.int64()),
    pa.field("status", pa.string()),
    pa.field("tasks", pa.int32(), nullable=False),
    pa.field("records_in", pa.int64(), nullable=False),
    pa.field("records_out", pa.int64(), nullable=False),
    pa.field("run_s", pa.float64(), nullable=False),
    pa.field("cpu_s", pa.float64()),
    pa.field("useful_s", pa.float64(), nullable=False),
    pa.field("wall_s", pa.float64()),
    pa.field("true_rate", pa.float64()),
    pa.field("load", pa.float64()),
    pa.field("bottleneck", pa.bool_(), nullable=False),
    pa.field("batch_rows", pa.int64(), nullable=False),
    pa.field("bound_s", pa.float64()),
    pa.field("stream_rate", pa.float64()),
    pa.field("written_at", pa.timestamp("us", tz="UTC"), nullable=False),
])

_PART = re.compile(r"^part-(?P<run>.+)-(?P<seq>\d+)\.parquet$")


# --------------------------------------------------------------------------- where


def data_dir() -> Path:
    """The kit's data directory: ``$LMSTREAM_KIT_HOME``, else ``$XDG_DATA_HOME/lmstream_kit``, else
    ``~/.local/share/lmstream_kit`` (an empty or, for XDG, relative variable counts as unset).

    No helper of this kind existed in the kit, and none of its dependencies offers one, so it lives here.
    """
    home = os.environ.get(HOME_ENV, "").strip()
    if home:
        return Path(home).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    if xdg and os.path.isabs(xdg):  # the XDG spec: a relative path is invalid and ignored
        return Path(xdg) / "lmstream_kit"
    return Path.home() / ".local" / "share" / "lmstream_kit"


def default_store() -> Path:
    """The history store used when none is given: ``history/`` in :func:`data_dir`."""
    return data_dir() / "history"


#: the seed history the kit ships (real runs of its six workloads at random source partitions, made by
#: ``benchmarks/seed_history.py``); ``"seed"`` names it wherever a store is asked for
SEED_STORE = Path(__file__).resolve().parents[1] / "resources" / "seed-history"
SEED = "seed"


def _store_path(store: str | os.PathLike | None) -> Path:
    if store is None:
        return default_store()
    if isinstance(store, str) and store == SEED:
        return SEED_STORE
    return Path(store).expanduser()


def _writable_store(store: str | os.PathLike | None) -> Path:
    """The store's directory, created; ConfigError naming it when it is a file or cannot be written."""
    path = _store_path(store)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"history store {str(path)!r} is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"history store {str(path)!r} cannot be written: {exc.strerror or exc}") from None
    return path


# --------------------------------------------------------------------------- stage structure


def _key_position(op: Any) -> tuple[str, int, int] | None:
    """``(key, job, position)`` of an operator dict or OperatorSample, None when it lacks one."""
    try:
        if isinstance(op, Mapping):
            key, job, position = op["key"], op["job"], op["position"]
        else:
            key, job, position = op.key, op.job, op.position
        if not isinstance(key, str) or isinstance(job, bool) or isinstance(position, bool):
            return None
        return key, int(job), int(position)
    except (KeyError, AttributeError, TypeError, ValueError):
        return None


def dag_fingerprint(operators: Iterable[Any], plan_ops: Sequence[str] | None = None) -> str:
    """A short, stable hash of a batch's stage structure (12 hex digits of SHA-256).

    It covers the sorted ``(key, position)`` of ``operators`` (the record's dicts or
    :class:`~lmstream_kit.tune.operators.OperatorSample` s; malformed entries are left out) and,
    when given and not empty, ``plan_ops``: the operator names of the query's plan, in plan order.
    The operators' metrics (tasks, records, times) do not change it.
    """
    stages = sorted({(kp[0], kp[2]) for kp in map(_key_position, operators) if kp is not None})
    body: dict[str, Any] = {"stages": [list(s) for s in stages]}
    if plan_ops:
        body["plan"] = [str(p) for p in plan_ops]
    text = json.dumps(body, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def stage_dag(operators: Iterable[Any]) -> list[tuple[str, str]]:
    """The batch's stages as edges ``(upstream key, downstream key)``, upstream first.

    A simplification of Spark's stage DAG: within a job, the stage at position k feeds the stage at
    the next position present (k + 1 unless a skipped stage was left out), a linear chain; jobs are
    not linked.  A join's two map stages both feed the join's stage in Spark; here the first feeds
    the second, which feeds the join.  Malformed entries are left out.

    >>> stage_dag([{"key": "j1.s0", "job": 1, "position": 0}, {"key": "j0.s2", "job": 0, "position": 2},
    ...            {"key": "j0.s0", "job": 0, "position": 0}, {"key": "j1.s1", "job": 1, "position": 1}])
    [('j0.s0', 'j0.s2'), ('j1.s0', 'j1.s1')]
    """
    jobs: dict[int, dict[int, str]] = {}
    for kp in map(_key_position, operators):
        if kp is not None:
            jobs.setdefault(kp[1], {}).setdefault(kp[2], kp[0])
    edges = []
    for job in sorted(jobs):
        chain = [jobs[job][p] for p in sorted(jobs[job])]
        edges += list(itertools.pairwise(chain))
    return edges


# --------------------------------------------------------------------------- rows


def _get(record: Any, name: str) -> Any:
    """A field of a record: a ``BatchRecord`` (typed field or plug-in field) or its dict form."""
    if isinstance(record, Mapping):
        return record.get(name)
    if hasattr(record, name):
        return getattr(record, name)
    extra = getattr(record, "extra", None)
    return extra.get(name) if isinstance(extra, Mapping) else None


def _int(v: Any) -> int:
    if isinstance(v, bool) or v is None:
        raise TypeError(v)
    if isinstance(v, float) and not v.is_integer():
        raise ValueError(v)
    return int(v)


def _float(v: Any) -> float:
    if isinstance(v, bool) or v is None:
        raise TypeError(v)
    return float(v)


def _opt(conv, v: Any) -> Any:
    return None if v is None else conv(v)


def _bool(v: Any) -> bool:
    if v is True or v is False or (not isinstance(v, str) and v in (True, False)):
        return bool(v)
    raise TypeError(v)


def _operator_row(op: Any) -> dict | None:
    """The operator columns of one record entry, None when it is malformed."""
    if not isinstance(op, Mapping):
        return None
    try:
        key = op["key"]
        if not isinstance(key, str):
            return None
        return {
            "operator": key, "job": _int(op["job"]), "position": _int(op["position"]),
            "stage_id": _opt(_int, op.get("stage_id")), "status": _opt(str, op.get("status")),
            "tasks": _int(op["tasks"]), "records_in": _int(op["records_in"]),
            "records_out": _int(op["records_out"]), "run_s": _float(op["run_s"]),
            "cpu_s": _opt(_float, op.get("cpu_s")), "useful_s": _float(op["useful_s"]),
            "wall_s": _opt(_float, op.get("wall_s")), "true_rate": _opt(_float, op.get("true_rate")),
            "load": _opt(_float, op.get("load")), "bottleneck": _bool(op["bottleneck"]),
        }
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


def history_rows(record: Any, *, run_id: str, workload: str | None = None,
                 plan_ops: Sequence[str] | None = None, written_at: float | None = None) -> tuple[list[dict], int]:
    """``(rows, skipped)``: the store's rows for one record (a ``BatchRecord`` or its dict form).

    ``workload`` defaults to the record's.  A record without ``operators`` gives no rows; an operator
    entry that is malformed is skipped and counted.  The fingerprint covers the kept operators.
    """
    operators = _get(record, "operators")
    if not operators or isinstance(operators, (str, bytes, Mapping)):
        return [], 0
    batch_id = _get(record, "batch_id")
    if batch_id is None or isinstance(batch_id, bool):
        return [], len(operators)
    kept = [(op, row) for op, row in ((op, _operator_row(op)) for op in operators) if row is not None]
    skipped = len(operators) - len(kept)
    if not kept:
        return [], skipped
    rows_in = _get(record, "rows") or 0
    processing = _get(record, "processing_s")
    rate = _get(record, "throughput_rows_s")
    if rate is None and processing:
        rate = rows_in / processing if processing > 0 else None
    bound = _get(record, "bound_s")
    stamp = datetime.fromtimestamp(time.time() if written_at is None else written_at, tz=timezone.utc)
    batch = {
        "run_id": run_id,
        "workload": workload if workload is not None else _opt(str, _get(record, "workload")),
        "fingerprint": dag_fingerprint([op for op, _ in kept], plan_ops),
        "batch_id": int(batch_id),
    }
    tail = {"batch_rows": int(rows_in), "bound_s": _opt(float, bound), "stream_rate": _opt(float, rate),
            "written_at": stamp}
    return [{**batch, **row, **tail} for _, row in kept], skipped


# --------------------------------------------------------------------------- writing


def _safe_name(run_id: str) -> str:
    """The run id as it appears in file names (characters other than letters, digits, ``_.-`` as ``_``)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)


class HistoryWriter:
    """Appends one run's records to a history store, ``flush_every`` batches to a file.

    >>> import tempfile
    >>> from lmstream_kit.record import BatchRecord
    >>> op = {"key": "j0.s0", "job": 0, "position": 0, "tasks": 2, "records_in": 100, "records_out": 0,
    ...       "run_s": 0.5, "useful_s": 0.4, "bottleneck": False}
    >>> store = tempfile.mkdtemp()
    >>> with HistoryWriter(store, "run1", "LR2S", flush_every=10) as w:
    ...     w.add(BatchRecord.from_batch(batch_id=0, policy="asap", datasets=[], admitted_at=0.0,
    ...                                  completed_at=1.0, operators=[op]))
    1
    >>> t = read_history(store)
    >>> t.num_rows, t["workload"][0].as_py(), t["tasks"][0].as_py(), sorted(os.listdir(store))
    (1, 'LR2S', 2, ['part-run1-000000.parquet'])
    """

    def __init__(self, store: str | os.PathLike | None, run_id: str, workload: str | None = None, *,
                 flush_every: int = 20, plan_ops: Sequence[str] | None = None, clock=time.time) -> None:
        if not isinstance(run_id, str) or not run_id.strip():
            raise ConfigError(f"history run id must be a non-empty string, got {run_id!r}")
        self.flush_every = Param("flush_every", int, low=1).validate(flush_every, label="history.flush_every")
        self.path = _writable_store(store)
        self.run_id = run_id
        self.workload = workload
        self.plan_ops = list(plan_ops) if plan_ops else None
        self.clock = clock
        self.skipped = 0  # malformed operator entries left out
        self.rows_written = 0
        self.files: list[Path] = []  # the parts this writer published
        self._rows: list[dict] = []
        self._batches = 0
        self._seq: int | None = None
        self._lock = threading.Lock()

    def add(self, record: Any) -> int:
        """Buffer one record's operators (a ``BatchRecord`` or its dict form); returns the rows added.

        Every ``flush_every`` batches that had operators, the buffer is written as a new file.
        """
        rows, skipped = history_rows(record, run_id=self.run_id, workload=self.workload, plan_ops=self.plan_ops,
                                     written_at=self.clock())
        with self._lock:
            self.skipped += skipped
            if not rows:
                return 0
            self._rows += rows
            self._batches += 1
            if self._batches >= self.flush_every:
                self._flush_locked()
        return len(rows)

    @property
    def pending(self) -> int:
        """Rows buffered and not yet written."""
        with self._lock:
            return len(self._rows)

    def flush(self) -> Path | None:
        """Write the buffered rows as a new part (returns it; None when nothing was buffered)."""
        with self._lock:
            return self._flush_locked()

    def close(self) -> None:
        """Write what is buffered."""
        self.flush()

    def __enter__(self) -> HistoryWriter:  # noqa: PYI034  (typing.Self needs Python 3.11)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_seq(self) -> int:
        if self._seq is None:  # continue after the parts an earlier writer of this run left
            prefix = _safe_name(self.run_id)
            seqs = [int(m["seq"]) for m in map(_PART.match, os.listdir(self.path)) if m and m["run"] == prefix]
            self._seq = max(seqs, default=-1) + 1
        seq, self._seq = self._seq, self._seq + 1
        return seq

    def _flush_locked(self) -> Path | None:
        if not self._rows:
            return None
        table = pa.Table.from_pylist(self._rows, schema=SCHEMA)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".parquet", dir=self.path)
        os.close(fd)
        try:
            import pyarrow.parquet as pq

            pq.write_table(table, tmp)
            target = self._publish(tmp)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.rows_written += len(self._rows)
        self._rows, self._batches = [], 0
        self.files.append(target)
        return target

    def _publish(self, tmp: str) -> Path:
        """Give the written temp file its part name without ever replacing an existing file."""
        while True:
            target = self.path / f"part-{_safe_name(self.run_id)}-{self._next_seq():06d}.parquet"
            try:
                os.link(tmp, target)
                return target
            except FileExistsError:
                continue  # another writer of the same run id took this name
            except OSError:  # no hard links on this filesystem
                if target.exists():
                    continue
                os.replace(tmp, target)
                return target


# --------------------------------------------------------------------------- reading


def _parts(path: Path) -> list[str]:
    if not path.exists():
        return []
    if not path.is_dir():
        raise ConfigError(f"history store {str(path)!r} is not a directory")
    return sorted(str(path / n) for n in os.listdir(path) if _PART.match(n))


def read_history(store: Any = None, workload: str | None = None,
                 fingerprint: str | None = None) -> pa.Table:
    """Every row of the store (:data:`SCHEMA`), optionally of one workload and/or one DAG fingerprint.

    ``store``: a path, :data:`SEED` (the shipped seed history), None (:func:`default_store`), or a
    list of these, read as one.  Parts are read in name order (run, then sequence), rows in the order
    they were added.  A missing or empty store gives an empty table with the schema.
    """
    stores = list(store) if isinstance(store, (list, tuple)) else [store]
    files = [f for one in stores for f in _parts(_store_path(one))]
    if not files:
        return SCHEMA.empty_table()
    import pyarrow.dataset as pads  # here: it imports pandas, which a stream that only writes never needs

    dataset = pads.dataset(files, schema=SCHEMA, format="parquet")
    cond = None
    for name, value in (("workload", workload), ("fingerprint", fingerprint)):
        if value is not None:
            term = pads.field(name) == value
            cond = term if cond is None else cond & term
    return dataset.to_table(filter=cond)


class History:
    """A history store: where it is, its rows, a summary, and writers for new runs.

    Parameters
    ----------
    store : path or None
        The store's directory (default :func:`default_store`); nothing is created until a writer
        writes.
    """

    def __init__(self, store: str | os.PathLike | None = None) -> None:
        self.path = _store_path(store)

    def read(self, workload: str | None = None, fingerprint: str | None = None) -> pa.Table:
        return read_history(self.path, workload=workload, fingerprint=fingerprint)

    def writer(self, run_id: str | None = None, workload: str | None = None, **kw: Any) -> HistoryWriter:
        return HistoryWriter(self.path, run_id or uuid.uuid4().hex, workload, **kw)

    def summary(self, workload: str | None = None, fingerprint: str | None = None) -> pa.Table:
        """Per (workload, fingerprint, operator): ``runs`` (distinct), ``batches`` (rows),
        ``bottlenecks``, ``tasks_min``/``tasks_max`` and ``true_rate_mean``, sorted by the keys."""
        keys = ["workload", "fingerprint", "operator"]
        table = self.read(workload, fingerprint)
        out = table.group_by(keys, use_threads=False).aggregate([
            ("run_id", "count_distinct"), ("batch_id", "count"), ("bottleneck", "sum"),
            ("tasks", "min"), ("tasks", "max"), ("true_rate", "mean"),
        ])
        names = {"run_id_count_distinct": "runs", "batch_id_count": "batches", "bottleneck_sum": "bottlenecks",
                 "tasks_min": "tasks_min", "tasks_max": "tasks_max", "true_rate_mean": "true_rate_mean"}
        out = out.select([*keys, *names]).rename_columns([*keys, *names.values()])
        out = out.set_column(out.schema.get_field_index("bottlenecks"), "bottlenecks",
                             out["bottlenecks"].cast(pa.int64()))
        return out.sort_by([(k, "ascending") for k in keys])


# --------------------------------------------------------------------------- the plug-in


class HistoryRecorder(BatchController):
    """Appends every batch's ``operators`` to a history store (after :class:`OperatorMetrics` added them).

    Add it after ``OperatorMetrics`` (``stream.add_controller(HistoryRecorder())``): a plug-in's
    ``after_batch`` sees the fields earlier controllers added in the same batch.  Records without
    operators (the digital twin, a batch whose stages could not be read) add nothing.  The store is
    checked at construction (ConfigError naming it); a failure to write later never fails a batch:
    it is kept in :attr:`error` and the rows stay buffered for the next try.

    Parameters
    ----------
    store : path or None
        The store's directory (default :func:`default_store`).
    run_id : str or None
        This run's id in the store (default: a new uuid4 hex).
    flush_every : int
        Batches buffered per file.
    workload : str or None
        The workload name to store (default: each record's ``workload``).
    plan_ops : sequence of str or None
        The query plan's operator names, for the DAG fingerprint.
    """

    prefix = "history"
    change_phase = BATCH
    PARAMS = (Param("flush_every", int, low=1, label="history: batches per file",
                    doc="batches buffered before they are written to the history store as one file"),)
    FIELDS: Mapping[str, str] = {}

    def __init__(self, store: str | os.PathLike | None = None, *, run_id: str | None = None, flush_every: int = 20,
                 workload: str | None = None, plan_ops: Sequence[str] | None = None) -> None:
        super().__init__()
        self.writer = HistoryWriter(store, run_id if run_id is not None else uuid.uuid4().hex, workload,
                                    flush_every=flush_every, plan_ops=plan_ops)
        self.error: Exception | None = None

    @property
    def run_id(self) -> str:
        return self.writer.run_id

    @property
    def path(self) -> Path:
        return self.writer.path

    @property
    def flush_every(self) -> int:
        return self.writer.flush_every

    def _apply_flush_every(self, value: int) -> None:
        old, self.writer.flush_every = self.writer.flush_every, value
        self.log_change("flush_every", value, old=old)

    def after_batch(self, record: Any) -> Mapping[str, Any] | None:
        try:
            self.writer.add(record)
        except Exception as exc:  # noqa: BLE001  (the history must never fail a batch)
            self.error = exc
        return None

    def close(self) -> None:
        self.writer.close()
