"""Statistics the admission controller learns with: a service-time model and prediction bounds.

>>> round(student_t_quantile(0.95, 4), 2), nearest_rank_quantile([4, -1, 0, 1, 0], 0.6)
(2.13, 0)
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Callable, Sequence
from statistics import NormalDist
from typing import Any

from .exceptions import ConfigError

__all__ = ["ServiceTimeModel", "nearest_rank_quantile", "prediction_bound", "student_t_quantile"]


def _real(name: str, value: Any) -> float:
    # bool is an int subclass but "slide_s=True" is always a mistake.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    return float(value)


def _nonneg(name: str) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        v = _real(name, value)
        if not (v >= 0.0 and math.isfinite(v)):  # "not >=" also rejects NaN
            raise ConfigError(f"{name} must be a finite number >= 0, got {value}")
        return v

    return check


def _check_history(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ConfigError(f"history must be an integer >= 1, got {value!r}")
    return int(value)


def student_t_quantile(q: float, dof: int) -> float:
    """Quantile of Student's t distribution (Cornish-Fisher expansion around the normal).

    Accurate to about 1% for ``dof >= 2`` at the quantiles used for margins.

    >>> round(student_t_quantile(0.95, 4), 2), round(student_t_quantile(0.95, 1000), 3)
    (2.13, 1.646)
    """
    z = NormalDist().inv_cdf(q)
    v = float(dof)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
    )


def prediction_bound(values: Sequence[float], q: float) -> float | None:
    """Upper ``q`` prediction bound of the next value of a sample, assuming normal errors.

    ``mean + t(q, n-1) * sd * sqrt(1 + 1/n)``; None for fewer than 3 values.
    The t factor makes it wide while few errors have been seen, which is when
    the empirical quantile (the largest of a handful of errors) is least reliable.

    >>> round(prediction_bound([1, 0, 0, 4, -1], 0.95), 3)
    5.288
    """
    n = len(values)
    if n < 3:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1))
    return mean + student_t_quantile(q, n - 1) * sd * math.sqrt(1.0 + 1.0 / n)


def nearest_rank_quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile: sort, ``k = ceil(q * n)``, return ``sorted[k - 1]``.

    ``q * n`` is rounded to 9 decimals before the ceiling so that, e.g.,
    ``0.6 * 5`` (``3.0000000000000004`` in binary) gives rank 3, not 4.

    Parameters
    ----------
    values : sequence of float
        Non-empty sample.
    q : float
        Quantile in (0, 1].

    Examples
    --------
    >>> nearest_rank_quantile([4, -1, 0, 1, 0], 0.6)
    0
    >>> nearest_rank_quantile([4, -1, 0, 1, 0], 0.95)
    4
    """
    s = sorted(values)
    if not s:
        raise ConfigError("nearest_rank_quantile needs at least one value, got none")
    k = math.ceil(round(q * len(s), 9))
    k = min(max(k, 1), len(s))
    return s[k - 1]


# ---------------------------------------------------------------------------
# service-time model
# ---------------------------------------------------------------------------


