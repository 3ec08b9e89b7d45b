"""RAPIDS confs from device plans: the shipped key list, the rules, the per-batch diff (no Spark)."""

from __future__ import annotations

import csv
import doctest
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lmstream_kit import mapper, rapids
from lmstream_kit.exceptions import ConfigError
from lmstream_kit.mapper import DeviceMapper, DevicePlan, Operator, OperatorPlacement, PlanDag
from lmstream_kit.rapids import (
    EXEC_KEY_PREFIX,
    SQL_ENABLED_KEY,
    Conflict,
    conf_diff,
    exec_key,
    exec_keys,
    exec_table,
    plugin_listed,
    rapids_confs,
)

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "lmstream_kit" / "resources" / rapids.KEY_FILE
DATA_COPY = ROOT / "data" / "rapids" / rapids.KEY_FILE

MAPPER_EXECS = sorted(mapper._EXEC_CLASSES)
#: execs with no Table II class that plans do contain
UNCLASSIFIED = [
    "WholeStageCodegenExec", "ArrowEvalPythonExec", "BatchEvalPythonExec", "MapInArrowExec",
    "StateStoreSaveExec", "StateStoreRestoreExec", "StreamingSymmetricHashJoinExec",
    "EventTimeWatermarkExec", "UnionExec", "CoalesceExec", "AQEShuffleReadExec", "ReusedExchangeExec",
    "MicroBatchScanExec", "SomethingUnknownExec",
]
IP = mapper.DEFAULT_INFLECTION_POINT
SIZES = [IP * f for f in (1e-4, 0.01, 0.1, 0.5, 0.81, 0.9, 1.0, 1.1, 1.21, 2, 5, 30, 100, 1e4)]


def _placement(op_id, name, device, op_class="Filter"):
    return OperatorPlacement(op_id, name, op_class, device, 1.0, 1.0, "test")


def _plan(*placements):
    return DevicePlan(tuple(placements), inflection_point=1.0, partition_bytes=1.0)


def _random_dag(rng: random.Random, names: list[str], n_ops: int) -> PlanDag:
    """A random tree (root 0) whose nodes use ``names``; children always have larger ids."""
    children: dict[int, list[int]] = {i: [] for i in range(n_ops)}
    for child in range(1, n_ops):
        children[rng.randrange(child)].append(child)
    return PlanDag(tuple(Operator(i, rng.choice(names), tuple(children[i])) for i in range(n_ops)))


# -- the shipped list ------------------------------------------------------------------------------

def test_packaged_list_is_identical_to_the_data_copy():
    assert SHIPPED.read_bytes() == DATA_COPY.read_bytes()


def test_key_list_is_well_formed_and_complete():
    lines = SHIPPED.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#") and "v26.06.0" in lines[0] and "411/supportedExecs.csv" in lines[0]
    rows = list(csv.DictReader(lines[1:]))
    assert [*rows[0]] == ["key", "exec", "default_enabled"]
    assert len(rows) == 53
    names = [r["exec"] for r in rows]
    assert names == sorted(set(names))
    for r in rows:
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]*Exec(V1)?", r["exec"]), r
        assert r["key"] == EXEC_KEY_PREFIX + r["exec"]
        assert r["default_enabled"] in ("true", "false")
    disabled = {r["exec"] for r in rows if r["default_enabled"] == "false"}
    assert disabled == {"ArrowWindowPythonExec", "CollectLimitExec", "FlatMapCoGroupsInPandasExec",
                        "TableCacheQueryStageExec", "WriteDeltaExec"}
    assert exec_keys() == {r["key"] for r in rows}
    assert {n: e.default_enabled for n, e in exec_table().items()} == {
        r["exec"]: r["default_enabled"] == "true" for r in rows}


def test_list_has_the_keys_the_mappers_execs_need():
    needed = [
        "HashAggregateExec", "ObjectHashAggregateExec", "SortAggregateExec", "FilterExec",
        "ShuffleExchangeExec", "BroadcastExchangeExec", "ProjectExec", "SortMergeJoinExec",
        "BroadcastHashJoinExec", "ShuffledHashJoinExec", "BroadcastNestedLoopJoinExec",
        "CartesianProductExec", "ExpandExec", "FileSourceScanExec", "BatchScanExec",
        "InMemoryTableScanExec", "SortExec",
    ]
    assert {EXEC_KEY_PREFIX + n for n in needed} <= exec_keys()
    # RAPIDS has no rule for these scans (incl. a streaming source's micro-batch scan): they stay
    # on the CPU whatever the plan says
    assert {n for n in MAPPER_EXECS if exec_key(n) is None} == {
        "LocalTableScanExec", "RDDScanExec", "MicroBatchScanExec", "ContinuousScanExec"}


