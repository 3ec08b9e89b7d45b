"""The kit's Kafka broker (lmstream_kit.kafka) and the Maven-resolved jars it runs on (lmstream_kit.jars).

The pure tests check the jar sets and their errors; the broker tests start a real single-node KRaft
broker from jars fetched from Maven Central (once, into the cache outside git), produce to it and
consume from it with a real client, restart it on the same directory, and stop it by pid."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from lmstream_kit.exceptions import ConfigError, KitError
from lmstream_kit.jars import JarSet, resolve

REPO = Path(__file__).resolve().parents[1]


def test_a_jar_set_is_a_project_file_of_its_coordinates_cached_under_a_hash_of_them(tmp_path, monkeypatch):
    jars = JarSet("demo", ("org.example:lib:1.0", "org.example:other:2.0"))
    pom = jars.pom()
    assert "<artifactId>lib</artifactId><version>1.0</version>" in pom and "<artifactId>jars-demo</artifactId>" in pom
    assert jars.key().startswith("demo-") and jars.key() != JarSet("demo", ("org.example:lib:1.1",)).key()
    monkeypatch.setenv("LMSTREAM_JARS", str(tmp_path))
    with pytest.raises(KitError, match=r"^the demo jars are not fetched yet: run `lmstream-kit jars fetch demo`$"):
        resolve(jars, offline=True)
    done = tmp_path / jars.key()
    done.mkdir()
    (done / "lib-1.0.jar").write_bytes(b"")
    (done / ".complete").write_text("")
    assert resolve(jars, offline=True) == [done / "lib-1.0.jar"]  # cached: no Maven
    with pytest.raises(ConfigError, match=r"^unknown jar set 'kafak'; known: kafka"):
        resolve("kafak")


def test_without_maven_the_fetch_fails_in_one_line_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LMSTREAM_JARS", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(KitError, match=r"^Maven \(mvn\) is needed to fetch the kafka jars from Maven Central: "
                                      r"apt-get install maven$"):
        resolve("kafka")


@pytest.fixture(scope="module")
def kafka_jars():
    """The broker's jars, fetched once (CI fetches them before the tests: `lmstream-kit jars fetch`)."""
    from conftest import need_maven

    need_maven("kafka")
    return resolve("kafka")


@pytest.mark.kafka
def test_the_broker_takes_records_and_gives_them_back_across_a_restart_on_its_directory(kafka_jars, tmp_path):
    from confluent_kafka import Consumer, Producer

    from lmstream_kit.kafka import KafkaBroker

    assert any(p.name.startswith("kafka_2.13-") for p in kafka_jars)
    data = tmp_path / "broker"
    with KafkaBroker(data_dir=data) as broker:
        # idempotent: a record retried (the topic is created by the first one) keeps its place, as the kit's own
        # producer does (feed/kafka.py); a plain producer may send it after the others
        producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        for i in range(100):
            producer.produce("events", key=str(i).encode(), value=f"v{i}".encode())
        assert producer.flush(30) == 0
        port = broker.port
    assert not (data / "broker.pid").exists() and data.is_dir()  # stopped, its directory kept

    with KafkaBroker(data_dir=data) as broker:  # the same storage: the topic and its records are there
        assert broker.port == port
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "test", "auto.offset.reset": "earliest"})
        consumer.subscribe(["events"])
        got, deadline = [], time.monotonic() + 60
        while len(got) < 100 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
        consumer.close()
    assert got == [f"v{i}" for i in range(100)]
    with pytest.raises(ConfigError, match=rf"belongs to a broker on port {port}, not 1$"):
        KafkaBroker(port=1, data_dir=data).start()
    with pytest.raises(ConfigError, match=r"^port must be an integer between 0 \(a free one\) and 65535, got -1$"):
        KafkaBroker(port=-1)


@pytest.mark.kafka
def test_lmstream_kit_kafka_serves_until_interrupted_and_stops_its_broker(kafka_jars, tmp_path):
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "lmstream_kit", "kafka", "--port", "0", "--dir", str(tmp_path / "b")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        line = ""
        deadline = time.monotonic() + 240  # a loaded CI machine starts two JVMs slowly (format, then the broker)
        while "broker: 127.0.0.1:" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, proc.stderr.read()[-2000:]
        assert "broker: 127.0.0.1:" in line, "the broker did not start within 240 s"
        pid = int((tmp_path / "b" / "broker.pid").read_text())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "stopping" in out and not (tmp_path / "b" / "broker.pid").exists()
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(pid, 0)


def test_a_bad_port_is_refused_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lmstream_kit", "kafka", "--port", "70000"], capture_output=True,
                          text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == \
        "error: port must be an integer between 0 (a free one) and 65535, got 70000"


def test_an_unknown_jar_set_is_refused_before_maven_runs():
    proc = subprocess.run([sys.executable, "-m", "lmstream_kit", "jars", "fetch", "kafka", "kafak"], capture_output=True,
                          text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "error: unknown jar set 'kafak'; known: kafka, spark-kafka"


@pytest.mark.kafka
def test_ctrl_c_while_the_broker_starts_stops_its_process_not_leaves_it_behind(kafka_jars, tmp_path, monkeypatch):
    import lmstream_kit.kafka.broker as B

    calls = []

    def port_open(port):  # the first call asks whether the port is taken; then Ctrl-C during the wait
        calls.append(port)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return False

    monkeypatch.setattr(B, "_port_open", port_open)
    broker = B.KafkaBroker(data_dir=tmp_path / "interrupted")
    with pytest.raises(KeyboardInterrupt):
        broker.start()
    assert broker.proc is None and not (tmp_path / "interrupted" / "broker.pid").exists()
    import psutil

    java = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path / "interrupted") in " ".join(p.info["cmdline"] or [])]
    assert java == [], [p.pid for p in java]
