"""Spark's own Kafka source (``format("kafka")``) against the kit's broker, watched by ``attach``.

A real broker (one per test session), Spark's Kafka connector from Maven Central added to the shared
session, a real producer.  The attached records carry each batch's consumer lag, taken from Spark's
progress: what the topic held past the batch's end offsets.
"""

from __future__ import annotations

import json
import time

import pytest

from lmstream_kit.attached import attach

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def produce(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        producer.produce(topic, key=str(i).encode(), value=json.dumps({"i": i}).encode())
    assert producer.flush(60) == 0


def test_attach_records_the_consumer_lag_of_each_batch_of_a_spark_kafka_query(spark_kafka, kafka_broker, tmp_path):
    produce(kafka_broker.bootstrap, "lag", 500, partitions=2)
    query = (spark_kafka.readStream.format("kafka").option("kafka.bootstrap.servers", kafka_broker.bootstrap)
             .option("subscribe", "lag").option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 100)
             .load().selectExpr("CAST(value AS STRING) AS value")
             .writeStream.format("noop").trigger(processingTime="200 milliseconds")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        stream = attach(query, run_dir=tmp_path / "run")
        batches = 5  # about 100 rows each: one more at a time until all 500 are read
        while sum(r["rows"] for r in stream.records) < 500:
            stream.wait(batches=batches, timeout=180)
            batches += 1
    finally:
        query.stop()
    data = sorted((r for r in stream.records if r["rows"] > 0), key=lambda r: r["batch_id"])
    assert sum(r["rows"] for r in data) == 500
    read = 0
    for r in data:  # everything was produced before the query started: the lag is what is left
        read += r["rows"]
        assert r["source_lag"] == 500 - read, (r["batch_id"], r["rows"], r["source_lag"])
    assert all(r["rows"] <= 101 for r in data)  # maxOffsetsPerTrigger, split over the partitions
    assert "source_lag" in stream.record_fields()


@pytest.mark.parametrize("read", ["executors", "driver"])
def test_the_lmstream_source_reads_a_kafka_spool_by_offset_and_its_checkpoint_names_them(
        spark, kafka_broker, tmp_path, read):
    import pyarrow as pa

    from lmstream_kit.feed.kafka import TopicIndexer, TopicRef, TopicWriter, create_topic
    from lmstream_kit.feed.spool import Spool

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.float64())])
    ref = TopicRef(kafka_broker.bootstrap, f"source-{read}")
    create_topic(ref, 3)
    writer = TopicWriter(ref)
    spool = Spool(tmp_path / "spool", schema=schema, kafka={"bootstrap": ref.bootstrap, "topic": ref.topic,
                                                             "format": "json"})
    indexer = TopicIndexer(spool)
    seen: dict[int, list[int]] = {}

    def run(until_rows: int):
        def keep(df, batch_id):
            seen[batch_id] = [r.id for r in df.select("id").collect()]  # a replayed batch overwrites its own

        query = (spark.readStream.format("lmstream").option("spool", spool.uri).option("read", read)
                 .option("partitions", 4).load()
                 .writeStream.foreachBatch(keep).trigger(processingTime="100 milliseconds")
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        try:
            deadline = time.monotonic() + 120
            while sum(map(len, seen.values())) < until_rows and time.monotonic() < deadline:
                query.awaitTermination(0.2)
                assert query.isActive, query.exception()
        finally:
            query.stop()

    for start in (0, 400):
        writer.write(pa.table({"id": pa.array(range(start, start + 400), pa.int64()),
                               "v": [i / 2 for i in range(start, start + 400)]}))
        indexer.poll_once()
    run(800)
    writer.write(pa.table({"id": pa.array(range(800, 900), pa.int64()), "v": [0.0] * 100}))
    indexer.poll_once()
    run(900)  # again from the checkpoint: only what is new
    ids = sorted(i for batch in seen.values() for i in batch)
    assert ids == list(range(900))
    offsets = sorted((tmp_path / "checkpoint" / "offsets").iterdir(), key=lambda p: int(p.name))
    last = json.loads(offsets[-1].read_text().splitlines()[-1])
    ends = {int(p): b for p, (_, b) in spool.datasets()[-1].ranges.items()}
    assert last["seq"] == spool.end_seq and {int(p): v for p, v in last["kafka"].items()} == {
        p: max(d.ranges[p][1] for d in spool.datasets() if d.ranges and p in d.ranges) for p in range(3)}
    assert ends  # the last poll found records
    spool.close()
