"""The twin executor: results independent of the device plan, Spark's watermark rules, restarts.

No Spark here: ``tests/test_twin_spark.py`` checks the twin against Spark itself.
The "GPU" of these tests is the ``pandas-device`` backend, pandas posing as a
second device whose every transition round-trips through Arrow.
"""

from __future__ import annotations

import doctest
import importlib
import json
import pickle
import sys

import numpy as np
import pyarrow as pa
import pytest

from lmstream_kit.exceptions import ConfigError, UnknownNameError
from lmstream_kit.mapper import DeviceMapper, DevicePlan, OperatorPlacement
from lmstream_kit.twin import TwinExecutor, cudf_available, get_backend, twin_program
from lmstream_kit.twin import backends as twin_backends
from lmstream_kit.workloads import get_workload
from lmstream_kit.workloads.cluster_monitoring import CM_SCHEMA
from lmstream_kit.workloads.linear_road import LR_SCHEMA

TWINS = ["LR2S", "CM1S", "CM1T", "CM2S", "LR1S", "LR1T"]


# ------------------------------------------------------------------------------------ helpers


def stream_batches(name: str, seed: int, *, rate: int = 40, seconds: int | None = None) -> list[pa.Table]:
    """Seeded micro-batches of 2 s to a third of a window, some late rows, some empty batches.

    ``seconds`` defaults to two and a half windows, so that several windows close.
    """
    wl = get_workload(name)
    window = int(wl.window_range_s)
    seconds = 5 * window // 2 if seconds is None else seconds
    rng = np.random.default_rng(seed)
    batches: list[pa.Table] = []
    second = 0
    while second < seconds:
        span = int(rng.integers(2, window // 3 + 1))
        parts = [wl.make_rows(t, rate, np.random.default_rng([seed, t]))
                 for t in range(second, min(second + span, seconds))]
        for _ in range(int(rng.integers(0, 3))):  # out of order: up to 40 s old, some of it late
            back = int(rng.integers(1, 41))
            if second - back >= 0:
                parts.append(wl.make_rows(second - back, 8, np.random.default_rng([seed, second, back])))
        batches.append(pa.concat_tables(parts))
        if rng.random() < 0.25:
            batches.append(wl.schema.empty_table())  # a no-data batch
        second += span
    batches.append(wl.schema.empty_table())
    return batches


def run_all(executor: TwinExecutor, batches, plan=None, first_id: int = 0):
    return [executor.process(t, first_id + i, plan) for i, t in enumerate(batches)]


def same_rows(got: pa.Table, want: pa.Table, ordered: bool) -> bool:
    """Exactly equal tables; for an unordered workload, equal up to the order of rows."""
    if not got.schema.equals(want.schema):
        return False
    if not ordered:
        keys = [(name, "ascending") for name in got.column_names]
        got, want = got.sort_by(keys), want.sort_by(keys)
    return got.equals(want)


def random_plan(program, rng) -> DevicePlan:
    """A plan with every classified operator on a random device (not one the mapper would make)."""
    entries = tuple(
        OperatorPlacement(op.id, op.exec_name, op.op_class,
                          "CPU" if op.cpu_only else str(rng.choice(["CPU", "GPU"])), None, None, "random")
        for op in program.ops
    )
    return DevicePlan(entries, inflection_point=1.0, partition_bytes=1.0)


def device_plans(program) -> list[DevicePlan]:
    """Distinct mixed plans of the mapper (partition sizes, inflection points, pins) and random ones."""
    found: dict[tuple, DevicePlan] = {}
    pin_sets = [{}, {"Aggregation": "GPU"}, {"Filter": "GPU", "Projection": "CPU"},
                {"Scan": "GPU", "Sort": "CPU"}, {"Expand": "CPU", "Aggregation": "CPU"}]
    for pins in pin_sets:
        for inflection in (16 * 1024, 150 * 1024, 2**20):
            mapper = DeviceMapper(inflection_point=inflection, pins=pins)
            for size in (512, 8_000, 64_000, 150 * 1024, 10**6, 10**9):
                plan = mapper.map(program.dag, partition_bytes=size)
                found.setdefault(plan.devices, plan)
    rng = np.random.default_rng(7)
    for _ in range(3):
        plan = random_plan(program, rng)
        found.setdefault(plan.devices, plan)
    n_ops = len(program.ops)
    return [p for p in found.values() if 0 < p.devices.count("GPU") < n_ops]


def expected_transitions(program, result) -> int:
    """Edges between devices, plus scans on and the root on the GPU (pandas-device)."""
    devices = result.devices
    count = sum(1 for op in program.ops for c in op.children if devices[c] != devices[op.id])
    count += sum(1 for op in program.ops if not op.children and devices[op.id] == "GPU")
    return count + (devices[program.dag.root] == "GPU")


# ------------------------------------------------------------------------------------ plan invariance


@pytest.mark.parametrize("name", TWINS)
def test_outputs_of_every_batch_do_not_depend_on_the_device_plan(name):
    program = twin_program(name)
    batches = stream_batches(name, seed=TWINS.index(name))
    reference = run_all(TwinExecutor(program, gpu_backend="pandas-device"), batches)  # all on the CPU
    assert sum(1 for r in reference if r.table.num_rows) >= 2, "the stream must emit something"
    assert any(r.dropped_late for r in reference), "the stream must have late rows"

    mixed = device_plans(program)
    assert len(mixed) >= 8
    all_gpu = DeviceMapper().map(program.dag, partition_bytes=10**12)
    assert all(e.device == "GPU" for e in all_gpu.entries if e.op_class is not None)
    # a plan per batch, as a stream places each batch: all-GPU; the mixed plans in turn (each
    # run starts at another one, so every plan meets several batches and states); and the
    # mapper's plan for each batch's own size
    mapper = DeviceMapper(inflection_point=float(np.median([t.nbytes for t in batches if t.num_rows])) / 2)
    runs = {
        "all-GPU": [all_gpu] * len(batches),
        **{f"mixed from {r}": [mixed[(i + r) % len(mixed)] for i in range(len(batches))]
           for r in (0, len(mixed) // 2)},
        "by size": [mapper.map(program.dag, partition_bytes=max(1, t.nbytes // 2)) for t in batches],
    }
    used = {plan.devices for plans in runs.values() for plan in plans}
    assert len(used) >= len(mixed) and len({p.devices for p in runs["by size"]}) >= 2
    for run, plans in runs.items():
        executor = TwinExecutor(program, gpu_backend="pandas-device")
        for i, (want, table, plan) in enumerate(zip(reference, batches, plans, strict=True)):
            got = executor.process(table, i, plan)
            assert same_rows(got.table, want.table, program.ordered), f"{run}: batch {i} under {plan.devices}"
            assert got.devices == {e.id: ("CPU" if program.op(e.id).cpu_only else e.device)
                                   for e in plan.entries}
            assert got.transitions == expected_transitions(program, got)
            assert set(got.op_seconds) == {op.id for op in program.ops}


def test_the_pandas_gpu_backend_gives_the_same_rows_without_transitions():
    program = twin_program("CM1S")
    batches = stream_batches("CM1S", seed=3, seconds=100)
    plan = DeviceMapper().map(program.dag, partition_bytes=10**9)
    cpu = run_all(TwinExecutor(program, gpu_backend="pandas-device"), batches)
    gpu = run_all(TwinExecutor(program, gpu_backend="pandas"), batches, plan)
    assert all(a.table.equals(b.table) for a, b in zip(cpu, gpu, strict=True))
    assert {b.transitions for b in gpu} == {0}
    assert "GPU" in gpu[0].devices.values()


def test_cm1_batches_are_ordered_by_window_end_then_busiest_category():
    results = run_all(TwinExecutor(twin_program("CM1S"), gpu_backend="pandas-device"),
                      stream_batches("CM1S", seed=5))
    emitted = [r.table.to_pandas() for r in results if r.table.num_rows]
    assert len(emitted) >= 3
    for batch in emitted:
        ordered = batch.sort_values(["window_end", "totalCpu", "category"], ascending=[True, False, True])
        assert batch.index.equals(ordered.index)


# ------------------------------------------------------------------------------------ Spark's rules


def cm_rows(times, *, category=0, cpu=0.5, event_type=1, job=1) -> pa.Table:
    n = len(times)
    return pa.Table.from_pydict(
        {
            "time": pa.array(times, pa.int64()),
            "job_id": pa.array([job] * n, pa.int64()),
            "task_index": pa.array([0] * n, pa.int32()),
            "machine_id": pa.array([1] * n, pa.int64()),
            "event_type": pa.array([event_type] * n, pa.int32()),
            "user": pa.array(["u0001"] * n, pa.string()),
            "scheduling_class": pa.array([category] * n, pa.int32()),
            "priority": pa.array([0] * n, pa.int32()),
            "cpu": pa.array([cpu] * n, pa.float64()),
            "memory": pa.array([0.1] * n, pa.float64()),
            "disk": pa.array([0.001] * n, pa.float64()),
        },
        schema=CM_SCHEMA,
    )


def lr_rows(times, *, vehicle=7, speed=30) -> pa.Table:
    n = len(times)
    ints = {c: pa.array(v, pa.int32()) for c, v in {
        "time": times, "vehicle": [vehicle] * n, "speed": [speed] * n, "highway": [0] * n, "lane": [1] * n,
        "direction": [0] * n, "segment": [3] * n, "position": [3 * 5280] * n}.items()}
    return pa.Table.from_pydict(ints, schema=LR_SCHEMA)


def seconds_of(column) -> list[int]:
    """Whole seconds of a timestamp column."""
    return [micros // 1_000_000 for micros in column.cast(pa.int64()).to_pylist()]


def windows(result) -> list[tuple]:
    """(window_start, window_end, events or tasks) in seconds, per output row."""
    table = result.table
    count = "events" if "events" in table.column_names else "tasks"
    return list(zip(seconds_of(table["window_start"]), seconds_of(table["window_end"]),
                    table[count].to_pylist(), strict=True))


def test_the_watermark_is_the_latest_event_time_before_the_batch_minus_the_lateness():
    ex = TwinExecutor("CM1T", gpu_backend="pandas")
    first = ex.process(cm_rows([10, 30]), 0)
    assert (first.late_watermark, first.eviction_watermark, ex.watermark) == (0, 0, 25)
    second = ex.process(cm_rows([20]), 1)  # older rows never move it back
    assert (second.late_watermark, second.eviction_watermark, ex.watermark) == (0, 25, 25)
    ex.process(ex.program.input_schema.empty_table(), 2)  # an empty batch leaves it alone
    assert ex.watermark == 25
    ex.process(cm_rows([3]), 3)  # not below 0 either
    assert ex.watermark == 25


def test_a_window_is_emitted_once_when_the_watermark_reaches_its_end():
    ex = TwinExecutor("CM1T", gpu_backend="pandas")
    empty = ex.program.input_schema.empty_table()
    assert ex.process(cm_rows([10, 20]), 0).table.num_rows == 0
    assert ex.process(cm_rows([64]), 1).table.num_rows == 0  # evicts at 15; next: 59
    assert ex.needs_no_data_batch and ex.watermark == 59
    assert ex.process(cm_rows([66]), 2).table.num_rows == 0  # evicts at 59 < 60; next: 61
    assert ex.needs_no_data_batch
    closed = ex.process(empty, 3)  # Spark's no-data batch: evicts at 61
    assert windows(closed) == [(0, 60, 2)]
    assert not ex.needs_no_data_batch
    assert ex.process(empty, 4).table.num_rows == 0  # once only
    assert ex.state_rows() == {"agg": 1}  # [60, 120) still open


def test_late_rows_are_judged_against_the_previous_batchs_watermark():
    ex = TwinExecutor("CM1T", gpu_backend="pandas")
    ex.process(cm_rows([100]), 0)  # watermark 95 from the next batch on
    # batch 1 evicts at 95 but drops late rows at batch 0's watermark (0): the row at 50 counts
    # and its window [0, 60) closes at once
    counted = ex.process(cm_rows([50]), 1)
    assert windows(counted) == [(0, 60, 1)] and counted.dropped_late == 0
    # batch 2 drops late rows at batch 1's watermark (95): [0, 60) is closed for good
    dropped = ex.process(cm_rows([40, 59]), 2)
    assert dropped.table.num_rows == 0 and dropped.dropped_late == 1
    assert ex.state_rows() == {"agg": 1}  # only [60, 120) from second 100


def test_a_row_older_than_the_watermark_still_counts_in_sliding_windows_still_open():
    ex = TwinExecutor("CM1S", gpu_backend="pandas")  # 60 s windows sliding by 10 s
    ex.process(cm_rows([70]), 0)
    ex.process(cm_rows([71]), 1)  # evicts at 65; the next batch at 66
    ex.process(ex.program.input_schema.empty_table(), 2)  # late rows of batch 3: at 66
    # 12 s lies in the windows ending at 20 .. 70, 58 s in those ending at 60 .. 110: the
    # (row, window) pairs of the windows ending at 20 .. 60 are late (5 groups), the rest count
    late = ex.process(cm_rows([12, 58]), 3)
    assert late.dropped_late == 5
    ex.process(cm_rows([200]), 4)
    out = ex.process(ex.program.input_schema.empty_table(), 5)
    counts = {end: n for _, end, n in windows(out)}
    assert min(counts) == 70
    assert counts[70] == 2  # 12 and 58, both older than the watermark (66)
    assert counts[80] == 3 and counts[110] == 3 and counts[120] == 2 and counts[130] == 2


def test_cm2s_watermark_only_sees_schedule_events():
    # Spark pushes event_type = 1 below the watermark operator: other events never move it
    ex = TwinExecutor("CM2S", gpu_backend="pandas")
    ex.process(pa.concat_tables([cm_rows([10]), cm_rows([100], event_type=0)]), 0)
    assert ex.watermark == 5


def test_self_join_pairs_each_new_report_with_stored_and_new_ones_once():
    ex = TwinExecutor("LR1T", gpu_backend="pandas-device")
    empty = LR_SCHEMA.empty_table()

    def times(result):
        return sorted(seconds_of(result.table["timestamp"]))

    assert times(ex.process(lr_rows([1]), 0)) == [1]
    # new x (stored + new) and stored x new: 2 rows of the new report, 1 of the stored one
    assert times(ex.process(lr_rows([2]), 1)) == [1, 2, 2]
    assert times(ex.process(lr_rows([40], vehicle=8), 2)) == [40]  # watermark 35 from batch 3 on
    # batch 3 drops late rows at batch 2's watermark (0): the report at 3 still joins, with the
    # stored reports at 1 and 2, and [0, 30) is evicted at the end of the batch
    assert times(ex.process(lr_rows([3]), 3)) == [1, 2, 3, 3, 3]
    assert ex.state_rows() == {"join": 1}
    ex.process(empty, 4)
    late = ex.process(lr_rows([4]), 5)  # late against batch 4's watermark (35): both sides drop it
    assert late.table.num_rows == 0 and late.dropped_late == 2


def test_join_of_reports_three_per_vehicle_and_window_is_the_full_cross_product():
    ex = TwinExecutor("LR1S", gpu_backend="pandas-device")
    out = ex.process(lr_rows([0, 1, 2]), 0).table.to_pandas()
    # 6 sliding windows hold all three reports: 3 x 3 pairs each
    assert len(out) == 6 * 9
    assert out.groupby("window_start").size().tolist() == [9] * 6


# ------------------------------------------------------------------------------------ state


@pytest.mark.parametrize("name", TWINS)
def test_state_dict_round_trip_mid_stream_gives_the_same_outputs(name):
    program = twin_program(name)
    batches = stream_batches(name, seed=11, seconds=2 * int(get_workload(name).window_range_s))
    plan = DeviceMapper().map(program.dag, partition_bytes=64_000)
    straight = run_all(TwinExecutor(program, gpu_backend="pandas-device"), batches, plan)
    cut = len(batches) // 2
    first = TwinExecutor(program, gpu_backend="pandas-device")
    run_all(first, batches[:cut], plan)
    saved = first.state_dict()
    assert first.state_rows()[next(iter(program.stores))] > 0
    for restore in (lambda s: json.loads(json.dumps(s)), lambda s: pickle.loads(pickle.dumps(s))):
        resumed = TwinExecutor(program, gpu_backend="pandas-device")
        resumed.load_state(restore(saved))
        assert resumed.watermark == first.watermark and resumed.state_rows() == first.state_rows()
        rest = run_all(resumed, batches[cut:], plan, first_id=cut)
        assert all(a.table.equals(b.table) for a, b in zip(straight[cut:], rest, strict=True))


def test_a_failed_batch_leaves_the_state_as_it_was():
    ex = TwinExecutor("CM1T", gpu_backend="pandas")
    ex.process(cm_rows([10]), 0)
    before = ex.state_dict()
    broken = cm_rows([70]).drop_columns(["cpu"])
    with pytest.raises(ConfigError, match="cpu"):
        ex.process(broken, 1)
    assert ex.state_dict() == before


def test_wrong_state_plan_or_batch_order_is_refused():
    ex = TwinExecutor("CM1S", gpu_backend="pandas-device")
    with pytest.raises(ConfigError, match="CM1S"):
        ex.load_state(TwinExecutor("CM2S", gpu_backend="pandas").state_dict())
    with pytest.raises(ConfigError, match="malformed"):
        ex.load_state({"format": "lmstream_kit.twin", "version": 1, "workload": "CM1S"})
    other = DeviceMapper().map(twin_program("LR2S").dag, partition_bytes=1000)
    with pytest.raises(ConfigError, match="does not belong"):
        ex.process(CM_SCHEMA.empty_table(), 0, other)
    ex.process(CM_SCHEMA.empty_table(), 3)
    with pytest.raises(ConfigError, match="after batch 3"):
        ex.process(CM_SCHEMA.empty_table(), 3)


# ------------------------------------------------------------------------------------ programs, backends


def test_every_workload_with_a_query_has_a_twin_and_passthrough_has_none():
    assert twin_program("PASSTHROUGH") is None
    assert twin_program(get_workload("lr2s")).workload == "LR2S"
    for name in TWINS:
        program = twin_program(name)
        assert program.input_schema.equals(get_workload(name).schema)
        state_ops = [op.exec_name for op in program.ops if op.cpu_only]
        assert "EventTimeWatermarkExec" in state_ops
        assert all(e.device == "CPU" for e in DeviceMapper().map(program.dag, 10**12).entries
                   if e.exec_name in state_ops)
    with pytest.raises(ConfigError, match="no twin"):
        TwinExecutor("PASSTHROUGH", gpu_backend="pandas")


def test_backends_are_registered_by_name_and_the_cpu_one_must_be_the_host():
    assert get_backend("PANDAS") is get_backend("pandas")
    with pytest.raises(UnknownNameError, match="known: cudf, pandas, pandas-device"):
        get_backend("arrow")
    with pytest.raises(ConfigError, match="host"):
        TwinExecutor("CM1S", gpu_backend="pandas", cpu_backend="pandas-device")


def test_cudf_is_reported_unavailable_here_without_crashing():
    ok, why = cudf_available()
    assert ok is False and why
    assert cudf_available() == (ok, why)  # cached
    with pytest.raises(ConfigError, match="gpu extra"):
        get_backend("cudf")
    with pytest.raises(ConfigError, match="cudf"):
        TwinExecutor("CM1S")  # the default GPU backend is cudf


@pytest.fixture
def fake_cudf(tmp_path, monkeypatch):
    """Put a module named ``cudf`` with the given source first on the path (here and in children)."""

    def install(source: str) -> None:
        package = tmp_path / "cudf"
        package.mkdir()
        (package / "__init__.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setenv("PYTHONPATH", str(tmp_path))
        twin_backends._reset_cudf_probe()

    monkeypatch.delenv(twin_backends.DISABLE_ENV, raising=False)
    yield install
    sys.modules.pop("cudf", None)
    twin_backends._reset_cudf_probe()


def test_a_cudf_import_that_kills_the_process_is_caught_in_the_probe(fake_cudf):
    fake_cudf("import os\nos.abort()\n")
    ok, why = cudf_available()
    assert not ok and "crashed" in why and "SIGABRT" in why
    assert "cudf" not in sys.modules  # never imported here


def test_a_cudf_import_that_raises_anything_is_reported(fake_cudf):
    fake_cudf("raise SystemError('CUDA driver version is insufficient')\n")
    ok, why = cudf_available()
    assert not ok and "CUDA driver version is insufficient" in why


def test_a_working_cudf_is_imported_once_the_probe_passed(fake_cudf):
    fake_cudf(
        "__version__ = '0.fake'\n"
        "class Series(list):\n"
        "    def sum(self):\n"
        "        return 3\n"
    )
    assert cudf_available() == (True, "cudf 0.fake works")
    assert sys.modules["cudf"].__version__ == "0.fake"


def test_the_probe_can_be_switched_off(monkeypatch):
    monkeypatch.setenv(twin_backends.DISABLE_ENV, "1")
    twin_backends._reset_cudf_probe()
    try:
        assert cudf_available() == (False, f"cudf disabled by {twin_backends.DISABLE_ENV}")
    finally:
        twin_backends._reset_cudf_probe()


@pytest.mark.parametrize(
    "module", ["lmstream_kit.twin", "lmstream_kit.twin.backends", "lmstream_kit.twin.program",
               "lmstream_kit.twin.executor"]
)
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(module),
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_the_twin_never_imports_pyspark():
    import subprocess

    code = ("import sys, lmstream_kit.twin as t; t.TwinExecutor('CM2S', gpu_backend='pandas'); "
            "print('pyspark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
