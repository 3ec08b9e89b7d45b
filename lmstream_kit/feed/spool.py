"""Append-only, replayable log of *datasets* (the rows that arrive together).

A spool is the hand-off point between whatever produces rows (the traffic
generator, the directory-ingest adapter) and the streaming source that the
Spark driver polls.  Every dataset is one immutable Arrow IPC file plus one
line in an append-only index, so any process that knows the spool's URI can
replay any range of datasets bit-for-bit, and a crashed writer can be
restarted without losing or duplicating what was already committed.

Layout under the spool root::

    meta.json                    format version, created_at, Arrow schema (base64)
    index.jsonl                  one JSON line per committed dataset, appended
    retained.json                where retention left off: datasets before ``first_seq`` have no data
    data/000000000000.arrow      Arrow IPC *file* format, one file per dataset
    data/000000000001.arrow
    ...

Commit protocol (why readers never see a half-written dataset):

1. the data file is written under a temporary name and moved into place;
2. only then is the index line appended, in a single write ending in ``\\n``;
3. readers parse complete lines only, so a torn trailing line is invisible,
   and a writer reopening the spool cuts the torn tail off before appending.

Example
-------
>>> import pyarrow as pa, tempfile
>>> sp = Spool(tempfile.mkdtemp(), schema=pa.schema([("x", pa.int32())]), durable=False)
>>> sp.append(pa.table({"x": pa.array([1, 2], pa.int32())})).seq
0
>>> sp.read_table().num_rows
2
"""

from __future__ import annotations

from ..exceptions import one_line

import base64
import json
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

from lmstream_kit.exceptions import SpoolError

__all__ = [
    "DatasetInfo",
    "Spool",
    "SPOOL_FORMAT_VERSION",
    "read_dataset_files",
    "resolve_location",
]

SPOOL_FORMAT_VERSION = 1
_META = "meta.json"
_INDEX = "index.jsonl"
_INDEX_BLOCK = 8 << 20  # bytes of the index parsed at a time
_RETAINED = "retained.json"
_DATA = "data"


def _data_path(seq: int) -> str:
    return f"{_DATA}/{seq:012d}.arrow"




@dataclass(frozen=True)
class DatasetInfo:
    """One committed dataset: the rows that arrived together at one instant.

    Attributes
    ----------
    seq : int
        0-based position in the spool; sequence numbers are contiguous.
    arrival : float
        Epoch seconds (``time.time()``) at which the dataset was committed.
    rows : int
        Number of rows in the dataset.
    nbytes : int
        Size of its data file in bytes.
    path : str
        Data file path relative to the spool root (``data/{seq:012d}.arrow``).
    source : str
        ``"generator"``, the ingested file's name, or ``""``.
    ranges : dict, optional
        In a Kafka spool (:mod:`lmstream_kit.feed.kafka`): the dataset's records, ``{partition:
        (start offset, end offset)}``; it has no data file then, and ``nbytes`` is an estimate.
    """

    seq: int
    arrival: float
    rows: int
    nbytes: int
    path: str
    source: str = ""
    second: int | None = None
    ranges: dict | None = None

    def to_json(self) -> dict:
        """Return the JSON-serialisable dict written as one index line."""
        out = {
            "seq": self.seq,
            "arrival": self.arrival,
            "rows": self.rows,
            "nbytes": self.nbytes,
            "path": self.path,
            "source": self.source,
        }
        if self.second is not None:
            out["second"] = self.second
        if self.ranges is not None:
            out["ranges"] = {str(p): [int(a), int(b)] for p, (a, b) in self.ranges.items()}
        return out

    @classmethod
    def from_json(cls, d: dict) -> "DatasetInfo":
        """Build a :class:`DatasetInfo` from a dict made by :meth:`to_json`."""
        return cls(
            seq=int(d["seq"]),
            arrival=float(d["arrival"]),
            rows=int(d["rows"]),
            nbytes=int(d["nbytes"]),
            path=str(d.get("path") or _data_path(int(d["seq"]))),
            source=str(d.get("source", "")),
            second=None if d.get("second") is None else int(d["second"]),
            ranges=None if d.get("ranges") is None else {int(p): (int(a), int(b)) for p, (a, b) in d["ranges"].items()},
        )


