"""The layering of docs/architecture.md, enforced: who may import Spark, the engine, the run loop."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPARK = ("pyspark", "py4j")

#: decision logic and plug-ins: plain Python, tested without Spark
PURE = {
    "lmstream_kit.admission", "lmstream_kit.controller", "lmstream_kit.devices", "lmstream_kit.exceptions",
    "lmstream_kit.mapper", "lmstream_kit.metrics", "lmstream_kit.placement", "lmstream_kit.policies",
    "lmstream_kit.protocol", "lmstream_kit.rapids", "lmstream_kit.record", "lmstream_kit.registry",
    "lmstream_kit.sim", "lmstream_kit.stats", "lmstream_kit.optimizer", "lmstream_kit.optimizer.fit",
    "lmstream_kit.optimizer.runner", "lmstream_kit.runloop", "lmstream_kit.units", "lmstream_kit.stream_config",
    "lmstream_kit.progress", "lmstream_kit.service_model", "lmstream_kit.results",
    "lmstream_kit.flumina", "lmstream_kit.flumina.spec", "lmstream_kit.flumina.plan", "lmstream_kit.flumina.run",
    "lmstream_kit.flumina.streams", "lmstream_kit.flumina.examples", "lmstream_kit.flumina.speculate",
    "lmstream_kit.flumina.batches", "lmstream_kit.flumina.tables",
    "lmstream_kit.tune", "lmstream_kit.tune.operators", "lmstream_kit.tune.knobs", "lmstream_kit.tune.ds2",
    "lmstream_kit.tune.predictor", "lmstream_kit.tune.tuner", "lmstream_kit.tune.history", "lmstream_kit.tune.pretrain", "lmstream_kit.tune.compare",
    "lmstream_kit.tune.stagesim", "lmstream_kit.bench.resume", "lmstream_kit.retention", "lmstream_kit.signals", "lmstream_kit.diskguard",
}
#: modules that may use the engine adapter layer
ENGINE_USERS = {"lmstream_kit.live", "lmstream_kit.bench.run", "lmstream_kit.cli", "lmstream_kit.attached",
                "lmstream_kit",  # the package re-exports SparkEngine lazily
                # the Flumina workload's batch program, run by the engine inside foreachBatch, runs its
                # passes with engine.flumina (a query builder of its own, imported inside the function)
                "lmstream_kit.workloads.flumina"}
#: the applications on top: nothing below imports them
APPS = ("lmstream_kit.live", "lmstream_kit.attached", "lmstream_kit.bench", "lmstream_kit.cli",
        "lmstream_kit.report", "widgets")


def _modules() -> dict[str, Path]:
    out = {}
    for top in ("lmstream_kit", "widgets"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, bool]]:
    """``(imported module, at module level)`` for every import of ``name``, relative ones resolved."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, id(node) in top_level))
            found += [(f"{target}.{alias.name}", id(node) in top_level) for alias in node.names]
    return found


def _is(target: str, prefix: str) -> bool:
    return target == prefix or target.startswith(prefix + ".")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_only_the_engine_layer_imports_spark(name):
    """pyspark/py4j: the engine adapter layer, and the workloads' query builders (inside functions)."""
    if _is(name, "lmstream_kit.engine"):
        return
    for target, top_level in _imports(name, MODULES[name]):
        if any(_is(target, s) for s in SPARK):
            assert _is(name, "lmstream_kit.workloads") and not top_level, (
                f"{name} imports {target}: only lmstream_kit.engine touches Spark "
                "(workloads may inside their query builders)"
            )


@pytest.mark.parametrize("name", sorted(MODULES))
def test_only_the_run_loop_bench_and_cli_use_the_engine(name):
    if _is(name, "lmstream_kit.engine") or name in ENGINE_USERS:
        return
    engine = [t for t, _ in _imports(name, MODULES[name]) if _is(t, "lmstream_kit.engine")]
    assert not engine, f"{name} imports {engine[0]}: reach Spark through the run loop or SparkEngine"


@pytest.mark.parametrize("name", sorted(PURE))
def test_decision_logic_imports_no_application_layer(name):
    for target, _ in _imports(name, MODULES[name]):
        assert not any(_is(target, app) for app in APPS), f"{name} imports {target}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _is(n, "widgets")))
def test_widgets_read_records_and_controls_not_the_run_loop(name):
    for target, _ in _imports(name, MODULES[name]):
        assert not _is(target, "lmstream_kit.live") and not _is(target, "lmstream_kit.engine"), (
            f"{name} imports {target}"
        )


def test_the_rules_see_every_import_kind():
    """The checker itself: a relative import, a nested import and a from-import are all found."""
    found = dict(_imports("lmstream_kit.placement", MODULES["lmstream_kit.placement"]))
    assert found.get("lmstream_kit.protocol") is True
    assert "lmstream_kit.twin" in found and found["lmstream_kit.twin"] is False


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebooks_import_neither_spark_nor_the_engine_layer(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    tree = ast.parse("\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))))
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for target in names:
            assert not any(_is(target, s) for s in SPARK), f"{notebook.name} imports {target}"
            assert not _is(target, "lmstream_kit.engine"), (
                f"{notebook.name} imports {target}: notebooks reach Spark through lmstream_kit.SparkEngine"
            )
