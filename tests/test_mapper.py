"""DeviceMapper (Algorithm 2): exact placements on hand-built plans and the cost-model properties."""

from __future__ import annotations

import doctest
import itertools
import json
import math
import threading

import numpy as np
import pytest

from lmstream_kit import mapper as mapper_module
from lmstream_kit.exceptions import ConfigError
from lmstream_kit.mapper import (
    BASE_COSTS,
    INITIAL_PREFERENCE,
    DeviceMapper,
    DevicePlan,
    Operator,
    PlanDag,
    exec_class,
    unmapped_reason,
)

IP = 150 * 1024
CLASS_EXEC = {
    "Aggregation": "HashAggregateExec",
    "Filter": "FilterExec",
    "Shuffle": "ShuffleExchangeExec",
    "Projection": "ProjectExec",
    "Join": "SortMergeJoinExec",
    "Expand": "ExpandExec",
    "Scan": "FileSourceScanExec",
    "Sort": "SortExec",
}


def chain(*execs: str) -> PlanDag:
    """Leaf first: ``execs[0]`` is the leaf (id 0), ``execs[-1]`` the root."""
    return PlanDag(tuple(Operator(i, name, (i - 1,) if i else ()) for i, name in enumerate(execs)))


# Scan -> Filter -> Project -> HashAggregate -> Shuffle -> HashAggregate
AGG_CHAIN = chain("FileSourceScanExec", "FilterExec", "ProjectExec", "HashAggregateExec",
                  "ShuffleExchangeExec", "HashAggregateExec")
# two scans, one filtered, joined, projected, aggregated
JOIN_DAG = PlanDag((
    Operator(0, "FileSourceScanExec"),
    Operator(1, "FileSourceScanExec"),
    Operator(2, "FilterExec", (1,)),
    Operator(3, "SortMergeJoinExec", (0, 2)),
    Operator(4, "ProjectExec", (3,)),
    Operator(5, "HashAggregateExec", (4,)),
))
WIDE_DAG = PlanDag((
    Operator(0, "LocalTableScanExec"),
    Operator(1, "InMemoryTableScanExec"),
    Operator(2, "BatchScanExec"),
    Operator(3, "ExpandExec", (0,)),
    Operator(4, "SortExec", (1,)),
    Operator(5, "BroadcastExchangeExec", (2,)),
    Operator(6, "BroadcastHashJoinExec", (3, 4)),
    Operator(7, "ShuffledHashJoinExec", (6, 5)),
    Operator(8, "SortAggregateExec", (7,)),
    Operator(9, "SortExec", (8,)),
))
DAGS = [AGG_CHAIN, JOIN_DAG, WIDE_DAG, chain("ProjectExec"), chain("FileSourceScanExec", "SortExec"),
        chain(*[CLASS_EXEC[c] for c in ("Scan", "Projection", "Expand", "Filter", "Join", "Sort",
                                        "Shuffle", "Aggregation")])]


def single(op_class: str) -> PlanDag:
    return chain(CLASS_EXEC[op_class])


# -- exact decisions ----------------------------------------------------------------------------


@pytest.mark.parametrize("r, expected", [
    (0.01, ["CPU"] * 6),
    (1.0, ["CPU"] * 6),
    # T = 0.11; Scan GPU 0.72*sqrt(1.1)+0.11 = 0.865 < 0.88 CPU; the Filter follows onto the GPU
    # (CPU side pays T: 1.21 > 1.154); the root aggregation pays T on both sides: CPU 1.21 < GPU 1.264.
    (1.1, ["GPU", "GPU", "GPU", "GPU", "GPU", "CPU"]),
    (100.0, ["GPU"] * 6),
])
def test_aggregation_chain_exact_devices(r, expected):
    assert list(DeviceMapper().map(AGG_CHAIN, r * IP).devices) == expected


@pytest.mark.parametrize("r, expected", [
    (0.01, ["CPU"] * 6),
    (1.0, ["CPU"] * 6),
    (1.1, ["GPU", "GPU", "GPU", "GPU", "GPU", "CPU"]),
    (100.0, ["GPU"] * 6),
])
def test_join_dag_exact_devices(r, expected):
    assert list(DeviceMapper().map(JOIN_DAG, r * IP).devices) == expected


