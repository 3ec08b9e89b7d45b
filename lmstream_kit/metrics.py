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

A stream that runs for days has its journals rotated by the spool retention
(:mod:`lmstream_kit.retention`): ``metrics.jsonl`` is renamed to
``metrics.<UTC stamp>.jsonl`` once it is large, later gzipped
(``metrics.<UTC stamp>.jsonl.gz``), and deleted once old, its totals folded into
``metrics.released.json`` first.  :func:`read_journal` reads every part in order,
or only the newest records.

:func:`load_metrics` joins the first two into one pandas DataFrame.  Nothing in
this module imports pyspark.
"""

from __future__ import annotations

import collections
import gzip
import json
import math
import os
import re
import threading
import zlib
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

from .exceptions import ConfigError
from .record import FIELD_DOCS, BatchRecord, summarize

__all__ = ["batch_key", "batch_record", "has_journal", "iter_jsonl", "iter_part", "journal_parts", "load_metrics", "part_order",
           "read_journal", "read_jsonl", "read_part", "read_released", "read_run_info", "remove_unused_run_dir",
           "summarize", "write_run_info", "CorruptLineError", "JsonlWriter", "METRICS_FILE", "PROGRESS_FILE", "RELEASED_FILE", "RUN_FILE"]

METRICS_FILE = "metrics.jsonl"
PROGRESS_FILE = "spark_progress.jsonl"
RUN_FILE = "run.json"
#: the totals of the metrics parts retention deleted (:func:`lmstream_kit.runinfo.processed_totals` adds them)
RELEASED_FILE = "metrics.released.json"

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

    The writer follows a rotation: when ``path`` was renamed away (or replaced) since
    the last line, the next line starts a new file at ``path``.  A line written while
    the rename happens lands at the end of the renamed part: nothing is lost, and the
    order is kept.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); w = JsonlWriter(d / "m.jsonl", durable=False)
    >>> w.append({"batch_id": 0}); os.replace(d / "m.jsonl", d / "m.1.jsonl"); w.append({"batch_id": 1})
    >>> read_jsonl(d / "m.1.jsonl"), read_jsonl(d / "m.jsonl")
    ([{'batch_id': 0}], [{'batch_id': 1}])
    >>> w.close()
    """

    def __init__(self, path: os.PathLike | str, *, durable: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.durable = durable
        self._lock = threading.Lock()
        self._fh = self._open()

    def _open(self):
        fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - held open across appends
        try:
            if _ends_mid_line(self.path):  # a writer died mid-line: end that line
                fh.write("\n")
                fh.flush()
                if self.durable:
                    os.fsync(fh.fileno())
        except BaseException:
            fh.close()
            raise
        return fh

    def _moved(self) -> bool:
        """Whether ``path`` is no longer the open file (rotation renamed it away)."""
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return True
        held = os.fstat(self._fh.fileno())
        return (now.st_ino, now.st_dev) != (held.st_ino, held.st_dev)

    def append(self, record: Mapping[str, Any]) -> None:
        line = json.dumps({k: _jsonable(v) for k, v in record.items()}, default=str) + "\n"
        with self._lock:
            if self._fh.closed:
                raise ValueError(f"{self.path} is closed")
            if self._moved():  # rotated: this line starts the new file
                fh = self._open()  # the old one stays ours until the new one is open
                self._fh.close()
                self._fh = fh
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
    """Records of a JSON-lines file, in order; a ``.gz`` file is read through gzip.

    What a writer killed mid-line leaves is skipped: a cut last line (no newline), and a cut
    line in the middle, which a later writer ended (or appended its own record to, which is
    kept).  Blank lines are skipped.  A file that does not exist has no records.

    Raises
    ------
    CorruptLineError
        For a line in the middle that is neither a record nor a cut one (one line, naming the
        file and the line number), or a ``.gz`` file that is not whole.
    """
    return list(iter_jsonl(path))


def iter_jsonl(path: os.PathLike | str) -> Iterator[dict]:
    """:func:`read_jsonl`'s records one at a time, so that a large journal part is never held whole
    (``fold_released``, ``processed_totals`` and a restart's tail read parts of 64 MiB this way).

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "m.jsonl"; _ = f.write_text('{"b": 0}\\n{"b": 1}\\n{"b"')
    >>> [r["b"] for r in iter_jsonl(f)], list(iter_jsonl(f.with_name("none.jsonl")))
    ([0, 1], [])
    """
    try:
        yield from _iter_records(Path(path))
    except (FileNotFoundError, NotADirectoryError):
        return


def _read_records(path: Path) -> list[dict]:
    """:func:`read_jsonl`, but a file that does not exist raises FileNotFoundError."""
    return list(_iter_records(path))


def _iter_records(path: Path) -> Iterator[dict]:
    """The records of ``path`` one at a time; a file that does not exist raises FileNotFoundError."""
    compressed = path.suffix == ".gz"
    fh = gzip.open(path, "rb") if compressed else open(path, "rb")  # noqa: SIM115 - closed by the with below
    try:
        with fh:
            yield from _parse_lines(fh, path)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        if not compressed:
            raise
        raise CorruptLineError(f"{path} is not a whole gzip file: {exc}") from None


def _parse_lines(fh: Any, path: Path) -> Iterator[dict]:
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
                record = json.loads(text)
            except ValueError as exc:
                error = exc
            else:
                yield record
                continue
        if last:
            continue  # a writer died mid-line
        start, record = _record_after_cut(text)
        if record is not None and (undecodable is None or "\ufffd" not in text[start:]):
            yield record  # after what a writer killed mid-line left
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


#: a rotated part's name after its journal's stem: ``.<UTC stamp>[-N]<suffix>[.gz]``
_PART = re.compile(r"\.(\d{8}T\d{6}Z)(?:-(\d+))?(\.[^.]+)(\.gz)?$")


def part_order(path: os.PathLike | str) -> tuple[str, int] | None:
    """Where a rotated journal part comes in its journal: ``(UTC stamp, N)`` from its name, None
    for a name that is not a rotated part's.  Parts sort oldest first by it.

    >>> part_order("metrics.20261125T093000Z.jsonl"), part_order("run/metrics.20261125T093000Z-2.jsonl.gz")
    (('20261125T093000Z', 0), ('20261125T093000Z', 2))
    >>> part_order("metrics.jsonl") is None
    True
    """
    match = _PART.search(Path(path).name)
    return None if match is None else (match.group(1), int(match.group(2) or 0))


def journal_parts(path: os.PathLike | str) -> list[Path]:
    """The rotated parts of the journal ``path``, oldest first.

    A part is ``<stem>.<UTC stamp>[-N]<suffix>`` beside it, or that name gzipped (``.gz``);
    where both exist (a compression under way) the part is the plain file.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> for name in ("metrics.20261125T093000Z-1.jsonl", "metrics.20261125T093000Z.jsonl.gz",
    ...              "metrics.20261124T000000Z.jsonl", "metrics.20261124T000000Z.jsonl.gz",
    ...              "metrics.jsonl", "metrics.released.json", "metrics.20261126T000000Z.jsonl.gz.tmp"):
    ...     _ = (d / name).write_text("")
    >>> [p.name for p in journal_parts(d / "metrics.jsonl")]
    ['metrics.20261124T000000Z.jsonl', 'metrics.20261125T093000Z.jsonl.gz', 'metrics.20261125T093000Z-1.jsonl']
    """
    path = Path(path)
    prefix = path.stem + "."
    parts: dict[tuple[str, int], Path] = {}
    try:
        names = [p.name for p in path.parent.iterdir()]
    except (FileNotFoundError, NotADirectoryError):  # no such directory: no parts
        return []
    for name in names:
        if not name.startswith(prefix):
            continue
        match = _PART.fullmatch(name[len(path.stem):])
        if match is None or match.group(3) != path.suffix:
            continue
        key = (match.group(1), int(match.group(2) or 0))
        if key not in parts or match.group(4) is None:  # the plain file, where both are there
            parts[key] = path.with_name(name)
    return [parts[key] for key in sorted(parts)]


def has_journal(path: os.PathLike | str) -> bool:
    """Whether the journal ``path`` has a file: itself, or a rotated part (it is renamed away
    when rotated, and is written again with the next record)."""
    path = Path(path)
    return path.is_file() or bool(journal_parts(path))


def read_part(part: os.PathLike | str) -> list[dict]:
    """The records of a rotated part (:func:`journal_parts`); one gzipped since it was listed is
    read from its ``.gz``, one deleted since has none."""
    return list(iter_part(part))


def iter_part(part: os.PathLike | str) -> Iterator[dict]:
    """:func:`read_part`'s records one at a time."""
    part = Path(part)
    try:
        records = _iter_records(part)
        first = next(records, None)  # opens the file: FileNotFoundError here, before anything is yielded
    except FileNotFoundError:
        if part.suffix != ".gz":
            yield from iter_jsonl(part.with_name(part.name + ".gz"))
        return
    if first is not None:
        yield first
        yield from records


def read_journal(path: os.PathLike | str, *, tail: int | None = None) -> list[dict]:
    """The records of the journal ``path``: those of its rotated parts (:func:`journal_parts`),
    oldest first, then its own.

    With ``tail``, only the newest ``tail`` records: the parts are read from the newest
    backwards, only as far as they are needed (a run of weeks is not read whole).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "m.20260101T000000Z.jsonl").write_text('{"b": 0}\\n{"b": 1}\\n')
    >>> with gzip.open(d / "m.20250101T000000Z.jsonl.gz", "wt") as fh:
    ...     _ = fh.write('{"b": -1}\\n')
    >>> _ = (d / "m.jsonl").write_text('{"b": 2}\\n')
    >>> [r["b"] for r in read_journal(d / "m.jsonl")], [r["b"] for r in read_journal(d / "m.jsonl", tail=2)]
    ([-1, 0, 1, 2], [1, 2])

    Raises
    ------
    CorruptLineError
        For a corrupt line of a part read (see :func:`read_jsonl`).
    ConfigError
        For a ``tail`` that is not a whole number >= 0.
    """
    path = Path(path)
    if tail is not None and (isinstance(tail, bool) or not isinstance(tail, int) or tail < 0):
        raise ConfigError(f"tail must be a whole number >= 0, got {tail!r}")
    parts = journal_parts(path)
    if tail is None:
        out: list[dict] = []
        for part in parts:
            out.extend(read_part(part))
        out.extend(read_jsonl(path))
        return out
    if tail == 0:
        return []
    chunks = [_newest(iter_jsonl(path), tail)]  # at most ``tail`` records of a file are held at a time
    held = len(chunks[0])
    for part in reversed(parts):
        if held >= tail:
            break
        chunks.append(_newest(iter_part(part), tail - held))
        held += len(chunks[-1])
    return [record for chunk in reversed(chunks) for record in chunk]


def _newest(records: Iterator[dict], n: int) -> list[dict]:
    """The last ``n`` of ``records``, holding no more than ``n`` at a time."""
    return list(collections.deque(records, maxlen=n))


def batch_key(record: Any) -> tuple | None:
    """What one batch's record is known by: ``(batch_id, start_seq, end_seq)``; None for a line
    that is no batch's record.  A batch that a crash left uncommitted runs again after the
    restart under the same key (the same batch id over the same datasets).

    >>> batch_key({"batch_id": 3, "start_seq": 10, "end_seq": 12, "rows": 5}), batch_key({"note": 1})
    ((3, 10, 12), None)
    """
    if not isinstance(record, dict) or record.get("batch_id") is None:
        return None
    return (int(record["batch_id"]), record.get("start_seq"), record.get("end_seq"))


def read_released(run_dir: os.PathLike | str) -> dict:
    """``metrics.released.json`` of ``run_dir``: the totals of the metrics parts retention deleted
    (``batches``, ``rows_processed``, ``parts``, ``last_key``, ``through_batch_id``,
    ``through_part``), or ``{}`` where none was deleted.

    Raises ConfigError naming the file where it is not such a JSON object.
    """
    path = Path(run_dir) / RELEASED_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        released = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc}): not the totals of released metrics") from None
    if not isinstance(released, dict) or not all(
            isinstance(released.get(k, 0), int) for k in ("batches", "rows_processed", "parts")):
        raise ConfigError(f"{path} is not a JSON object of whole totals: not the totals of released metrics")
    return released


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
    Both journals are read whole, rotated parts included (:func:`read_journal`); the
    batches of parts that retention deleted are gone.
    """
    import pandas as pd

    run_dir = Path(run_dir)
    records = read_journal(run_dir / METRICS_FILE)
    df = pd.DataFrame.from_records(records) if records else pd.DataFrame(columns=list(CORE_FIELDS))
    progress = read_journal(run_dir / PROGRESS_FILE)
    if progress and len(df):
        pdf = pd.DataFrame.from_records(progress)
        pdf = pdf.drop_duplicates("batch_id", keep="last")
        pdf = pdf.rename(columns={c: f"spark_{c}" for c in pdf.columns if c != "batch_id"})
        df = df.merge(pdf, on="batch_id", how="left")
    if len(df):
        df = df.sort_values("batch_id", kind="stable").reset_index(drop=True)
    return df
