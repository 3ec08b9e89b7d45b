"""A Kafka topic as the stream's replayable log: indexed into a spool, its records never copied.

Kafka keeps the records and can give any offset range again, so the kit keeps only an *index*
of the topic: a spool created with ``kafka=`` (:class:`~lmstream_kit.feed.spool.Spool`) whose
datasets are offset ranges, one per Kafka partition with new records, instead of data files.
:class:`TopicIndexer` (in the driver) polls the topic's end offsets and appends one dataset per
poll that found records, with

- ``rows``: the records in its ranges (end offset minus start offset, summed);
- ``arrival``: the timestamp of the oldest record in it (the first record of each range, the
  earliest of them).  A topic's records carry either the producer's ``CreateTime`` or the
  broker's ``LogAppendTime``, as the topic's ``message.timestamp.type`` says; the kit reads
  whichever the record has.  Topics it creates (:func:`create_topic`) use ``LogAppendTime``, the
  time the record reached Kafka, so that a latency is measured from the broker, not from a
  producer's clock; a topic of ``CreateTime`` makes latencies count from the producer's event;
- ``nbytes``: an estimate: the rows times the mean size (key and value) of the records sampled
  for the timestamps (reading every record in the driver to count its bytes would double the
  traffic).

Everything that reads a spool then works on a topic: the admission gate sees pending records,
bytes and the oldest one's arrival, and a batch's datasets name the exact offsets it reads, so
a batch replayed after a restart reads the same records.  Values are JSON objects or Avro records
(:mod:`~lmstream_kit.feed.values`, the URI's ``?format=``), decoded to the spool's schema; a record
that does not fit is rejected with its partition, offset and reason (the dead-letter file), and
never stops the stream.

>>> parse_kafka_uri("kafka://127.0.0.1:9092/events")
TopicRef(bootstrap='127.0.0.1:9092', topic='events', format='json')
>>> parse_kafka_uri("kafka://127.0.0.1:9092/events?format=avro").format
'avro'
>>> parse_kafka_uri("kafka://127.0.0.1/events")
Traceback (most recent call last):
...
lmstream_kit.exceptions.ConfigError: a Kafka feed is kafka://HOST:PORT/TOPIC[?format=json|avro|avro-confluent], got 'kafka://127.0.0.1/events'
>>> merge_ranges([{0: (0, 5), 1: (0, 2)}, {0: (5, 9)}])
{0: (0, 9), 1: (0, 2)}
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..exceptions import ConfigError, KitError, one_line
from .values import FORMATS, check_format, decode_json, decode_values, encode_json, encode_values

__all__ = ["TopicIndexer", "TopicRef", "TopicWriter", "create_topic", "decode_json", "encode_json", "merge_ranges",
           "open_topic", "parse_kafka_uri", "read_kafka_datasets", "read_pieces", "read_ranges", "split_ranges"]

#: the headers of a record the kit's generator wrote: its simulated second and the row's index in it
SECOND_HEADER, ROW_HEADER = "lmstream.second", "lmstream.row"

_URI = re.compile(r"^kafka://(?P<host>[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d{1,5})/(?P<topic>[A-Za-z0-9._\-]{1,249})"
                  r"(\?format=(?P<format>[a-z\-]+))?$")


@dataclass(frozen=True)
class TopicRef:
    """A topic on a Kafka cluster: its ``bootstrap.servers``, name and value format
    (:mod:`~lmstream_kit.feed.values`: ``json``, ``avro`` or ``avro-confluent``)."""

    bootstrap: str
    topic: str
    format: str = "json"

    @property
    def uri(self) -> str:
        return f"kafka://{self.bootstrap}/{self.topic}" + ("" if self.format == "json" else f"?format={self.format}")

    @property
    def meta(self) -> dict:
        """What a Kafka spool keeps of its topic (a run directory's spool refuses another topic or format)."""
        return {"bootstrap": self.bootstrap, "topic": self.topic, "format": self.format}


def parse_kafka_uri(text: str) -> TopicRef:
    """``kafka://HOST:PORT/TOPIC[?format=json|avro|avro-confluent]`` as a :class:`TopicRef`;
    ConfigError (one line) otherwise."""
    m = _URI.match(str(text).strip())
    if m is None or not 0 < int(m["port"]) < 65536 or m["topic"] in (".", ".."):
        raise ConfigError(f"a Kafka feed is kafka://HOST:PORT/TOPIC[?format={'|'.join(FORMATS)}], got {text!r}")
    if m["format"] is not None and m["format"] not in FORMATS:
        raise ConfigError(f"a topic's value format is one of {', '.join(FORMATS)}, got {m['format']!r} in {text!r}")
    return TopicRef(f"{m['host']}:{int(m['port'])}", m["topic"], m["format"] or "json")


def is_kafka_uri(text: Any) -> bool:
    return isinstance(text, str) and text.startswith("kafka://")


# ---------------------------------------------------------------------- ranges
def merge_ranges(parts: Iterable[Mapping[int, Sequence[int]]]) -> dict[int, tuple[int, int]]:
    """Contiguous per-partition ranges ``{partition: (start, end)}`` joined into one per partition."""
    out: dict[int, tuple[int, int]] = {}
    for ranges in parts:
        for p, (start, end) in ranges.items():
            p, start, end = int(p), int(start), int(end)
            if p in out:
                lo, hi = out[p]
                if start != hi:
                    raise KitError(f"offset ranges of partition {p} are not contiguous: {lo}-{hi}, then {start}-{end}")
                out[p] = (lo, end)
            else:
                out[p] = (start, end)
    return dict(sorted(out.items()))


def split_ranges(ranges: Mapping[int, Sequence[int]], parts: int) -> list[tuple[int, int, int]]:
    """``(partition, start, end)`` pieces: one per Kafka partition, more (each partition's range cut
    near-equally, the largest first) until there are ``parts`` or every piece holds one record.

    >>> split_ranges({0: (0, 10), 1: (5, 7)}, 3)
    [(0, 0, 5), (0, 5, 10), (1, 5, 7)]
    >>> split_ranges({0: (0, 10), 1: (5, 7)}, 1)
    [(0, 0, 10), (1, 5, 7)]
    """
    cuts = {int(p): 1 for p, (s, e) in ranges.items() if int(e) > int(s)}
    sizes = {int(p): int(e) - int(s) for p, (s, e) in ranges.items() if int(e) > int(s)}
    while sum(cuts.values()) < parts:
        p = max(cuts, key=lambda q: (sizes[q] / cuts[q], -q), default=None)
        if p is None or sizes[p] <= cuts[p]:
            break
        cuts[p] += 1
    out = []
    for p in sorted(cuts):
        start = int(ranges[p][0])
        base, extra = divmod(sizes[p], cuts[p])
        for i in range(cuts[p]):
            end = start + base + (1 if i < extra else 0)
            out.append((p, start, end))
            start = end
    return out


# ---------------------------------------------------------------------- Kafka clients
#: librdkafka's own log lines (a broker that went away, say) go here, not to the terminal: the
#: indexer says what is wrong in one line (``TopicIndexer.error``); enable this logger to see them
CLIENT_LOG = logging.getLogger("lmstream_kit.kafka.client")
CLIENT_LOG.addHandler(logging.NullHandler())


def _client_conf(bootstrap: str, **more: Any) -> dict:
    return {"bootstrap.servers": bootstrap, "client.id": "lmstream_kit", "logger": CLIENT_LOG, **more}


def _consumer(bootstrap: str):
    from confluent_kafka import Consumer

    # no group subscription: the kit assigns partitions and offsets itself, and commits nothing to Kafka.
    # A fetch waits at most 10 ms for records it does not have yet: the broker answers a connection's
    # requests in order, so a fetch left waiting (500 ms by default) delays the next offset query
    return Consumer(_client_conf(bootstrap, **{"group.id": "lmstream_kit", "enable.auto.commit": False,
                                               "enable.partition.eof": True, "auto.offset.reset": "error",
                                               "fetch.wait.max.ms": 10}))


def create_topic(ref: TopicRef, partitions: int = 1, *, timestamp: str = "LogAppendTime",
                 timeout_s: float = 30.0) -> bool:
    """Create ``ref``'s topic with ``partitions`` partitions (False where it exists already).

    ``timestamp``: ``LogAppendTime`` (the broker stamps each record when it appends it: latencies
    count from there) or ``CreateTime`` (the producer's stamp).
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    if timestamp not in ("LogAppendTime", "CreateTime"):
        raise ConfigError(f"timestamp must be 'LogAppendTime' or 'CreateTime', got {timestamp!r}")
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ConfigError(f"partitions must be a positive integer, got {partitions!r}")
    admin = AdminClient(_client_conf(ref.bootstrap))
    new = NewTopic(ref.topic, num_partitions=partitions, replication_factor=1,
                   config={"message.timestamp.type": timestamp})
    try:
        admin.create_topics([new], request_timeout=timeout_s)[ref.topic].result(timeout_s)
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise KitError(f"cannot create topic {ref.topic} on {ref.bootstrap}: {one_line(exc)}") from exc
    _wait_until_served(ref, partitions, timeout_s)
    return True


def _wait_until_served(ref: TopicRef, partitions: int, timeout_s: float) -> None:
    """Return once every partition of a new topic answers an offset query.  Creation returns before
    the broker leads them: CI saw a query right after it fail with "Not leader for partition"."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    waiting = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
               KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION}
    deadline = time.monotonic() + timeout_s
    consumer = _consumer(ref.bootstrap)
    try:
        for p in range(partitions):
            while True:
                try:
                    consumer.get_watermark_offsets(TopicPartition(ref.topic, p), timeout=timeout_s)
                    break
                except KafkaException as exc:
                    if exc.args[0].code() not in waiting or time.monotonic() > deadline:
                        raise KitError(f"topic {ref.topic} on {ref.bootstrap} was created, but its partition "
                                       f"{p} is not served: {one_line(exc)}") from exc
                time.sleep(0.05)
    finally:
        consumer.close()