def test_spark_3_names_are_not_in_the_spark_4_1_list():
    # the 3.3.0-generated docs list these; Spark 4.1 renamed them
    for old, new in [("AggregateInPandasExec", "ArrowAggregatePythonExec"),
                     ("WindowInPandasExec", "ArrowWindowPythonExec"),
                     ("PythonMapInArrowExec", "MapInArrowExec")]:
        assert exec_key(old) is None
        assert exec_key(new) == EXEC_KEY_PREFIX + new


def test_parse_rejects_malformed_lists():
    good = "# c\nkey,exec,default_enabled\nspark.rapids.sql.exec.FilterExec,FilterExec,true\n"
    assert set(rapids._parse(good)) == {"FilterExec"}
    bad = [
        "key,exec\nspark.rapids.sql.exec.FilterExec,FilterExec\n",
        "key,exec,default_enabled\nspark.rapids.sql.exec.Filter,FilterExec,true\n",
        "key,exec,default_enabled\nspark.rapids.sql.exec.FilterExec,FilterExec,yes\n",
        "key,exec,default_enabled\n" + "spark.rapids.sql.exec.FilterExec,FilterExec,true\n" * 2,
        "# only a comment\nkey,exec,default_enabled\n",
    ]
    for text in bad:
        with pytest.raises(ConfigError):
            rapids._parse(text)


def test_exec_table_is_a_copy():
    exec_table().clear()
    assert len(exec_table()) == 53


def test_plugin_listed_parses_spark_plugins():
    assert plugin_listed("com.nvidia.spark.SQLPlugin")
    assert plugin_listed(" org.example.A ,com.nvidia.spark.SQLPlugin,org.example.B")
    assert not plugin_listed("com.nvidia.spark.SQLPluginX")
    assert not plugin_listed("")
    assert not plugin_listed(None)


# -- rapids_confs over mapper plans ----------------------------------------------------------------

@pytest.mark.parametrize("pins", [None, {"Sort": "GPU"}, {"Aggregation": "CPU", "Scan": "GPU"},
                                  {c: "GPU" for c in mapper.BASE_COSTS},
                                  {c: "CPU" for c in mapper.BASE_COSTS}])
def test_every_emitted_key_is_in_the_shipped_list(pins):
    rng = random.Random(20260614)
    names = MAPPER_EXECS + UNCLASSIFIED + ["HashAggregate", "Filter", "Sort"]  # suffix-less too
    known = exec_keys() | {SQL_ENABLED_KEY}
    dev_mapper = DeviceMapper(pins=pins)
    emitted: set[str] = set()
    n_plans = 0
    for n_ops in (1, 2, 3, 5, 8, 13, 40):
        for _ in range(6):
            dag = _random_dag(rng, names, n_ops)
            for size in SIZES:
                plan = dev_mapper.map(dag, partition_bytes=size)
                out = rapids_confs(plan)
                n_plans += 1
                assert set(out.confs) <= known
                assert out.confs[SQL_ENABLED_KEY] in ("true", "false")
                assert set(out.confs.values()) <= {"true", "false"}
                # every exec of the plan is either keyed or skipped, never both
                keyed = {k[len(EXEC_KEY_PREFIX):] for k in out.confs if k != SQL_ENABLED_KEY}
                canon = {rapids._canonical(e.exec_name) for e in plan.entries}
                assert keyed | set(out.skipped) == canon and not keyed & set(out.skipped)
                emitted |= set(out.confs)
    assert n_plans == 7 * 6 * len(SIZES)
    # every mapper exec that RAPIDS knows was keyed at least once
    assert {exec_key(n) for n in MAPPER_EXECS if exec_key(n)} <= emitted