def resolve_location(location: str | os.PathLike) -> tuple[pafs.FileSystem, str, str]:
    """Resolve a spool location to ``(filesystem, root path, uri)``.

    Parameters
    ----------
    location : str or os.PathLike
        A local path or a pyarrow filesystem URI (``file:///abs/path``,
        ``hdfs://namenode:8020/path``).

    Returns
    -------
    tuple
        The pyarrow filesystem, the root path inside it (no trailing slash),
        and a URI string that reopens the same spool from another process
        (the absolute path for plain local paths, the URI as given otherwise).
    """
    text = os.fspath(location)
    if "://" in text:
        try:
            fs, root = pafs.FileSystem.from_uri(text)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise SpoolError(f"cannot open spool at {text}: {one_line(exc)}") from exc
        return fs, root.rstrip("/") or "/", text
    root = os.path.abspath(os.path.expanduser(text))
    return pafs.LocalFileSystem(), root, root


# Executors call read_dataset_files once per partition; resolving a filesystem
# (especially HDFS, which connects to the namenode) is far costlier than
# reading a small Arrow file, so filesystems are cached per URI per process.
_FS_CACHE: dict[str, tuple[pafs.FileSystem, str]] = {}
_FS_CACHE_LOCK = threading.Lock()


def _cached_fs(uri: str) -> tuple[pafs.FileSystem, str]:
    hit = _FS_CACHE.get(uri)
    if hit is None:
        with _FS_CACHE_LOCK:
            hit = _FS_CACHE.get(uri)
            if hit is None:
                fs, root, _ = resolve_location(uri)
                hit = _FS_CACHE[uri] = (fs, root)
    return hit


def _read_ipc_file(fs: pafs.FileSystem, full_path: str) -> Iterator[pa.RecordBatch]:
    try:
        with fs.open_input_file(full_path) as f:
            reader = ipc.open_file(f)
            # Materialise inside the `with`: the batches must outlive the handle.
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
    except FileNotFoundError as exc:
        raise SpoolError(f"spool data file {full_path} is missing") from exc
    except (pa.ArrowException, OSError) as exc:
        raise SpoolError(f"cannot read spool data file {full_path}: {one_line(exc)}") from exc
    yield from batches


def _missing_reason(fs: pafs.FileSystem, root: str, rel: str) -> str:
    """Why data file ``rel`` is missing: retention deleted it (the spool's mark says so), or not known."""
    first = _read_first_seq(fs, root)
    stem = rel.rsplit("/", 1)[-1].split(".", 1)[0]
    if stem.isdigit() and int(stem) < first:
        return (f"spool dataset {int(stem)} at {root} was deleted by the spool's retention (datasets before "
                f"{first} are gone); a restart from the run's checkpoint never needs it")
    return f"spool data file {root}/{rel} is missing"


def _read_first_seq(fs: pafs.FileSystem, root: str) -> int:
    """The spool's retention mark (``retained.json``): the first dataset with a data file (0: none deleted)."""
    try:
        with fs.open_input_stream(f"{root}/{_RETAINED}", compression=None) as f:
            return int(json.loads(f.read().decode("utf-8"))["first_seq"])
    except FileNotFoundError:
        return 0
    except (pa.ArrowException, OSError, ValueError, KeyError, TypeError) as exc:
        raise SpoolError(f"cannot read the retention mark of spool {root}: {one_line(exc)}") from exc