def test_exact_costs_of_one_operator():
    # Scan leaf at r = 4: CPU 0.8*4 = 3.2, GPU 0.8*0.9*2 + T(4) = 1.44 + 0.1*4 = 1.84
    entry = DeviceMapper().map(chain("FileSourceScanExec", "SortExec"), 4 * IP).entries[0]
    assert (entry.op_class, entry.device, entry.reason) == ("Scan", "GPU", "gpu cheaper")
    assert entry.cpu_cost == pytest.approx(3.2) and entry.gpu_cost == pytest.approx(1.84)


# -- property 1: initial preference at the inflection point --------------------------------------


@pytest.mark.parametrize("op_class", list(BASE_COSTS))
def test_initial_preference_holds_at_inflection_point_without_transition(op_class):
    mapper = DeviceMapper(transition_cost=0)
    entry = mapper.map(single(op_class), IP).entries[0]
    pref = INITIAL_PREFERENCE[op_class]
    if pref == "CPU":
        assert entry.cpu_cost < entry.gpu_cost and entry.device == "CPU"
    elif pref == "GPU":
        assert entry.gpu_cost < entry.cpu_cost and entry.device == "GPU"
    else:
        assert entry.gpu_cost == entry.cpu_cost == BASE_COSTS[op_class]
        assert entry.device == "GPU" and entry.reason.startswith("tie")  # a leaf ties towards the GPU


def test_neutral_tie_follows_the_previous_device():
    mapper = DeviceMapper(transition_cost=0)
    after_cpu = mapper.map(chain("FilterExec", "ProjectExec"), IP)  # Filter prefers the CPU at r=1
    after_gpu = mapper.map(chain("SortExec", "ProjectExec"), IP)  # Sort prefers the GPU at r=1
    assert after_cpu.devices == ("CPU", "CPU") and after_gpu.devices == ("GPU", "GPU")
    assert after_cpu.entries[1].reason == after_gpu.entries[1].reason == "tie: previous device"


# -- property 2: GPU gets relatively cheaper with size; monotone mapping -------------------------


SIZES = np.geomspace(1e-3, 1e3, 200) * IP


@pytest.mark.parametrize("op_class", list(BASE_COSTS))
def test_gpu_to_cpu_cost_ratio_falls_strictly_with_size(op_class):
    mapper = DeviceMapper(transition_cost=0)
    ratios = [e.gpu_cost / e.cpu_cost for e in (mapper.map(single(op_class), s).entries[0] for s in SIZES)]
    assert all(b < a for a, b in itertools.pairwise(ratios))


@pytest.mark.parametrize("dag", DAGS)
def test_all_cpu_well_below_and_all_gpu_well_above_inflection_point(dag):
    mapper = DeviceMapper()
    assert set(mapper.map(dag, 0.05 * IP).devices) == {"CPU"}
    assert set(mapper.map(dag, 20 * IP).devices) == {"GPU"}


@pytest.mark.parametrize("transition_cost", [0.0, 0.1, 0.2, 0.36])
@pytest.mark.parametrize("dag", DAGS)
def test_no_operator_moves_back_to_cpu_as_size_grows(dag, transition_cost):
    mapper = DeviceMapper(transition_cost=transition_cost)
    on_gpu = np.array([[d == "GPU" for d in mapper.map(dag, s).devices] for s in SIZES])
    assert not (on_gpu[:-1] & ~on_gpu[1:]).any()  # never GPU at one size and CPU at the next
    assert not on_gpu[0].any() and on_gpu[-1].all()


def test_monotone_with_custom_base_costs_and_inflection_point():
    mapper = DeviceMapper(inflection_point=10_000, base_costs={"Filter": 2.5, "Scan": 0.4, "Join": 0.6},
                          transition_cost=0.15)
    for dag in DAGS:
        on_gpu = np.array([[d == "GPU" for d in mapper.map(dag, s).devices]
                           for s in np.geomspace(1, 1e7, 200)])
        assert not (on_gpu[:-1] & ~on_gpu[1:]).any()


# -- property 3: transition cost -----------------------------------------------------------------


