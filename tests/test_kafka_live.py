"""A LiveStream in front of a real Kafka topic: the same checks as on the spool.

The kit's generator writes to the topic (``kafka=`` with traffic), or other producers do
(``traffic=None``); the stream indexes the topic and reads each batch's offsets from Kafka.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.feed.spool import Spool
from lmstream_kit.live import LiveStream
from lmstream_kit.metrics import load_metrics, read_run_info
from lmstream_kit.protocol import BatchController

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

COLUMNS = ["time", "vehicle", "speed", "highway", "lane", "direction", "segment", "position"]


def output_table(run_dir: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted((run_dir / "output").glob("part-*.parquet"))])


def sorted_rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table[c].to_pylist() for c in COLUMNS), strict=True))


@pytest.mark.parametrize("read, fmt", [("driver", "json"), ("executors", "avro")], ids=["driver", "executors-avro"])
def test_every_record_of_the_topic_is_processed_exactly_once(spark, kafka_broker, tmp_path, read, fmt):
    run = tmp_path / "kafka"
    s = LiveStream("PASSTHROUGH", policy="lmstream", traffic="random", rate=400, speedup=10, duration_s=60,
                   run_dir=run, spark=spark, seed=3, read=read,
                   kafka=f"kafka://{kafka_broker.bootstrap}/live-{read}?format={fmt}", kafka_partitions=3)
    s.start()
    s.wait(until=lambda st: st.feed_finished(), timeout=180)
    s.stop()
    spool = Spool(run / "spool", create=False)
    assert spool.kafka == {"bootstrap": kafka_broker.bootstrap, "topic": f"live-{read}", "format": fmt}
    assert all(d.ranges for d in spool.datasets())
    assert {p for d in spool.datasets() for p in d.ranges} == {0, 1, 2}
    fed = spool.read_table()  # from Kafka, by the offsets the index holds
    out = output_table(run)
    assert fed.num_rows > 10_000 and fed.num_rows == s.feed.sink.rows
    assert sorted_rows(out) == sorted_rows(fed), "output rows must equal the topic's records, once each"
    df = load_metrics(run)
    data = df[df["rows"] > 0]
    assert data["start_seq"].iloc[0] == 0
    assert (data["start_seq"].iloc[1:].to_numpy() == data["end_seq"].iloc[:-1].to_numpy()).all()
    assert data["end_seq"].iloc[-1] == spool.end_seq and data["rows"].sum() == fed.num_rows
    assert read_run_info(run)["total_rows"] == fed.num_rows


def test_a_topic_that_others_write_to_is_read_as_it_comes_and_stops_cleanly(spark, kafka_broker, tmp_path):
    from lmstream_kit.feed.kafka import TopicRef, TopicWriter, create_topic
    from lmstream_kit.workloads import load_workload

    ref = TopicRef(kafka_broker.bootstrap, "live-others")
    create_topic(ref, 2)
    workload = load_workload("PASSTHROUGH")
    import numpy as np

    writer = TopicWriter(ref)
    sent = [workload.make_rows(second, 500, np.random.default_rng([1, second])) for second in range(6)]
    run = tmp_path / "others"
    s = LiveStream("PASSTHROUGH", policy="lmstream", traffic=None, run_dir=run, spark=spark, kafka=ref.uri,
                   speedup=5)
    s.start()
    try:
        for table in sent:
            writer.write(table)
            time.sleep(0.2)
        s.wait(rows=3000, timeout=180)
        assert not s.feed_finished()  # a topic others write to has no end
    finally:
        s.stop()
    assert sorted_rows(output_table(run)) == sorted_rows(pa.concat_tables(sent))


def test_a_bad_kafka_uri_or_a_topic_and_a_directory_are_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^a Kafka feed is kafka://HOST:PORT/TOPIC\[\?format=json\|avro\|avro-confluent\], "
                                          r"got 'kafka://nowhere'$"):
        LiveStream("PASSTHROUGH", kafka="kafka://nowhere", run_dir=tmp_path / "a")
    with pytest.raises(ConfigError, match=r"^a stream reads either a Kafka topic or an input directory, not both$"):
        LiveStream("PASSTHROUGH", kafka="kafka://127.0.0.1:9/t", input_dir=tmp_path, run_dir=tmp_path / "b")
    with pytest.raises(ConfigError, match=r"^traffic=None \(no generator\) is for a Kafka topic"):
        LiveStream("PASSTHROUGH", traffic=None, run_dir=tmp_path / "c")
    with pytest.raises(ConfigError, match=r"^fail_on_data_loss must be True or False, got 'no'$"):
        LiveStream("PASSTHROUGH", kafka="kafka://127.0.0.1:9/t", fail_on_data_loss="no", run_dir=tmp_path / "d")


def test_run_feed_kafka_sends_the_traffic_through_a_topic_and_a_dead_broker_is_one_line(kafka_broker, tmp_path):
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "cli"
    uri = f"kafka://{kafka_broker.bootstrap}/cli-feed"
    proc = subprocess.run([sys.executable, "-m", "lmstream_kit", "run", "--workload", "PASSTHROUGH", "--feed", uri,
                           "--kafka-partitions", "2", "--duration", "20", "--speedup", "10", "--rate", "300",
                           "--out", str(out)], capture_output=True, text=True, cwd=repo, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"through {uri}" in proc.stdout and "Traceback" not in proc.stderr
    spool = Spool(out / "spool", create=False)
    assert spool.kafka["topic"] == "cli-feed" and spool.total_rows() > 3000
    assert output_table(out).num_rows == spool.total_rows()  # drained on stop: every record once

    dead = subprocess.run([sys.executable, "-m", "lmstream_kit", "run", "--workload", "PASSTHROUGH", "--feed",
                           "kafka://127.0.0.1:9/t", "--out", str(tmp_path / "dead")],
                          capture_output=True, text=True, cwd=repo, timeout=120)
    assert dead.returncode == 2 and "Traceback" not in dead.stderr, dead.stderr[-2000:]
    assert dead.stderr.strip().splitlines()[-1].startswith("error: cannot reach Kafka at 127.0.0.1:9 (is a broker")


def test_a_broker_restart_stalls_the_stream_and_it_goes_on_with_nothing_lost(spark, tmp_path):
    from lmstream_kit.kafka import KafkaBroker

    broker = KafkaBroker(data_dir=tmp_path / "broker").start()  # its own: the session's broker stays up
    run = tmp_path / "restart"
    s = LiveStream("PASSTHROUGH", policy="lmstream", traffic="constant", rate=300, speedup=5, duration_s=200,
                   run_dir=run, spark=spark, kafka=f"kafka://{broker.bootstrap}/restarted", kafka_partitions=2)
    try:
        s.start()
        s.wait(batches=3, timeout=120)
        broker.stop()
        deadline = time.monotonic() + 60
        while s.feed.status is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert s.feed.status is not None, "the indexer says Kafka is away"  # the stream itself runs on
        time.sleep(2)
        stalled = len([r for r in s.records if r["rows"]])
        assert s.is_active
        broker.start()  # the same directory and port: its topics and offsets are kept
        s.wait(batches=stalled + 3, timeout=180)
        assert s.feed.status is None
    finally:
        s.stop()
        broker.stop()
    # the stop drained what the topic held, each record once (read back from the restarted broker's copy)
    broker.start()
    try:
        fed = Spool(run / "spool", create=False).read_table()
        assert sorted_rows(output_table(run)) == sorted_rows(fed) and fed.num_rows == s.feed.sink.rows
    finally:
        broker.stop()


def test_a_bench_on_kafka_runs_each_cell_through_a_topic_of_its_own(spark, kafka_broker, tmp_path):
    from lmstream_kit.bench import BenchConfig, run_bench

    cfg = BenchConfig(queries="PASSTHROUGH", policies="lmstream,asap", traffic="constant", duration_s=30, speedup=10,
                      rate=300, warmup_s=0, output="parquet", feed=f"kafka://{kafka_broker.bootstrap}/bench")
    result = run_bench(cfg, tmp_path / "bench", spark=spark)
    assert list(result.results["feed"]) == ["kafka", "kafka"] and result.meta["feed"] == cfg.feed
    topics = []
    for row in result.results.itertuples():
        spool = Spool(tmp_path / "bench" / row.run_dir / "spool", create=False)
        topics.append(spool.kafka["topic"])
        fed = spool.read_table()  # what the cell's generator wrote to its topic, read back by offset
        assert fed.num_rows == row.rows == 30 * 300
        assert sorted_rows(output_table(tmp_path / "bench" / row.run_dir)) == sorted_rows(fed)
    assert len(set(topics)) == 2 and all(t.startswith("bench-PASSTHROUGH-") for t in topics)


class HoldAdmission(BatchController):
    """Holds admission until ``release`` is set; ``asked`` is set once Spark asked while data waited."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.asked = threading.Event()
        self.host = None

    def plugged(self, host) -> None:
        self.host = host

    def admission_held(self) -> str | None:
        if self.release.is_set():
            return None
        if self.host is not None and self.host.spool.total_rows() > 0:
            self.asked.set()
        return "held by the test"


