"""Shared fixtures: one real local SparkSession for the integration tests."""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(scope="session")
def spark():
    """A real local[2] SparkSession shared by the Spark tests (never mocked)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("Java is required for the Spark integration tests")
    from lmstream_kit.engine.session import build_session

    session = build_session(
        master="local[2]",
        app_name="lmstream_kit-tests",
        conf={
            # faster JVM start for short tests (benchmarks keep the default JIT)
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        },
    )
    yield session
    session.stop()
