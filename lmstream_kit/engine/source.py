"""``spark.readStream.format("lmstream")``: a Python streaming source over a feed spool.

Offsets are feed sequence numbers (``{"seq": n}`` means datasets ``0..n-1``
are in or before this batch), so a restart from a checkpoint re-reads exactly
the same datasets.  With a ``channel`` option, every ``latestOffset`` call asks
the driver's admission gate (the LMStream controller, or a baseline policy)
whether to admit everything pending or to keep buffering; without one, the
source admits everything the spool holds (Spark's own trigger decides).

Options
-------
spool : str
    The spool location (path or pyarrow filesystem URI), readable by executors.
channel : str, optional
    ``host:port`` of the driver's :class:`~lmstream_kit.engine.channel.ChannelServer`.
channel_key : str, optional
    Path of the file that holds the channel's authkey.
partitions : int, optional
    Upper bound on input partitions per micro-batch (default 2).
dead_letter : str, optional
    Where records of a Kafka spool that do not fit the schema go (JSON Lines, one entry each with
    its partition, offset, record and reason); without it they are left out silently.
fail_on_data_loss : {"true", "false"}, optional
    A Kafka spool's batch whose records Kafka no longer has (retention deleted them): fail
    (``true``, the default, as Spark's Kafka source does) or read on without them, each lost range
    in the dead-letter file.
read : {"executors", "driver"}, optional
    Where a batch's datasets are read.  ``executors`` (default): Spark tasks
    read the spool files in Python workers, which scales out on a cluster but
    costs one Python task per partition and batch (~0.3-0.5 s on a small
    machine).  ``driver``: the source-runner process reads the admitted
    datasets itself and hands them to Spark as Arrow batches (PySpark's
    *simple* stream reader path), so no Python task runs per batch; best for
    local Spark and moderate rates, since all data passes through the driver.

A Kafka spool (:mod:`lmstream_kit.feed.kafka`) indexes a topic: its datasets are offset ranges.
The offsets then also carry the topic's end offset of each partition (``{"seq": n, "kafka":
{"0": 120, "1": 98}}``), so that Spark's checkpoint says which records each batch read, and a
batch reads its ranges from Kafka, split along Kafka's partitions.
"""

from __future__ import annotations

from typing import Iterator, Optional, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
    SimpleDataSourceStreamReader,
)
from pyspark.sql.types import StructType

from ..feed.spool import Spool, read_dataset_files
from .channel import COMMIT, INITIAL, LATEST, PLANNED, ChannelClient
from .schema import spark_compatible, spark_ddl

try:  # PySpark >= 4.2: admission-control API
    from pyspark.sql.streaming.datasource import ReadAllAvailable as _ReadAllAvailable
except ImportError:  # PySpark 4.0 / 4.1
    _ReadAllAvailable = None

SOURCE_NAME = "lmstream"

#: PySpark's process that runs a Python streaming source for the driver
RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"
_SHUTDOWN_ERRORS = (BrokenPipeError, ConnectionResetError, EOFError)


def quiet_runner_shutdown(main_module=None) -> bool:
    """In PySpark's source-runner process, stop printing its own shutdown traceback.

    When Spark stops a query it closes the runner's socket.  The runner then
    fails reading the next command (EOFError), and its error reply hits the
    closed socket in ``outfile.flush()`` (BrokenPipeError) *outside* PySpark's
    ``try``, so Python prints a traceback on the terminal of a query that
    stopped cleanly.  This installs a ``sys.excepthook`` in that process only,
    which stays silent for those socket errors and passes anything else on.
    Returns whether it was installed (once per process).
    """
    import sys

    main = main_module if main_module is not None else sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None) or ""
    if name != RUNNER_MODULE or getattr(sys.excepthook, "_lmstream_quiet", False):
        return False
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        if issubclass(exc_type, _SHUTDOWN_ERRORS):
            return
        previous(exc_type, exc, tb)

    hook._lmstream_quiet = True
    sys.excepthook = hook
    return True


quiet_runner_shutdown()


def data_path(seq: int) -> str:
    """Relative path of dataset ``seq`` in a spool (the spool's layout)."""
    return f"data/{seq:012d}.arrow"


class SeqRangePartition(InputPartition):
    """Datasets ``[start, end)`` of the spool at ``uri``; carried to the executor."""

    def __init__(self, uri: str, start: int, end: int) -> None:
        super().__init__((start, end))
        self.uri, self.start, self.end = uri, start, end


