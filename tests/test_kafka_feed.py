"""A Kafka topic indexed into a spool (lmstream_kit.feed.kafka) against a real broker.

The pure parts (URIs, JSON values, offset ranges) run without a broker; the rest produces with a
real client to the session's broker, indexes the topic, and reads the records back by offset.
"""

from __future__ import annotations

import time
from datetime import datetime

import numpy as np
import pyarrow as pa
import pytest

from lmstream_kit.exceptions import ConfigError, KitError, SpoolError
from lmstream_kit.feed.kafka import (
    TopicIndexer,
    TopicRef,
    TopicWriter,
    create_topic,
    decode_json,
    encode_json,
    merge_ranges,
    parse_kafka_uri,
    read_kafka_datasets,
    split_ranges,
)
from lmstream_kit.feed.spool import Spool
from lmstream_kit.feed.values import _arrow_parsable, _decode_json_arrow, decode_values, encode_values
from lmstream_kit.workloads import WORKLOADS

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("speed", pa.float64()),
                    pa.field("name", pa.string()), pa.field("ts", pa.timestamp("us"))])


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "speed": [i * 0.5 for i in range(start, start + n)],
                     "name": [None if i % 7 == 0 else f"car {i}" for i in range(start, start + n)],
                     "ts": pa.array([datetime(2026, 11, 24, 12, 0, i % 60, 123456) for i in range(start, start + n)],
                                    pa.timestamp("us"))}, schema=SCHEMA)


@pytest.mark.parametrize("bad", ["kafka://host/topic", "kafka://host:0/t", "kafka://host:9092/", "http://h:1/t",
                                 "kafka://host:9092/a b", "kafka://h:99999/t"])
def test_a_malformed_kafka_uri_is_refused_in_one_line_naming_it(bad):
    with pytest.raises(ConfigError, match=r"^a Kafka feed is kafka://HOST:PORT/TOPIC\[\?format=json\|avro\|avro-confluent\], "
                                          r"got ") as err:
        parse_kafka_uri(bad)
    assert repr(bad) in str(err.value)


def test_the_value_format_is_named_in_the_uri_and_an_unknown_one_is_refused_in_one_line():
    ref = parse_kafka_uri("kafka://127.0.0.1:9092/cars?format=avro-confluent")
    assert (ref.topic, ref.format, ref.uri) == ("cars", "avro-confluent", "kafka://127.0.0.1:9092/cars?format=avro-confluent")
    assert ref.meta == {"bootstrap": "127.0.0.1:9092", "topic": "cars", "format": "avro-confluent"}
    assert parse_kafka_uri("kafka://127.0.0.1:9092/cars").uri == "kafka://127.0.0.1:9092/cars"
    with pytest.raises(ConfigError, match=r"^a topic's value format is one of json, avro, avro-confluent, got 'protobuf' "
                                          r"in 'kafka://h:1/t\?format=protobuf'$"):
        parse_kafka_uri("kafka://h:1/t?format=protobuf")
    # the kit's generator has no schema registry: it writes json or avro (refused before any broker is asked)
    with pytest.raises(ConfigError, match=r"^the kit's generator writes json or avro values, not 'avro-confluent' "):
        TopicWriter(ref)


def test_json_values_round_trip_to_the_schema_exactly():
    table = rows(0, 50)
    back, bad = decode_json(encode_json(table), SCHEMA)
    assert bad == [] and back.equals(table)


@pytest.mark.parametrize("fmt", ["avro", "avro-confluent"])
def test_avro_values_round_trip_to_the_schema_exactly(fmt):
    table = rows(0, 50)
    values = encode_values(table, "avro")
    if fmt == "avro-confluent":  # what a producer with a schema registry writes: magic byte 0, schema id 42
        values = [b"\x00" + (42).to_bytes(4, "big") + v for v in values]
    back, bad = decode_values(values, SCHEMA, fmt)
    assert bad == [] and back.equals(table)


def test_avro_records_that_do_not_fit_are_named_by_index_and_reason():
    good = encode_values(rows(0, 2), "avro")
    other = encode_values(pa.table({"id": pa.array([7], pa.int64())}), "avro")[0]  # another schema's record
    values = [*good, b"", other, good[0] + b"\x00", None]
    table, bad = decode_values(values, SCHEMA, "avro")
    assert table.column("id").to_pylist() == [0, 1]
    assert bad == [(2, "not an Avro record of the schema: it ends early"),
                   (3, "not an Avro record of the schema: it ends early"),
                   (4, "not an Avro record of the schema: 1 byte(s) left over"), (5, "record has no value")]
    _, bad = decode_values([good[1], b"\x00\x00\x00\x00\x01" + good[1]], SCHEMA, "avro-confluent")
    assert bad == [(0, "no Confluent wire-format header (magic byte 0 and a schema id)")]
    # a value outside a narrower column's type is one reason, not a crash
    narrow = pa.schema([pa.field("n", pa.int8(), nullable=False)])
    wide = encode_values(pa.table({"n": pa.array([5, 300], pa.int32())},
                                  schema=pa.schema([pa.field("n", pa.int32(), nullable=False)])), "avro")
    table, bad = decode_values(wide, narrow, "avro")
    assert table.column("n").to_pylist() == [5] and bad == [(1, "column 'n': value 300 is not int8")]


