"""Traffic patterns and the background generator that feeds a spool.

The LMStream paper offers one dataset per (simulated) second, whose row count
follows a traffic pattern: *constant*, *random* (normally distributed), or a
recorded trace.  :class:`FeedGenerator` turns a pattern plus a row factory
into datasets committed to a :class:`~lmstream_kit.feed.spool.Spool` on a
wall-clock schedule (optionally sped up).

Determinism: the row count of second ``s`` depends only on the pattern's
parameters and ``s`` (never on call order or timing), and the rows of second
``s`` are made with ``np.random.default_rng([seed, s])``, so two runs with the
same parameters produce identical spools whatever the machine's speed.
"""

from __future__ import annotations

import copy
import csv
import math
import os
import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from lmstream_kit.diskguard import is_disk_full
from lmstream_kit.exceptions import ConfigError, SpoolError, one_line
from lmstream_kit.registry import Registry

from .spool import DatasetInfo, Spool

__all__ = [
    "Traffic",
    "ConstantTraffic",
    "RandomTraffic",
    "TraceTraffic",
    "TRAFFIC_PATTERNS",
    "traffic_from_spec",
    "FeedGenerator",
    "MakeRows",
]

#: ``make_rows(second, n, rng) -> pa.Table``: the rows of one simulated second.
MakeRows = Callable[[int, int, np.random.Generator], pa.Table]

# Mixed into the per-second seed of RandomTraffic so that the row *count* of a
# second is drawn from a different stream than the rows' *content*, which the
# generator draws from default_rng([seed, s]) with the same seed.
_COUNT_STREAM = 0x7261_7465  # "rate"


def _check_positive(name: str, value: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number > 0, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise ConfigError(f"{name} must be > 0, got {value!r}")
    return number


class Traffic(ABC):
    """A traffic pattern: the number of rows offered in each simulated second.

    Attributes
    ----------
    name : str
        Short name of the pattern (``"constant"``, ``"random"``, ``"trace"``).
    scale : float
        Live multiplier on the offered rate (1.0 = as specified); assigning a
        value <= 0 raises :class:`ConfigError`.  A running generator picks up a
        change from its next dataset.
    """

    name: str = "traffic"

    def __init__(self) -> None:
        self._scale = 1.0

    @property
    def scale(self) -> float:
        return self._scale

    @scale.setter
    def scale(self, factor: float) -> None:
        self._scale = _check_positive("rate scale", factor)

    def scaled(self, factor: float) -> "Traffic":
        """Return a copy whose offered rate is multiplied by ``factor`` (> 0)."""
        factor = _check_positive("rate scale", factor)
        other = copy.copy(self)
        other._scale = self._scale * factor
        return other

    def rows_at(self, second: int) -> int | None:
        """Rows offered in simulated ``second`` (>= 0), or None once exhausted."""
        if second < 0:
            raise ConfigError(f"second must be >= 0, got {second}")
        base = self._base_rows(int(second))
        if base is None:
            return None
        if self._scale == 1.0:
            return max(0, int(round(base)))
        return max(0, int(round(base * self._scale)))

    @abstractmethod
    def _base_rows(self, second: int) -> float | None:
        """Unscaled row count of ``second`` (may be fractional), or None."""

    @abstractmethod
    def _describe(self) -> str:
        """Human-readable description without the scale."""

    def describe(self) -> str:
        """One-line human-readable description, e.g. ``"random N(1000, 250) rows/s, seed 0"``."""
        text = self._describe()
        if self._scale != 1.0:
            text += f", scaled x{self._scale:g}"
        return text

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.describe()}>"


class ConstantTraffic(Traffic):
    """The same number of rows every second.

    Parameters
    ----------
    rows : int
        Rows per second (>= 0).
    """

    name = "constant"

    def __init__(self, rows: int = 1000) -> None:
        super().__init__()
        if int(rows) != rows or rows < 0:
            raise ConfigError(f"constant traffic rows must be an integer >= 0, got {rows!r}")
        self.rows = int(rows)

    def _base_rows(self, second: int) -> float:
        return self.rows

    def _describe(self) -> str:
        return f"constant {self.rows} rows/s"


