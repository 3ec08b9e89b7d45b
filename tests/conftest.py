"""Shared fixtures: one real local SparkSession for the integration tests, and the bench command up to its bench."""

from __future__ import annotations

import os
import shutil

import pytest

# Every Spark driver of the suite (this process's, notebooks' kernels', the CLI's, benches') compiles
# with Java's quick compiler only: they live a minute or two, and C2's compiling was 40% of a
# notebook's driver CPU (39 -> 22-26 CPU-s); a caller's own setting wins
os.environ.setdefault("LMSTREAM_DRIVER_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")


@pytest.fixture(scope="session")
def spark():
    """A real local[2] SparkSession shared by the Spark tests (never mocked)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("Java is required for the Spark integration tests")
    from lmstream_kit.engine.session import build_session

    session = build_session(master="local[2]", app_name="lmstream_kit-tests")
    yield session
    session.stop()


def need_maven(jar_set: str) -> None:
    """Skip a Kafka test where its jars are not fetched and Maven is missing, unless CI requires it
    (``LMSTREAM_REQUIRE_KAFKA=1``: then it fails, naming what is missing)."""
    from lmstream_kit.exceptions import KitError
    from lmstream_kit.jars import resolve

    if shutil.which("mvn") is not None:
        return
    try:
        resolve(jar_set, offline=True)
    except KitError:
        reason = f"the {jar_set} jars are not fetched and Maven (mvn) is missing: apt-get install maven"
        if os.environ.get("LMSTREAM_REQUIRE_KAFKA") == "1":
            pytest.fail(f"LMSTREAM_REQUIRE_KAFKA=1 but {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """One real single-node Kafka broker (KRaft) for the test session, from its Maven jars."""
    from lmstream_kit.kafka import KafkaBroker

    need_maven("kafka")

    broker = KafkaBroker(data_dir=tmp_path_factory.mktemp("kafka")).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def spark_kafka(spark):
    """The shared session with Spark's Kafka connector (``format("kafka")``) added to its class path."""
    from lmstream_kit.engine.session import add_jars
    from lmstream_kit.jars import resolve, spark_kafka

    need_maven("spark-kafka")

    add_jars(spark, resolve(spark_kafka()))
    return spark


@pytest.fixture
def bench_cli(monkeypatch):
    """``bench_cli(*args)``: ``lmstream-kit bench ARGS`` up to the bench, which does not run; returns click's
    result and ``{"cfg": the BenchConfig, **run_bench's keyword arguments}``.  The command must reach the
    bench, unless ``reach=False`` (a bad option: the dict is empty)."""
    from click.testing import CliRunner

    from lmstream_kit.cli import cli

    class Reached(Exception):
        pass

    def invoke(*args: str, reach: bool = True):
        seen: dict = {}

        def fake_run_bench(cfg, out, **kwargs):
            seen.update(cfg=cfg, **kwargs)
            raise Reached

        monkeypatch.setattr("lmstream_kit.bench.run_bench", fake_run_bench)
        result = CliRunner().invoke(cli, ["bench", *args])
        if reach:
            assert isinstance(result.exception, Reached), result.output
        return result, seen

    return invoke
