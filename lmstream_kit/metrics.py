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

from .exceptions import ConfigError
from .record import FIELD_DOCS, BatchRecord, summarize

__all__ = ["batch_record", "load_metrics", "read_jsonl", "read_run_info", "remove_unused_run_dir", "summarize",
           "write_run_info", "CorruptLineError", "JsonlWriter", "METRICS_FILE", "PROGRESS_FILE", "RUN_FILE"]

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
    leaves at most one partial trailing line, which the loaders skip.  A file that
    ends in such a line is first given the newline it lacks, so that the next
    record starts a line of its own instead of being glued to the partial one.
    """

    def __init__(self, path: os.PathLike | str, *, durable: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.durable = durable
        self._lock = threading.Lock()
        self._fh = open(self.path, "a", encoding="utf-8")
        if _ends_mid_line(self.path):  # a writer died mid-line: end that line
            self._fh.write("\n")
            self._fh.flush()
            if self.durable:
                os.fsync(self._fh.fileno())

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


class CorruptLineError(ConfigError):
    """A line of a JSON-lines file that is neither a record nor what a writer killed mid-line leaves.

    Its message is one line naming the file and the line number.
    """


def _ends_mid_line(path: Path) -> bool:
    """Whether the file at ``path`` is non-empty and does not end with a newline."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell() == 0:
                return False
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except OSError:
        return False


_HEX = frozenset("0123456789abcdefABCDEF")
#: what may complete the value a cut line ends in before its brackets are closed: nothing, a
#: number's missing digits, a key's value, a key after a comma, the rest of a literal
_LITERALS = ("true", "false", "null", "NaN", "Infinity")
_COMPLETIONS = ("", "0", ":0", '"":0', *sorted({lit[k:] for lit in _LITERALS for k in range(1, len(lit))}))


def _is_cut_record(text: str) -> bool:
    """Whether ``text`` is the beginning of a JSON object cut short (what a writer killed mid-line
    leaves), not a corrupt or complete one.

    >>> line = json.dumps({"batch_id": 7, "x": -1.5e-07, "ok": True, "s": "a\\u00e9\\"b", "l": [1, {}]})
    >>> all(_is_cut_record(line[:k]) for k in range(1, len(line)))
    True
    >>> [_is_cut_record(text) for text in (line, '{"a": 1,, "b": 2}', "hello", '{"a": 1]')]
    [False, False, False, False]
    """
    text = text.strip().strip("\x00")
    if not text.startswith("{"):
        return False
    closers: list[str] = []
    in_string, escape, hex_left = False, False, 0
    for ch in text:
        if in_string:
            if hex_left:
                if ch not in _HEX:
                    return False
                hex_left -= 1
            elif escape:
                escape = False
                hex_left = 4 if ch == "u" else 0
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            closers.append("}" if ch == "{" else "]")
        elif ch in "}]" and (not closers or closers.pop() != ch):
            return False
    if not closers:
        return False  # the object is closed: it did not parse for another reason
    head = text + (("n" if escape else "0" * hex_left) + '"' if in_string else "")
    tail = "".join(reversed(closers))
    for middle in _COMPLETIONS:
        try:
            json.loads(head + middle + tail)
            return True
        except ValueError:
            continue
    return False


def _record_after_cut(text: str) -> tuple[int, Any]:
    """``(column, record)`` of the record a line holds after a cut one that nothing ended (a writer
    killed mid-line, then a writer that appended without ending the line first), or ``(-1, None)``."""
    start = text.find('{"', 1)
    while start > 0:
        try:
            record = json.loads(text[start:])
        except ValueError:
            record = None
        if isinstance(record, dict) and _is_cut_record(text[:start]):
            return start, record
        start = text.find('{"', start + 1)
    return -1, None


def read_jsonl(path: os.PathLike | str) -> list[dict]:
    """Records of a JSON-lines file, in order.

    What a writer killed mid-line leaves is skipped: a cut last line (no newline), and a cut
    line in the middle, which a later writer ended (or appended its own record to, which is
    kept).  Blank lines are skipped.

    Raises
    ------
    CorruptLineError
        For a line in the middle that is neither a record nor a cut one (one line, naming the
        file and the line number).
    """
    path = Path(path)
    if not path.exists():
        return []
    out = []
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            last = not raw.endswith(b"\n")  # only the last line can lack its newline
            try:
                text, undecodable = raw.decode("utf-8"), None
            except UnicodeDecodeError as exc:  # a multi-byte character cut in two, or not UTF-8 at all
                text, undecodable = raw.decode("utf-8", errors="replace"), exc
            if not text.strip().strip("\x00").strip():
                continue
            error: Any = undecodable
            if undecodable is None:
                try:
                    out.append(json.loads(text))
                    continue
                except ValueError as exc:
                    error = exc
            if last:
                continue  # a writer died mid-line
            start, record = _record_after_cut(text)
            if record is not None and (undecodable is None or "\ufffd" not in text[start:]):
                out.append(record)  # after what a writer killed mid-line left
                continue
            if _is_cut_record(text):
                continue  # a writer died mid-line, and the next one ended the line
            if undecodable is not None:
                why = f"not UTF-8 ({undecodable.reason} at byte {undecodable.start})"
            else:
                why = f"not a JSON record ({getattr(error, 'msg', error)}, column {getattr(error, 'colno', '?')})"
            shown = text.strip()
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise CorruptLineError(f"{path}, line {number}: {why}: {shown!r}") from error
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