def check_reachable(ref: TopicRef, timeout_s: float = 10.0) -> bool:
    """Whether ``ref``'s topic exists; KitError (one line) where Kafka does not answer at all."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(_client_conf(ref.bootstrap))
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise KitError(f"cannot reach Kafka at {ref.bootstrap} (is a broker running? lmstream-kit kafka starts "
                       f"one): {one_line(exc)}") from exc
    return ref.topic in meta.topics


def open_topic(ref: TopicRef, *, create_partitions: int | None = None) -> bool:
    """Check, before a stream starts, that Kafka answers at ``ref`` (KitError in one line where not),
    and create the topic with ``create_partitions`` where it is missing and that is given (the kit's
    generator writes it); returns whether the topic exists now.  A topic that others write to may
    come later: its indexer waits for it."""
    if create_partitions is not None:
        check_format(ref.format, writing=True)
    exists = check_reachable(ref)
    if not exists and create_partitions is not None:
        create_topic(ref, create_partitions)
        return True
    return exists


def topic_partitions(consumer, ref: TopicRef, timeout_s: float = 10.0) -> list[int]:
    """The topic's partition ids (KitError where the topic does not exist or Kafka is unreachable)."""
    from confluent_kafka import KafkaException

    try:
        meta = consumer.list_topics(ref.topic, timeout=timeout_s)
    except KafkaException as exc:
        raise KitError(f"cannot reach Kafka at {ref.bootstrap}: {one_line(exc)}") from exc
    topic = meta.topics.get(ref.topic)
    if topic is None or topic.error is not None or not topic.partitions:
        why = one_line(topic.error) if topic is not None and topic.error is not None else "no such topic"
        raise KitError(f"topic {ref.topic} on {ref.bootstrap}: {why}")
    return sorted(topic.partitions)


