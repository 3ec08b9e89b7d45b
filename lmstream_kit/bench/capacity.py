"""The capacity search: :class:`CapacitySearch` (pure, which rate to probe next and what the probes
bracket), :func:`search_pairs` (the probe loop under a probe limit and a wall-clock budget) and
``_capacity``, which runs it on real streams for every (query, policy) of a sweep."""

from __future__ import annotations

import itertools
import math
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from ..exceptions import ConfigError
from .cells import PROBE_SUMMARY, batch_fields, bound_s, collector_fields, metrics_so_far
from .config import BenchConfig, ProgressFn
from .outputs import machine_boot

if TYPE_CHECKING:
    from .run import _Runner

#: share of batches that must meet the bound for a rate to count as sustained
CAPACITY_SHARE = 0.95
#: the bracket [highest pass, lowest fail] is done when ``hi / lo - 1`` is at most this
CAPACITY_RESOLUTION = 0.1
#: runs (seeds ``seed``, ``seed + 1``, ...) each bound of the final bracket needs: one lucky run proves little
#: (a rate's verdict is its runs' majority, a tie runs once more)
CAPACITY_REPS = 2
#: what a search's result says (see :attr:`CapacitySearch.status`)
STATUSES = ("bracketed", "open", "not-converged", "none-passed")
#: the columns of a probe row (``capacity.parquet``); ``lo``, ``hi`` and ``status`` are the search's after it
PROBE_COLUMNS = ["query", "policy", "probe", "rate", "rep", "seed", "duration_s", "within_bound", "passed",
                 "batches", "caught_up", "wall_s", "lo", "hi", "status", "error", "retried", "gc_share", "full_gcs",
                 *PROBE_SUMMARY, "boot"]


def probe_dir(out: Path, query: str, policy: str, rate: float, rep: int) -> Path:
    """The run directory of one capacity probe in the bench directory ``out``."""
    return Path(out) / "runs" / f"capacity-{query}-{policy}-{int(rate)}-r{int(rep)}"


def move_probes(out: Path, rows: Sequence[dict], into: str) -> int:
    """Move the run directories of the probes ``rows`` (a search set aside) under ``out/runs/into``, so
    that the search that runs again at the same rates does not write over their journals; returns
    how many were there."""
    moved = 0
    for row in rows:
        src = probe_dir(out, row["query"], row["policy"], row["rate"], row.get("rep", 0))
        if src.is_dir():
            dest = Path(out) / "runs" / into / src.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(dest, ignore_errors=True)
            src.rename(dest)
            moved += 1
    return moved


def with_batch_fields(out: Path, rows: Sequence[dict]) -> list[dict]:
    """``rows`` (probes an interrupted bench logged), each lacking :data:`~.cells.PROBE_SUMMARY`'s
    columns given them from its run's journal where that is still there (a probe logged before the
    kit recorded them), the others as they are."""
    filled = []
    for row in rows:
        if all(k in row for k in PROBE_SUMMARY):
            filled.append(row)
            continue
        metrics = metrics_so_far(probe_dir(out, row["query"], row["policy"], row["rate"], row.get("rep", 0)))
        if not (metrics["rows"] > 0).any() or "max_latency_s" not in metrics:
            filled.append(row)
            continue
        filled.append({**row, **batch_fields(metrics)})
    return filled