def transition(r, t0=0.1):
    with_t = DeviceMapper(transition_cost=t0).map(single("Sort"), r * IP).entries[0]
    without = DeviceMapper(transition_cost=0).map(single("Sort"), r * IP).entries[0]
    # a single operator is leaf and root: two T terms on the GPU side, none on the CPU side
    assert with_t.cpu_cost == without.cpu_cost
    return (with_t.gpu_cost - without.gpu_cost) / 2


def test_transition_cost_is_negligible_below_and_surges_above_inflection_point():
    assert transition(1.0) == pytest.approx(0.1)
    assert transition(0.01) / (0.8 * 0.01) < 0.015  # about 1 % of the work at a hundredth of the IP
    share = [transition(r) / r for r in (0.01, 0.1, 0.5, 1.0)]
    assert all(b > a for a, b in itertools.pairwise(share))  # its share of the work rises to the IP...
    assert transition(10) == pytest.approx(1.0) and transition(100) == pytest.approx(10.0)  # ...then t0*r


def test_transition_cost_placement_follows_algorithm_2():
    r, t = 0.5, 0.1 * 0.5 * math.sqrt(0.5)
    bare = DeviceMapper(transition_cost=0)
    for pins, cpu_extra, gpu_extra in [({"Scan": "CPU"}, 0.0, t), ({"Scan": "GPU"}, t, 0.0)]:
        with_t = DeviceMapper(pins=pins).map(chain("FileSourceScanExec", "ProjectExec", "SortExec"), r * IP)
        without = bare.map(chain("FileSourceScanExec", "ProjectExec", "SortExec"), r * IP)
        leaf, inner, root = with_t.entries
        assert leaf.gpu_cost - without.entries[0].gpu_cost == pytest.approx(t)  # data from the host
        assert leaf.cpu_cost == without.entries[0].cpu_cost
        # inner Project: transition on the side opposite the (pinned) Scan's device
        assert inner.cpu_cost - without.entries[1].cpu_cost == pytest.approx(cpu_extra)
        assert inner.gpu_cost - without.entries[1].gpu_cost == pytest.approx(gpu_extra)
        # root: back to the host on the GPU side, plus the previous-device term
        prev_cpu = inner.device == "CPU"
        assert root.gpu_cost - without.entries[2].gpu_cost == pytest.approx(t * (1 + prev_cpu))
        assert root.cpu_cost - without.entries[2].cpu_cost == pytest.approx(0 if prev_cpu else t)


# -- property 4: leaf-to-root walk, several children ---------------------------------------------


def test_children_are_placed_before_parents_and_any_gpu_child_makes_previous_gpu():
    dag = PlanDag((Operator(7, "BroadcastHashJoinExec", (3, 9)), Operator(3, "FileSourceScanExec"),
                   Operator(9, "FilterExec", (4,)), Operator(4, "LocalTableScanExec")))
    order = dag.topological_order()
    assert order.index(4) < order.index(9) < order.index(7) and order.index(3) < order.index(7)
    r = 0.5
    t = 0.1 * r * math.sqrt(r)
    plan = DeviceMapper(pins={"Filter": "GPU"}).map(dag, r * IP)  # one child on GPU, one on CPU
    assert plan.device_of(9) == "GPU" and plan.device_of(3) == "CPU"
    join = plan.entries[0]
    assert join.cpu_cost == pytest.approx(0.9 * r + t)  # previous device = GPU
    assert join.gpu_cost == pytest.approx(0.9 * math.sqrt(r) + t)  # root only


def test_all_operators_start_on_gpu_and_move_to_cpu_only_when_cheaper():
    for r in (0.01, 0.9, 1.1, 1.3, 5):
        for e in DeviceMapper().map(WIDE_DAG, r * IP).entries:
            if e.cpu_cost == e.gpu_cost:
                assert e.reason.startswith("tie")
            else:
                assert (e.device == "CPU") == (e.cpu_cost < e.gpu_cost)


# -- pins, unclassified execs, parameters --------------------------------------------------------