class TopicWriter:
    """Produce tables to a topic as values of its format, JSON or Avro (the feed's generators,
    ``--feed kafka://...``).

    Rows go to the topic's partitions in turn, so each partition gets its share of every second
    (Kafka's own choice for records without a key sticks to one partition per batch of records,
    and a second's rows often fit one batch); where the partitions cannot be listed, Kafka chooses.
    """

    def __init__(self, ref: TopicRef, *, linger_ms: int = 5) -> None:
        from confluent_kafka import Producer

        self.ref = ref
        self.format = check_format(ref.format, writing=True)
        self._producer = Producer(_client_conf(ref.bootstrap, **{"linger.ms": linger_ms, "acks": "all",
                                                                 "enable.idempotence": True}))
        self._errors: list[str] = []
        self._partitions: int | None = None
        self._turn = 0

    def _partition_count(self) -> int:
        """The topic's partitions (0: unknown, Kafka chooses), listed once."""
        if self._partitions is None:
            try:
                topic = self._producer.list_topics(self.ref.topic, timeout=10.0).topics.get(self.ref.topic)
                self._partitions = len(topic.partitions) if topic is not None and topic.error is None else 0
            except Exception:  # noqa: BLE001  (the broker away: Kafka picks, and we ask again next write)
                return 0
        return self._partitions

    def _delivered(self, err, _msg) -> None:
        if err is not None:
            self._errors.append(one_line(err))

    def write(self, table: pa.Table, *, flush: bool = True, timeout_s: float = 300.0, second: int | None = None,
              row_ids: Sequence[int] | None = None) -> int:
        """Produce every row of ``table``; with ``flush``, return once Kafka has them all (a broker
        that restarts meanwhile is waited for, up to ``timeout_s``, Kafka's own delivery timeout).

        ``second``: the generator's simulated second of these rows, kept in each record's headers
        with the row's index in it (``row_ids``, default 0, 1, ...), so that a resumed generator
        goes on where the topic ends (:func:`generated_tail`)."""
        ids = range(table.num_rows) if row_ids is None else row_ids
        partitions = self._partition_count()
        for i, value in zip(ids, encode_values(table, self.format)):
            headers = None if second is None else [(SECOND_HEADER, b"%d" % second), (ROW_HEADER, b"%d" % i)]
            where = {"partition": self._turn % partitions} if partitions else {}
            self._turn += 1
            while True:
                try:
                    self._producer.produce(self.ref.topic, value=value, headers=headers, on_delivery=self._delivered,
                                           **where)
                    break
                except BufferError:  # the local queue is full: let it drain
                    self._producer.poll(0.1)
            self._producer.poll(0)
        if flush:
            self.flush(timeout_s)
        return table.num_rows

    def flush(self, timeout_s: float = 300.0) -> None:
        left = self._producer.flush(timeout_s)
        if self._errors or left:
            errors, self._errors = self._errors, []
            raise KitError(f"Kafka at {self.ref.bootstrap} did not take {len(errors) + left} record(s) for topic "
                           f"{self.ref.topic}: {errors[0] if errors else 'timed out'}")

    def close(self) -> None:
        self.flush()