class CapacitySearch:
    """Bracket the highest sustained rate: doubling, halving, geometric bisection, then repetitions.

    Pure logic: ask :meth:`next_rate`, run a probe at that rate (repetition
    :meth:`runs_at`, so seed ``seed + runs_at(rate)``) and tell the outcome with
    :meth:`record`.  A rate *passed* when most runs at it passed and *failed* when
    most failed; where they tie (a pass and a fail) it runs once more, so that
    neither one lucky run nor one unlucky one (a garbage collection in a policy's
    few large batches) decides a bound.

    With ``min_batches`` (and runs recorded with their ``batches`` and ``late``
    counts), a rate's runs are pooled instead: it *passed* where at least
    ``share`` of all their batches met the bound, and it *failed* where the late
    ones are more than ``1 - share`` of their batches, counted as at least
    ``min_batches``; in between (one late batch among fewer than 20, at 95%) it
    runs once more.  A policy that makes 6 or 18 batches in a probe is then not
    failed by one late batch that a policy making 100 may have five of.  A run
    that fell behind or failed (recorded without counts) fails its rate.  :attr:`hi` is the lowest failed rate,
    :attr:`lo` the highest passed one below it.  The search starts at ``start``;
    doubles while probes pass (up to ``max_rate``); halves while they fail (down
    to ``start / 8``); bisects (geometric midpoint) until ``hi / lo - 1 <=
    resolution``; then runs each bound again until it has ``reps`` runs.  A
    bound whose repeats turn its verdict moves the bracket and the search goes
    on from there.  No more than ``max_probes`` runs (repetitions included) are
    made.

    Parameters
    ----------
    start : float
        First probed rate (rows per simulated second), at most ``max_rate``.
    max_probes : int
        Most runs, repetitions included.
    max_rate : float
        Highest rate probed; a search that passes it is ``open``.
    factor : float
        Step of the doubling and the halving.
    resolution : float
        Relative width ``hi / lo - 1`` at which the bracket is done.
    reps : int
        Runs each bound of the final bracket needs.
    min_batches : int
        Pool a rate's runs, a fail needing at least this many batches (0: most runs decide).
    share : float
        Share of a rate's pooled batches that must meet the bound.

    Examples
    --------
    The capacity is 3,000; each bound is run twice once the bracket is within 10%:

    >>> s = CapacitySearch(1000, max_probes=12, max_rate=100000)
    >>> while (r := s.next_rate()) is not None:
    ...     s.record(r, r <= 3000)
    >>> [rate for rate, _, _ in s.probes]
    [1000, 2000, 4000, 2828, 3363, 3084, 2828, 3084]
    >>> s.lo, s.hi, s.status, s.bound_reps
    (2828, 3084, 'bracketed', 2)

    An unlucky run: 2,828's repetition fails, a tie that a third run decides; it passes, so the
    bracket stands:

    >>> s = CapacitySearch(1000, max_probes=12, max_rate=100000)
    >>> while (r := s.next_rate()) is not None:
    ...     s.record(r, r <= 3000 and (r, s.runs_at(r)) != (2828, 1))
    >>> s.probes[6:]
    [(2828, 1, False), (2828, 2, True), (3084, 1, False)]
    >>> s.lo, s.hi, s.status
    (2828, 3084, 'bracketed')

    A lucky run: 2,828 passed first, and its next two runs fail, so it is a fail, and the
    bisection goes on below it:

    >>> s = CapacitySearch(1000, max_probes=12, max_rate=100000)
    >>> while (r := s.next_rate()) is not None:
    ...     s.record(r, r <= 3000 and not (r == 2828 and s.runs_at(r) > 0))
    >>> s.probes[6:]
    [(2828, 1, False), (2828, 2, False), (2378, 0, True), (2593, 0, True), (2593, 1, True)]
    >>> s.lo, s.hi, s.status, s.bound_reps
    (2593, 2828, 'bracketed', 2)

    Pooled: a policy makes 18 batches a run.  From 3,000 rows/s the first run at a rate has one late
    batch (94.4% alone), and from 3,500 every run has two.  One late batch of 18 runs again; with
    the next run's 18 all on time it is 1 of 36, a pass; two late of 18 fail at once:

    >>> s = CapacitySearch(1000, max_probes=20, max_rate=100000, min_batches=20)
    >>> while (r := s.next_rate()) is not None:
    ...     late = 0 if r < 3000 else (1 if s.runs_at(r) == 0 else 0) if r < 3500 else 2
    ...     s.record(r, late == 0, batches=18, late=late)
    >>> s.probes[3:]
    [(2828, 0, True), (3363, 0, False), (3363, 1, True), (3668, 0, False), (3668, 1, False)]
    >>> s.lo, s.hi, s.status
    (3363, 3668, 'bracketed')
    """

    def __init__(
        self,
        start: float,
        *,
        max_probes: int = 12,
        max_rate: float = 64000.0,
        factor: float = 2.0,
        resolution: float = CAPACITY_RESOLUTION,
        reps: int = CAPACITY_REPS,
        min_batches: int = 0,
        share: float = CAPACITY_SHARE,
    ) -> None:
        if not start > 0:
            raise ConfigError(f"capacity start rate must be > 0, got {start!r}")
        if not max_rate > 0:
            raise ConfigError(f"capacity max rate must be > 0, got {max_rate!r}")
        self.max_probes = int(max_probes)
        self.max_rate = max(1, int(round(max_rate)))
        self.start = min(max(1, int(round(start))), self.max_rate)
        self.factor = float(factor)
        self.resolution = float(resolution)
        self.reps = int(reps)
        self.min_batches = int(min_batches)
        self.share = float(share)
        self.floor = self.start / 8.0
        #: every run so far, in order: (rate, repetition, passed)
        self.probes: list[tuple[int, int, bool]] = []
        self._runs: dict[int, list[bool]] = {}
        self._counts: dict[int, list[Optional[tuple[int, int]]]] = {}  # per run: (batches, late), None: fell behind

    def verdict(self, rate: float) -> Optional[bool]:
        """Whether ``rate`` passed (True) or failed (False): most of its runs, or with ``min_batches`` their
        pooled batches (see the class); None where it runs once more or has no run."""
        rate = int(round(rate))
        runs = self._runs.get(rate, ())
        if not runs:
            return None
        if self.min_batches > 0:
            counts = self._counts[rate]
            if any(c is None for c in counts):
                return False
            batches = sum(c[0] for c in counts)
            late = sum(c[1] for c in counts)
            allowed = 1.0 - self.share
            if late <= allowed * batches + 1e-9:
                return True
            if late > allowed * max(batches, self.min_batches) + 1e-9:
                return False
            return None
        passed = sum(runs)
        return None if 2 * passed == len(runs) else 2 * passed > len(runs)

    @property
    def hi(self) -> Optional[int]:
        """The lowest rate most runs of which failed (None: none did)."""
        failed = [r for r in self._runs if self.verdict(r) is False]
        return min(failed) if failed else None

    @property
    def lo(self) -> Optional[int]:
        """The highest rate below :attr:`hi` most runs of which passed (None: none did)."""
        hi = self.hi
        passed = [r for r in self._runs if self.verdict(r) is True and (hi is None or r < hi)]
        return max(passed) if passed else None

    @property
    def capacity(self) -> Optional[int]:
        """The highest rate that most runs passed: :attr:`lo`."""
        return self.lo

    @property
    def bound_reps(self) -> int:
        """The fewest runs at a bound of the bracket (:attr:`lo`, :attr:`hi`); 0 before any run."""
        bounds = [b for b in (self.lo, self.hi) if b is not None]
        return min(len(self._runs[b]) for b in bounds) if bounds else 0

    @property
    def status(self) -> str:
        """``bracketed`` (within the resolution, each bound run ``reps`` times), ``open`` (no fail up
        to ``max_rate``), ``none-passed`` (every rate down to ``start / 8`` failed) or ``not-converged``
        (stopped before any of those: the probe limit or the caller's budget)."""
        lo, hi = self.lo, self.hi
        if not self.probes or self._plan() is not None:
            return "not-converged"
        if lo is None:
            return "none-passed"
        if hi is None:
            return "open"
        return "bracketed" if hi / lo - 1.0 <= self.resolution else "not-converged"

    def runs_at(self, rate: float) -> int:
        """How many runs ``rate`` had: the repetition index of its next run."""
        return len(self._runs.get(int(round(rate)), ()))

    def next_rate(self) -> Optional[int]:
        """The rate of the next run; None when done or after ``max_probes`` runs."""
        if len(self.probes) >= self.max_probes:
            return None
        return self._plan()

    def record(self, rate: float, passed: bool, *, batches: Optional[int] = None, late: Optional[int] = None) -> None:
        """Record one run at ``rate``: its repetition index is :meth:`runs_at` before the call.  ``batches``
        and ``late`` (its batches, those over the bound) are what a pooled search judges; a run without
        them that did not pass fell behind or failed."""
        rate = int(round(rate))
        runs = self._runs.setdefault(rate, [])
        self.probes.append((rate, len(runs), bool(passed)))
        runs.append(bool(passed))
        counted = batches is not None and late is not None and batches > 0
        counts = (int(batches), int(late)) if counted else (0, 0) if passed else None
        self._counts.setdefault(rate, []).append(counts)

    def _plan(self) -> Optional[int]:
        """The next rate with no probe limit; None when the search is done."""
        tied = [r for r in self._runs if self.verdict(r) is None]
        if tied:  # a pass and a fail (only a bound's repeat makes one): a third run decides
            return min(tied)
        lo, hi = self.lo, self.hi
        if lo is None and hi is None:
            return self.start
        if hi is None:
            if lo < self.max_rate:
                return int(round(min(lo * self.factor, self.max_rate)))
            return self._unconfirmed(lo)
        if lo is None:
            rate = hi / self.factor
            return int(round(rate)) if rate >= self.floor else self._unconfirmed(hi)
        mid = int(round(math.sqrt(lo * hi)))
        if hi / lo - 1.0 > self.resolution and mid not in (lo, hi):
            return mid
        # the repeat of lo first: a fail there moves the bracket, making hi's repeat moot
        return self._unconfirmed(lo) or self._unconfirmed(hi)

    def _unconfirmed(self, rate: int) -> Optional[int]:
        return rate if len(self._runs[rate]) < self.reps else None