@pytest.mark.parametrize("name", [n for n in WORKLOADS.names() if WORKLOADS.get(n).generated])
@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_every_workloads_rows_round_trip_through_its_values(name, fmt):
    workload = WORKLOADS.get(name)
    table = workload.make_rows(3, 200, np.random.default_rng(5)).select(workload.schema.names).cast(workload.schema)
    back, bad = decode_values(encode_values(table, fmt), workload.schema, fmt, workload.checks)
    assert bad == [] and back.equals(table)
    if fmt == "json" and all(_arrow_parsable(f.type) for f in workload.schema):  # Arrow's reader took them
        fast = _decode_json_arrow(encode_values(table, fmt), workload.schema, workload.checks)
        assert fast is not None and fast[0].equals(table)


def test_json_that_arrows_reader_would_misread_goes_record_by_record():
    narrow = pa.schema([pa.field("n", pa.int8(), nullable=False)])
    values = [b'{"n": 300}', b'{"n": 3.0}', b'{"n": "x"}', b"{}", b'{"n": 4, "more": [1]}']
    assert _decode_json_arrow(values, narrow, None) is None  # 300 does not fit int8: not wrapped, not nulled
    table, bad = decode_json(values, narrow)
    assert table.column("n").to_pylist() == [3, 4]
    assert bad == [(0, "column 'n': value 300 is not int8"), (2, "column 'n': value 'x' is not int8"),
                   (3, "column 'n': value is missing")]
    text = pa.schema([pa.field("s", pa.string())])
    assert _decode_json_arrow([b'{"s": 5}'], text, None) is None  # a number is not text
    assert _decode_json_arrow([b'{"s":\n"a"}'], text, None) is None  # an object over two lines
    assert decode_json([b'{"s":\n"a"}', b'{"s": 5}'], text)[1] == [(1, "column 's': value 5 is not string")]


def test_records_that_do_not_fit_are_named_by_index_and_reason():
    values = [*encode_json(rows(0, 2)), b"{not json", b'{"id": null}', b'{"id": 5, "speed": "fast"}']
    table, bad = decode_json(values, SCHEMA)
    assert table.column("id").to_pylist() == [0, 1]
    assert [i for i, _ in bad] == [2, 3, 4]
    assert bad[0][1].startswith("invalid JSON: ") and bad[1][1] == "column 'id': value is missing"
    assert bad[2][1] == "column 'speed': value 'fast' is not double"


def test_ranges_merge_only_when_contiguous_and_split_along_partitions():
    assert merge_ranges([{1: (10, 20)}, {0: (0, 4)}, {1: (20, 21)}]) == {0: (0, 4), 1: (10, 21)}
    with pytest.raises(KitError, match=r"^offset ranges of partition 1 are not contiguous: 10-20, then 22-30$"):
        merge_ranges([{1: (10, 20)}, {1: (22, 30)}])
    pieces = split_ranges({0: (0, 100), 1: (0, 3), 2: (7, 7)}, 4)
    assert pieces == [(0, 0, 34), (0, 34, 67), (0, 67, 100), (1, 0, 3)]  # an empty range gives no piece
    assert split_ranges({0: (0, 2)}, 8) == [(0, 0, 1), (0, 1, 2)]  # never a piece without a record


def test_a_kafka_spool_keeps_its_topic_and_refuses_another(tmp_path):
    meta = {"bootstrap": "127.0.0.1:1", "topic": "a", "format": "json"}
    with Spool(tmp_path / "s", schema=SCHEMA, kafka=meta) as sp:
        info = sp.append_ranges({0: (0, 3)}, rows=3, nbytes=30, arrival=1.0)
        assert (info.seq, info.ranges, info.path) == (0, {0: (0, 3)}, "")
        with pytest.raises(SpoolError, match="holds data files"):
            Spool(tmp_path / "files", schema=SCHEMA).append_ranges({0: (0, 1)}, rows=1, nbytes=1, arrival=0)
    again = Spool(tmp_path / "s", create=False)
    assert again.kafka == meta and again.datasets()[0].ranges == {0: (0, 3)}
    with pytest.raises(SpoolError, match=r"indexes .*'topic': 'a'.*, not .*'topic': 'b'"):
        Spool(tmp_path / "s", kafka={**meta, "topic": "b"})