# ---------------------------------------------------------------------- reading
def read_ranges(ref: TopicRef, pieces: Iterable[tuple[int, int, int]], *, timeout_s: float = 300.0,
                lost: list | None = None) -> Iterator[tuple[int, int, bytes | None, float]]:
    """The records ``(partition, offset, value, timestamp s)`` of each ``(partition, start, end)``
    piece, in offset order; KitError where Kafka does not give them within ``timeout_s`` (the
    broker down that long): a broker that restarts meanwhile stalls the batch, it does not fail it.

    Records that Kafka no longer has (retention or a deletion removed them before they were read)
    are a KitError naming them, or, with ``lost``, left out and added to it as ``(partition,
    start, end)`` ranges."""
    for msg in _read_messages(ref, pieces, timeout_s=timeout_s, lost=lost):
        yield msg.partition(), msg.offset(), msg.value(), msg.timestamp()[1] / 1000


def _read_messages(ref: TopicRef, pieces: Iterable[tuple[int, int, int]], *, timeout_s: float = 300.0,
                   lost: list | None = None) -> Iterator[Any]:
    """The messages of each ``(partition, start, end)`` piece, in offset order (see :func:`read_ranges`)."""
    from confluent_kafka import KafkaError, TopicPartition

    consumer = _consumer(ref.bootstrap)
    try:
        for partition, start, end in pieces:
            if end <= start:
                continue
            consumer.assign([TopicPartition(ref.topic, int(partition), int(start))])
            want, deadline = int(start), time.monotonic() + timeout_s
            while want < end:
                msgs = consumer.consume(num_messages=min(10_000, end - want), timeout=1.0)
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            if msg.offset() >= end:  # the rest of the piece holds no record (a transaction's
                                want = end           # marker, compacted away): nothing to wait for
                                break
                            continue
                        first = _log_start(consumer, ref, partition)
                        if first is None or first <= want:
                            raise KitError(f"reading {ref.topic}[{partition}] at offset {want}: {one_line(err)}")
                        gone = (int(partition), want, min(first, end))
                        if lost is None:
                            raise KitError(f"records {gone[1]}-{gone[2] - 1} of {ref.topic}[{partition}] are gone from "
                                           f"Kafka (the partition starts at offset {first} now: retention or a deletion "
                                           "removed them before they were read); fail_on_data_loss=False goes on "
                                           "without them")
                        lost.append(gone)
                        want = gone[2]
                        if want < end:
                            consumer.assign([TopicPartition(ref.topic, int(partition), want)])
                        break
                    off = msg.offset()
                    if off < want:
                        continue
                    if off >= end:  # past the piece: the offsets before it held no record
                        want = end
                        break
                    want = off + 1  # past a compacted offset too
                    yield msg
                    deadline = time.monotonic() + timeout_s
                if time.monotonic() > deadline:
                    raise KitError(f"Kafka at {ref.bootstrap} gave no record of {ref.topic}[{partition}] from offset "
                                   f"{want} (of {start}-{end}) within {timeout_s:g} s")
    finally:
        consumer.close()


