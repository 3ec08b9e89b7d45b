"""Tests for lmstream_kit.workloads.linear_road (pure data, no Spark)."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.feed.spool import Spool
from lmstream_kit.workloads.linear_road import (
    EPOCH_S,
    LR_CHECKS,
    LR_SCHEMA,
    ROAD_FT,
    make_position_reports,
)


def gen(second, n, seed=0, **kw):
    return make_position_reports(second, n, np.random.default_rng([seed, second]), **kw)


def test_schema_is_all_non_nullable_int32():
    assert LR_SCHEMA.names == ["time", "vehicle", "speed", "highway", "lane", "direction", "segment", "position"]
    assert all(f.type == pa.int32() and not f.nullable for f in LR_SCHEMA)
    assert LR_CHECKS["speed"] == (0, 100)
    assert LR_CHECKS["lane"] == (0, 4)
    assert LR_CHECKS["direction"] == (0, 1)
    assert LR_CHECKS["segment"] == (0, 99)
    assert LR_CHECKS["position"] == (0, 527999)


def test_exact_rows_for_a_seed():
    t = gen(7, 4)
    assert t.schema.equals(LR_SCHEMA)
    assert t.to_pylist() == [
        {"time": 7, "vehicle": 7, "speed": 55, "highway": 1, "lane": 2, "direction": 0, "segment": 40, "position": 214576},
        {"time": 7, "vehicle": 37, "speed": 58, "highway": 1, "lane": 2, "direction": 1, "segment": 21, "position": 113931},
        {"time": 7, "vehicle": 67, "speed": 26, "highway": 0, "lane": 1, "direction": 1, "segment": 9, "position": 52672},
        {"time": 7, "vehicle": 97, "speed": 67, "highway": 1, "lane": 3, "direction": 0, "segment": 31, "position": 167697},
    ]


def test_value_ranges_and_segment_consistency():
    t = pa.concat_tables([gen(s, 500, highways=3) for s in range(0, 2000, 37)]).to_pydict()
    for col, (lo, hi) in LR_CHECKS.items():
        v = np.asarray(t[col])
        assert v.min() >= lo and v.max() <= hi, col
    assert set(t["highway"]) == {0, 1, 2}
    assert set(t["direction"]) == {0, 1}
    assert set(t["lane"]) == {0, 1, 2, 3, 4}
    assert np.array_equal(np.asarray(t["segment"]), np.asarray(t["position"]) // 5280)
    speed = np.asarray(t["speed"])
    assert 0.85 < np.mean((speed >= 40) | (speed < 35)) and np.mean((speed >= 40) & (speed <= 80)) > 0.75


def test_deterministic_for_second_n_and_rng_state():
    assert gen(123, 1000).equals(gen(123, 1000))
    assert not gen(123, 1000).equals(gen(123, 1000, seed=1))
    assert gen(5, 0).num_rows == 0 and gen(5, 0).schema.equals(LR_SCHEMA)


def test_vehicles_report_every_30_seconds():
    for s in (0, 1, 29, 30, 31, 1000):
        t = gen(s, 300)
        v = np.asarray(t.column("vehicle"))
        assert np.all(v % 30 == s % 30)
        assert len(set(v.tolist())) == 300
        assert set(t.column("time").to_pylist()) == {s}
    # the same vehicles report again 30 s later
    assert gen(4, 50).column("vehicle").equals(gen(34, 50).column("vehicle"))


def test_congested_segments_exist_below_40_mph():
    t = pa.concat_tables([gen(s, 1000) for s in range(30)]).to_pandas()
    assert (t.speed < 40).mean() > 0.08
    avg = t.groupby(["highway", "direction", "segment"]).speed.mean()
    slow = avg[avg < 40]
    assert 8 <= len(slow) <= 40  # LR2S returns rows, but only for jammed segments
    assert (avg >= 40).sum() > 300


def test_congestion_moves_slowly():
    def slow_segments(start):
        t = pa.concat_tables([gen(s, 1000) for s in range(start, start + 30)]).to_pandas()
        avg = t.groupby(["highway", "direction", "segment"]).speed.mean()
        return set(avg[avg < 40].index)

    a, b, later = slow_segments(0), slow_segments(EPOCH_S), slow_segments(20 * EPOCH_S)
    assert a != b and len(a & b) >= len(a) // 3  # shifted by one segment: overlap remains
    assert len(a & later) < len(a) // 2


def test_positions_advance_with_speed():
    s0 = 100
    a = gen(s0, 1000).to_pandas().set_index("vehicle")
    b = gen(s0 + 30, 1000).to_pandas().set_index("vehicle")
    assert (a.direction == b.direction).all() and (a.highway == b.highway).all()
    moved = np.where(a.direction == 0, b.position - a.position, a.position - b.position)
    moved = np.mod(moved, ROAD_FT)  # vehicles loop around the expressway
    mph = moved / 30 * 3600 / 5280
    free = (a.speed >= 45) & (b.speed >= 45)
    err = np.abs(mph[free] - (a.speed[free] + b.speed[free]) / 2)
    assert free.sum() > 600
    assert np.median(err) < 3 and np.mean(err < 8) > 0.95


def test_invalid_arguments():
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError, match="n must be >= 0, got -1"):
        make_position_reports(0, -1, rng)
    with pytest.raises(ConfigError, match="highways must be >= 1, got 0"):
        make_position_reports(0, 5, rng, highways=0)
    with pytest.raises(ConfigError, match="second must be >= 0, got -2"):
        make_position_reports(-2, 5, rng)


def test_fast_enough():
    rng = np.random.default_rng(0)
    make_position_reports(1, 1000, rng)
    best = min(
        (lambda t0: (make_position_reports(s, 1000, rng), time.perf_counter() - t0)[1])(time.perf_counter())
        for s in range(30)
    )
    assert best < 0.002, f"{best * 1000:.2f} ms for 1000 rows"


def test_round_trip_through_spool(tmp_path):
    sp = Spool(tmp_path / "sp", schema=LR_SCHEMA, durable=False)
    tables = [gen(s, 200) for s in range(3)]
    for t in tables:
        sp.append(t, source="generator")
    back = Spool(sp.uri, create=False).read_table()
    assert back.schema.equals(LR_SCHEMA)
    assert back.equals(pa.concat_tables(tables))


def test_bundled_sample_matches_generator():
    sample = pa_csv.read_csv(
        "data/linear_road_sample.csv",
        convert_options=pa_csv.ConvertOptions(column_types={f.name: f.type for f in LR_SCHEMA}),
    )
    assert sample.num_rows == 300
    expected = pa.concat_tables([gen(s, 100) for s in range(3)])
    assert sample.cast(LR_SCHEMA).equals(expected)