@pytest.mark.kafka
def test_the_indexer_indexes_what_a_producer_wrote_and_reads_it_back_by_offset(kafka_broker, tmp_path):
    ref = TopicRef(kafka_broker.bootstrap, "feed-index")
    assert create_topic(ref, 3) is True and create_topic(ref, 3) is False
    writer = TopicWriter(ref)
    before = time.time()
    writer.write(rows(0, 300))
    after = time.time()
    spool = Spool(tmp_path / "spool", schema=SCHEMA, kafka={"bootstrap": ref.bootstrap, "topic": ref.topic,
                                                              "format": "json"})
    indexer = TopicIndexer(spool)
    first = indexer.poll_once()
    assert first.rows == 300 and first.ranges == {0: (0, 100), 1: (0, 100), 2: (0, 100)}  # rows take turns
    # LogAppendTime: the broker stamped the records when they came (same clock, to the millisecond)
    assert before - 0.01 <= first.arrival <= after + 0.01
    assert 300 * 20 < first.nbytes < 300 * 200  # estimated from the sampled records' sizes
    assert indexer.poll_once() is None  # nothing new
    writer.write(rows(300, 50))
    second = indexer.poll_once()
    assert second.seq == 1 and second.rows == 50
    assert all(second.ranges[p][0] == first.ranges[p][1] for p in second.ranges if p in first.ranges)
    back = spool.read_table().sort_by("id")
    assert back.equals(rows(0, 350))
    assert spool.read_table(1, 2).num_rows == 50
    spool.close()

    # a restarted run's indexer goes on after what the spool indexed: nothing twice, nothing skipped
    writer.write(rows(350, 10))
    reopened = Spool(tmp_path / "spool", schema=SCHEMA)
    third = TopicIndexer(reopened).poll_once()
    assert third.seq == 2 and third.rows == 10
    assert reopened.read_table().sort_by("id").equals(rows(0, 360))
    reopened.close()


@pytest.mark.kafka
def test_bad_records_are_left_out_with_their_partition_offset_and_reason(kafka_broker, tmp_path):
    from confluent_kafka import Producer

    ref = TopicRef(kafka_broker.bootstrap, "feed-bad")
    create_topic(ref, 1)
    producer = Producer({"bootstrap.servers": ref.bootstrap, "enable.idempotence": True})  # offsets in order
    for value in [*encode_json(rows(0, 3)), b"garbage", *encode_json(rows(3, 2)), b'{"id": "x"}']:
        producer.produce(ref.topic, value=value)
    assert producer.flush(30) == 0
    meta = {"bootstrap": ref.bootstrap, "topic": ref.topic, "format": "json"}
    spool = Spool(tmp_path / "spool", schema=SCHEMA, kafka=meta)
    info = TopicIndexer(spool).poll_once()
    assert info.rows == 7  # Kafka counts records, good or not
    rejects: list = []
    table = pa.Table.from_batches(list(read_kafka_datasets(meta, [info], SCHEMA, rejects=rejects)), schema=SCHEMA)
    assert table.column("id").to_pylist() == [0, 1, 2, 3, 4]
    assert [(r["partition"], r["offset"], r["record"]) for r in rejects] == [(0, 3, "garbage"), (0, 6, '{"id": "x"}')]
    assert rejects[1]["reason"] == "column 'id': value 'x' is not int64"
    spool.close()


@pytest.mark.kafka
def test_an_avro_topic_is_read_back_by_offset_and_its_bad_records_are_left_out_in_hex(kafka_broker, tmp_path):
    from confluent_kafka import Producer

    ref = TopicRef(kafka_broker.bootstrap, "feed-avro", "avro")
    create_topic(ref, 2)
    TopicWriter(ref).write(rows(0, 120))
    producer = Producer({"bootstrap.servers": ref.bootstrap})
    producer.produce(ref.topic, value=b"\x02", partition=1)  # an id, then nothing: it ends early
    assert producer.flush(30) == 0
    spool = Spool(tmp_path / "spool", schema=SCHEMA, kafka=ref.meta)
    info = TopicIndexer(spool).poll_once()
    assert info.rows == 121
    rejects: list = []
    table = pa.Table.from_batches(list(read_kafka_datasets(ref.meta, [info], SCHEMA, rejects=rejects)), schema=SCHEMA)
    assert table.sort_by("id").equals(rows(0, 120))
    assert [(r["partition"], r["record"], r["reason"]) for r in rejects] == [
        (1, "02", "not an Avro record of the schema: it ends early")]
    spool.close()