def _log_start(consumer, ref: TopicRef, partition: int) -> int | None:
    """The first offset Kafka still holds of ``partition`` (None where it does not answer)."""
    from confluent_kafka import TopicPartition

    try:
        lo, _ = consumer.get_watermark_offsets(TopicPartition(ref.topic, int(partition)), timeout=10.0)
    except Exception:  # noqa: BLE001
        return None
    return int(lo)


def read_pieces(meta: Mapping[str, Any], pieces: Iterable[tuple[int, int, int]], schema: pa.Schema, *,
                checks: Mapping[str, Any] | None = None, rejects: list | None = None,
                chunk: int = 20_000, fail_on_data_loss: bool = True) -> Iterator[pa.RecordBatch]:
    """The records of offset ``pieces`` of a Kafka spool's topic (``meta``: the spool's ``kafka``),
    decoded to ``schema`` in chunks of ``chunk`` records; each record that does not fit is left
    out and, with ``rejects``, added to it as ``{"partition", "offset", "record", "reason"}``.

    Records Kafka no longer has fail the read (KitError naming them), or without
    ``fail_on_data_loss`` are left out, each range added to ``rejects`` once (``offset``: its
    first, ``record`` None)."""
    fmt = check_format(meta.get("format", "json"))
    ref = TopicRef(meta["bootstrap"], meta["topic"], fmt)
    buffer: list[tuple[int, int, bytes | None]] = []

    def flush() -> Iterator[pa.RecordBatch]:
        table, bad = decode_values([v for _, _, v in buffer], schema, fmt, checks)
        if rejects is not None:
            for i, reason in bad:
                p, off, value = buffer[i]
                # a JSON record as its text, an Avro one as its bytes in hex
                record = None if value is None else value.decode("utf-8", "replace") if fmt == "json" else value.hex()
                rejects.append({"partition": p, "offset": off, "record": record, "reason": reason})
        buffer.clear()
        yield from table.to_batches()

    lost: list | None = None if fail_on_data_loss else []
    for partition, offset, value, _ in read_ranges(ref, pieces, lost=lost):
        buffer.append((partition, offset, value))
        if len(buffer) >= chunk:
            yield from flush()
    if buffer:
        yield from flush()
    if lost and rejects is not None:
        rejects.extend({"partition": p, "offset": a, "record": None,
                        "reason": f"records {a}-{b - 1} were gone from Kafka before they were read ({b - a} lost)"}
                       for p, a, b in lost)


def read_kafka_datasets(meta: Mapping[str, Any], infos: Sequence[Any], schema: pa.Schema, **kw: Any
                        ) -> Iterator[pa.RecordBatch]:
    """The records of a Kafka spool's datasets ``infos``, partition by partition (see :func:`read_pieces`)."""
    ranges = merge_ranges(i.ranges for i in infos if i.ranges)
    yield from read_pieces(meta, [(p, a, b) for p, (a, b) in ranges.items()], schema, **kw)