def test_pinned_class_always_goes_to_its_device():
    mapper = DeviceMapper(pins={"Aggregation": "GPU"})
    mapper.pin("Scan", "CPU")
    for r in (0.01, 1, 100):
        plan = mapper.map(AGG_CHAIN, r * IP)
        assert [plan.device_of(i) for i in (0, 3, 5)] == ["CPU", "GPU", "GPU"]
        assert {plan.entries[i].reason for i in (0, 3, 5)} == {"pinned"}
    mapper.pin("Scan", None)
    assert mapper.map(AGG_CHAIN, 100 * IP).device_of(0) == "GPU"
    assert mapper.snapshot()["pins"] == {"Aggregation": "GPU"}


@pytest.mark.parametrize("exec_name, reason", [
    ("ArrowEvalPythonExec", "python exec"),
    ("BatchEvalPythonExec", "python exec"),
    ("FlatMapGroupsInPandasExec", "python exec"),
    ("PythonMapInArrowExec", "python exec"),
    ("StateStoreSaveExec", "streaming state exec"),
    ("StateStoreRestoreExec", "streaming state exec"),
    ("StreamingSymmetricHashJoinExec", "streaming state exec"),
    ("EventTimeWatermarkExec", "streaming state exec"),
    ("StreamingDeduplicateExec", "streaming state exec"),
    ("WholeStageCodegenExec", "no Table II class"),
    ("InputAdapter", "no Table II class"),
    ("MysteryExec", "no Table II class"),
])
def test_unclassified_execs_stay_on_cpu_with_a_reason(exec_name, reason):
    dag = chain("FileSourceScanExec", exec_name, "HashAggregateExec")
    for r in (0.01, 100):
        entry = DeviceMapper().map(dag, r * IP).entries[1]
        assert (entry.op_class, entry.device, entry.reason) == (None, "CPU", reason)
        assert entry.cpu_cost is None and entry.gpu_cost is None
    assert exec_class(exec_name) is None and unmapped_reason(exec_name) == reason


@pytest.mark.parametrize("exec_name, op_class", [
    ("HashAggregateExec", "Aggregation"), ("ObjectHashAggregateExec", "Aggregation"),
    ("SortAggregateExec", "Aggregation"), ("FilterExec", "Filter"), ("ShuffleExchangeExec", "Shuffle"),
    ("BroadcastExchangeExec", "Shuffle"), ("ProjectExec", "Projection"), ("SortMergeJoinExec", "Join"),
    ("BroadcastHashJoinExec", "Join"), ("ShuffledHashJoinExec", "Join"),
    ("BroadcastNestedLoopJoinExec", "Join"), ("CartesianProductExec", "Join"), ("ExpandExec", "Expand"),
    ("FileSourceScanExec", "Scan"), ("BatchScanExec", "Scan"), ("InMemoryTableScanExec", "Scan"),
    ("LocalTableScanExec", "Scan"), ("RDDScanExec", "Scan"), ("SortExec", "Sort"),
    ("HashAggregate", "Aggregation"), ("Sort", "Sort"),
])
def test_exec_class_maps_table_ii(exec_name, op_class):
    assert exec_class(exec_name) == op_class and unmapped_reason(exec_name) is None


@pytest.mark.parametrize("call, match", [
    (lambda m: m.set_inflection_point(0), "inflection_point.*0"),
    (lambda m: m.set_inflection_point(float("nan")), "inflection_point.*nan"),
    (lambda m: m.set_base_cost("Scan", -1), "Scan.*-1"),
    (lambda m: m.set_base_cost("Window", 1.0), "'Window'.*known: Aggregation, Filter"),
    (lambda m: m.set_transition_cost(-0.5), "transition_cost.*-0.5"),
    (lambda m: m.set_transition_cost(True), "transition_cost.*True"),
    (lambda m: m.pin("Sort", "TPU"), "'TPU'"),
    (lambda m: m.pin("Udf", "CPU"), "'Udf'.*known"),
    (lambda m: m.map(AGG_CHAIN, -3), "partition_bytes.*-3"),
])
def test_bad_values_raise_config_error_naming_them(call, match):
    mapper = DeviceMapper()
    before = mapper.snapshot()
    with pytest.raises(ConfigError, match=match) as info:
        call(mapper)
    assert isinstance(info.value, ValueError)
    assert mapper.snapshot() == before