Pair = tuple  # (query, policy)


def search_pairs(
    pairs: Sequence[Pair],
    probe: Callable[[Pair, int, int], dict],
    make_search: Callable[[Pair], CapacitySearch],
    *,
    budget_s: Optional[float] = None,
    clock: Callable[[], float] = time.monotonic,
    notify: Optional[ProgressFn] = None,
    on_row: Optional[Callable[[dict], None]] = None,
    prior: Sequence[dict] = (),
    on_query_done: Optional[Callable[[str, list], None]] = None,
) -> list[dict]:
    """Run a :class:`CapacitySearch` for each pair; one row (:data:`PROBE_COLUMNS`) per run.

    ``make_search(pair)`` gives each pair its search.  ``probe(pair, rate, rep)`` runs one probe and
    returns at least ``passed`` (bool) and the other measured columns.  The pairs of one query take turns,
    one run each (its policies' probes side by side, so that a machine that
    slows down over an hour slows every policy's search alike, not the last
    one's); the queries run one after the other, in order.  With ``budget_s``,
    no probe starts after ``budget_s`` seconds of ``clock``: each query in turn
    gets an equal share of the time left (so a slow query cannot starve the
    others), and time left over at the end goes to the queries their share cut
    short, in order.  A pair the budget stopped is ``not-converged`` with its
    bracket so far; one it left without any probe gets a row with no rate.  ``notify`` gets the
    bench's progress events; ``total`` is an upper bound of the runs, which
    shrinks as pairs finish under their ``max_probes``.  ``on_row`` gets each
    run's row as soon as it is complete (the bench's crash-safe log).  ``prior``: the rows of an
    interrupted search (that log), replayed into the searches before any probe runs; their
    ``wall_s`` counts against the budget.  ``on_query_done(query, rows)`` is called once per query with
    its pairs' rows as soon as its search can go no further: at once where every pair finished (the
    bench measures the query's cells at a share of its capacity there, on the machine that searched
    it), else once the budget is spent; the seconds it takes do not count against the budget.

    Examples
    --------
    >>> def probe(pair, rate, rep):
    ...     return {"passed": rate <= {"a": 3000, "b": 1500}[pair[1]]}
    >>> ran = []
    >>> rows = search_pairs([("Q", "a"), ("Q", "b")], probe, lambda pair: CapacitySearch(1000, max_probes=12),
    ...                     on_row=ran.append)
    >>> [(r["policy"], r["probe"], r["rate"], r["rep"], r["lo"], r["hi"], r["status"]) for r in rows[-2:]]
    [('b', 5, 1414.0, 1, 1414, 1542, 'not-converged'), ('b', 6, 1542.0, 1, 1414, 1542, 'bracketed')]
    >>> "".join(r["policy"] for r in ran)  # in turn, until b's search was done (7 runs; a's took 8)
    'abababababababa'
    """
    notify = notify or (lambda event: None)
    searches = {pair: make_search(pair) for pair in pairs}
    most = {pair: s.max_probes for pair, s in searches.items()}  # each pair's runs at most
    rows: dict = {pair: [] for pair in pairs}
    state = {"done": 0}
    spent = 0.0
    for row in sorted(prior, key=lambda r: int(r["probe"])):
        pair = (row["query"], row["policy"])
        if pair in searches:
            searches[pair].record(row["rate"], row["passed"], **run_counts(row))
            rows[pair].append(row)
            state["done"] += 1
            spent += float(row.get("wall_s") or 0.0)
    paused = [0.0]  # seconds spent in on_query_done: not the search's

    def now() -> float:
        return clock() - paused[0]

    started = now() - spent
    told: set = set()

    def done(query: str) -> None:
        if on_query_done is None or query in told:
            return
        told.add(query)
        began = clock()
        try:
            on_query_done(query, [row for pair in pairs if pair[0] == query for row in rows[pair]])
        finally:
            paused[0] += clock() - began

    def event(label: str) -> None:
        notify({"phase": "capacity", "done": state["done"], "total": sum(most.values()), "label": label})

    def step(pair: Pair, rate: int) -> None:
        search = searches[pair]
        rep = search.runs_at(rate)
        event(f"capacity {pair[0]} {pair[1]} @ {rate} rows/s, run {rep + 1}")
        measured = probe(pair, rate, rep)
        search.record(rate, measured["passed"], **run_counts(measured))
        row = {"query": pair[0], "policy": pair[1], "probe": len(search.probes) - 1, "rate": float(rate),
               "rep": rep, **measured, "passed": bool(measured["passed"])}
        row.update(lo=search.lo, hi=search.hi, status=search.status)
        rows[pair].append(row)
        if on_row is not None:
            on_row(row)
        state["done"] += 1

    def settle(pair: Pair) -> None:  # where its turns ended: finished, at its probe limit or out of time
        search = searches[pair]
        if search.next_rate() is None:  # its runs are all it gets
            most[pair] = len(search.probes)
        event(f"capacity {pair[0]} {pair[1]}: {_bracket_label(search)}")

    def run(group: list, deadline: Optional[float]) -> None:
        """The query's pairs in turn, one run each, until every one is done or ``deadline`` has passed."""
        waiting = list(group)
        while waiting:
            for pair in list(waiting):
                rate = searches[pair].next_rate()
                if rate is not None and (deadline is None or now() < deadline):
                    step(pair, rate)
                    if searches[pair].next_rate() is not None:
                        continue
                waiting.remove(pair)
                settle(pair)

    groups = [list(group) for _, group in itertools.groupby(pairs, key=lambda pair: pair[0])]
    for i, group in enumerate(groups):
        deadline = None
        if budget_s is not None:
            at = now()
            deadline = at + max(0.0, started + budget_s - at) / (len(groups) - i)
        run(group, deadline)
        if all(searches[pair].next_rate() is None for pair in group):
            done(group[0][0])
    if budget_s is not None:
        for group in groups:  # its unfinished pairs only: a finished one's bracket was said
            left = [pair for pair in group if searches[pair].next_rate() is not None]
            if left:
                run(left, started + budget_s)
    for group in groups:  # the queries the budget cut short, with what they have
        done(group[0][0])
    for pair in pairs:  # the budget is spent: no pair gets another run
        most[pair] = len(searches[pair].probes)
    finished = all(s.next_rate() is None for s in searches.values())
    event("capacity: done" if finished else "capacity: budget spent")
    out: list = []
    for pair in pairs:
        out += rows[pair] or [{"query": pair[0], "policy": pair[1], "probe": 0, "rate": math.nan, "rep": 0,
                               "passed": False, "lo": None, "hi": None, "status": "not-converged"}]
    return out