# ---------------------------------------------------------------------- the index
class TopicIndexer:
    """Poll a topic's end offsets and index what is new into a Kafka spool (a thread in the driver).

    Each poll that finds records appends one dataset: the offset range of each partition that
    grew, its ``rows``, the earliest first-record timestamp as ``arrival`` and estimated
    ``nbytes`` (see the module).  It starts after what the spool indexed already (a restarted run
    goes on from there); a new spool starts at the topic's current start (``start="earliest"``)
    or end (``"latest"``).  A poll that fails (the broker down) is retried; ``error`` says why
    meanwhile, and nothing is indexed twice or skipped.
    """

    def __init__(self, spool, *, poll_s: float = 0.05, start: str = "earliest") -> None:
        if spool.kafka is None:
            raise ConfigError(f"{spool!r} is not a Kafka spool (create it with kafka=)")
        if start not in ("earliest", "latest"):
            raise ConfigError(f"start must be 'earliest' or 'latest', got {start!r}")
        self.spool = spool
        self.ref = TopicRef(spool.kafka["bootstrap"], spool.kafka["topic"], spool.kafka.get("format", "json"))
        self.poll_s = float(poll_s)
        self.from_ = start  # where a new spool starts: 'earliest' or 'latest'
        self.error: str | None = None
        self.polls = 0
        self._next: dict[int, int] | None = None
        self._consumer = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- one poll ------------------------------------------------------------
    def _ends(self) -> dict[int, tuple[int, int]]:
        from confluent_kafka import TopicPartition

        out = {}
        for p in topic_partitions(self._consumer, self.ref):
            lo, hi = self._consumer.get_watermark_offsets(TopicPartition(self.ref.topic, p), timeout=10.0)
            out[p] = (int(lo), int(hi))
        return out

    def _first(self, partition: int, offset: int) -> tuple[float, int] | None:
        """(timestamp s, key and value bytes) of the record at ``offset`` of ``partition``."""
        from confluent_kafka import TopicPartition

        self._consumer.assign([TopicPartition(self.ref.topic, partition, offset)])
        try:
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                msg = self._consumer.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                return msg.timestamp()[1] / 1000, len(msg.value() or b"") + len(msg.key() or b"")
            return None
        finally:
            self._consumer.unassign()  # no fetch left waiting in front of the next poll's offset queries

    def poll_once(self) -> Any:
        """Index what the topic holds past the last dataset; returns the new DatasetInfo, or None."""
        if self._consumer is None:
            self._consumer = _consumer(self.ref.bootstrap)
        ends = self._ends()
        if self._next is None:
            known = self.spool.datasets()
            indexed = merge_ranges(d.ranges for d in known) if known else {}
            self._next = {p: hi for p, (_, hi) in indexed.items()}
            for p, (lo, hi) in ends.items():  # partitions the index has not seen yet
                self._next.setdefault(p, lo if self.from_ == "earliest" or known else hi)
        ranges = {}
        for p, (lo, hi) in ends.items():
            begin = self._next.setdefault(p, lo)  # a partition added to the topic: from its start
            if hi > begin:
                ranges[p] = (max(begin, lo), hi)
        self.polls += 1
        if not ranges:
            return None
        samples = [s for s in (self._first(p, start) for p, (start, _) in ranges.items()) if s is not None]
        rows = sum(end - start for start, end in ranges.values())
        arrival = min(ts for ts, _ in samples) if samples else time.time()
        size = sum(n for _, n in samples) / len(samples) if samples else 0
        info = self.spool.append_ranges(ranges, rows=rows, nbytes=int(round(rows * size)), arrival=arrival)
        self._next.update({p: end for p, (_, end) in ranges.items()})
        return info

    # -- the thread --------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
                self.error = None
            except Exception as exc:  # noqa: BLE001  (the broker may be down: say so, and poll again)
                self.error = one_line(exc)
                if self._consumer is not None:
                    try:
                        self._consumer.close()
                    except Exception:  # noqa: BLE001
                        pass
                    self._consumer = None
                self._stop.wait(1.0)
            self._stop.wait(self.poll_s)

    def start(self) -> TopicIndexer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"lmstream-kafka-index-{self.ref.topic}",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self, *, last_poll: bool = False) -> None:
        """Stop polling; with ``last_poll``, index once more what the topic holds now (where Kafka
        answers: what it does not stays in the topic, for the next run)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if last_poll:
            try:
                self.poll_once()
            except Exception:  # noqa: BLE001, S110
                pass
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


# ---------------------------------------------------------------------- the feed
class TopicSink:
    """Where a :class:`~lmstream_kit.feed.traffic.FeedGenerator` writes when its traffic goes to a
    topic (``--feed kafka://...``): each dataset is produced, and in Kafka when ``append`` returns.

    ``written``: rows of a second that the topic holds already (``{second: row indices}``, from
    :func:`generated_tail`): a resumed generator makes that second again and only the rows the topic
    lacks are written, so a generator killed in the middle of a second writes none twice."""

    def __init__(self, writer: TopicWriter, *, written: Mapping[int, set] | None = None) -> None:
        self.writer = writer
        self.rows = 0
        self.written = {int(s): set(ids) for s, ids in (written or {}).items()}

    def append(self, table: pa.Table, *, source: str = "", second: int | None = None, arrival: float | None = None):
        ids = list(range(table.num_rows))
        there = self.written.pop(second, None) if second is not None else None
        if there:
            ids = [i for i in ids if i not in there]
            table = table.take(pa.array(ids, pa.int64()))
        n = self.writer.write(table, second=second, row_ids=ids)
        self.rows += n
        return _Written(n)


def generated_tail(ref: TopicRef, *, timeout_s: float = 30.0) -> tuple[int, set[int]] | None:
    """The last second the kit's generator wrote to ``ref``'s topic and the row indices of it that
    the topic holds (all of them unless a generator was killed while it wrote that second); None
    where the topic is empty or its last records come from other producers (no second in their
    headers).  Reads each partition's tail, backwards in growing windows, until it passes that second."""
    from confluent_kafka import TopicPartition

    consumer = _consumer(ref.bootstrap)
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(ref.topic, p), timeout=timeout_s)
                for p in topic_partitions(consumer, ref, timeout_s)}
        last: int | None = None
        for p, (lo, hi) in ends.items():
            tail = _headers(ref, p, max(lo, hi - 8), hi, timeout_s) if hi > lo else []
            if tail:
                second = tail[-1][0]
                if second is None:
                    return None
                last = second if last is None else max(last, second)
        if last is None:
            return None
        rows: set[int] = set()
        for p, (lo, hi) in ends.items():
            window = 256
            while hi > lo:
                start = max(lo, hi - window)
                tail = _headers(ref, p, start, hi, timeout_s)
                if start == lo or (tail and (tail[0][0] is None or tail[0][0] < last)):
                    rows |= {r for s, r in tail if s == last and r is not None}
                    break
                window *= 4
        return last, rows
    finally:
        consumer.close()