def test_large_partitions_send_every_keyed_exec_to_the_gpu():
    dag = PlanDag((Operator(0, "ProjectExec", (1,)), Operator(1, "HashAggregateExec", (2,)),
                   Operator(2, "ShuffleExchangeExec", (3,)), Operator(3, "HashAggregateExec", (4,)),
                   Operator(4, "FilterExec", (5,)), Operator(5, "BatchScanExec", ())))
    out = rapids_confs(DeviceMapper().map(dag, partition_bytes=1000 * IP))
    assert out.confs == {
        SQL_ENABLED_KEY: "true",
        "spark.rapids.sql.exec.ProjectExec": "true",
        "spark.rapids.sql.exec.HashAggregateExec": "true",
        "spark.rapids.sql.exec.ShuffleExchangeExec": "true",
        "spark.rapids.sql.exec.FilterExec": "true",
        "spark.rapids.sql.exec.BatchScanExec": "true",
    }
    assert out.enabled and out.skipped == {} and out.conflicts == {}
    small = rapids_confs(DeviceMapper().map(dag, partition_bytes=IP / 1000))
    assert not small.enabled
    assert set(small.confs) == set(out.confs)
    assert set(small.confs.values()) == {"false"}


def test_suffixless_names_get_the_exec_key():
    plan = _plan(_placement(0, "HashAggregate", "GPU", "Aggregation"), _placement(1, "Filter", "GPU"))
    assert rapids_confs(plan).confs == {
        SQL_ENABLED_KEY: "true",
        "spark.rapids.sql.exec.HashAggregateExec": "true",
        "spark.rapids.sql.exec.FilterExec": "true",
    }


# -- the enabled switch ----------------------------------------------------------------------------

def test_enabled_when_a_keyed_exec_is_on_the_gpu():
    plan = _plan(_placement(0, "FilterExec", "CPU"), _placement(1, "SortExec", "GPU", "Sort"))
    assert rapids_confs(plan).confs[SQL_ENABLED_KEY] == "true"


def test_disabled_when_everything_is_on_the_cpu():
    plan = _plan(_placement(0, "FilterExec", "CPU"), _placement(1, "SortExec", "CPU", "Sort"))
    out = rapids_confs(plan)
    assert out.confs[SQL_ENABLED_KEY] == "false" and not out.enabled


def test_disabled_when_the_only_gpu_operator_has_no_rapids_key():
    plan = _plan(_placement(0, "FilterExec", "CPU"), _placement(1, "LocalTableScanExec", "GPU", "Scan"))
    out = rapids_confs(plan)
    assert out.confs == {SQL_ENABLED_KEY: "false", "spark.rapids.sql.exec.FilterExec": "false"}
    assert out.skipped == {"LocalTableScanExec": "no RAPIDS exec key; planned GPU (test)"}


def test_disabled_when_the_only_gpu_operator_loses_a_conflict():
    plan = _plan(_placement(0, "FilterExec", "GPU"), _placement(1, "FilterExec", "CPU"))
    out = rapids_confs(plan)
    assert out.confs == {SQL_ENABLED_KEY: "false", "spark.rapids.sql.exec.FilterExec": "false"}


# -- the conflict rule -----------------------------------------------------------------------------

def test_exec_type_on_both_devices_goes_to_the_cpu_and_is_listed():
    plan = _plan(
        _placement(0, "ProjectExec", "GPU", "Projection"),
        _placement(1, "FilterExec", "GPU"),
        _placement(2, "FilterExec", "CPU"),
        _placement(3, "Filter", "GPU"),  # same type, suffix-less spelling
        _placement(4, "ProjectExec", "GPU", "Projection"),
    )
    out = rapids_confs(plan)
    assert out.confs == {
        SQL_ENABLED_KEY: "true",
        "spark.rapids.sql.exec.ProjectExec": "true",
        "spark.rapids.sql.exec.FilterExec": "false",
    }
    assert out.conflicts == {"FilterExec": Conflict("FilterExec", gpu_ops=(1, 3), cpu_ops=(2,))}
    assert out.to_dict()["conflicts"] == {"FilterExec": {"gpu_ops": [1, 3], "cpu_ops": [2]}}