def test_constructor_validates_like_the_setters():
    with pytest.raises(ConfigError, match="inflection_point"):
        DeviceMapper(inflection_point=-1)
    with pytest.raises(ConfigError, match="'Window'"):
        DeviceMapper(base_costs={"Window": 1})
    with pytest.raises(ConfigError, match="'cpu'"):
        DeviceMapper(pins={"Scan": "cpu"})


@pytest.mark.parametrize("operators, match", [
    ((), "at least one"),
    ((Operator(0, "SortExec"), Operator(0, "SortExec")), "unique"),
    ((Operator(0, "SortExec", (5,)),), "unknown children"),
    ((Operator(0, "SortExec"), Operator(1, "SortExec")), "exactly one root"),
    ((Operator(0, "SortExec", (1,)), Operator(1, "SortExec", (2,)), Operator(2, "SortExec", (1,))), "cycle"),
])
def test_malformed_dags_are_rejected(operators, match):
    with pytest.raises(ConfigError, match=match):
        PlanDag(operators)


def test_setters_change_the_next_mapping_and_snapshot():
    mapper = DeviceMapper()
    assert mapper.map(AGG_CHAIN, 5 * IP).devices == ("GPU",) * 6
    mapper.set_inflection_point(10 * IP)  # the same bytes are now half the inflection point
    assert mapper.map(AGG_CHAIN, 5 * IP).devices == ("CPU",) * 6
    mapper.set_base_cost("Scan", 2.0)
    mapper.set_transition_cost(0.2)
    snap = mapper.snapshot()
    assert snap["inflection_point"] == 10 * IP and snap["base_costs"]["Scan"] == 2.0
    assert snap["transition_cost"] == 0.2 and snap["base_costs"]["Filter"] == 1.0


def test_concurrent_retuning_while_mapping_gives_consistent_plans():
    mapper = DeviceMapper()
    stop = threading.Event()

    def retune():
        while not stop.is_set():
            mapper.set_inflection_point(IP / 100)
            mapper.set_inflection_point(IP * 100)

    thread = threading.Thread(target=retune)
    thread.start()
    try:
        plans = [mapper.map(AGG_CHAIN, IP) for _ in range(300)]
    finally:
        stop.set()
        thread.join()
    assert {p.inflection_point for p in plans} <= {IP / 100, IP * 100}
    for p in plans:  # each plan is computed from one inflection point
        assert set(p.devices) == ({"GPU"} if p.inflection_point == IP / 100 else {"CPU"})


# -- output ---------------------------------------------------------------------------------------


def test_plan_summary_and_json_round_trip():
    plan = DeviceMapper().map(chain("FileSourceScanExec", "ArrowEvalPythonExec", "HashAggregateExec"),
                              100 * IP)
    assert plan.summary() == "3 ops: 2 GPU, 1 CPU"
    assert plan.partition_bytes == 100 * IP and plan.inflection_point == IP
    data = json.loads(plan.to_json())
    assert data == plan.to_dict()
    assert data["entries"][1] == {"id": 1, "exec_name": "ArrowEvalPythonExec", "op_class": None,
                                  "device": "CPU", "cpu_cost": None, "gpu_cost": None,
                                  "reason": "python exec", "children": [0]}
    assert DevicePlan.from_dict(data) == plan


def test_docstring_examples_run():
    result = doctest.testmod(mapper_module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_parameters_that_would_break_monotonicity_are_refused_and_nothing_changes():
    from lmstream_kit.mapper import max_transition_cost

    m = DeviceMapper()
    limit = max_transition_cost(m.snapshot()["base_costs"])
    assert limit == pytest.approx(0.9 * 0.8 / 2)  # Scan/Sort: b = 0.8, m = 0.9
    m.set_transition_cost(limit)
    with pytest.raises(ConfigError, match="0.5"):
        m.set_transition_cost(0.5)
    assert m.snapshot()["transition_cost"] == pytest.approx(limit)
    # lowering a base cost shrinks the limit: refused while t0 is at the old limit
    with pytest.raises(ConfigError, match="must be <= 0.225"):
        m.set_base_cost("Scan", 0.5)
    assert m.snapshot()["base_costs"]["Scan"] == 0.8
    with pytest.raises(ConfigError, match="0.4"):
        DeviceMapper(transition_cost=0.4)
