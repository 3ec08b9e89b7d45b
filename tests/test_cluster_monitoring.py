"""Tests for lmstream_kit.workloads.cluster_monitoring (pure data, no Spark)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.feed.spool import Spool
from lmstream_kit.workloads.cluster_monitoring import (
    CM_CHECKS,
    CM_SCHEMA,
    EPOCH_S,
    EVENT_MIX,
    EVENT_TYPES,
    JOB_ID_BASE,
    JOBS_PER_EPOCH,
    MACHINES,
    _job_table,
    make_task_events,
)

SCHEDULE = EVENT_TYPES.index("SCHEDULE")


def gen(second, n, seed=0, **kw):
    return make_task_events(second, n, np.random.default_rng([seed, second]), **kw)


@pytest.fixture(scope="module")
def minute():
    """60 seconds x 1000 events of the first epoch, as a DataFrame."""
    return pa.concat_tables([gen(s, 1000) for s in range(60)]).to_pandas()


def test_schema_order_types_and_nullability():
    assert CM_SCHEMA.names == [
        "time", "job_id", "task_index", "machine_id", "event_type", "user",
        "scheduling_class", "priority", "cpu", "memory", "disk",
    ]
    types = [pa.int64(), pa.int64(), pa.int32(), pa.int64(), pa.int32(), pa.string(),
             pa.int32(), pa.int32(), pa.float64(), pa.float64(), pa.float64()]
    assert [f.type for f in CM_SCHEMA] == types
    assert not any(f.nullable for f in CM_SCHEMA)
    assert EVENT_TYPES == ("SUBMIT", "SCHEDULE", "EVICT", "FAIL", "FINISH", "KILL",
                           "LOST", "UPDATE_PENDING", "UPDATE_RUNNING")
    assert len(EVENT_MIX) == len(EVENT_TYPES) and abs(sum(EVENT_MIX) - 1.0) < 1e-12
    assert CM_CHECKS["event_type"] == (0, 8)
    assert CM_CHECKS["scheduling_class"] == (0, 3)
    assert CM_CHECKS["priority"] == (0, 11)
    for col in ("cpu", "memory", "disk"):
        assert CM_CHECKS[col] == (0.0, 1.0)
    for col in ("time", "job_id", "task_index", "machine_id"):
        assert CM_CHECKS[col][0] == 0
    assert set(CM_CHECKS) <= set(CM_SCHEMA.names)


def test_exact_rows_for_a_seed():
    t = gen(7, 4)
    assert t.schema.equals(CM_SCHEMA)
    assert t.to_pylist() == [
        {"time": 7, "job_id": 6000002203, "task_index": 23325, "machine_id": 0, "event_type": 0,
         "user": "u0050", "scheduling_class": 0, "priority": 2,
         "cpu": 0.028986, "memory": 0.019702, "disk": 0.000414},
        {"time": 7, "job_id": 6000002151, "task_index": 35, "machine_id": 5597, "event_type": 1,
         "user": "u0153", "scheduling_class": 1, "priority": 1,
         "cpu": 0.028237, "memory": 0.033428, "disk": 0.000243},
        {"time": 7, "job_id": 6000001782, "task_index": 31, "machine_id": 1123, "event_type": 1,
         "user": "u0205", "scheduling_class": 0, "priority": 6,
         "cpu": 0.046807, "memory": 0.07084, "disk": 0.00063},
        {"time": 7, "job_id": 6000001550, "task_index": 841, "machine_id": 7824, "event_type": 4,
         "user": "u0271", "scheduling_class": 0, "priority": 0,
         "cpu": 0.010055, "memory": 0.033221, "disk": 0.000372},
    ]


def test_value_ranges():
    t = pa.concat_tables([gen(s, 500) for s in range(0, 5000, 97)]).to_pydict()
    for col, (lo, hi) in CM_CHECKS.items():
        v = np.asarray(t[col])
        assert v.min() >= lo and v.max() <= hi, col
    assert set(t["event_type"]) == set(range(9))
    assert set(t["scheduling_class"]) == {0, 1, 2, 3}
    assert np.asarray(t["machine_id"]).max() <= MACHINES
    for col in ("cpu", "memory", "disk"):
        assert np.asarray(t[col]).min() >= 1e-6, col  # strictly positive requests
    assert all(len(u) == 5 and u[0] == "u" for u in set(t["user"]))


def test_time_column_is_the_second():
    for s in (0, 1, 599, 600, 123456):
        assert set(gen(s, 50).column("time").to_pylist()) == {s}


def test_deterministic_for_second_n_and_rng_state():
    assert gen(123, 1000).equals(gen(123, 1000))
    assert not gen(123, 1000).equals(gen(123, 1000, seed=1))
    assert not gen(123, 1000).equals(gen(124, 1000).set_column(0, "time", gen(123, 1000).column("time")))
    # the same rng state at a different second (same epoch) differs only in time
    a = make_task_events(10, 300, np.random.default_rng(5))
    b = make_task_events(11, 300, np.random.default_rng(5))
    assert a.drop_columns(["time"]).equals(b.drop_columns(["time"]))
    # ... and in another epoch the jobs are different ones
    c = make_task_events(10 + EPOCH_S, 300, np.random.default_rng(5))
    assert not set(a.column("job_id").to_pylist()) & set(c.column("job_id").to_pylist())


def test_empty_and_invalid_arguments():
    t = gen(5, 0)
    assert t.num_rows == 0 and t.schema.equals(CM_SCHEMA)
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError, match="n must be >= 0, got -1"):
        make_task_events(0, -1, rng)
    with pytest.raises(ConfigError, match="second must be >= 0, got -2"):
        make_task_events(-2, 5, rng)
    with pytest.raises(ConfigError, match="jobs must be >= 1, got 0"):
        make_task_events(0, 5, rng, jobs=0)
    with pytest.raises(ConfigError, match="machines must be >= 1, got 0"):
        make_task_events(0, 5, rng, machines=0)
    with pytest.raises(ConfigError, match="users must be between 1 and 10000, got 0"):
        make_task_events(0, 5, rng, users=0)


def test_keyword_arguments():
    t = gen(3, 400, jobs=1, machines=2, users=5).to_pandas()
    assert t.job_id.nunique() == 1
    assert set(t.machine_id) <= {0, 1, 2}
    u = gen(3, 2000, users=5).column("user").to_pylist()
    assert set(u) <= {f"u{i:04d}" for i in range(5)} and len(set(u)) >= 3


def test_job_sizes_are_skewed(minute):
    counts = minute.job_id.value_counts()
    top = counts.iloc[: max(1, len(counts) // 10)].sum()
    assert top / len(minute) > 0.5
    assert counts.iloc[0] / len(minute) > 0.08  # one job owns a large slice
    assert (counts == 1).sum() > 200  # and a long tail of tiny jobs
    assert set(minute.job_id) <= set(range(JOB_ID_BASE, JOB_ID_BASE + JOBS_PER_EPOCH))


def test_task_index_bounded_by_job_size(minute):
    tab = _job_table(0, JOBS_PER_EPOCH, 300)
    size = dict(zip(tab["job_id"].tolist(), tab["size"].tolist()))
    sizes = minute.job_id.map(size)
    assert (minute.task_index >= 0).all() and (minute.task_index < sizes).all()
    assert minute.groupby("job_id").task_index.nunique().max() > 1000  # big jobs have many tasks


def test_event_type_mix(minute):
    share = minute.event_type.value_counts(normalize=True).reindex(range(9), fill_value=0.0)
    assert 0.30 <= share[SCHEDULE] <= 0.32
    assert 0.28 <= share[0] <= 0.30  # SUBMIT close to SCHEDULE
    assert 0.29 <= share[4] <= 0.31  # FINISH
    assert share[[SCHEDULE, 4]].min() > share.drop([SCHEDULE, 4]).max()  # the two most common
    assert 0.07 <= share[[2, 3, 5]].sum() <= 0.11  # EVICT + FAIL + KILL: a few percent each
    assert share[[6, 7, 8]].max() < 0.01  # LOST, UPDATE_*: rare


def test_machine_zero_only_for_pending_events(minute):
    pending = minute.event_type.isin([EVENT_TYPES.index("SUBMIT"), EVENT_TYPES.index("UPDATE_PENDING")])
    assert (minute.machine_id[pending] == 0).all()
    assert (minute.machine_id[~pending] >= 1).all()
    assert minute.machine_id[~pending].nunique() > 5000


def test_per_job_and_per_task_constants(minute):
    by_job = minute.groupby("job_id")
    for col in ("user", "scheduling_class", "priority"):
        assert (by_job[col].nunique() == 1).all(), col
    by_task = minute.groupby(["job_id", "task_index"])
    for col in ("cpu", "memory", "disk"):
        assert (by_task[col].nunique() == 1).all(), col
    placed = minute[minute.machine_id > 0].groupby(["job_id", "task_index"]).machine_id.nunique()
    assert (placed == 1).all()
    # requests jitter within +-10% of the job's value
    ratio = minute.cpu / by_job.cpu.transform("median")
    assert ratio.between(0.8, 1.25).all() and minute.groupby("job_id").cpu.nunique().max() > 100
    # groupings are meaningful: attributes vary across jobs
    jobs = by_job.first()
    assert jobs.user.nunique() > 100
    assert set(jobs.scheduling_class) == {0, 1, 2, 3}
    assert jobs.priority.nunique() >= 10
    assert (jobs.priority <= 4).mean() > 0.7  # skewed towards low priorities


def test_requests_are_small_and_right_skewed(minute):
    jobs = minute.groupby("job_id")[["cpu", "memory", "disk"]].first()
    assert (jobs.cpu < 0.1).mean() > 0.85 and jobs.cpu.median() < 0.05
    assert jobs.cpu.mean() > jobs.cpu.median()  # right skew
    assert jobs.cpu.max() > 0.2
    assert (jobs.memory < 0.1).mean() > 0.85
    assert jobs.disk.max() < 0.02 and jobs.disk.median() < 0.001


def test_round_trip_through_spool(tmp_path):
    sp = Spool(tmp_path / "sp", schema=CM_SCHEMA, durable=False)
    tables = [gen(s, 200) for s in range(3)]
    for t in tables:
        sp.append(t, source="generator")
    back = Spool(sp.uri, create=False).read_table()
    assert back.schema.equals(CM_SCHEMA)
    assert back.equals(pa.concat_tables(tables))


def test_bundled_sample_matches_generator():
    sample = pa_csv.read_csv(
        "data/cluster_monitoring_sample.csv",
        convert_options=pa_csv.ConvertOptions(column_types={f.name: f.type for f in CM_SCHEMA}),
    )
    assert sample.num_rows == 300
    expected = pa.concat_tables([gen(s, 100) for s in range(3)])
    assert sample.cast(CM_SCHEMA).equals(expected)
