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
"""

from __future__ import annotations

from typing import Iterator, Optional, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from ..feed.spool import Spool, read_dataset_files
from .channel import COMMIT, INITIAL, LATEST, PLANNED, ChannelClient
from .schema import spark_compatible, spark_ddl

try:  # PySpark >= 4.2: admission-control API
    from pyspark.sql.streaming.datasource import ReadAllAvailable as _ReadAllAvailable
except ImportError:  # PySpark 4.0 / 4.1
    _ReadAllAvailable = None

SOURCE_NAME = "lmstream"


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


class LMStreamDataSource(DataSource):
    """The ``lmstream`` streaming source (register with ``spark.dataSource.register``)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return spark_ddl(Spool(self.options["spool"], create=False).schema)

    def streamReader(self, schema: StructType) -> "LMStreamReader":
        return LMStreamReader(schema, dict(self.options))


class LMStreamReader(DataSourceStreamReader):
    """Runs in Spark's source-runner process (offsets) and on executors (``read``)."""

    def __init__(self, schema: StructType, options: dict) -> None:
        if "spool" not in options:
            from ..exceptions import ConfigError

            raise ConfigError("the lmstream source needs option 'spool' (a path or URI)")
        self.uri = options["spool"]
        self.num_partitions = int(options.get("partitions", 2))
        self.channel = options.get("channel")
        self.channel_key = options.get("channel_key")
        self.field_names = [f.name for f in schema.fields]
        self._client: Optional[ChannelClient] = None  # opened lazily, in the runner
        self._spool: Optional[Spool] = None
        self._arrow_schema: Optional[pa.Schema] = None

    # -- runner side -----------------------------------------------------
    def _call(self, *request):
        if self._client is None:
            host, port = self.channel.rsplit(":", 1)
            self._client = ChannelClient(host, int(port), self.channel_key)
        return self._client.call(*request)

    def _spool_end(self) -> int:
        if self._spool is None:
            self._spool = Spool(self.uri, create=False)
        self._spool.refresh()
        return self._spool.end_seq

    def initialOffset(self) -> dict:
        return {"seq": int(self._call(INITIAL)) if self.channel else 0}

    def latestOffset(self, start: Optional[dict] = None, limit=None) -> dict:
        # PySpark 4.0/4.1 call latestOffset(); 4.2+ call latestOffset(start, limit)
        # because this signature has parameters.  Holding a batch = returning start.
        begin = None if start is None else int(start["seq"])
        if self.channel:
            return {"seq": int(self._call(LATEST, begin))}
        return {"seq": self._spool_end()}

    def getDefaultReadLimit(self):  # only called by PySpark >= 4.2
        return _ReadAllAvailable()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        lo, hi = int(start["seq"]), int(end["seq"])
        if self.channel:
            # tells the driver which datasets the batch being planned holds; this is
            # also how a batch replayed from the offset log after a restart is known
            self._call(PLANNED, lo, hi)
        return [SeqRangePartition(self.uri, a, b) for a, b in split_range(lo, hi, self.num_partitions)]

    def commit(self, end: dict) -> None:
        if self.channel:
            self._call(COMMIT, int(end["seq"]))

    # -- executor side ---------------------------------------------------
    def read(self, partition: SeqRangePartition) -> Iterator[pa.RecordBatch]:
        paths = [data_path(s) for s in range(partition.start, partition.end)]
        schema = self._arrow_schema
        for batch in read_dataset_files(partition.uri, paths):
            batch = batch.select(self.field_names)
            if schema is None:
                schema = self._arrow_schema = spark_compatible(batch.schema)
            yield batch.cast(schema)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