def split_range(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """Split ``[start, end)`` into at most ``parts`` contiguous, near-equal chunks."""
    n = end - start
    if n <= 0:
        return []
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    out, lo = [], start
    for i in range(parts):
        hi = lo + base + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


class KafkaPiecePartition(InputPartition):
    """Offsets ``[start, end)`` of one partition of a Kafka spool's topic; carried to the executor."""

    def __init__(self, meta: dict, partition: int, start: int, end: int) -> None:
        super().__init__((partition, start, end))
        self.meta, self.partition, self.start, self.end = meta, partition, start, end


class LMStreamDataSource(DataSource):
    """The ``lmstream`` streaming source (register with ``spark.dataSource.register``)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return spark_ddl(Spool(self.options["spool"], create=False).schema)

    def streamReader(self, schema: StructType) -> "LMStreamReader":
        mode = self.options.get("read", "executors")
        if mode == "driver":
            # PySpark falls back to simpleStreamReader() when streamReader() is
            # not implemented; the base class raises exactly that error
            return super().streamReader(schema)
        if mode != "executors":
            from ..exceptions import ConfigError

            raise ConfigError(f"option read must be 'executors' or 'driver', got {mode!r}")
        return LMStreamReader(schema, dict(self.options))

    def simpleStreamReader(self, schema: StructType) -> "LMStreamPrefetchReader":
        return LMStreamPrefetchReader(schema, dict(self.options))


class _SpoolAccess:
    """What both readers share: options, the channel, reading datasets."""

    def _setup(self, schema: StructType, options: dict) -> None:
        if "spool" not in options:
            from ..exceptions import ConfigError

            raise ConfigError("the lmstream source needs option 'spool' (a path or URI)")
        self.uri = options["spool"]
        self.num_partitions = int(options.get("partitions", 2))
        self.channel = options.get("channel")
        self.channel_key = options.get("channel_key")
        self.field_names = [f.name for f in schema.fields]
        self.dead_letter = options.get("dead_letter")
        self.fail_on_data_loss = str(options.get("fail_on_data_loss", "true")).lower() != "false"
        self._client: Optional[ChannelClient] = None  # opened lazily, in the runner
        self._spool: Optional[Spool] = None
        self._arrow_schema: Optional[pa.Schema] = None
        self._ends: tuple[int, dict] = (0, {})  # a Kafka spool's end offsets after datasets [0, seq)

    def _call(self, *request):
        if self._client is None:
            host, port = self.channel.rsplit(":", 1)
            self._client = ChannelClient(host, int(port), self.channel_key)
        return self._client.call(*request)

    def _index(self) -> Spool:
        if self._spool is None:
            self._spool = Spool(self.uri, create=False)
        return self._spool

    def _spool_end(self) -> int:
        self._index().refresh()
        return self._index().end_seq

    @property
    def kafka(self) -> Optional[dict]:
        return self._index().kafka

    def _offset(self, seq: int) -> dict:
        """The offset after datasets ``[0, seq)``: with a Kafka spool, the topic's end offsets too."""
        if self.kafka is None:
            return {"seq": seq}
        done, ends = self._ends
        if seq < done:
            done, ends = 0, {}
        ends = dict(ends)
        for info in self._index().datasets(done, seq):
            ends.update({int(p): int(b) for p, (_, b) in (info.ranges or {}).items()})
        self._ends = (seq, ends)
        return {"seq": seq, "kafka": {str(p): ends[p] for p in sorted(ends)}}

    def _pieces(self, lo: int, hi: int, end: Optional[dict]) -> dict:
        """A Kafka spool's ranges of datasets ``[lo, hi)``, checked against the checkpoint's offsets."""
        from ..feed.kafka import merge_ranges

        ranges = merge_ranges(info.ranges or {} for info in self._index().datasets(lo, hi))
        logged = (end or {}).get("kafka")
        if logged is not None:
            wrong = [p for p, (_, b) in ranges.items() if int(logged.get(str(p), -1)) != b]
            if wrong:
                from ..exceptions import SpoolError

                raise SpoolError(f"the checkpoint's end offsets {logged} disagree with the spool's index at "
                                 f"partition {wrong[0]} ({ranges[wrong[0]][1]}): is this the run's own spool?")
        return ranges

    def _read_kafka(self, pieces, meta: Optional[dict] = None) -> Iterator[pa.RecordBatch]:
        from ..feed.kafka import read_pieces
        from ..feed.validate import write_dead_letter

        meta = meta if meta is not None else self.kafka
        rejects: list = []
        schema = self._arrow_schema
        for batch in read_pieces(meta, pieces, self._index().schema, rejects=rejects,
                                 fail_on_data_loss=self.fail_on_data_loss):
            batch = batch.select(self.field_names)
            if schema is None:
                schema = self._arrow_schema = spark_compatible(batch.schema)
            yield batch.cast(schema)
        if rejects and self.dead_letter:
            from pathlib import Path

            write_dead_letter(Path(self.dead_letter), f"kafka:{meta['topic']}",
                              [{"line": f"{r['partition']}:{r['offset']}", "record": r["record"],
                                "reason": r["reason"]} for r in rejects])

    def _latest(self, begin: Optional[int]) -> int:
        """Ask the gate (or, without a channel, the spool) where the next batch ends."""
        if self.channel:
            return int(self._call(LATEST, begin))
        return self._spool_end()

    def _read_range(self, uri: str, start: int, end: int) -> Iterator[pa.RecordBatch]:
        paths = [data_path(s) for s in range(start, end)]
        schema = self._arrow_schema
        for batch in read_dataset_files(uri, paths):
            batch = batch.select(self.field_names)
            if schema is None:
                schema = self._arrow_schema = spark_compatible(batch.schema)
            yield batch.cast(schema)

    def initialOffset(self) -> dict:
        return self._offset(int(self._call(INITIAL)) if self.channel else 0)

    def commit(self, end: dict) -> None:
        if self.channel:
            self._call(COMMIT, int(end["seq"]))

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class LMStreamReader(_SpoolAccess, DataSourceStreamReader):
    """Runs in Spark's source-runner process (offsets) and on executors (``read``)."""

    def __init__(self, schema: StructType, options: dict) -> None:
        self._setup(schema, options)

    def latestOffset(self, start: Optional[dict] = None, limit=None) -> dict:
        # PySpark 4.0/4.1 call latestOffset(); 4.2+ call latestOffset(start, limit)
        # because this signature has parameters.  Holding a batch = returning start.
        return self._offset(self._latest(None if start is None else int(start["seq"])))

    def getDefaultReadLimit(self):  # only called by PySpark >= 4.2
        return _ReadAllAvailable()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        lo, hi = int(start["seq"]), int(end["seq"])
        parts = self.num_partitions
        if self.channel:
            # tells the driver which datasets the batch being planned holds (this is also how a
            # batch replayed from the offset log after a restart is known); the driver may answer
            # with the number of input partitions for this batch (a live knob, no restart)
            asked = self._call(PLANNED, lo, hi, True)
            if isinstance(asked, int) and asked >= 1:
                parts = asked
        if self.kafka is not None:  # along Kafka's partitions, cut further where more are asked
            from ..feed.kafka import split_ranges

            return [KafkaPiecePartition(self.kafka, p, a, b)
                    for p, a, b in split_ranges(self._pieces(lo, hi, end), parts)]
        return [SeqRangePartition(self.uri, a, b) for a, b in split_range(lo, hi, parts)]

    # -- executor side ---------------------------------------------------
    def read(self, partition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, KafkaPiecePartition):
            return self._read_kafka([(partition.partition, partition.start, partition.end)], partition.meta)
        return self._read_range(partition.uri, partition.start, partition.end)


class LMStreamPrefetchReader(_SpoolAccess, SimpleDataSourceStreamReader):
    """``read="driver"``: the source runner reads admitted datasets and hands them to Spark.

    PySpark calls ``read(start)`` at every poll; when the gate admits, the
    datasets are read right there and returned (as a list, since PySpark copies
    the iterator) together with the new offset.  A batch replayed after a
    restart is read by ``readBetweenOffsets``.
    """

    def __init__(self, schema: StructType, options: dict) -> None:
        self._setup(schema, options)

    def read(self, start: dict):
        begin = int(start["seq"])
        end = self._latest(begin)
        if end <= begin:
            return iter([]), start
        batches = list(self._read_seqs(begin, end, None))
        if self.channel:
            self._call(PLANNED, begin, end, False)  # handed over whole: one partition
        return iter(batches), self._offset(end)

    def _read_seqs(self, lo: int, hi: int, end: Optional[dict]) -> Iterator[pa.RecordBatch]:
        if self.kafka is not None:
            return self._read_kafka([(p, a, b) for p, (a, b) in self._pieces(lo, hi, end).items()])
        return self._read_range(self.uri, lo, hi)

    def readBetweenOffsets(self, start: dict, end: dict):
        lo, hi = int(start["seq"]), int(end["seq"])
        return iter(list(self._read_seqs(lo, hi, end)))
