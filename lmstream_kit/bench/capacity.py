"""The capacity search: :class:`CapacitySearch` (pure, which rate to probe next) and the
probe loop that runs it for every (query, policy) of a sweep."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..exceptions import ConfigError
from .cells import bound_s
from .config import BenchConfig, ProgressFn

if TYPE_CHECKING:
    from .run import _Runner

#: share of batches that must meet the bound for a rate to count as sustained
CAPACITY_SHARE = 0.95


class CapacitySearch:
    """Find the highest sustained rate by doubling, halving and geometric bisection.

    Pure logic: ask :meth:`next_rate`, run a probe at that rate, tell the outcome
    with :meth:`record`; :attr:`capacity` is the highest rate that passed (None if
    none did).  The search starts at ``start``; doubles while probes pass (up to
    ``max_rate``); halves while they fail (down to ``start / 8``); then bisects
    (geometric midpoint) between the highest pass and the lowest fail until they
    are within ``resolution`` (relative) or ``max_probes`` probes ran.

    >>> s = CapacitySearch(1000, max_probes=10, max_rate=100000)
    >>> while (r := s.next_rate()) is not None:
    ...     s.record(r, r <= 3000)
    >>> s.capacity, [p for p, _ in s.probes]
    (2828, [1000, 2000, 4000, 2828, 3363, 3084])
    """

    def __init__(
        self,
        start: float,
        *,
        max_probes: int = 6,
        max_rate: float = 64000.0,
        factor: float = 2.0,
        resolution: float = 0.1,
    ) -> None:
        if not start > 0:
            raise ConfigError(f"capacity start rate must be > 0, got {start!r}")
        self.start = float(start)
        self.max_probes = int(max_probes)
        self.max_rate = float(max_rate)
        self.factor = float(factor)
        self.resolution = float(resolution)
        self.floor = self.start / 8.0
        self.probes: list[tuple[int, bool]] = []
        self.lo: Optional[int] = None  # highest rate that passed
        self.hi: Optional[int] = None  # lowest rate that failed

    @property
    def capacity(self) -> Optional[int]:
        return self.lo

    def next_rate(self) -> Optional[int]:
        if len(self.probes) >= self.max_probes:
            return None
        if self.lo is None and self.hi is None:
            return int(round(self.start))
        if self.hi is None:
            if self.lo >= self.max_rate:
                return None
            return int(round(min(self.lo * self.factor, self.max_rate)))
        if self.lo is None:
            rate = self.hi / self.factor
            return None if rate < self.floor else int(round(rate))
        if self.hi / self.lo - 1.0 <= self.resolution:
            return None
        rate = int(round(math.sqrt(self.lo * self.hi)))
        return None if rate in (self.lo, self.hi) else rate

    def record(self, rate: float, passed: bool) -> None:
        rate = int(round(rate))
        self.probes.append((rate, bool(passed)))
        if passed:
            self.lo = rate if self.lo is None else max(self.lo, rate)
        else:
            self.hi = rate if self.hi is None else min(self.hi, rate)


def _capacity(cfg: BenchConfig, runner: _Runner, out: Path, notify: ProgressFn) -> list[dict]:
    """Search each (query, policy)'s highest rate that meets the bound for 95% of batches."""
    from ..metrics import JsonlWriter

    pairs = [(q, p) for q in cfg.queries for p in cfg.policies]
    total = len(pairs) * cfg.capacity_probes
    done = 0
    probes: list[dict] = []
    log = JsonlWriter(out / "capacity.jsonl")
    for query, policy in pairs:
        workload = cfg.workload(query)
        bound = bound_s(workload, cfg.speedup)
        # after the feed ends, a policy gets one trigger interval (fixed) plus two
        # bounds to catch up; a stream that cannot is overloaded
        catch_up = 2 * bound + (cfg.trigger_s / cfg.speedup if policy == "fixed" else 0.0) + 2.0
        search = CapacitySearch(cfg.capacity_start or cfg.rate, max_probes=cfg.capacity_probes,
                                max_rate=cfg.capacity_max_rate)
        while (rate := search.next_rate()) is not None:
            label = f"capacity {query} {policy} @ {rate} rows/s"
            notify({"phase": "capacity", "done": done, "total": total, "label": label})
            run_dir = out / "runs" / f"capacity-{query}-{policy}-{rate}"
            metrics, _, caught_up = runner.run(query, policy, "constant", rate=rate, seed=cfg.seed,
                                               duration_s=cfg.capacity_duration_s, run_dir=run_dir,
                                               catch_up_s=catch_up)
            data = metrics[metrics["rows"] > 0] if len(metrics) else metrics
            share = float((data["max_latency_s"] <= bound).mean()) if len(data) else 0.0
            passed = caught_up and share >= CAPACITY_SHARE
            search.record(rate, passed)
            probe = {"query": query, "policy": policy, "probe": len(search.probes) - 1, "rate": float(rate),
                     "within_bound": share, "passed": passed, "batches": int(len(data)),
                     "caught_up": caught_up}
            probes.append(probe)
            log.append(probe)
            shutil.rmtree(run_dir / "spool", ignore_errors=True)  # probes keep metrics, not input
            done += 1
        done = (pairs.index((query, policy)) + 1) * cfg.capacity_probes
        notify({"phase": "capacity", "done": done, "total": total, "label": f"capacity {query} {policy}"})
    log.close()
    return probes
