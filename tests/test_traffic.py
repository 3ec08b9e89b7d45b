"""Tests for lmstream_kit.feed.traffic (no Spark)."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.feed.spool import Spool
from lmstream_kit.feed.traffic import (
    ConstantTraffic,
    FeedGenerator,
    RandomTraffic,
    TraceTraffic,
    traffic_from_spec,
)

SCHEMA = pa.schema([pa.field("second", pa.int32(), nullable=False), pa.field("x", pa.float64(), nullable=False)])


def make_rows(second: int, n: int, rng: np.random.Generator) -> pa.Table:
    return pa.table(
        {"second": pa.array(np.full(n, second, dtype=np.int32)), "x": pa.array(rng.random(n))}, schema=SCHEMA
    )


class FakeTime:
    """A monotonic clock that only moves when slept on (or advanced by hand)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def spool(tmp_path):
    return Spool(tmp_path / "sp", schema=SCHEMA, durable=False)


# ---------------------------------------------------------------- patterns
def test_constant_traffic():
    t = ConstantTraffic(rows=750)
    assert [t.rows_at(s) for s in (0, 1, 10**6)] == [750, 750, 750]
    assert t.name == "constant"
    assert t.describe() == "constant 750 rows/s"


def test_random_traffic_exact_counts_for_seeds():
    assert [RandomTraffic(mean=1000, std=250, seed=0).rows_at(s) for s in range(6)] == [
        1012, 890, 1302, 1061, 884, 1026,
    ]
    assert [RandomTraffic(mean=1000, std=250, seed=42).rows_at(s) for s in range(6)] == [
        1041, 906, 986, 923, 807, 990,
    ]
    # clipped at zero, never negative
    assert [RandomTraffic(mean=10, std=20, seed=3).rows_at(s) for s in range(10)] == [
        17, 48, 0, 3, 11, 11, 36, 19, 0, 53,
    ]


def test_random_traffic_independent_of_call_order_and_instance():
    a = RandomTraffic(mean=500, std=100, seed=9)
    forward = [a.rows_at(s) for s in range(50)]
    b = RandomTraffic(mean=500, std=100, seed=9)
    backward = [b.rows_at(s) for s in reversed(range(50))][::-1]
    assert forward == backward
    assert a.rows_at(17) == forward[17]  # asking again changes nothing
    assert forward != [RandomTraffic(mean=500, std=100, seed=10).rows_at(s) for s in range(50)]
    assert a.describe() == "random N(500, 100) rows/s, seed 9"


def test_scale_and_scaled():
    t = ConstantTraffic(rows=100)
    half = t.scaled(0.5)
    assert half.rows_at(0) == 50 and t.rows_at(0) == 100
    t.scale = 1.5
    assert t.rows_at(3) == 150
    assert t.describe() == "constant 100 rows/s, scaled x1.5"
    with pytest.raises(ConfigError, match="rate scale must be > 0, got 0"):
        t.scale = 0
    with pytest.raises(ConfigError, match=r"rate scale must be > 0, got -2"):
        t.scaled(-2)