@pytest.mark.kafka
def test_a_resumed_generator_goes_on_where_the_topic_ends_and_writes_no_row_twice(kafka_broker, tmp_path):
    from lmstream_kit.feed.kafka import TopicSink, generated_tail

    ref = TopicRef(kafka_broker.bootstrap, "feed-resume")
    create_topic(ref, 3)
    assert generated_tail(ref) is None  # an empty topic: a generator starts at second 0
    sink = TopicSink(TopicWriter(ref))
    for second in range(3):
        sink.append(rows(100 * second, 40), second=second)
    assert generated_tail(ref) == (2, set(range(40)))
    # a generator killed while it wrote second 3: Kafka holds some of its rows, in no order
    cut = [0, 5, 6, 17, 39]
    TopicWriter(ref).write(rows(300, 40).take(pa.array(cut)), second=3, row_ids=cut)
    assert generated_tail(ref) == (3, set(cut))
    resumed = TopicSink(TopicWriter(ref), written={3: set(cut)})
    assert resumed.append(rows(300, 40), second=3).rows == 35  # second 3 again: only what Kafka lacks
    assert resumed.append(rows(400, 40), second=4).rows == 40
    assert generated_tail(ref) == (4, set(range(40)))
    spool = Spool(tmp_path / "spool", schema=SCHEMA, kafka=ref.meta)
    back = TopicIndexer(spool).poll_once()
    ids = sorted(spool.read_table().column("id").to_pylist())
    assert back.rows == 200 and ids == sorted(i for s in range(5) for i in range(100 * s, 100 * s + 40))
    spool.close()
    # records of other producers (no second in their headers) at the end: nothing to go on from
    TopicWriter(ref).write(rows(900, 30))
    assert generated_tail(ref) is None


@pytest.mark.kafka
def test_records_deleted_before_they_were_read_fail_the_read_or_are_named_and_skipped(kafka_broker, tmp_path):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    ref = TopicRef(kafka_broker.bootstrap, "feed-retention")
    create_topic(ref, 2)
    TopicWriter(ref).write(rows(0, 100))  # 50 a partition, in turn: partition 0 holds the even ids
    spool = Spool(tmp_path / "spool", schema=SCHEMA, kafka=ref.meta)
    info = TopicIndexer(spool).poll_once()
    spool.close()
    admin = AdminClient({"bootstrap.servers": ref.bootstrap})
    for future in admin.delete_records([TopicPartition(ref.topic, 0, 30)], request_timeout=30).values():
        future.result(30)  # what retention does to old segments, now: partition 0 starts at offset 30
    with pytest.raises(KitError, match=r"^records 0-29 of feed-retention\[0\] are gone from Kafka \(the partition "
                                       r"starts at offset 30 now: .*fail_on_data_loss=False goes on without them$"):
        list(read_kafka_datasets(ref.meta, [info], SCHEMA))
    rejects: list = []
    table = pa.Table.from_batches(list(read_kafka_datasets(ref.meta, [info], SCHEMA, rejects=rejects,
                                                           fail_on_data_loss=False)), schema=SCHEMA)
    assert sorted(table.column("id").to_pylist()) == sorted([*range(60, 100, 2), *range(1, 100, 2)])
    assert rejects == [{"partition": 0, "offset": 0, "record": None,
                        "reason": "records 0-29 were gone from Kafka before they were read (30 lost)"}]


@pytest.mark.kafka
def test_the_indexer_of_a_missing_topic_says_so_and_keeps_polling(kafka_broker, tmp_path):
    meta = {"bootstrap": kafka_broker.bootstrap, "topic": "feed-missing", "format": "json"}
    spool = Spool(tmp_path / "spool", schema=SCHEMA, kafka=meta)
    indexer = TopicIndexer(spool, poll_s=0.05).start()
    try:
        deadline = time.monotonic() + 30
        while indexer.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert indexer.error is not None and "feed-missing" in indexer.error, indexer.error
        create_topic(TopicRef(meta["bootstrap"], meta["topic"]), 2)
        TopicWriter(TopicRef(meta["bootstrap"], meta["topic"])).write(rows(0, 20))
        while spool.end_seq == 0 and time.monotonic() < deadline + 30:
            time.sleep(0.05)
    finally:
        indexer.stop()
    assert spool.total_rows() == 20 and indexer.error is None
    spool.close()
