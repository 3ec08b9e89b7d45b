"""The examples in the docstrings run, so they stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "lmstream_kit.stream_config",
    "lmstream_kit.retention",
    "lmstream_kit.runloop",
    "lmstream_kit.signals",
    "lmstream_kit.runinfo",
    "lmstream_kit.diskguard",
    "lmstream_kit.plots.frames",
    "lmstream_kit.units",
    "lmstream_kit.stats",
    "lmstream_kit.service_model",
    "lmstream_kit.results",
    "lmstream_kit.record",
    "lmstream_kit.protocol",
    "lmstream_kit.exceptions",
    "lmstream_kit.admission",
    "lmstream_kit.bench",
    "lmstream_kit.bench.capacity",
    "lmstream_kit.bench.resume",
    "lmstream_kit.bench.watchdog",
    "lmstream_kit.cpu",
    "lmstream_kit.controller",
    "lmstream_kit.devices",
    "lmstream_kit.engine.plan",
    "lmstream_kit.engine.attach",
    "lmstream_kit.attached",
    "lmstream_kit.progress",
    "lmstream_kit.mapper",
    "lmstream_kit.feed.ingest",
    "lmstream_kit.feed.kafka",
    "lmstream_kit.feed.values",
    "lmstream_kit.bench.config",
    "lmstream_kit.jars",
    "lmstream_kit.kafka.broker",
    "lmstream_kit.feed.parse",
    "lmstream_kit.feed.spool",
    "lmstream_kit.feed.validate",
    "lmstream_kit.feed.watch",
    "lmstream_kit.metrics",
    "lmstream_kit.optimizer",
    "lmstream_kit.optimizer.fit",
    "lmstream_kit.optimizer.runner",
    "lmstream_kit.plots.batches",
    "lmstream_kit.plots.bench",
    "lmstream_kit.plots.windows",
    "lmstream_kit.plots.plan",
    "lmstream_kit.plots.records",
    "lmstream_kit.rapids",
    "lmstream_kit.registry",
    "lmstream_kit.report",
    "lmstream_kit.report.common",
    "lmstream_kit.report.figures",
    "lmstream_kit.report.formatting",
    "lmstream_kit.report.paper",
    "lmstream_kit.report.render",
    "lmstream_kit.report.tables",
    "lmstream_kit.sim",
    "lmstream_kit.twin",
    "lmstream_kit.workloads.base",
    "lmstream_kit.workloads.custom",
    "lmstream_kit.workloads.loader",
    "lmstream_kit.flumina.spec",
    "lmstream_kit.flumina.plan",
    "lmstream_kit.flumina.run",
    "lmstream_kit.flumina.streams",
    "lmstream_kit.flumina.examples",
    "lmstream_kit.flumina.batches",
    "lmstream_kit.plots.flumina",
    "lmstream_kit.workloads.cluster_monitoring",
    "lmstream_kit.workloads.hashing",
    "widgets",
    "widgets.figures",
    "widgets.dashboard",
    "widgets.status",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