class RandomTraffic(Traffic):
    """Normally distributed rows per second: ``round(N(mean, std))`` clipped at 0.

    The count for second ``s`` is drawn from
    ``np.random.default_rng([seed, s, 0x72617465])``: it depends only on
    ``(seed, s)``, not on call order (the extra word keeps it independent of
    the row content, which the generator draws from ``[seed, s]``).

    Parameters
    ----------
    mean : float
        Mean rows per second (> 0).
    std : float
        Standard deviation (>= 0).
    seed : int
        Seed of the per-second draws.
    """

    name = "random"

    def __init__(self, mean: float = 1000, std: float = 250, seed: int = 0) -> None:
        super().__init__()
        self.mean = _check_positive("random traffic mean", mean)
        if not math.isfinite(float(std)) or std < 0:
            raise ConfigError(f"random traffic std must be >= 0, got {std!r}")
        if int(seed) != seed or seed < 0:
            raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
        self.std = float(std)
        self.seed = int(seed)

    def _base_rows(self, second: int) -> float:
        rng = np.random.default_rng([self.seed, second, _COUNT_STREAM])
        return rng.normal(self.mean, self.std)

    def _describe(self) -> str:
        return f"random N({self.mean:g}, {self.std:g}) rows/s, seed {self.seed}"


class TraceTraffic(Traffic):
    """Rows per second replayed from a recorded trace.

    Parameters
    ----------
    rows_per_second : sequence of int
        Row count of second 0, 1, ... (each >= 0, at least one).
    repeat : bool
        Loop the trace forever; otherwise :meth:`rows_at` returns None past
        its end, which ends a generator run.
    label : str
        Shown in :meth:`describe` (``from_csv`` uses the file name).
    """

    name = "trace"

    def __init__(self, rows_per_second: Sequence[int], repeat: bool = False, *, label: str = "") -> None:
        super().__init__()
        values = list(rows_per_second)
        if not values:
            raise ConfigError("a traffic trace needs at least one second of rows")
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ConfigError(f"trace rows must be integers >= 0, got {v!r} at second {i}")
        self.rows_per_second = [int(v) for v in values]
        self.repeat = bool(repeat)
        self.label = label

    @classmethod
    def from_csv(cls, path: str | os.PathLike, repeat: bool = False) -> "TraceTraffic":
        """Read a trace from a CSV file.

        The documented layout is ``second,rows``: a header row naming a ``rows``
        column and optionally a ``second`` column, which must then hold 0..n-1
        in any order (rows are sorted by it).  A file of a single column is
        read as rows per second from second 0, whatever its header, or with
        none.  Blank lines are ignored.

        Raises
        ------
        ConfigError
            Naming the file and the offending line and value.
        """
        p = Path(path)
        try:
            # utf-8-sig: a byte-order mark (spreadsheets write one) is not part of the first value
            with open(p, newline="", encoding="utf-8-sig") as f:
                lines = [(i, row) for i, row in enumerate(csv.reader(f), start=1) if any(c.strip() for c in row)]
        except FileNotFoundError:
            raise ConfigError(f"traffic trace file {p} not found") from None
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise ConfigError(f"cannot read traffic trace file {p}: {exc}") from None
        if not lines:
            raise ConfigError(f"traffic trace file {p} is empty")

        first_line, first = lines[0]
        if len(first) == 1 and _parse_count(first[0]) is not None:
            header, body, rows_col, second_col = None, lines, 0, None
        elif len(first) == 1 and _is_number(first[0]):
            raise ConfigError(
                f"traffic trace file {p}, line {first_line}: rows value {first[0].strip()!r} is not an integer >= 0"
            )
        elif len(first) == 1:  # one column of counts under a header of any name
            header, body, rows_col, second_col = [first[0].strip().lower()], lines[1:], 0, None
        else:
            header = [c.strip().lower() for c in first]
            if "rows" not in header:
                raise ConfigError(
                    f"traffic trace file {p}, line {first_line}: header {','.join(first)!r} has no 'rows' column"
                )
            rows_col = header.index("rows")
            second_col = header.index("second") if "second" in header else None
            body = lines[1:]
        if not body:
            raise ConfigError(f"traffic trace file {p} has a header but no rows")

        pairs: list[tuple[int, int]] = []
        width = 1 if header is None else len(header)
        for line_no, row in body:
            if len(row) != width:
                raise ConfigError(
                    f"traffic trace file {p}, line {line_no}: expected {width} column(s), got {len(row)}"
                )
            count = _parse_count(row[rows_col])
            if count is None:
                raise ConfigError(
                    f"traffic trace file {p}, line {line_no}: rows value {row[rows_col].strip()!r} "
                    "is not an integer >= 0"
                )
            if second_col is None:
                sec = len(pairs)
            else:
                sec = _parse_count(row[second_col])
                if sec is None:
                    raise ConfigError(
                        f"traffic trace file {p}, line {line_no}: second value {row[second_col].strip()!r} "
                        "is not an integer >= 0"
                    )
            pairs.append((sec, count))
        if second_col is not None:
            pairs.sort()
            for expected, (sec, _) in enumerate(pairs):
                if sec != expected:
                    raise ConfigError(
                        f"traffic trace file {p}: 'second' column must hold 0..{len(pairs) - 1} "
                        f"exactly once each; second {expected} is "
                        f"{'repeated' if sec < expected else 'missing'}"
                    )
        return cls([c for _, c in pairs], repeat=repeat, label=p.name)

    def __len__(self) -> int:
        return len(self.rows_per_second)

    def _base_rows(self, second: int) -> int | None:
        n = len(self.rows_per_second)
        if second >= n:
            if not self.repeat:
                return None
            second %= n
        return self.rows_per_second[second]

    def _describe(self) -> str:
        n = len(self.rows_per_second)
        mean = sum(self.rows_per_second) / n
        where = f" {self.label}" if self.label else ""
        loop = ", repeating" if self.repeat else ""
        return f"trace{where} ({n} s, mean {mean:.0f} rows/s{loop})"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _parse_count(text: str) -> int | None:
    text = text.strip()
    try:
        value = int(text)
    except ValueError:
        try:  # spreadsheets like to write 1200.0
            f = float(text)
        except ValueError:
            return None
        if not math.isfinite(f) or not f.is_integer():
            return None
        value = int(f)
    return value if value >= 0 else None


