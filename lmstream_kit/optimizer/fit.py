"""The inflection-point model, pure: no thread, no state (LMStream Section III-E, Eq. 10).

:func:`fit_proposal` fits throughput and latency over a window of :class:`BatchSample` and proposes
a value; :func:`dither` is the exploration offset; the ``_check_*`` helpers validate settings.

Example
-------
>>> history = [BatchSample(b, 2.0 ** (16 + 0.25 * (b % 4)), rows=1000, nbytes=10**6,
...                        throughput_rows_s=1e4 * (1 + 0.1 * (b % 4)), max_latency_s=1.0)
...            for b in range(8)]
>>> result = fit_proposal(history, current=2.0**16, bounds=(1024, 2.0**30), target_latency_s=None)
>>> result.reason, result.n, round(math.log2(result.proposal), 3)
('ok', 8, 17.75)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..exceptions import ConfigError
from ..protocol import positive as _positive

__all__ = [
    "GRID_STEP",
    "MIN_X_RANGE",
    "TIE_TOLERANCE",
    "BatchSample",
    "FitResult",
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
    in :func:`fit_proposal`'s formulas (``x`` = log2 bytes, ``z`` = ln batch bytes); ``r2`` likewise
    (``None`` for a response that did not vary).
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

    Why: if every batch were mapped with the same ``x``, the ``x`` and ``x**2`` columns of
    :func:`fit_proposal` would be constant and the regression singular: the optimizer could never
    learn which way to move.  So the value applied to each batch is the proposal times ``2 ** u``,
    with ``u`` this offset (default exploration 0.25 log2 units, i.e. about -16 % .. +19 %), clipped
    to the bounds.  Being a hash, a run is reproducible whatever the thread timing.
    ``exploration=0`` disables the dither (and with it, after the first batches, the fits: they are
    skipped as "x range").  A frozen optimizer does not dither.

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
    """Fit the two quadratic responses below on ``history`` and propose an inflection point.

    The paper's Equation 10 was lost in the text we work from; this model keeps what the section
    states (regression on the per-batch history of inflection point, throughput and maximum latency;
    target throughput = best seen; target latency = the slide, or the mean for tumbling windows).

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