def test_mapper_can_split_one_exec_type_and_the_rule_resolves_it():
    # a Filter leaf pays the leaf transition, a Filter above a GPU Sort does not: near r = m^2
    # the mapper puts the two Filters on different devices
    dag = PlanDag((Operator(0, "FilterExec", (1,)), Operator(1, "SortExec", (2,)),
                   Operator(2, "FilterExec", ())))
    split = None
    for size in SIZES + [IP * x / 100 for x in range(100, 400)]:
        plan = DeviceMapper().map(dag, partition_bytes=size)
        filters = {e.id: e.device for e in plan.entries if e.exec_name == "FilterExec"}
        if len(set(filters.values())) == 2:
            split = plan
            break
    assert split is not None, "expected a partition size at which the two Filters disagree"
    out = rapids_confs(split)
    assert out.confs["spark.rapids.sql.exec.FilterExec"] == "false"
    assert set(out.conflicts) == {"FilterExec"}
    c = out.conflicts["FilterExec"]
    assert {split.device_of(i) for i in c.gpu_ops} == {"GPU"}
    assert {split.device_of(i) for i in c.cpu_ops} == {"CPU"}


# -- unclassified execs ----------------------------------------------------------------------------

def test_unclassified_execs_with_a_key_follow_the_plan_by_default():
    plan = DeviceMapper().map(
        PlanDag((Operator(0, "ArrowEvalPythonExec", (1,)), Operator(1, "StateStoreSaveExec", (2,)),
                 Operator(2, "SortExec", ()))),
        partition_bytes=1000 * IP,
    )
    out = rapids_confs(plan)
    assert out.confs == {
        SQL_ENABLED_KEY: "true",
        "spark.rapids.sql.exec.ArrowEvalPythonExec": "false",
        "spark.rapids.sql.exec.SortExec": "true",
    }
    assert out.skipped == {"StateStoreSaveExec": "no RAPIDS exec key; planned CPU (streaming state exec)"}

    left = rapids_confs(plan, leave_unclassified=True)
    assert left.confs == {SQL_ENABLED_KEY: "true", "spark.rapids.sql.exec.SortExec": "true"}
    assert left.skipped == {
        "ArrowEvalPythonExec": "no Table II class (python exec); left to RAPIDS' default",
        "StateStoreSaveExec": "no RAPIDS exec key; planned CPU (streaming state exec)",
    }


# -- the per-batch diff ----------------------------------------------------------------------------

def test_diff_from_nothing_sets_everything():
    d = conf_diff(None, {"a": "true", "b": "false"})
    assert d.changed == {"a": "true", "b": "false"}
    assert d.unchanged == frozenset() and d.stale == frozenset()
    assert d.applied == {"a": "true", "b": "false"}


def test_diff_of_identical_confs_is_empty():
    confs = {"a": "true", "b": "false"}
    d = conf_diff(confs, dict(confs))
    assert d.changed == {} and d.unchanged == {"a", "b"} and d.applied == confs


def test_diff_keeps_stale_keys_applied():
    d = conf_diff({"a": "true", "gone": "false"}, {"a": "false", "new": "true"})
    assert d.changed == {"a": "false", "new": "true"}
    assert d.stale == {"gone"}
    assert d.applied == {"a": "false", "gone": "false", "new": "true"}


def test_diff_between_batches_of_a_growing_stream():
    dag = PlanDag((Operator(0, "HashAggregateExec", (1,)), Operator(1, "ShuffleExchangeExec", (2,)),
                   Operator(2, "HashAggregateExec", (3,)), Operator(3, "BatchScanExec", ())))
    dev_mapper = DeviceMapper()
    applied = None
    changes = []
    for size in [IP / 100, IP / 100, IP * 100, IP * 100, IP / 100]:
        confs = rapids_confs(dev_mapper.map(dag, partition_bytes=size)).confs
        d = conf_diff(applied, confs)
        assert {**(applied or {}), **d.changed} == confs  # setting only `changed` is enough
        applied = d.applied
        changes.append(len(d.changed))
    assert changes == [4, 0, 4, 0, 4]


def test_diff_rejects_non_string_values():
    with pytest.raises(ConfigError, match="'a': True"):
        conf_diff(None, {"a": True})
    with pytest.raises(ConfigError, match="previous confs"):
        conf_diff({"a": 1}, {"a": "true"})


def test_rapids_modules_do_not_import_pyspark():
    code = ("import sys, lmstream_kit.rapids, lmstream_kit.engine.rapids; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_docstring_examples():
    result = doctest.testmod(rapids, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