def read_dataset_files(uri: str, paths: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """Read spool data files by relative path, without touching the index.

    This is what Spark executors call: it needs only the spool URI and the
    ``DatasetInfo.path`` values chosen by the driver, and it caches the
    resolved filesystem per URI so repeated calls stay cheap.

    Parameters
    ----------
    uri : str
        ``Spool.uri`` of the spool (a local absolute path or a filesystem URI).
    paths : sequence of str
        Data file paths relative to the spool root, e.g. ``"data/000000000003.arrow"``.

    Yields
    ------
    pyarrow.RecordBatch
        The batches of each file in order, in the spool schema exactly.
    """
    fs, root = _cached_fs(uri)
    for rel in paths:
        try:
            yield from _read_ipc_file(fs, f"{root}/{rel}")
        except SpoolError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):
                raise SpoolError(_missing_reason(fs, root, rel)) from exc
            raise


class Spool:
    """Append-only replayable log of datasets on a local or pyarrow filesystem.

    Parameters
    ----------
    location : str or os.PathLike
        Local directory or filesystem URI (``file:///abs/path``, ``hdfs://...``).
    schema : pyarrow.Schema, optional
        Required to create a new spool.  When opening an existing spool it is
        optional; if given it must equal the stored schema (field names, types
        and nullability; schema metadata is not compared).
    create : bool
        True (default) opens the spool for writing, creating it if missing and
        repairing a torn index tail left by a crashed writer.  False opens an
        existing spool read-only (for readers in other processes).
    durable : bool
        If True, fsync each data file, the data directory and the index after
        every append (local filesystems; on other filesystems the stream's
        flush semantics apply).  False is much faster and is fine for
        benchmarks, where losing the last datasets on power loss is harmless.

    Raises
    ------
    SpoolError
        If the location cannot be created or written, no spool exists there
        (``create=False``), a new spool is requested without a schema, or the
        given schema differs from the stored one.

    Notes
    -----
    One writer process at a time is assumed; within it, :meth:`append` is
    thread-safe.  Any number of readers may tail the index concurrently.
    """

    def __init__(
        self,
        location: str | os.PathLike,
        *,
        schema: pa.Schema | None = None,
        create: bool = True,
        durable: bool = True,
        kafka: dict | None = None,
    ) -> None:
        self._location = os.fspath(location)
        self.kafka: dict | None = dict(kafka) if kafka is not None else None
        self.filesystem, self.root, self.uri = resolve_location(location)
        self.durable = bool(durable)
        self.writable = bool(create)
        self._lock = threading.RLock()
        self._is_local = isinstance(self.filesystem, pafs.LocalFileSystem)
        self._infos: list[DatasetInfo] = []
        self._cum_rows: list[int] = [0]  # prefix sums so total_rows is O(1)
        self._cum_bytes: list[int] = [0]  # and kept_bytes
        self._first_seq = 0  # retention's mark: datasets before it have no data file any more
        self._base = 0  # datasets released from memory: _infos[i] is dataset _base + i
        self._offset = 0  # bytes of index.jsonl already parsed (complete lines only)
        self._index_stream = None
        self._closed = False
        self.kafka_stored: dict | None = None

        if create:
            self._prepare_writable_root()
        meta_path = self._full(_META)
        if self._exists(meta_path):
            stored = self._read_meta(meta_path)
            if schema is not None and not schema.equals(stored, check_metadata=False):
                raise SpoolError(
                    f"schema mismatch for spool at {self._location}: stored {_schema_str(stored)}, "
                    f"given {_schema_str(schema)}"
                )
            self.schema = stored
            if kafka is not None and self.kafka_stored != dict(kafka):
                raise SpoolError(f"spool at {self._location} indexes {self.kafka_stored or 'no topic'}, not {dict(kafka)}")
            self.kafka = self.kafka_stored
            self._first_seq = _read_first_seq(self.filesystem, self.root)
        elif not create:
            raise SpoolError(f"no spool at {self._location} (meta.json not found)")
        elif schema is None:
            raise SpoolError(f"creating a new spool at {self._location} requires a schema")
        else:
            self.schema = schema
            self._write_meta(meta_path)

        if create:
            self._open_for_append()
        else:
            self.refresh()

    # ------------------------------------------------------------------ setup
    def _full(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def _exists(self, full_path: str) -> bool:
        return self.filesystem.get_file_info(full_path).type == pafs.FileType.File

    def _prepare_writable_root(self) -> None:
        probe = self._full(f".probe-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            info = self.filesystem.get_file_info(self.root)
            if info.type == pafs.FileType.File:
                raise SpoolError(f"cannot write spool at {self._location}: it is a regular file, not a directory")
            self.filesystem.create_dir(self._full(_DATA), recursive=True)
            # Permission problems only show up on an actual write, and we want
            # them at construction, not at the first append minutes later.
            with self.filesystem.open_output_stream(probe, compression=None) as out:
                out.write(b"probe")
            self.filesystem.delete_file(probe)
        except SpoolError:
            raise
        except (pa.ArrowException, OSError) as exc:
            raise SpoolError(f"cannot write spool at {self._location}: {one_line(exc)}") from exc

    def _read_meta(self, meta_path: str) -> pa.Schema:
        try:
            with self.filesystem.open_input_stream(meta_path, compression=None) as f:
                meta = json.loads(f.read().decode("utf-8"))
            schema = ipc.read_schema(pa.py_buffer(base64.b64decode(meta["schema"])))
        except (pa.ArrowException, OSError, ValueError, KeyError, TypeError) as exc:
            raise SpoolError(f"cannot read spool metadata at {self._location}: {one_line(exc)}") from exc
        version = meta.get("version")
        if version != SPOOL_FORMAT_VERSION:
            raise SpoolError(
                f"spool at {self._location} has format version {version!r}; "
                f"this lmstream_kit reads version {SPOOL_FORMAT_VERSION}"
            )
        self.created_at = float(meta.get("created_at", 0.0))
        self.kafka_stored = meta.get("kafka")
        return schema

    def _write_meta(self, meta_path: str) -> None:
        self.created_at = time.time()
        meta = {
            "format": "lmstream_kit.spool",
            "version": SPOOL_FORMAT_VERSION,
            "created_at": self.created_at,
            "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode("ascii"),
            "fields": [f"{f.name}: {f.type}" for f in self.schema],  # for humans only
        }
        if self.kafka is not None:  # an index of a topic: its datasets are offset ranges, no data files
            meta["kafka"] = self.kafka
        tmp = meta_path + f".tmp-{uuid.uuid4().hex[:8]}"
        try:
            with self.filesystem.open_output_stream(tmp, compression=None) as out:
                out.write(json.dumps(meta, indent=1).encode("utf-8"))
            self.filesystem.move(tmp, meta_path)
            with self.filesystem.open_output_stream(self._full(_INDEX), compression=None):
                pass
        except (pa.ArrowException, OSError) as exc:
            raise SpoolError(f"cannot write spool at {self._location}: {one_line(exc)}") from exc

    def _open_for_append(self) -> None:
        index_path = self._full(_INDEX)
        if not self._exists(index_path):
            self._write_empty_index(index_path)
        self.refresh()
        size = self.filesystem.get_file_info(index_path).size or 0
        if size > self._offset:
            # A writer died mid-line.  Readers already ignore the torn tail; cut
            # it off so our next line does not get glued onto it.
            self._truncate_index(index_path, self._offset)
        self._remove_orphans()
        try:
            self._index_stream = self.filesystem.open_append_stream(index_path, compression=None)
        except pa.ArrowNotImplementedError as exc:
            raise SpoolError(
                f"cannot write spool at {self._location}: its filesystem "
                f"({self.filesystem.type_name}) does not support append streams"
            ) from exc
        except (pa.ArrowException, OSError) as exc:
            raise SpoolError(f"cannot write spool at {self._location}: {one_line(exc)}") from exc

    def _write_empty_index(self, index_path: str) -> None:
        with self.filesystem.open_output_stream(index_path, compression=None):
            pass

    def _truncate_index(self, index_path: str, keep: int) -> None:
        if self._is_local:
            os.truncate(index_path, keep)
            return
        with self.filesystem.open_input_stream(index_path, compression=None) as f:
            head = f.read(keep)
        tmp = index_path + f".tmp-{uuid.uuid4().hex[:8]}"
        with self.filesystem.open_output_stream(tmp, compression=None) as out:
            out.write(head)
        self.filesystem.delete_file(index_path)
        self.filesystem.move(tmp, index_path)

    def _remove_orphans(self) -> None:
        # Data files at or beyond the next seq (written, never indexed) and
        # temp files from a crashed append are garbage; the next append of that
        # seq would overwrite them anyway, but some filesystems refuse to move
        # onto an existing file, so clear them now.
        next_seq = self._next_seq()
        try:
            entries = self.filesystem.get_file_info(pafs.FileSelector(self._full(_DATA), allow_not_found=True))
        except (pa.ArrowException, OSError):
            return
        for entry in entries:
            name = entry.base_name
            stem = name.split(".", 1)[0]
            # below the retention mark: a release that died between its mark and its deletions
            orphan = name.startswith(".tmp-") or (
                name.endswith(".arrow") and stem.isdigit() and not self._first_seq <= int(stem) < next_seq
            )
            if orphan and entry.type == pafs.FileType.File:
                try:
                    self.filesystem.delete_file(entry.path)
                except (pa.ArrowException, OSError):
                    pass

    # ---------------------------------------------------------------- writing
    def append(
        self,
        data: pa.Table | pa.RecordBatch | Sequence[pa.RecordBatch],
        *,
        arrival: float | None = None,
        source: str = "",
        second: int | None = None,
    ) -> DatasetInfo:
        """Commit one dataset and return its :class:`DatasetInfo`.

        Parameters
        ----------
        data : pyarrow.Table, pyarrow.RecordBatch or list of RecordBatch
            The rows.  Columns are matched to the spool schema by name (extra
            columns are dropped) and cast to its types.
        arrival : float, optional
            Commit time in epoch seconds; defaults to ``time.time()`` taken
            after the data file is in place.
        source : str
            Where the rows came from (``"generator"`` or a file name).
        second : int, optional
            The generator's simulated second of the rows (a resumed generator
            continues after the last one).

        Raises
        ------
        SpoolError
            If the spool is read-only or closed, columns are missing, a value
            cannot be cast, or the write fails.
        """
        if not self.writable:
            raise SpoolError(f"spool at {self._location} was opened read-only (create=False)")
        table = self._conform(data)
        with self._lock:
            if self._closed or self._index_stream is None:
                raise SpoolError(f"spool at {self._location} is closed")
            seq = self._next_seq()
            rel = _data_path(seq)
            final = self._full(rel)
            tmp = self._full(f"{_DATA}/.tmp-{seq:012d}.arrow")
            try:
                with self.filesystem.open_output_stream(tmp, compression=None) as sink:
                    with ipc.new_file(sink, self.schema) as writer:
                        writer.write_table(table)
                    nbytes = sink.tell()
                if self.durable and self._is_local:
                    _fsync_path(tmp)
                self.filesystem.move(tmp, final)
                if self.durable and self._is_local:
                    _fsync_path(self._full(_DATA))
                info = DatasetInfo(
                    seq=seq,
                    arrival=time.time() if arrival is None else float(arrival),
                    rows=table.num_rows,
                    nbytes=int(nbytes),
                    path=rel,
                    source=source,
                    second=second,
                )
            except (pa.ArrowException, OSError) as exc:
                raise SpoolError(f"cannot append to spool at {self._location}: {one_line(exc)}") from exc
            return self._commit(info)

    def _commit(self, info: DatasetInfo) -> DatasetInfo:
        """Append ``info``'s index line (durable where the spool is), and account for it.  Under the lock."""
        line = (json.dumps(info.to_json(), separators=(",", ":")) + "\n").encode("utf-8")
        try:
            # One write call per line keeps the line contiguous in the file.
            self._index_stream.write(line)
            self._index_stream.flush()
            if self.durable and self._is_local:
                _fsync_path(self._full(_INDEX))
        except (pa.ArrowException, OSError) as exc:
            raise SpoolError(f"cannot append to spool at {self._location}: {one_line(exc)}") from exc
        # We wrote the line ourselves: account for it without re-reading.
        self._offset += len(line)
        self._add(info)
        return info

    def _conform(self, data) -> pa.Table:
        if isinstance(data, pa.RecordBatch):
            table = pa.Table.from_batches([data])
        elif isinstance(data, pa.Table):
            table = data
        elif isinstance(data, (list, tuple)):
            table = pa.Table.from_batches(list(data), schema=data[0].schema if data else self.schema)
        else:
            raise SpoolError(
                f"spool data must be a pyarrow Table, RecordBatch or list of RecordBatch, got {type(data).__name__}"
            )
        schema = self.schema
        if table.schema.equals(schema):
            return table  # fast path: generator output is already exact
        missing = [name for name in schema.names if name not in table.column_names]
        if missing:
            raise SpoolError(
                f"data for spool at {self._location} is missing column(s) {', '.join(map(repr, missing))}"
            )
        try:
            return table.select(schema.names).cast(schema)
        except (pa.ArrowException, ValueError) as exc:
            raise SpoolError(
                f"data does not fit the schema of spool at {self._location}: {one_line(exc)}"
            ) from exc

    def append_ranges(self, ranges: dict, *, rows: int, nbytes: int, arrival: float,
                      source: str = "kafka") -> DatasetInfo:
        """Commit one dataset of a Kafka spool: the offset ``ranges`` ``{partition: (start, end)}``
        of its records (no data file: Kafka keeps them)."""
        if not self.writable:
            raise SpoolError(f"spool at {self._location} was opened read-only (create=False)")
        if self.kafka is None:
            raise SpoolError(f"spool at {self._location} holds data files, not a Kafka topic's offsets")
        with self._lock:
            if self._closed or self._index_stream is None:
                raise SpoolError(f"spool at {self._location} is closed")
            seq = self._next_seq()
            info = DatasetInfo(seq=seq, arrival=float(arrival), rows=int(rows), nbytes=int(nbytes),
                               path="", source=source,
                               ranges={int(p): (int(a), int(b)) for p, (a, b) in ranges.items()})
            return self._commit(info)

    # -------------------------------------------------------------- retention
    @property
    def first_seq(self) -> int:
        """The first dataset whose rows are still here: retention deleted the data of those before it."""
        return self._first_seq

    @property
    def kept_bytes(self) -> int:
        """Bytes of the data files still here (datasets ``first_seq`` onwards; 0 in a Kafka spool)."""
        with self._lock:
            if self.kafka is not None:
                return 0
            first = min(self._first_seq, self._next_seq())
            return self._cum_bytes[-1] - self._prefix(self._cum_bytes, first)

    def release(self, before_seq: int) -> tuple[int, int]:
        """Delete the data of datasets ``[first_seq, before_seq)``; return ``(datasets, bytes)`` freed.

        The index keeps their lines (sequence numbers stay contiguous, offsets stay valid).  The
        mark (``retained.json``) is moved first, then the files are deleted: a crash in between
        leaves files below the mark, which the next writer to open the spool removes.  The caller
        decides what may go (:mod:`lmstream_kit.retention` never passes what a restart from the
        checkpoint could read again).

        Raises
        ------
        SpoolError
            If the spool is read-only, ``before_seq`` is past its end, or the mark cannot be written.
        """
        if not self.writable:
            raise SpoolError(f"spool at {self._location} was opened read-only (create=False)")
        with self._lock:
            before = int(before_seq)
            if before > self._next_seq():
                raise SpoolError(f"cannot release spool datasets before {before}: the spool at {self._location} "
                                 f"holds {self._next_seq()}")
            first = self._first_seq
            if before <= first:
                return 0, 0
            tmp = self._full(f"{_RETAINED}.tmp-{uuid.uuid4().hex[:8]}")
            try:
                with self.filesystem.open_output_stream(tmp, compression=None) as out:
                    out.write(json.dumps({"first_seq": before, "at": time.time()}).encode("utf-8"))
                self.filesystem.move(tmp, self._full(_RETAINED))
            except (pa.ArrowException, OSError) as exc:
                raise SpoolError(f"cannot write the retention mark of spool at {self._location}: "
                                 f"{one_line(exc)}") from exc
            self._first_seq = before
            freed = (self._prefix(self._cum_bytes, before) - self._prefix(self._cum_bytes, first)
                     if self.kafka is None else 0)
            infos = self._infos[first - self._base:before - self._base]
            # their index entries leave memory too (the file keeps its lines): a stream that runs
            # for days holds the datasets it may still read, not one entry per second since it began
            cut = before - self._base
            del self._infos[:cut], self._cum_rows[:cut], self._cum_bytes[:cut]
            self._base = before
        if self.kafka is None:
            for info in infos:  # outside the lock: appends go on meanwhile
                try:
                    self.filesystem.delete_file(self._full(info.path))
                except FileNotFoundError:
                    pass
                except (pa.ArrowException, OSError):
                    pass  # below the mark: removed when a writer next opens the spool
        return len(infos), int(freed)

    def close(self) -> None:
        """Close the index append stream; further appends raise SpoolError."""
        with self._lock:
            if self._index_stream is not None:
                try:
                    self._index_stream.close()
                except (pa.ArrowException, OSError):
                    pass
                self._index_stream = None
            self._closed = True

    def __enter__(self) -> "Spool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # best effort: release the append handle
        try:
            if self._index_stream is not None:
                self._index_stream.close()
        except Exception:
            pass

    # ---------------------------------------------------------------- reading
    def _next_seq(self) -> int:
        """The seq the next dataset gets: the datasets released from memory plus those held."""
        return self._base + len(self._infos)

    def _prefix(self, sums: list[int], seq: int) -> int:
        """Rows (or bytes) of datasets ``[0, seq)`` from the prefix sums held (from ``_base`` on)."""
        if seq == 0:
            return 0
        if seq < self._base:
            raise self._released(seq)
        return sums[seq - self._base]

    def _released(self, seq: int) -> SpoolError:
        return SpoolError(f"spool dataset {seq} at {self._location} was released by retention (datasets before "
                          f"{self._base}): its index line is in the file, no longer in memory")

    def _add(self, info: DatasetInfo) -> None:
        self._infos.append(info)
        self._cum_rows.append(self._cum_rows[-1] + info.rows)
        self._cum_bytes.append(self._cum_bytes[-1] + info.nbytes)

    def refresh(self) -> list[DatasetInfo]:
        """Parse index lines appended since the last call and return their entries.

        Only complete (newline-terminated) lines are parsed; a partially
        written trailing line is left for a later call.

        Raises
        ------
        SpoolError
            If the index cannot be read or a complete line is corrupt.
        """
        with self._lock:
            index_path = self._full(_INDEX)
            new: list[DatasetInfo] = []
            try:
                with self.filesystem.open_input_file(index_path) as f:
                    size = f.size()
                    if size <= self._offset:
                        return []
                    f.seek(self._offset)
                    carry, left = b"", size - self._offset
                    while left > 0:  # in blocks: a week-long index is not held whole while it is parsed
                        block = f.read(min(_INDEX_BLOCK, left))
                        if not block:
                            break
                        left -= len(block)
                        data = carry + block
                        end = data.rfind(b"\n")
                        if end < 0:
                            carry = data
                            continue
                        self._parse_lines(data[: end + 1], index_path, new)
                        self._offset += end + 1
                        carry = data[end + 1:]
            except FileNotFoundError as exc:
                raise SpoolError(f"spool index {index_path} is missing") from exc
            except (pa.ArrowException, OSError) as exc:
                raise SpoolError(f"cannot read spool index {index_path}: {one_line(exc)}") from exc
            return new

    def _parse_lines(self, chunk: bytes, index_path: str, new: list[DatasetInfo]) -> None:
        """Add the entries of the complete index lines in ``chunk`` (those held go to ``new`` too)."""
        for raw in chunk.splitlines():
            if not raw.strip():
                continue
            expected = self._next_seq()
            try:
                info = DatasetInfo.from_json(json.loads(raw))
            except (ValueError, KeyError, TypeError) as exc:
                raise SpoolError(
                    f"corrupt line for dataset {expected} in spool index {index_path}: {one_line(exc)}"
                ) from exc
            if info.seq != expected:
                raise SpoolError(
                    f"spool index {index_path} jumps from seq {expected - 1} to {info.seq}"
                )
            if self.writable and not self._infos and info.seq < self._first_seq:
                # released before this writer opened the spool: only its totals stay in memory,
                # so that a restart after weeks holds the datasets it may read, not every line
                self._cum_rows[0] += info.rows
                self._cum_bytes[0] += info.nbytes
                self._base += 1
                continue
            self._add(info)
            new.append(info)

    @property
    def end_seq(self) -> int:
        """Number of complete datasets known (refreshes the index first)."""
        self.refresh()
        return self._next_seq()

    def __len__(self) -> int:
        return self.end_seq

    def _bounds(self, start: int, end: int | None) -> tuple[int, int]:
        n = self._next_seq()
        if start < 0:
            raise SpoolError(f"dataset start must be >= 0, got {start}")

        stop = n if end is None else min(int(end), n)
        return int(start), max(int(start), stop)

    def datasets(self, start: int = 0, end: int | None = None) -> list[DatasetInfo]:
        """Return the datasets with ``start <= seq < end`` (end None = all known)."""
        self.refresh()
        lo, hi = self._bounds(start, end)
        if lo < self._base and hi > lo:
            raise self._released(lo)
        return self._infos[lo - self._base:hi - self._base]

    def total_rows(self, start: int = 0, end: int | None = None) -> int:
        """Return the number of rows in datasets ``[start, end)``."""
        self.refresh()
        lo, hi = self._bounds(start, end)
        return self._prefix(self._cum_rows, hi) - self._prefix(self._cum_rows, lo) if hi > lo else 0

    def read_batches(
        self, infos_or_start: Iterable[DatasetInfo] | int = 0, end: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Yield the record batches of some datasets, in the spool schema.

        Parameters
        ----------
        infos_or_start : list of DatasetInfo or int
            Either the datasets to read, or the first seq of a range.
        end : int, optional
            End (exclusive) of the seq range when ``infos_or_start`` is an int.
        """
        if isinstance(infos_or_start, int):
            infos = self.datasets(infos_or_start, end)
        else:
            infos = list(infos_or_start)
        if self.kafka is not None:
            from .kafka import read_kafka_datasets

            yield from read_kafka_datasets(self.kafka, infos, self.schema)
            return
        for info in infos:
            try:
                yield from _read_ipc_file(self.filesystem, self._full(info.path))
            except SpoolError as exc:
                if isinstance(exc.__cause__, FileNotFoundError):
                    raise SpoolError(_missing_reason(self.filesystem, self.root, info.path)) from exc
                raise

    def read_table(self, start: int = 0, end: int | None = None) -> pa.Table:
        """Return datasets ``[start, end)`` as one table (empty table if none)."""
        return pa.Table.from_batches(list(self.read_batches(start, end)), schema=self.schema)

    def __repr__(self) -> str:
        return f"Spool({self.uri!r}, datasets={self._next_seq()}, writable={self.writable})"


def _schema_str(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema) + ")"


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