def test_a_batch_whose_records_kafka_deleted_goes_on_without_them_when_asked(spark, kafka_broker, tmp_path):
    """The records are indexed, then deleted while a plugged-in controller holds admission, so no
    batch can read them first (on a loaded machine a trigger once came between the two)."""
    import numpy as np
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from lmstream_kit.feed.kafka import TopicRef, TopicWriter, create_topic
    from lmstream_kit.workloads import load_workload

    ref = TopicRef(kafka_broker.bootstrap, "live-deleted")
    create_topic(ref, 2)
    workload = load_workload("PASSTHROUGH")
    sent = workload.make_rows(0, 400, np.random.default_rng(4))
    run = tmp_path / "deleted"
    hold = HoldAdmission()
    s = LiveStream("PASSTHROUGH", policy="fixed", trigger_s=10, traffic=None, run_dir=run, spark=spark,
                   kafka=ref.uri, speedup=5, fail_on_data_loss=False, controllers=(hold,))
    s.start()
    try:
        deadline = time.monotonic() + 120
        while s.feed is None and time.monotonic() < deadline:  # the indexer starts after the first batch
            time.sleep(0.05)
        TopicWriter(ref).write(sent)  # row i to partition i % 2, at offset i // 2
        while s.spool.total_rows() < 400 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hold.asked.wait(30), "Spark never asked for a batch while the records were held"
        assert not [r for r in s.records if r["rows"] > 0]
        admin = AdminClient({"bootstrap.servers": ref.bootstrap})
        for future in admin.delete_records([TopicPartition(ref.topic, 0, 100)], request_timeout=30).values():
            future.result(30)  # what retention does to old segments, now
        hold.release.set()
        s.wait(rows=400, timeout=120)  # the batch's rows: what the index holds
    finally:
        s.stop()
    kept = sent.take(pa.array([i for i in range(400) if i % 2 or i >= 200]))
    assert sorted_rows(output_table(run)) == sorted_rows(kept)
    dead = (run / "dead_letter.jsonl").read_text()
    assert "records 0-99 were gone from Kafka before they were read (100 lost)" in dead