def run_counts(row: dict) -> dict:
    """``batches`` and ``late`` of a probe's row for :meth:`CapacitySearch.record`; none where it fell
    behind, failed or made no batch.

    >>> run_counts({"batches": 18, "within_bound": 17 / 18, "caught_up": True})
    {'batches': 18, 'late': 1}
    >>> run_counts({"batches": 18, "within_bound": 1.0, "caught_up": False})
    {}
    """
    batches, share = row.get("batches"), row.get("within_bound")
    if not row.get("caught_up") or row.get("error") or batches is None or share is None:
        return {}
    try:
        batches, share = int(batches), float(share)
    except (TypeError, ValueError):
        return {}
    if batches <= 0 or not math.isfinite(share):
        return {}
    return {"batches": batches, "late": int(round((1.0 - share) * batches))}


def _bracket_label(search: CapacitySearch) -> str:
    lo, hi = search.lo, search.hi
    span = {(True, True): f"{lo}-{hi}", (True, False): f">= {lo}", (False, True): f"< {hi}"}.get(
        (lo is not None, hi is not None), "no probe")
    return f"{span} rows/s ({search.status}, {len(search.probes)} runs)"


def _capacity(cfg: BenchConfig, runner: _Runner, out: Path, notify: ProgressFn,
              clock: Callable[[], float] = time.monotonic, prior: Sequence[dict] = (),
              on_query_done: Optional[Callable[[str, list], None]] = None,
              starts: Optional[dict] = None) -> list[dict]:
    """Bracket each (query, policy)'s highest rate that meets the bound for 95% of batches
    (``prior``: the probes of an interrupted bench, kept; ``on_query_done``: see :func:`search_pairs`;
    ``starts``: ``{(query, policy): rate}``, where a pair's search starts instead of the sweep's start, a
    search set aside to run again on this machine starting where its bracket was)."""
    from ..metrics import JsonlWriter

    log = JsonlWriter(out / "capacity.jsonl")
    last: dict = {"phase": "capacity", "done": 0, "total": 0}

    def tell(event: dict) -> None:
        last.update(event)
        notify(event)

    def announce(label: str) -> None:  # a warm-up before a probe: the bar stays where it is
        notify({**last, "label": label})

    def probe(pair: Pair, rate: int, rep: int) -> dict:
        query, policy = pair
        bound = bound_s(cfg.workload(query), cfg.speedup)
        # after the feed ends, a policy gets one trigger interval (fixed) plus two
        # bounds to catch up; a stream that cannot is overloaded
        catch_up = 2 * bound + (cfg.trigger_s / cfg.speedup if policy == "fixed" else 0.0) + 2.0
        run_dir = probe_dir(out, query, policy, rate, rep)
        began = time.monotonic()
        error, retried = None, None
        while True:
            try:
                runner.warm(query, announce)  # a fresh JVM (a resume, a new session) pays no probe's cold code
                metrics, _, caught_up = runner.run(query, policy, "constant", rate=rate, seed=cfg.seed + rep,
                                                   duration_s=cfg.capacity_duration_s, run_dir=run_dir,
                                                   catch_up_s=catch_up)
                break
            except Exception:
                error = runner.recover()
                if error is None:  # the session runs: a failure of the kit's, not of the rate
                    raise
            # the session was lost (its JVM exited), and a new session runs the rest
            metrics = metrics_so_far(run_dir)
            caught_up = False
            if retried is None and (not (metrics["rows"] > 0).any() or runner.lost_to_heap is False):
                # before its first batch the heap was spent by the runs before this one (an overloaded
                # probe's state), not by this rate; a JVM that did not run out of heap (Spark's exit
                # after an earlier probe's long collection cost its executor the heartbeat, a kill)
                # says nothing of this rate either: it runs once more on the new session
                retried, error = error, None
                continue
            break
        if error is None and runner.stuck is not None:  # it ran, and its query outlived the stop
            error = f"the query did not stop: {runner.stuck}; a new JVM runs the next probe"
        data = metrics[metrics["rows"] > 0] if len(metrics) else metrics
        share = float((data["max_latency_s"] <= bound).mean()) if len(data) else 0.0
        for spent in ("spool", "checkpoint"):  # probes keep metrics, not input or state (a probe is never
            shutil.rmtree(run_dir / spent, ignore_errors=True)  # resumed; an LR1T probe's state is 0.3 GB)
        measured = {"seed": cfg.seed + rep, "duration_s": float(cfg.capacity_duration_s),
                    "within_bound": share, "passed": bool(caught_up and share >= CAPACITY_SHARE),
                    "batches": int(len(data)), "caught_up": bool(caught_up),
                    "wall_s": round(time.monotonic() - began, 3),
                    **{k: v for k, v in collector_fields(metrics).items() if k != "gc_s"},
                    **batch_fields(metrics, bound),
                    "boot": machine_boot(),  # the machine (a resumed search may run on another)
                    **({"error": error} if error else {}),
                    **({"retried": retried} if retried else {})}
        return measured

    def make_search(pair: Pair) -> CapacitySearch:
        start = (starts or {}).get(pair) or cfg.capacity_start or cfg.rate
        return CapacitySearch(start, max_probes=cfg.capacity_probes,
                              max_rate=cfg.capacity_max_rate, min_batches=cfg.capacity_min_batches)

    try:
        rows = search_pairs([(q, p) for q in cfg.queries for p in cfg.policies], probe, make_search,
                            budget_s=cfg.capacity_budget_s, clock=clock, notify=tell, on_row=log.append,
                            prior=prior, on_query_done=on_query_done)
    finally:
        log.close()
    unprobed = {"seed": cfg.seed, "duration_s": float(cfg.capacity_duration_s), "within_bound": math.nan,
                "batches": 0, "caught_up": False, "wall_s": math.nan}
    return [{**unprobed, **row, **{k: math.nan if row[k] is None else float(row[k]) for k in ("lo", "hi")}}
            for row in rows]