def _headers(ref: TopicRef, partition: int, start: int, end: int, timeout_s: float) -> list[tuple[int | None, int | None]]:
    """``(second, row)`` from the headers of the records ``[start, end)`` of ``partition``."""
    out = []
    for msg in _read_messages(ref, [(partition, start, end)], timeout_s=timeout_s):
        found = dict(msg.headers() or ())
        second, row = found.get(SECOND_HEADER), found.get(ROW_HEADER)
        out.append((int(second) if second is not None else None, int(row) if row is not None else None))
    return out


@dataclass(frozen=True)
class _Written:
    rows: int


class KafkaFeed:
    """A stream's feed from a topic: the indexer, and the kit's own generator writing to the topic
    where it has one (``generator``; None: other producers write to it).

    ``finished`` where the generator has finished and every record it wrote is indexed (a topic
    that others write to never finishes).  ``error`` is the generator's; the indexer's (the
    broker down, say) is ``status``: the stream stalls meanwhile and goes on when Kafka is back.
    """

    def __init__(self, spool, *, generator: Any = None, sink: TopicSink | None = None, poll_s: float = 0.05) -> None:
        self.indexer = TopicIndexer(spool, poll_s=poll_s)
        self.generator = generator
        self.sink = sink
        self._indexed_at_start = spool.total_rows()

    def start(self) -> KafkaFeed:
        self.indexer.start()
        if self.generator is not None:
            self.generator.start()
        return self

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop the generator, index what it wrote (a stop drains it), then stop the indexer."""
        if self.generator is not None:
            self.generator.stop(timeout)
        self.indexer.stop(last_poll=True)

    @property
    def finished(self) -> bool:
        if self.generator is None or not self.generator.finished:
            return False
        return self.indexer.spool.total_rows() - self._indexed_at_start >= (self.sink.rows if self.sink else 0)

    @property
    def error(self) -> BaseException | None:
        return getattr(self.generator, "error", None)

    @property
    def status(self) -> str | None:
        """Why the topic is not being indexed now (None while it is)."""
        return self.indexer.error

    def __getattr__(self, name: str) -> Any:  # the generator's live settings (speedup, rate scale, ...)
        generator = self.__dict__.get("generator")
        if generator is None:
            raise AttributeError(name)
        return getattr(generator, name)