# ------------------------------------------------------------------ traces
def test_trace_from_csv_with_second_column_sorted(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("second,rows\n2,30\n0,10\n\n1,20\n")
    t = TraceTraffic.from_csv(p)
    assert [t.rows_at(s) for s in range(4)] == [10, 20, 30, None]
    assert t.describe() == "trace t.csv (3 s, mean 20 rows/s)"


def test_trace_from_csv_rows_only_header_and_headerless(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("rows,comment\n5,x\n6.0,y\n")
    assert TraceTraffic.from_csv(p).rows_per_second == [5, 6]
    q = tmp_path / "b.csv"
    q.write_text("7\n8\n9\n")
    t = TraceTraffic.from_csv(q, repeat=True)
    assert [t.rows_at(s) for s in range(7)] == [7, 8, 9, 7, 8, 9, 7]


@pytest.mark.parametrize(
    "text, counts",
    [
        ("count\n10\n20\n30\n", [10, 20, 30]),
        ("Requests per second\n1200.0\n\n0\n7\n", [1200, 0, 7]),
        ("rows\n4\n5\n", [4, 5]),
        ("12\n0\n3\n", [12, 0, 3]),
        ("\ufeffn\n8\n9\n", [8, 9]),  # a spreadsheet's byte-order mark before the header
        ("\ufeff8\n9\n", [8, 9]),  # ... or before the first count of a headerless file
    ],
)
def test_a_single_column_trace_is_rows_per_second_whatever_its_header(tmp_path, text, counts):
    p = tmp_path / "t.csv"
    p.write_text(text, encoding="utf-8")
    t = TraceTraffic.from_csv(p)
    assert t.rows_per_second == counts
    assert [t.rows_at(s) for s in range(len(counts) + 1)] == [*counts, None]


def test_bundled_diurnal_trace():
    t = TraceTraffic.from_csv("data/traces/diurnal_example.csv")
    assert len(t) == 120
    assert t.rows_at(0) == 394 and t.rows_at(119) is not None and t.rows_at(120) is None
    assert min(t.rows_per_second) < 400 < 1600 < max(t.rows_per_second)


@pytest.mark.parametrize(
    "text, message",
    [
        ("rows\n10\nabc\n", r"t\.csv, line 3: rows value 'abc' is not an integer >= 0"),
        ("rows\n10\n-4\n", r"t\.csv, line 3: rows value '-4' is not an integer >= 0"),
        ("10\n1.5\n", r"t\.csv, line 2: rows value '1.5' is not an integer >= 0"),
        ("count,n\n1,2\n", r"t\.csv, line 1: header 'count,n' has no 'rows' column"),
        ("count\n10\nabc\n", r"t\.csv, line 3: rows value 'abc' is not an integer >= 0"),
        ("count\n10\n5,6\n", r"t\.csv, line 3: expected 1 column\(s\), got 2"),
        ("-5\n10\n", r"t\.csv, line 1: rows value '-5' is not an integer >= 0"),
        ("2.5\n10\n", r"t\.csv, line 1: rows value '2\.5' is not an integer >= 0"),
        ("count\n", r"t\.csv has a header but no rows"),
        ("second,rows\n0,1\n2,1\n", r"'second' column must hold 0\.\.1 exactly once each; second 1 is missing"),
        ("second,rows\n0,1\n0,1\n", r"second 1 is repeated"),
        ("second,rows\n0,1\nx,1\n", r"line 3: second value 'x' is not an integer >= 0"),
        ("rows,a\n1\n", r"line 2: expected 2 column\(s\), got 1"),
        ("\n\n", r"t\.csv is empty"),
        ("rows\n", r"t\.csv has a header but no rows"),
    ],
)
def test_trace_csv_errors_name_file_line_and_value(tmp_path, text, message):
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        TraceTraffic.from_csv(p)
    assert str(p.name) in str(err.value)


def test_trace_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=f"traffic trace file {tmp_path / 'nope.csv'} not found"):
        TraceTraffic.from_csv(tmp_path / "nope.csv")


# ------------------------------------------------------------------- specs
def test_traffic_from_spec():
    c = traffic_from_spec("constant", rate=300)
    assert isinstance(c, ConstantTraffic) and c.rows_at(0) == 300
    r = traffic_from_spec("random", rate=500, seed=1)
    assert isinstance(r, RandomTraffic) and r.std == 125.0 and r.mean == 500.0
    assert [r.rows_at(s) for s in range(4)] == [337, 563, 472, 614]
    assert traffic_from_spec("RANDOM", rate=500, spread=0, seed=1).rows_at(3) == 500
    t = traffic_from_spec("data/traces/diurnal_example.csv")
    assert isinstance(t, TraceTraffic) and len(t) == 120


def test_traffic_from_spec_errors_name_the_value():
    with pytest.raises(ConfigError, match="rate must be > 0, got -5"):
        traffic_from_spec("constant", rate=-5)
    with pytest.raises(ConfigError, match="rate must be > 0, got 0"):
        traffic_from_spec("random", rate=0)
    with pytest.raises(ConfigError, match="spread must be >= 0, got -1"):
        traffic_from_spec("random", spread=-1)
    with pytest.raises(ConfigError, match=r"unknown traffic pattern 'bursty'; expected constant, random, or a CSV file"):
        traffic_from_spec("bursty")
    with pytest.raises(ConfigError, match=r"traffic trace file 'missing\.csv' does not exist"):
        traffic_from_spec("missing.csv")


# --------------------------------------------------------------- generator
def test_generator_schedule_with_speedup(spool):
    ft = FakeTime()
    calls = []

    def rows(second, n, rng):
        calls.append((second, ft.now))
        return make_rows(second, n, rng)

    gen = FeedGenerator(spool, ConstantTraffic(rows=10), rows, speedup=2.0, duration_s=4,
                        clock=ft.clock, sleep=ft.sleep)
    gen.run_until_done()
    assert calls == [(0, 0.0), (1, 0.5), (2, 1.0), (3, 1.5)]
    assert ft.sleeps == [0.5, 0.5, 0.5]
    assert gen.finished and gen.seconds_done == 4 and gen.datasets_written == 4 and gen.rows_written == 40
    infos = spool.datasets()
    assert [i.rows for i in infos] == [10, 10, 10, 10]
    assert all(i.source == "generator" for i in infos)
    assert spool.read_table().column("second").to_pylist() == [s for s in range(4) for _ in range(10)]


def test_generator_content_is_deterministic_per_second(tmp_path):
    a = Spool(tmp_path / "a", schema=SCHEMA, durable=False)
    b = Spool(tmp_path / "b", schema=SCHEMA, durable=False)
    traffic = RandomTraffic(mean=20, std=5, seed=4)
    FeedGenerator(a, traffic, make_rows, seed=4, duration_s=5).generate_now(5)
    ft = FakeTime()
    FeedGenerator(b, traffic, make_rows, seed=4, duration_s=5, speedup=3, clock=ft.clock, sleep=ft.sleep).run_until_done()
    assert a.read_table().equals(b.read_table())
    first = a.read_table(0, 1)
    expected = np.random.default_rng([4, 0]).random(traffic.rows_at(0))
    assert first.column("x").to_pylist() == expected.tolist()


def test_generator_catches_up_when_behind(spool):
    ft = FakeTime()
    calls = []

    def slow_rows(second, n, rng):
        calls.append(ft.now)
        ft.now += 2.0  # each dataset takes twice its 1 s slot
        return make_rows(second, n, rng)

    gen = FeedGenerator(spool, ConstantTraffic(rows=3), slow_rows, duration_s=4, clock=ft.clock, sleep=ft.sleep)
    gen.run_until_done()
    assert calls == [0.0, 2.0, 4.0, 6.0]
    assert ft.sleeps == []
    assert spool.end_seq == 4


def test_generator_zero_row_seconds_use_their_slot(spool):
    ft = FakeTime()
    calls = []

    def rows(second, n, rng):
        calls.append((second, n, ft.now))
        return make_rows(second, n, rng)

    gen = FeedGenerator(spool, TraceTraffic([3, 0, 0, 2]), rows, clock=ft.clock, sleep=ft.sleep)
    gen.run_until_done()  # ends when the trace is exhausted
    assert calls == [(0, 3, 0.0), (3, 2, 3.0)]
    assert gen.seconds_done == 4 and gen.datasets_written == 2 and gen.rows_written == 5
    assert ft.now == 3.0


def test_generator_live_rate_scale_and_speedup(spool):
    ft = FakeTime()
    calls = []
    gen = None

    def rows(second, n, rng):
        calls.append((second, n, ft.now))
        if second == 1:
            gen.set_rate_scale(2.0)
            gen.set_speedup(4.0)
        return make_rows(second, n, rng)

    gen = FeedGenerator(spool, ConstantTraffic(rows=10), rows, duration_s=4, clock=ft.clock, sleep=ft.sleep)
    gen.run_until_done()
    assert calls == [(0, 10, 0.0), (1, 10, 1.0), (2, 20, 1.25), (3, 20, 1.5)]
    assert [i.rows for i in spool.datasets()] == [10, 10, 20, 20]
    assert gen.rate_scale == 2.0 and gen.speedup == 4.0
    with pytest.raises(ConfigError, match="speedup must be > 0, got 0"):
        gen.set_speedup(0)
    with pytest.raises(ValueError, match="rate scale must be > 0, got -1"):
        gen.set_rate_scale(-1)


def test_generator_start_second_and_prefill(spool):
    ft = FakeTime()
    seen = []

    def rows(second, n, rng):
        seen.append((second, ft.now))
        return make_rows(second, n, rng)

    gen = FeedGenerator(spool, ConstantTraffic(rows=2), rows, seed=1, start_second=100, duration_s=5,
                        clock=ft.clock, sleep=ft.sleep)
    written = gen.generate_now(2)
    assert [i.seq for i in written] == [0, 1]
    assert seen == [(100, 0.0), (101, 0.0)]
    ft.now = 50.0
    gen.run_until_done()  # the schedule starts where the run starts
    assert seen[2:] == [(102, 50.0), (103, 51.0), (104, 52.0)]
    assert gen.seconds_done == 5 and gen.next_second == 105
    assert gen.generate_now(3) == []  # duration reached
    tab = spool.read_table(2, 3)
    assert tab.column("second").to_pylist() == [102, 102]
    assert tab.column("x").to_pylist() == np.random.default_rng([1, 102]).random(2).tolist()


def test_generator_validation(spool):
    with pytest.raises(ConfigError, match="speedup must be > 0, got -1"):
        FeedGenerator(spool, ConstantTraffic(), make_rows, speedup=-1)
    with pytest.raises(ConfigError, match="start_second must be an integer >= 0, got -3"):
        FeedGenerator(spool, ConstantTraffic(), make_rows, start_second=-3)


def test_generator_thread_runs_and_stops(spool):
    gen = FeedGenerator(spool, ConstantTraffic(rows=5), make_rows, speedup=1000, duration_s=20)
    gen.start()
    assert gen.join(timeout=10)
    assert gen.finished and gen.error is None
    assert gen.datasets_written == 20 and spool.end_seq == 20

    slow = FeedGenerator(spool, ConstantTraffic(rows=5), make_rows, speedup=0.01, start_second=20)
    slow.start()
    deadline = time.monotonic() + 5
    while slow.datasets_written < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    t0 = time.monotonic()
    slow.stop(timeout=5)  # interrupts a 100 s wait
    assert time.monotonic() - t0 < 2
    assert slow.finished and slow.datasets_written == 1


def test_generator_thread_records_error(spool):
    def broken(second, n, rng):
        raise RuntimeError(f"boom at {second}")

    gen = FeedGenerator(spool, ConstantTraffic(rows=5), broken, speedup=1000, duration_s=3)
    gen.start()
    assert gen.join(timeout=10)
    assert isinstance(gen.error, RuntimeError) and str(gen.error) == "boom at 0"
    assert gen.finished and spool.end_seq == 0