class ServiceTimeModel:
    """Predicts a micro-batch's service (processing) time from its size in bytes.

    The model is deterministic and keeps the last ``history`` ``(nbytes,
    seconds)`` pairs.  With ``x`` the sizes and ``t`` the times held:

    * no observations: predict ``prior_s``;
    * fewer than 3 observations, or all sizes equal (a regression line is not
      identifiable): the conservative proportional rule. With
      ``m_t = mean(t)`` and ``m_x = mean(x)``, predict ``m_t`` if
      ``x <= m_x`` (or ``m_x == 0``), else ``m_t * x / m_x`` -- a smaller
      batch is never predicted faster than the average, a larger one scales
      linearly;
    * otherwise ordinary least squares of ``t`` on ``x``: slope
      ``b = cov(x, t) / var(x)`` clipped at ``>= 0`` (bigger batches never run
      faster), intercept ``a = mean(t) - b * mean(x)``; if ``a < 0`` the line
      is refitted through the origin (``a = 0``, ``b = sum(x t) / sum(x^2)``).
      Predict ``max(a + b * x, 0)``.

    Parameters
    ----------
    history : int, default 100
        How many recent observations to keep (>= 1).
    prior_s : float, default 0.5
        Prediction before any observation (>= 0).  Writable.

    Examples
    --------
    >>> m = ServiceTimeModel(prior_s=0.5)
    >>> m.predict(1000)
    0.5
    >>> m.update(100, 1.0); m.update(300, 2.0)
    >>> m.predict(150), m.predict(400)     # proportional rule: m_t = 1.5, m_x = 200
    (1.5, 3.0)
    >>> m.update(200, 1.5)
    >>> a, b = m.coefficients; round(a, 6), round(b, 6)   # OLS now
    (0.5, 0.005)
    """

    def __init__(self, *, history: int = 100, prior_s: float = 0.5) -> None:
        self._history = _check_history(history)
        self._prior_s = _nonneg("prior_s")(prior_s)
        self._obs: deque[tuple[float, float]] = deque(maxlen=self._history)
        # Cached fit so predict() is O(1): ("prior"|"proportional"|"ols", p, q)
        # where p, q are (m_t, m_x) for the proportional rule, (a, b) for OLS.
        self._mode = "prior"
        self._p = 0.0
        self._q = 0.0

    # -- read-only state ----------------------------------------------------
    @property
    def history(self) -> int:
        """Maximum number of observations held."""
        return self._history

    @property
    def n(self) -> int:
        """Number of observations currently held (<= ``history``)."""
        return len(self._obs)

    @property
    def mode(self) -> str:
        """Which rule predicts: ``"prior"``, ``"proportional"`` or ``"ols"``."""
        return self._mode

    @property
    def coefficients(self) -> tuple[float, float] | None:
        """``(intercept, slope)`` of the OLS line, or None when not in OLS mode."""
        if self._mode != "ols":
            return None
        return (self._p, self._q)

    @property
    def line(self) -> tuple[float, float] | None:
        """``(intercept, slope)`` of the cost of a batch as a line in its bytes: the OLS line, or before
        it the proportional rule's average cost per byte through the origin (its flat part below the
        mean size left out); None before any observation or where every batch had 0 bytes.

        >>> m = ServiceTimeModel()
        >>> m.line is None
        True
        >>> m.update(100, 1.0); m.line
        (0.0, 0.01)
        """
        if self._mode == "ols":
            return (self._p, self._q)
        if self._mode == "proportional" and self._q > 0.0:
            return (0.0, self._p / self._q)
        return None

    @property
    def prior_s(self) -> float:
        """Prediction used while no observation is held."""
        return self._prior_s

    @prior_s.setter
    def prior_s(self, value: float) -> None:
        self._prior_s = _nonneg("prior_s")(value)

    # -- learning / predicting ---------------------------------------------
    def update(self, nbytes: int, seconds: float) -> None:
        """Add one ``(nbytes, seconds)`` observation and refit.

        Raises
        ------
        ConfigError
            If ``nbytes`` or ``seconds`` is negative or not finite.
        """
        x = _nonneg("nbytes")(nbytes)
        t = _nonneg("seconds")(seconds)
        self._obs.append((x, t))
        self._refit()

    def predict(self, nbytes: int) -> float:
        """Predicted service time in seconds for a batch of ``nbytes`` bytes."""
        mode = self._mode
        x = float(nbytes)
        if mode == "ols":
            y = self._p + self._q * x
            return max(0.0, y)
        if mode == "proportional":
            m_t, m_x = self._p, self._q
            if m_x == 0.0 or x <= m_x:
                return m_t
            return m_t * x / m_x
        return self._prior_s

    def _refit(self) -> None:
        obs = self._obs
        n = len(obs)
        if n == 0:
            self._mode = "prior"
            return
        xs = [o[0] for o in obs]
        ts = [o[1] for o in obs]
        m_x = math.fsum(xs) / n
        m_t = math.fsum(ts) / n
        if n < 3 or min(xs) == max(xs):
            self._mode, self._p, self._q = "proportional", m_t, m_x
            return
        # Centred sums: numerically stable for large byte counts.
        sxx = math.fsum((x - m_x) ** 2 for x in xs)
        sxt = math.fsum((x - m_x) * (t - m_t) for x, t in zip(xs, ts))
        b = sxt / sxx
        b = max(b, 0.0)
        a = m_t - b * m_x
        if a < 0.0:
            # A negative intercept would predict ~0 s for small batches and
            # make the controller wait too long; go through the origin instead.
            a = 0.0
            b = math.fsum(x * t for x, t in zip(xs, ts)) / math.fsum(x * x for x in xs)
        self._mode, self._p, self._q = "ols", a, b

    def __repr__(self) -> str:
        return f"ServiceTimeModel(history={self._history}, prior_s={self._prior_s}, n={self.n}, mode={self._mode!r})"
