"""The inflection-point optimizer's live object: it runs the fits on one background thread.

:class:`InflectionOptimizer` takes a :class:`~.fit.BatchSample` after each batch and hands out the
value to map the next one with, without waiting for a fit longer than asked.

Example
-------
>>> opt = InflectionOptimizer(initial=256 * 1024, background=False)
>>> opt.freeze()
>>> opt.next_inflection_point(0), opt.frozen     # frozen: the value itself, without dither
(262144.0, True)
>>> [(c["param"], c["value"]) for c in opt.pop_changes()]
[('frozen', True)]
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..exceptions import ConfigError
from ..protocol import BATCH, Param, Tunable
from .fit import (
    BatchSample,
    FitResult,
    _check_bounds,
    _check_exploration,
    _check_int,
    _check_target_latency,
    _is_int,
    _is_real,
    _positive,
    dither,
)

__all__ = ["InflectionOptimizer"]

_MAX_WINDOW = 100_000


def _package_fit() -> Callable[..., FitResult]:
    """``lmstream_kit.optimizer.fit_proposal``, looked up at each call (a replaced one is used)."""
    from .. import optimizer

    return optimizer.fit_proposal


class InflectionOptimizer(Tunable):
    """Re-tunes the device mapper's inflection point after every micro-batch, in the background.

    After every micro-batch the stream reports a :class:`BatchSample` through :meth:`observe`; right
    before the next batch is mapped it asks :meth:`next_inflection_point` for the value to give the
    :class:`~lmstream_kit.mapper.DeviceMapper`.  The regression (:func:`~.fit.fit_proposal`) runs on
    one background worker thread, so ``observe`` only appends to a bounded history and
    ``next_inflection_point`` only reads the newest finished proposal; a fit that is not done in
    time leaves the current value in place, and any time spent waiting for it is reported as
    *optimizer blocking* (Table IV's last row).

    Parameters
    ----------
    initial
        Inflection point in bytes before any fit (default 150 KiB, the paper's initial value).
    window
        How many recent batches the fits use (>= ``min_history``); older ones are dropped.
    min_history
        Usable batches needed before a fit (>= 5: the model has up to 4 coefficients).
    exploration
        Half-width of the dither, in log2 units, in ``[0, 2]`` (see :func:`~.fit.dither`); 0
        disables it.
    bounds
        ``(low, high)`` bytes: every value returned stays within them.
    target_latency_s
        ``L*``: the window slide for sliding windows; ``None`` for tumbling windows, where ``L*``
        is the running mean of all observed maximum latencies.
    seed
        Seed of the dither.
    background
        ``True``: fits run on one worker thread.  ``False``: each :meth:`observe` fits
        synchronously (exact, deterministic tests; it blocks the caller for the fit).
    max_step
        How far (log2 units) past the observed range a proposal may go.
    fit
        The fit function (default: ``lmstream_kit.optimizer.fit_proposal``, looked up at each
        call).
    mapper
        Optional object with ``set_inflection_point(nbytes)`` (a ``DeviceMapper``): each value
        returned by :meth:`next_inflection_point` is also set on it.

    Notes
    -----
    Live changes: :meth:`freeze`, :meth:`release`, :meth:`set_inflection_point` (which also
    freezes: a value set by hand stays until :meth:`release`), :meth:`set_window`,
    :meth:`set_exploration` and :meth:`set_target_latency`.  They are validated, thread-safe,
    recorded for :meth:`pop_changes`, and apply from the next :meth:`next_inflection_point` call.
    :meth:`freeze` holds the current value without its dither.  A freeze or release discards
    proposals from fits that started before it; fits still run while frozen (their summary is in
    :meth:`snapshot`) but are not applied.  After :meth:`close`, samples are still recorded but
    no fit runs.

    Examples
    --------
    A noiseless quadratic surface whose best inflection point is 1 MiB (``x = 20``), from 64 KiB:

    >>> import math
    >>> def run(opt, batches):
    ...     for b in range(batches):
    ...         ip = opt.next_inflection_point(b)
    ...         tput = 1e5 - 4e3 * (math.log2(ip) - 20) ** 2
    ...         opt.observe(BatchSample(b, ip, rows=10_000, nbytes=10**6, throughput_rows_s=tput,
    ...                                 max_latency_s=1e4 / tput))
    >>> with InflectionOptimizer(initial=64 * 1024, background=False) as opt:
    ...     run(opt, 12)
    >>> opt.snapshot()["center"], opt.snapshot()["fits_run"], opt.last_fit.reason
    (1048576.0, 12, 'ok')
    >>> opt.set_inflection_point(256 * 1024)      # by hand: this freezes the optimizer
    >>> opt.frozen, opt.next_inflection_point(12)
    (True, 262144.0)
    >>> [(c["param"], c["value"]) for c in opt.pop_changes()]
    [('inflection_point', 262144.0), ('frozen', True)]
    """

    prefix = ""  # its changes keep their plain names (``frozen``, ``window``, ...)
    change_phase = BATCH  # read when each batch is placed
    PARAMS = (
        Param("frozen", bool, doc="hold the current inflection point (no proposals)"),
        Param("window", int, low=1, doc="batches the regression fits"),
        Param("exploration", float, low=0, doc="dither half-width, log2 units"),
    )

    def __init__(
        self,
        *,
        initial: float = 150 * 1024,
        window: int = 40,
        min_history: int = 6,
        exploration: float = 0.25,
        bounds: tuple[float, float] = (4 * 1024, 64 * 1024 * 1024),
        target_latency_s: float | None = None,
        seed: int = 0,
        background: bool = True,
        max_step: float = 1.0,
        fit: Callable[..., FitResult] | None = None,
        mapper: Any = None,
    ) -> None:
        self._bounds = _check_bounds(bounds)
        initial = _positive("initial", initial)
        if not self._bounds[0] <= initial <= self._bounds[1]:
            raise ConfigError(f"initial must lie within bounds {self._bounds}, got {initial!r}")
        self._min_history = _check_int("min_history", min_history, 5, _MAX_WINDOW)
        self._window = _check_int("window", window, self._min_history, _MAX_WINDOW)
        self._exploration = _check_exploration(exploration)
        self._target_latency = _check_target_latency(target_latency_s)
        if not _is_int(seed):
            raise ConfigError(f"seed must be an integer, got {seed!r}")
        self._seed = int(seed)
        if not isinstance(background, bool):
            raise ConfigError(f"background must be True or False, got {background!r}")
        self._background = background
        self._max_step = _positive("max_step", max_step)
        if fit is not None and not callable(fit):
            raise ConfigError(f"fit must be callable, got {fit!r}")
        self._fit_fn = fit
        if mapper is not None and not callable(getattr(mapper, "set_inflection_point", None)):
            raise ConfigError(f"mapper must have a set_inflection_point method, got {mapper!r}")
        self._mapper = mapper

        super().__init__()
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the worker waits on it
        self._done = threading.Condition(self._lock)  # next_inflection_point waits on it
        self._history: deque[BatchSample] = deque(maxlen=self._window)
        self._center = initial  # the value in effect, before the dither
        self._applied = initial  # the last value returned
        self._proposal: float | None = None  # newest finished proposal not yet applied
        self._frozen = False
        self._epoch = 0  # bumped by freeze/release: older fits' proposals are dropped
        self._lat_sum = 0.0
        self._lat_n = 0
        self._n_requested = 0  # observe calls that asked for a fit
        self._n_done = 0  # the highest request number a finished fit covered
        self._pending = 0  # requests the worker has not picked up yet
        self._fits_run = 0
        self._fits_skipped = 0
        self._fits_coalesced = 0
        self._skip_reasons: dict[str, int] = {}
        self._samples_ignored = 0
        self._last_fit: FitResult | None = None
        self._blocked_s = 0.0
        self._blocked_total_s = 0.0
        self._changes: list[dict] = []
        self._closed = False
        self._thread: threading.Thread | None = None

    # -- internal (call with the lock held) ------------------------------------------------------

    def _l_star(self) -> float | None:
        if self._target_latency is not None:
            return self._target_latency
        return self._lat_sum / self._lat_n if self._lat_n else None

    def _record(self, param: str, value: Any) -> None:
        self._changes.append({"param": param, "value": value, "at": time.time()})
        self.log_change(param, value)

    def _apply_frozen(self, value: bool) -> None:
        self.freeze() if value else self.release()

    def _apply_window(self, value: int) -> None:
        self.set_window(value)

    def _apply_exploration(self, value: float) -> None:
        self.set_exploration(value)

    def _fit_args(self) -> tuple[list[BatchSample], dict, int, int]:
        kwargs = {
            "current": self._center,
            "bounds": self._bounds,
            "target_latency_s": self._l_star(),
            "min_history": self._min_history,
            "max_step": self._max_step,
        }
        return list(self._history), kwargs, self._n_requested, self._epoch

    def _run_fit(self, history: list[BatchSample], kwargs: dict) -> FitResult:
        fn = self._fit_fn if self._fit_fn is not None else _package_fit()
        try:
            return fn(history, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a failed fit keeps the current value
            last = history[-1].batch_id if history else None
            return FitResult(None, f"error: {type(exc).__name__}: {exc}", len(history), last)

    def _publish(self, result: FitResult, request: int, epoch: int) -> None:
        self._fits_run += 1
        self._last_fit = result
        self._n_done = max(self._n_done, request)
        if result.proposal is None:
            self._fits_skipped += 1
            key = result.reason.split(":", 1)[0]
            self._skip_reasons[key] = self._skip_reasons.get(key, 0) + 1
        elif epoch == self._epoch and not self._frozen:
            self._proposal = result.proposal
        self._done.notify_all()

    def _worker(self) -> None:
        while True:
            with self._lock:
                while not self._closed and self._pending == 0:
                    self._work.wait()
                if self._closed:
                    return
                self._fits_coalesced += self._pending - 1
                self._pending = 0
                history, kwargs, request, epoch = self._fit_args()
            result = self._run_fit(history, kwargs)
            with self._lock:
                self._publish(result, request, epoch)

    # -- the stream's calls ----------------------------------------------------------------------

    def observe(self, sample: BatchSample) -> None:
        """Record a finished batch and ask for a fit; never waits for the fit (when ``background``).

        A batch with 0 rows is counted in ``samples_ignored`` and does not start a fit.  After
        :meth:`close`, samples are still recorded but no fit runs.
        """
        if not isinstance(sample, BatchSample):
            raise ConfigError(f"observe expects a BatchSample, got {sample!r}")
        with self._lock:
            if sample.rows == 0:
                self._samples_ignored += 1
                return
            self._history.append(sample)
            self._lat_sum += sample.max_latency_s
            self._lat_n += 1
            if self._closed:
                return
            self._n_requested += 1
            if not self._background:
                history, kwargs, request, epoch = self._fit_args()
            else:
                self._pending += 1
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._worker, name="lmstream-inflection-optimizer", daemon=True
                    )
                    self._thread.start()
                self._work.notify()
                return
        result = self._run_fit(history, kwargs)
        with self._lock:
            self._publish(result, request, epoch)

    update = observe  # river-style alias

    def next_inflection_point(self, batch_id: int, wait_s: float = 0.0) -> float:
        """The inflection point (bytes) to map batch ``batch_id`` with.

        The newest finished proposal, or the current value when no newer one is ready, times the
        exploration dither ``2 ** u`` and clipped to ``bounds``.  If a fit is pending, waits at
        most ``wait_s`` seconds for it; the time waited is added to :meth:`pop_blocked_s`.  When
        frozen, returns the frozen (or hand-set) value, without dither and without waiting.
        """
        if not _is_int(batch_id):
            raise ConfigError(f"batch_id must be an integer, got {batch_id!r}")
        if not _is_real(wait_s) or wait_s < 0:
            raise ConfigError(f"wait_s must be a finite number >= 0, got {wait_s!r}")
        with self._lock:
            if not self._frozen and wait_s > 0 and self._n_done < self._n_requested:
                wanted = self._n_requested
                start = time.monotonic()
                deadline = start + wait_s
                timed_out = False
                while self._n_done < wanted and not self._closed:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        timed_out = True
                        break
                    self._done.wait(remaining)
                waited = time.monotonic() - start
                if timed_out:
                    waited = max(waited, float(wait_s))
                self._blocked_s += waited
                self._blocked_total_s += waited
            if self._frozen:
                value = self._center
            else:
                if self._proposal is not None:
                    self._center = self._proposal
                    self._proposal = None
                u = dither(self._seed, int(batch_id), self._exploration)
                lo, hi = self._bounds
                value = min(max(self._center * 2.0**u, lo), hi)
            self._applied = value
        if self._mapper is not None:
            self._mapper.set_inflection_point(value)
        return value

    def pop_blocked_s(self) -> float:
        """Seconds :meth:`next_inflection_point` spent waiting for fits since the last call."""
        with self._lock:
            out, self._blocked_s = self._blocked_s, 0.0
            return out

    # -- live parameters -------------------------------------------------------------------------

    def freeze(self) -> None:
        """Stop applying proposals: the current value (without dither) stays until :meth:`release`."""
        with self._lock:
            if self._frozen:
                return
            self._frozen = True
            self._proposal = None
            self._epoch += 1
            self._record("frozen", True)

    def release(self) -> None:
        """Resume optimising from the current (frozen or hand-set) value."""
        with self._lock:
            if not self._frozen:
                return
            self._frozen = False
            self._proposal = None
            self._epoch += 1
            self._record("frozen", False)

    @property
    def bounds(self) -> tuple[float, float]:
        """The range (bytes) the inflection point is kept in; fixed when the optimizer is made."""
        return self._bounds

    @property
    def frozen(self) -> bool:
        """Whether proposals are held back (after :meth:`freeze` or :meth:`set_inflection_point`)."""
        return self._frozen

    def set_inflection_point(self, nbytes: float, *, record: bool = True) -> None:
        """Set the value by hand (bytes, within ``bounds``); this freezes the optimizer.

        The value is used, without dither, until :meth:`release`; optimising then resumes from it.
        """
        value = _positive("inflection_point", nbytes)
        lo, hi = self._bounds
        if not lo <= value <= hi:
            raise ConfigError(f"inflection_point must lie within bounds {self._bounds}, got {nbytes!r}")
        with self._lock:
            self._center = value
            self._proposal = None
            if record:  # False: the caller records the value (the stream: the mapper's change)
                self._record("inflection_point", value)
            if not self._frozen:
                self._frozen = True
                self._record("frozen", True)
            self._epoch += 1

    def set_window(self, n: int) -> None:
        """Keep the ``n`` most recent batches (``min_history <= n``); a smaller window drops the oldest."""
        n = _check_int("window", n, self._min_history, _MAX_WINDOW)
        with self._lock:
            if n == self._window:
                return
            self._window = n
            self._history = deque(self._history, maxlen=n)
            self._record("window", n)

    def set_exploration(self, x: float) -> None:
        """Set the dither half-width in log2 units (0 disables it)."""
        x = _check_exploration(x)
        with self._lock:
            if x != self._exploration:
                self._exploration = x
                self._record("exploration", x)

    def set_target_latency(self, seconds: float | None, *, record: bool = True) -> None:
        """Set ``L*`` in seconds (the slide), or ``None`` for the running mean (tumbling windows).

        ``record=False`` is for a caller that records the change itself (the stream: its ``target_s``).
        """
        value = _check_target_latency(seconds)
        with self._lock:
            if value != self._target_latency:
                self._target_latency = value
                if record:
                    self._record("target_latency_s", value)

    def pop_changes(self) -> list[dict]:
        """Live changes (``param``, ``value``, ``at``) not returned before, oldest first.

        The stream records them with the next batch id; each change is returned once.
        """
        with self._lock:
            out, self._changes = self._changes, []
            return out

    # -- read-only answers -----------------------------------------------------------------------

    @property
    def inflection_point(self) -> float:
        """The last value returned by :meth:`next_inflection_point` (``initial`` before any)."""
        return self._applied

    @property
    def history(self) -> list[BatchSample]:
        """The samples in the window, oldest first (a copy)."""
        with self._lock:
            return list(self._history)

    @property
    def window(self) -> int:
        return self._window

    @property
    def exploration(self) -> float:
        return self._exploration

    @property
    def target_latency_s(self) -> float | None:
        """``L*`` in force: the set value, or the running mean (``None`` before any batch)."""
        with self._lock:
            return self._l_star()

    @property
    def last_fit(self) -> FitResult | None:
        """The newest finished fit, or ``None``."""
        return self._last_fit

    def snapshot(self) -> dict:
        """JSON-serialisable state: current value, settings, targets, last fit and counters."""
        with self._lock:
            tputs = [s.throughput_rows_s for s in self._history]
            return {
                "inflection_point": self._applied,
                "center": self._center,
                "pending_proposal": self._proposal,
                "frozen": self._frozen,
                "window": self._window,
                "history_len": len(self._history),
                "min_history": self._min_history,
                "exploration": self._exploration,
                "bounds": list(self._bounds),
                "max_step": self._max_step,
                "target_throughput_rows_s": max(tputs) if tputs else None,
                "target_latency_s": self._l_star(),
                "target_latency_mode": "running mean" if self._target_latency is None else "set",
                "last_fit": None if self._last_fit is None else self._last_fit.to_dict(),
                "fits_requested": self._n_requested,
                "fits_run": self._fits_run,
                "fits_skipped": self._fits_skipped,
                "fits_coalesced": self._fits_coalesced,
                "skip_reasons": dict(self._skip_reasons),
                "samples_ignored": self._samples_ignored,
                "blocked_s_total": self._blocked_total_s,
                "background": self._background,
                "closed": self._closed,
                "worker_alive": self._thread is not None and self._thread.is_alive(),
            }

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop the worker thread (idempotent).

        A fit in progress finishes first; ``timeout`` bounds the wait for it (the thread is a
        daemon, so one stuck in a fit does not keep the process alive).
        """
        with self._lock:
            self._closed = True
            self._work.notify_all()
            self._done.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> InflectionOptimizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "frozen" if self._frozen else "live"
        return (
            f"InflectionOptimizer({state}, inflection_point={self._applied:.0f}, "
            f"window={self._window}, exploration={self._exploration:g}, fits_run={self._fits_run})"
        )