#: Built-in named patterns: ``factory(rate, spread, seed) -> Traffic``.
TRAFFIC_PATTERNS: Registry[Callable[[float, float | None, int], Traffic]] = Registry("traffic pattern")
TRAFFIC_PATTERNS.register("constant", lambda rate, spread, seed: ConstantTraffic(rows=int(round(rate))))
TRAFFIC_PATTERNS.register(
    "random",
    lambda rate, spread, seed: RandomTraffic(mean=rate, std=0.25 * rate if spread is None else spread, seed=seed),
)


def traffic_from_spec(spec: str, *, rate: float = 1000, spread: float | None = None, seed: int = 0) -> Traffic:
    """Build a traffic pattern from a CLI-style spec.

    Parameters
    ----------
    spec : str
        ``"constant"``, ``"random"``, or a path to a ``.csv`` trace (see
        :meth:`TraceTraffic.from_csv`; ``rate``/``spread`` do not apply).
    rate : float
        Rows per second (constant) or mean rows per second (random); > 0.
    spread : float, optional
        Standard deviation for random traffic (default ``0.25 * rate``).
    seed : int
        Seed for random traffic.

    Raises
    ------
    ConfigError
        If ``rate`` <= 0, ``spread`` < 0, or ``spec`` is unknown.
    """
    rate = _check_positive("rate", rate)
    text = str(spec).strip()
    if text.lower().endswith(".csv") or os.sep in text or "/" in text:
        if not Path(text).is_file():
            raise ConfigError(
                f"traffic trace file {text!r} does not exist; "
                "expected constant, random, or a CSV file of rows per second"
            )
        return TraceTraffic.from_csv(text)
    if text.lower() not in TRAFFIC_PATTERNS:
        raise ConfigError(
            f"unknown traffic pattern {text!r}; expected constant, random, or a CSV file of rows per second"
        )
    if spread is not None and (not math.isfinite(float(spread)) or spread < 0):
        raise ConfigError(f"spread must be >= 0, got {spread!r}")
    return TRAFFIC_PATTERNS.get(text)(rate, spread, seed)


