"""Online inflection-point optimizer (LMStream Section III-E, Eq. 10), off the stream's thread.

After every micro-batch the stream reports a :class:`BatchSample` through
:meth:`InflectionOptimizer.observe`; right before the next batch is mapped it asks
:meth:`InflectionOptimizer.next_inflection_point` for the value to give the
:class:`~lmstream_kit.mapper.DeviceMapper`.  The regression runs on one background worker thread,
so ``observe`` only appends to a bounded history and ``next_inflection_point`` only reads the
newest finished proposal; a fit that is not done in time leaves the current value in place, and
any time spent waiting for it is reported as *optimizer blocking* (Table IV's last row).  The
paper's Equation 10 was lost in the text we work from; the model below keeps what the section
states (regression on the per-batch history of inflection point, throughput and maximum latency;
target throughput = best seen; target latency = the slide, or the mean for tumbling windows).

Model
-----
Work in ``x = log2(inflection point)`` and ``z = ln(batch bytes)``.  Over the window of recent
non-empty batches, fit by OLS (statsmodels) one quadratic response for throughput and one for the
maximum latency::

    T(x, z) = a0 + a1 x + a2 x**2 + a3 z          L(x, z) = c0 + c1 x + c2 x**2 + c3 z

(``z`` is left out when every batch has the same size, since it would duplicate the constant).
The ``z`` term keeps batch-size variation from being mistaken for the inflection point's effect;
both responses are predicted at the window's median ``z``.  The proposal minimises::

    loss(x) = ((T* - T(x)) / T*)_+ ** 2  +  ((L(x) - L*) / L*)_+ ** 2

over a grid of step 1/64 in ``x``, limited to the observed ``x`` range widened by ``max_step``
(1 log2 unit: a trust region, since a quadratic says little far outside its data) and to
``bounds``.  ``T*`` is the best throughput in the window; ``L*`` is ``target_latency_s`` (the
window slide) or, when that is ``None`` (tumbling windows), the running mean of every observed
maximum latency.  Grid points whose loss is within 1e-12 of the minimum are ties; among them the
highest predicted ``T(x)`` wins, and what is still tied goes to the point nearest the current
value.  (Where the fit reaches both targets, the loss is 0 on a whole interval: taking the point
of it nearest the current value would only ever move as far as the best sample so far, so on a
slope the optimizer would creep by the dither, ~0.1 log2 units a batch, instead of stepping up to
``max_step`` past the data.)  When the fit is not identifiable (fewer than ``min_history``
samples, an ``x`` range under :data:`MIN_X_RANGE`, a rank-deficient design, or a fit error) the
current value is kept and the skip is counted by reason.

Exploration
-----------
If every batch were mapped with the same ``x``, the ``x`` and ``x**2`` columns would be constant
and the regression singular: the optimizer could never learn which way to move.  So the value
applied to each batch is the proposal times ``2 ** u``, with ``u`` uniform in
``[-exploration, +exploration]`` (default 0.25 log2 units, i.e. about -16 % .. +19 %), clipped to
``bounds``.  ``u`` is a hash of ``(seed, batch_id)``, so a run is reproducible whatever the
thread timing.  ``exploration=0`` disables the dither (and with it, after the first batches, the
fits: they are skipped as "x range").  A frozen optimizer does not dither.

Examples
--------
>>> opt = InflectionOptimizer(initial=64 * 1024, exploration=0.0, background=False)
>>> opt.next_inflection_point(0)
65536.0
>>> opt.observe(BatchSample(0, 65536.0, rows=1000, nbytes=10**6, throughput_rows_s=5e4,
...                         max_latency_s=0.8))
>>> opt.snapshot()["skip_reasons"]
{'too few samples': 1}
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .exceptions import ConfigError

__all__ = [
    "GRID_STEP",
    "MIN_X_RANGE",
    "BatchSample",
    "FitResult",
    "InflectionOptimizer",
    "dither",
    "fit_proposal",
]

#: Resolution of the search grid, in log2 units (1/64: about 1.1 % of the inflection point).
GRID_STEP = 1.0 / 64.0
#: Smallest spread (max - min) of ``log2(inflection point)`` in the window that a fit accepts.
MIN_X_RANGE = 0.1
#: Loss values within this of the minimum are ties (broken toward the current value).
TIE_TOLERANCE = 1e-12
_MAX_EXPLORATION = 2.0
_MAX_WINDOW = 100_000
_MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------------------
# value types
# ---------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class BatchSample:
    """What the stream reports after a micro-batch: the value it was mapped with and how it ran.

    Parameters
    ----------
    batch_id
        The micro-batch id.
    inflection_point
        Bytes (> 0): the inflection point the batch was mapped with.
    rows, nbytes
        Rows and bytes of the batch (>= 0); a batch with 0 rows is not used by the fits.
    throughput_rows_s
        Average throughput of the batch in rows per second (>= 0).
    max_latency_s
        Maximum end-to-end latency of a dataset of the batch, in seconds (>= 0).

    Raises
    ------
    ConfigError
        When a field has the wrong type or an out-of-range value (the message names it).
    """

    batch_id: int
    inflection_point: float
    rows: int
    nbytes: int
    throughput_rows_s: float
    max_latency_s: float

    def __post_init__(self) -> None:
        for name in ("batch_id", "rows", "nbytes"):
            value = getattr(self, name)
            if not _is_int(value) or (name != "batch_id" and value < 0):
                bound = "an integer" if name == "batch_id" else "an integer >= 0"
                raise ConfigError(f"BatchSample.{name} must be {bound}, got {value!r}")
        if not _is_real(self.inflection_point) or self.inflection_point <= 0:
            raise ConfigError(
                f"BatchSample.inflection_point must be a finite number > 0, got {self.inflection_point!r}"
            )
        for name in ("throughput_rows_s", "max_latency_s"):
            value = getattr(self, name)
            if not _is_real(value) or value < 0:
                raise ConfigError(f"BatchSample.{name} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True)
class FitResult:
    """Outcome of one fit: a proposal in bytes, or ``None`` with the reason it was skipped.

    ``coefficients`` maps ``"throughput"`` and ``"latency"`` to ``{"const", "x", "x2"[, "z"]}``
    in the module's formulas (``x`` = log2 bytes, ``z`` = ln batch bytes); ``r2`` likewise (``None``
    for a response that did not vary).
    """

    proposal: float | None
    reason: str
    n: int
    batch_id: int | None = None
    coefficients: dict = field(default_factory=dict)
    r2: dict = field(default_factory=dict)
    target_throughput: float | None = None
    target_latency: float | None = None
    x_range: tuple[float, float] | None = None
    loss: float | None = None

    @property
    def ok(self) -> bool:
        """Whether the fit produced a proposal."""
        return self.proposal is not None

    def to_dict(self) -> dict:
        """A JSON-ready dict (for a snapshot or a metrics record)."""
        out = asdict(self)
        out["ok"] = self.ok
        if self.x_range is not None:
            out["x_range"] = list(self.x_range)
        return out


# ---------------------------------------------------------------------------
# the model (pure functions; the worker thread calls fit_proposal)
# ---------------------------------------------------------------------------


def _mix64(z: int) -> int:
    # splitmix64 finaliser: a fixed, platform-independent hash
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def dither(seed: int, batch_id: int, exploration: float) -> float:
    """The exploration offset, in log2 units, for one batch: uniform in ``[-exploration, +exploration]``.

    A hash of ``(seed, batch_id)``, so it does not depend on how many calls came before.

    Examples
    --------
    >>> dither(0, 7, 0.25) == dither(0, 7, 0.25), abs(dither(0, 7, 0.25)) <= 0.25, dither(0, 7, 0.0)
    (True, True, 0.0)
    """
    if exploration == 0:
        return 0.0
    u = (_mix64(_mix64(seed & _MASK64) ^ (batch_id & _MASK64)) >> 11) / float(1 << 53)
    return exploration * (2.0 * u - 1.0)


def _ols(y: np.ndarray, design: np.ndarray):
    import statsmodels.api as sm  # lazy: importing this module stays cheap

    return sm.OLS(y, design).fit()


def fit_proposal(
    history: Sequence[BatchSample],
    *,
    current: float,
    bounds: tuple[float, float],
    target_latency_s: float | None,
    min_history: int = 6,
    max_step: float = 1.0,
) -> FitResult:
    """Fit the module's two quadratic responses on ``history`` and propose an inflection point.

    Parameters
    ----------
    history
        The window of samples (empty batches are ignored).
    current
        The inflection point in effect (bytes); ties are broken toward it.
    bounds
        ``(low, high)`` bytes the proposal must stay within.
    target_latency_s
        ``L*`` in seconds; ``None`` or 0 drops the latency term.
    min_history
        Fewer usable samples than this: no fit.
    max_step
        How far (log2 units) beyond the observed range the proposal may go.

    Returns
    -------
    FitResult
        ``proposal`` is ``None`` when the fit was not identifiable; ``reason`` says why.
    """
    samples = [s for s in history if s.rows > 0]
    n = len(samples)
    last_id = samples[-1].batch_id if samples else None
    if n < min_history:
        return FitResult(None, "too few samples", n, last_id)
    x = np.log2([s.inflection_point for s in samples])
    z = np.log([max(s.nbytes, 1) for s in samples])
    tput = np.array([s.throughput_rows_s for s in samples], dtype=float)
    lat = np.array([s.max_latency_s for s in samples], dtype=float)
    x_lo, x_hi = float(x.min()), float(x.max())
    if x_hi - x_lo < MIN_X_RANGE:
        return FitResult(None, "x range", n, last_id, x_range=(x_lo, x_hi))
    t_star = float(tput.max())
    if t_star <= 0:
        return FitResult(None, "no throughput", n, last_id, x_range=(x_lo, x_hi))

    # centred and scaled columns keep the design well conditioned; coefficients are
    # converted back to the formulas' raw x and z for the report
    xm = float(x.mean())
    xc = x - xm
    use_z = float(z.max() - z.min()) > 1e-9
    zm = float(z.mean())
    cols = [np.ones(n), xc, xc**2]
    names = ["const", "x", "x2"]
    if use_z:
        cols.append(z - zm)
        names.append("z")
    design = np.column_stack(cols)
    scale = np.abs(design).max(axis=0)
    if np.linalg.matrix_rank(design / scale) < design.shape[1] or n <= design.shape[1]:
        return FitResult(None, "singular", n, last_id, x_range=(x_lo, x_hi))
    try:
        fit_t = _ols(tput, design)
        fit_l = _ols(lat, design)
        bt, bl = np.asarray(fit_t.params, dtype=float), np.asarray(fit_l.params, dtype=float)
        if not (np.all(np.isfinite(bt)) and np.all(np.isfinite(bl))):
            raise FloatingPointError("non-finite coefficients")
        # a constant response (e.g. a latency that never changed) has no r2
        r2 = {name: (float(f.rsquared) if float(f.centered_tss) > 0 else None)
              for name, f in (("throughput", fit_t), ("latency", fit_l))}
    except Exception as exc:  # noqa: BLE001 - any fit failure keeps the current value
        return FitResult(None, f"error: {type(exc).__name__}: {exc}", n, last_id, x_range=(x_lo, x_hi))

    log_lo, log_hi = math.log2(bounds[0]), math.log2(bounds[1])
    g_lo = max(x_lo - max_step, log_lo)
    g_hi = min(x_hi + max_step, log_hi)
    k_lo, k_hi = math.ceil(g_lo / GRID_STEP - 1e-9), math.floor(g_hi / GRID_STEP + 1e-9)
    if k_hi < k_lo:
        return FitResult(None, "outside bounds", n, last_id, x_range=(x_lo, x_hi))
    grid = np.arange(k_lo, k_hi + 1) * GRID_STEP
    gc = grid - xm
    z_med = float(np.median(z)) - zm if use_z else 0.0

    def predict(b: np.ndarray) -> np.ndarray:
        y = b[0] + b[1] * gc + b[2] * gc**2
        return y + b[3] * z_med if use_z else y

    t_hat = predict(bt)
    shortfall = np.clip((t_star - t_hat) / t_star, 0.0, None)
    loss = shortfall**2
    if target_latency_s:
        excess = np.clip((predict(bl) - target_latency_s) / target_latency_s, 0.0, None)
        loss = loss + excess**2
    best = float(loss.min())
    ties = np.flatnonzero(loss <= best + TIE_TOLERANCE)
    # Where the fit reaches both targets the loss is 0 on a whole interval; take the highest
    # predicted throughput there, else the optimizer would only creep by the dither.
    t_ties = t_hat[ties]
    ties = ties[t_ties >= t_ties.max() - TIE_TOLERANCE * t_star]
    x_cur = math.log2(current)
    pick = int(ties[np.argmin(np.abs(grid[ties] - x_cur))])
    proposal = float(min(max(2.0 ** float(grid[pick]), bounds[0]), bounds[1]))

    def raw(b: np.ndarray) -> dict:
        # y = b0 + b1 (x - xm) + b2 (x - xm)^2 + b3 (z - zm), expanded
        out = {
            "const": float(b[0] - b[1] * xm + b[2] * xm * xm - (b[3] * zm if use_z else 0.0)),
            "x": float(b[1] - 2.0 * b[2] * xm),
            "x2": float(b[2]),
        }
        if use_z:
            out["z"] = float(b[3])
        return out

    return FitResult(
        proposal,
        "ok",
        n,
        last_id,
        coefficients={"throughput": raw(bt), "latency": raw(bl)},
        r2=r2,
        target_throughput=t_star,
        target_latency=target_latency_s,
        x_range=(x_lo, x_hi),
        loss=best,
    )


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------


def _positive(name: str, value: Any) -> float:
    if not _is_real(value) or value <= 0:
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _check_bounds(value: Any) -> tuple[float, float]:
    ok = isinstance(value, (tuple, list)) and len(value) == 2 and all(_is_real(v) for v in value)
    if not ok or not 0 < value[0] < value[1]:
        raise ConfigError(f"bounds must be (low, high) bytes with 0 < low < high, got {value!r}")
    return float(value[0]), float(value[1])


def _check_exploration(value: Any) -> float:
    if not _is_real(value) or not 0 <= value <= _MAX_EXPLORATION:
        raise ConfigError(
            f"exploration must be a number of log2 units in [0, {_MAX_EXPLORATION:g}], got {value!r}"
        )
    return float(value)


def _check_target_latency(value: Any) -> float | None:
    if value is None:
        return None
    return _positive("target_latency_s", value)


def _check_int(name: str, value: Any, low: int, high: int) -> int:
    if not _is_int(value) or not low <= value <= high:
        raise ConfigError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return int(value)


# ---------------------------------------------------------------------------
# the live object
# ---------------------------------------------------------------------------


class InflectionOptimizer:
    """Re-tunes the device mapper's inflection point after every micro-batch, in the background.

    Parameters
    ----------
    initial
        Inflection point in bytes before any fit (default 150 KiB, the paper's initial value).
    window
        How many recent batches the fits use (>= ``min_history``); older ones are dropped.
    min_history
        Usable batches needed before a fit (>= 5: the model has up to 4 coefficients).
    exploration
        Half-width of the dither, in log2 units, in ``[0, 2]`` (see the module docstring); 0
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
        The fit function (default: the module's :func:`fit_proposal`, looked up at each call).
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
        fn = self._fit_fn if self._fit_fn is not None else fit_proposal
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
    def frozen(self) -> bool:
        """Whether proposals are held back (after :meth:`freeze` or :meth:`set_inflection_point`)."""
        return self._frozen

    def set_inflection_point(self, nbytes: float) -> None:
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

    def set_target_latency(self, seconds: float | None) -> None:
        """Set ``L*`` in seconds (the slide), or ``None`` for the running mean (tumbling windows)."""
        value = _check_target_latency(seconds)
        with self._lock:
            if value != self._target_latency:
                self._target_latency = value
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