class FeedGenerator:
    """Background thread committing one dataset per simulated second to a spool.

    The dataset of simulated second ``s`` is due at wall time
    ``t0 + (s - first) / speedup`` where ``t0`` is when :meth:`start` (or
    :meth:`run_until_done`) was called and ``first`` is the first second that
    run generates.  A generator that falls behind commits immediately until
    it has caught up (each dataset's ``arrival`` is its actual commit time).
    Seconds with zero rows use their time slot but write no dataset.

    Parameters
    ----------
    spool : Spool
        Writable spool receiving the datasets (``source="generator"``).
    traffic : Traffic
        Rows per second.  ``set_rate_scale`` changes its ``scale``.
    make_rows : callable
        ``make_rows(second, n, rng) -> pa.Table`` with ``rng =
        np.random.default_rng([seed, second])``.
    speedup : float
        Simulated seconds per wall second (> 0).
    seed : int
        Seed of the per-second row content.
    duration_s : int, optional
        Simulated seconds to generate, counted from ``start_second``
        (None: until stopped or the traffic is exhausted).
    start_second : int
        First simulated second (to continue a run on an existing spool).
    clock, sleep : callable
        Monotonic clock and sleep function; injectable for tests.  With the
        default ``time.sleep`` waits are interruptible by :meth:`stop` and by
        :meth:`set_speedup`.
    """

    def __init__(
        self,
        spool: Spool,
        traffic: Traffic,
        make_rows: MakeRows,
        *,
        speedup: float = 1.0,
        seed: int = 0,
        duration_s: int | None = None,
        start_second: int = 0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.spool = spool
        self.traffic = traffic
        self.make_rows = make_rows
        self._speedup = _check_positive("speedup", speedup)
        if int(seed) != seed or seed < 0:
            raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
        self.seed = int(seed)
        if duration_s is not None and (int(duration_s) != duration_s or duration_s < 0):
            raise ConfigError(f"duration_s must be an integer >= 0 or None, got {duration_s!r}")
        self.duration_s = None if duration_s is None else int(duration_s)
        if int(start_second) != start_second or start_second < 0:
            raise ConfigError(f"start_second must be an integer >= 0, got {start_second!r}")
        self.start_second = int(start_second)
        self._clock = clock
        self._sleep = sleep
        self._interruptible = sleep is time.sleep

        self._next_second = self.start_second
        self._datasets = 0
        self._rows = 0
        self._finished = False
        self._error: BaseException | None = None
        #: why the feed waits now (the spool's disk is full), or None
        self.blocked: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        # Schedule anchor: second `_anchor_second` is due at `_anchor_wall`.
        self._anchor_wall = 0.0
        self._anchor_second = self.start_second
        self._slot_second = self.start_second - 1

    # -------------------------------------------------------------- properties
    @property
    def speedup(self) -> float:
        return self._speedup

    @property
    def next_second(self) -> int:
        """The simulated second that will be generated next."""
        return self._next_second

    @property
    def seconds_done(self) -> int:
        """Simulated seconds generated so far (including zero-row seconds)."""
        return self._next_second - self.start_second

    @property
    def datasets_written(self) -> int:
        return self._datasets

    @property
    def rows_written(self) -> int:
        return self._rows

    @property
    def finished(self) -> bool:
        """True once a run has ended (duration reached, traffic exhausted, stopped or failed)."""
        return self._finished

    @property
    def error(self) -> BaseException | None:
        """The exception that ended the background thread, if any."""
        return self._error

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ----------------------------------------------------------- live settings
    def set_speedup(self, speedup: float) -> None:
        """Change the speedup from the next dataset on (``speedup`` > 0).

        The schedule is re-anchored at the due time of the last generated
        second, so the next dataset comes ``1 / speedup`` wall seconds after it.
        """
        new = _check_positive("speedup", speedup)
        with self._lock:
            last = self._slot_second  # the latest second whose slot has begun
            if last >= self._anchor_second:
                self._anchor_wall = self._due(last)
                self._anchor_second = last
            self._speedup = new
        self._wake.set()

    def set_rate_scale(self, factor: float) -> None:
        """Multiply the traffic's specified rate by ``factor`` (> 0) from the next dataset on."""
        self.traffic.scale = factor

    @property
    def rate_scale(self) -> float:
        return self.traffic.scale

    # -------------------------------------------------------------- generating
    def _due(self, second: int) -> float:
        return self._anchor_wall + (second - self._anchor_second) / self._speedup

    def _done(self) -> bool:
        if self.duration_s is not None and self._next_second - self.start_second >= self.duration_s:
            return True
        return self.traffic.rows_at(self._next_second) is None

    def _emit(self, second: int) -> DatasetInfo | None:
        # Count read at emit time so a rate change applies from this dataset.
        n = self.traffic.rows_at(second)
        info = None
        if n:
            rng = np.random.default_rng([self.seed, second])
            table = self.make_rows(second, n, rng)
            info = self.spool.append(table, source="generator", second=second)
            self._datasets += 1
            self._rows += info.rows
        self._next_second = second + 1
        return info

    def _wait_until_due(self, second: int) -> bool:
        """Sleep until ``second`` is due; False if stopped meanwhile."""
        while not self._stop.is_set():
            with self._lock:
                delay = self._due(second) - self._clock()
            if delay <= 0:
                return True
            if self._interruptible:
                self._wake.wait(delay)
                self._wake.clear()
            else:
                self._sleep(delay)
        return False

    def _run(self) -> None:
        with self._lock:
            self._anchor_wall = self._clock()
            self._anchor_second = self._next_second
            self._slot_second = self._next_second - 1
        self._finished = False
        try:
            while not self._stop.is_set() and not self._done():
                second = self._next_second
                if not self._wait_until_due(second):
                    break
                with self._lock:
                    self._slot_second = second
                try:
                    self._emit(second)
                    self.blocked = None
                except SpoolError as exc:
                    if not is_disk_full(exc):
                        raise
                    # the spool's disk is full: this second's rows are made again (its seed is the
                    # second) once there is room, so nothing is lost; the stream says why it waits
                    self.blocked = f"feed waits: {one_line(exc)}"
                    self._stop.wait(1.0)
        finally:
            self._finished = True

    def run_until_done(self) -> None:
        """Generate synchronously, honouring the schedule, until the run ends.

        Requires a finite ``duration_s`` or a non-repeating trace, or a
        :meth:`stop` from another thread.  Exceptions propagate.
        """
        self._stop.clear()
        self._run()

    def generate_now(self, n_seconds: int) -> list[DatasetInfo]:
        """Write the next ``n_seconds`` seconds immediately, ignoring the clock.

        Stops early at ``duration_s`` or when the traffic is exhausted.
        Returns the datasets written (zero-row seconds write none).
        """
        if int(n_seconds) != n_seconds or n_seconds < 0:
            raise ConfigError(f"n_seconds must be an integer >= 0, got {n_seconds!r}")
        written = []
        for _ in range(int(n_seconds)):
            if self._done():
                break
            info = self._emit(self._next_second)
            if info is not None:
                written.append(info)
        return written

    def _thread_main(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # surfaced via .error; a thread cannot raise to the caller
            self._error = exc

    def start(self) -> "FeedGenerator":
        """Start generating in a daemon thread; returns self."""
        if self.running:
            raise ConfigError("the feed generator is already running")
        self._stop.clear()
        self._wake.clear()
        self._error = None
        self._finished = False
        self._thread = threading.Thread(target=self._thread_main, name="lmstream-feed", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 10.0) -> None:
        """Ask the thread to stop after its current dataset and wait up to ``timeout`` s."""
        self._stop.set()
        self._wake.set()
        self.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; True if it has ended (or never started)."""
        thread = self._thread
        if thread is None:
            return True
        if thread is not threading.current_thread():
            thread.join(timeout)
        return not thread.is_alive()

    def __repr__(self) -> str:
        return (
            f"FeedGenerator({self.traffic.describe()}, speedup={self._speedup:g}, "
            f"seconds_done={self.seconds_done}, datasets={self._datasets}, rows={self._rows})"
        )
