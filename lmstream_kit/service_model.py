"""A service-time model that sees what makes a micro-batch slow, fitted online in the background.

:class:`FeatureServiceModel` predicts a batch's processing seconds from what the stream knows before
admission (:data:`FEATURES`); :func:`windows_closed` counts the windows a batch closes;
:func:`compare_errors` replays a trace through it and the bytes-only model.

Example
-------
>>> trace = [({"bytes": 1e5 * k, "windows_closed": k % 2}, 0.5 + 1e-6 * 1e5 * k + 0.4 * (k % 2))
...          for k in range(1, 8)]
>>> with FeatureServiceModel(min_obs=4, background=False) as m:
...     for features, seconds in trace:
...         m.observe(features, seconds)
>>> c = m.coefficients
>>> round(c["intercept"], 6), round(c["bytes"] * 1e6, 6), round(c["windows_closed"], 6), c["partitions"]
(0.5, 1.0, 0.4, 0.0)
>>> round(m.predict({"bytes": 2e5, "windows_closed": 1}), 6)
1.1
"""

from __future__ import annotations

import math
import numbers
import statistics
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .exceptions import ConfigError
from .stats import ServiceTimeModel, nearest_rank_quantile

__all__ = ["FEATURES", "INPUTS", "FeatureServiceModel", "HeapForecast", "compare_errors", "window_end_at", "window_ends_passed",
           "windows_closed"]

#: the driver JVM's memory pools each progress record reports (``<pool>_used_bytes`` and
#: ``<pool>_committed_bytes``: :class:`lmstream_kit.engine.listener.JvmMemory`), and HeapForecast reads
HEAP_POOLS = ("eden", "old")

#: What the caller passes to :meth:`FeatureServiceModel.observe` and ``predict``, with its unit.
#: All are known before the batch is admitted; a missing one counts as 0.
INPUTS: dict[str, str] = {
    "bytes": "bytes in the batch",
    "windows_closed": "window ends the watermark passes with this batch (count; see windows_closed)",
    "state_rows": "rows held in state stores, from Spark's last progress (sum of numRowsTotal)",
    "state_bytes": "state stores' memory, bytes, from Spark's last progress (sum of memoryUsedBytes)",
    "state_rows_removed": "state rows the last progress reported removed (sum of numRowsRemoved)",
    "since_eviction_s": "wall seconds since the last batch that removed state rows",
    "partitions": "partitions the batch will be processed with (count)",
    "young_gc_due": "1 where the batch's rows would fill the driver's eden: a young collection pauses it "
                    "(HeapForecast), else 0",
    "full_gc_due": "1 where that collection would also overflow the old generation: a full collection, "
                   "the long pause (HeapForecast), else 0",
}

#: The model's features: the :data:`INPUTS`, then the interaction ``windows_closed x state_rows``
#: (rows; eviction work grows with the state the closing windows sweep), computed from them.
FEATURES: tuple[str, ...] = (*INPUTS, "windows_closed_x_state_rows")

# Window ends and watermarks are sums of decimal-looking floats (e.g. 0.1 * 3 against 0.3); a
# nanosecond of tolerance resolves exact ties as "reached", as the admission controller does.
_TIE_EPS_S = 1e-9


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------


def _finite(name: str, value: Any, *, nonneg: bool = True) -> float:
    # bool is an int subclass, but "bytes=True" is always a mistake
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real)
    v = float(value) if ok else math.nan
    if not (math.isfinite(v) and (v >= 0.0 or not nonneg)):
        need = "a finite number >= 0" if nonneg else "a finite number"
        raise ConfigError(f"{name} must be {need}, got {value!r}")
    return v


def _vector(features: Mapping[str, float]) -> tuple[float, ...]:
    """The :data:`FEATURES` row of one batch (missing inputs are 0; the interaction is computed)."""
    if not isinstance(features, Mapping):
        raise ConfigError(f"features must be a mapping of feature name -> value, got {features!r}")
    unknown = sorted(str(k) for k in features if k not in INPUTS)
    if unknown:
        raise ConfigError(
            f"unknown feature {', '.join(repr(k) for k in unknown)}; known features: {', '.join(INPUTS)}"
        )
    row = [_finite(f"feature {name!r}", features.get(name, 0.0)) for name in INPUTS]
    row.append(row[1] * row[2])  # windows_closed x state_rows
    return tuple(row)


def _check_count(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


# ---------------------------------------------------------------------------
# the fit (pure)
# ---------------------------------------------------------------------------


def _fit_nonneg(X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Non-negative least squares of ``y`` on ``[1, X]``: ``(intercept, coefficients)``, all >= 0.

    Every column of ``X`` must vary (:func:`_run_fit` drops the others).  The columns are divided
    by their root mean square (scaled, not centred: centring would move the intercept out of the
    sign constraint), which keeps bytes (~1e6) and counts (~1) equally conditioned.  The intercept
    is a constant column with ``fit_intercept=False``: scikit-learn's own intercept with
    ``positive=True`` is ``mean(y) - mean(X) @ coef``, which can be negative.  Looked up at each
    fit, so a test can replace it.

    >>> a, b = _fit_nonneg(np.array([[1.0], [2.0], [3.0]]), np.array([-1.0, -0.5, 0.0]))
    >>> float(a), [float(v) for v in b]        # unconstrained: -1.5 + 0.5 x
    (0.0, [0.0])
    """
    from sklearn.linear_model import LinearRegression  # lazy: importing this module stays cheap

    scale = np.sqrt(np.mean(X**2, axis=0))
    A = np.hstack([np.ones((X.shape[0], 1)), X / scale])
    reg = LinearRegression(fit_intercept=False, positive=True).fit(A, y)
    return float(reg.coef_[0]), reg.coef_[1:] / scale


@dataclass(frozen=True)
class _Fit:
    """One published fit (immutable: ``predict`` reads it without a lock once it holds it)."""

    intercept: float
    coef: tuple[float, ...]  # by FEATURES, in seconds per unit
    dropped: tuple[str, ...]  # features that never varied in the fitted window
    n: int
    rmse_s: float  # in-sample
    mae_s: float

    def predict(self, x: Sequence[float]) -> float:
        return self.intercept + math.fsum(c * v for c, v in zip(self.coef, x))


# ---------------------------------------------------------------------------
# the live model
# ---------------------------------------------------------------------------


class FeatureServiceModel:
    """Predicts a micro-batch's processing seconds from :data:`FEATURES`, refitted in the background.

    ``seconds = intercept + sum(coef[f] * feature[f])`` with every coefficient, the intercept
    included, ``>= 0`` (every feature can only add time), fitted by scikit-learn's
    ``LinearRegression(positive=True)`` on the last ``history`` observations (see
    :func:`_fit_nonneg`).  Each :meth:`observe` once ``min_obs`` observations are held asks for a
    refit; fits run on one daemon worker thread and requests that pile up while one runs are
    coalesced (the next fit takes the newest window).  :meth:`predict` reads the last published fit
    and never waits for one.

    Parameters
    ----------
    history : int, default 200
        Observations kept for the fit, and out-of-sample errors kept (>= ``min_obs``).
    min_obs : int, default 12
        Observations needed before the first fit (>= 2).
    background : bool, default True
        ``False``: each :meth:`observe` fits inline (deterministic tests; it blocks the caller).

    Notes
    -----
    :attr:`errors` are the out-of-sample residuals ``seconds - prediction``, each prediction made
    by the fit published just before that observation was added (none before the first fit):
    what the admission controller learns its margin from.  Same observations, same coefficients.
    After :meth:`close`, observations are still recorded and predictions still answered, but no
    fit runs.

    Examples
    --------
    >>> m = FeatureServiceModel(min_obs=3, background=False)
    >>> m.observe({"bytes": 1000}, 0.5); m.observe({"bytes": 2000}, 0.7)
    >>> m.predict({"bytes": 1500}) is None, m.mode            # fewer than min_obs
    (True, 'unfitted')
    >>> m.observe({"bytes": 3000}, 0.9)
    >>> round(m.predict({"bytes": 4000}), 6), m.coefficients["state_rows"]   # state never varied
    (1.1, 0.0)
    >>> m.observe({"bytes": 4000}, 1.2); [round(e, 6) for e in m.errors]
    [0.1]
    >>> m.observe({"bytes": -1}, 1.0)
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: feature 'bytes' must be a finite number >= 0, got -1
    """

    def __init__(self, *, history: int = 200, min_obs: int = 12, background: bool = True) -> None:
        self._min_obs = _check_count("min_obs", min_obs, 2)
        self._history = _check_count("history", history, self._min_obs)
        if not isinstance(background, bool):
            raise ConfigError(f"background must be True or False, got {background!r}")
        self._background = background
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the worker waits on it
        self._done = threading.Condition(self._lock)  # wait() waits on it
        self._X: deque[tuple[float, ...]] = deque(maxlen=self._history)
        self._y: deque[float] = deque(maxlen=self._history)
        self._errors: deque[float] = deque(maxlen=self._history)
        self._fit: _Fit | None = None
        self._n_requested = 0  # observe calls that asked for a fit
        self._n_done = 0  # the highest request a finished fit covered
        self._pending = 0  # requests the worker has not picked up yet
        self._fitting = False
        self._fits_run = 0
        self._fits_coalesced = 0
        self._fits_failed = 0
        self._last_error: str | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    # -- internal (call with the lock held) ------------------------------------------------------

    def _fit_args(self) -> tuple[np.ndarray, np.ndarray, int]:
        return np.array(self._X, dtype=float), np.array(self._y, dtype=float), self._n_requested

    def _publish(self, result: _Fit | Exception, request: int) -> None:
        self._n_done = max(self._n_done, request)
        if isinstance(result, Exception):  # a failed fit keeps the last published one
            self._fits_failed += 1
            self._last_error = f"{type(result).__name__}: {result}"
        else:
            self._fits_run += 1
            self._fit = result
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
                self._fitting = True
                X, y, request = self._fit_args()
            result = _run_fit(X, y)
            with self._lock:
                self._fitting = False
                self._publish(result, request)

    # -- the stream's calls ----------------------------------------------------------------------

    def observe(self, features: Mapping[str, float], seconds: float) -> None:
        """Record a finished batch's features and processing ``seconds``; ask for a refit.

        Never waits for a fit when ``background``.  The residual against the published fit is
        added to :attr:`errors` before the batch joins the window.

        Raises
        ------
        ConfigError
            If a feature is unknown, negative or not finite, or ``seconds`` is.
        """
        x = _vector(features)
        t = _finite("seconds", seconds)
        with self._lock:
            if self._fit is not None:
                self._errors.append(t - self._fit.predict(x))
            self._X.append(x)
            self._y.append(t)
            if self._closed or len(self._y) < self._min_obs:
                return
            self._n_requested += 1
            if self._background:
                self._pending += 1
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._worker, name="lmstream-service-model", daemon=True
                    )
                    self._thread.start()
                self._work.notify()
                return
            X, y, request = self._fit_args()
        result = _run_fit(X, y)
        with self._lock:
            self._publish(result, request)

    update = observe  # river-style alias

    def predict(self, features: Mapping[str, float]) -> float | None:
        """Predicted processing seconds of a batch, or None until a fit is published.

        Reads the last published fit (the lock is held only to read it); never waits for a fit.

        Raises
        ------
        ConfigError
            If a feature is unknown, negative or not finite.
        """
        x = _vector(features)
        with self._lock:
            fit = self._fit
        return None if fit is None else fit.predict(x)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the fits asked for so far are published; False if ``timeout`` s passed first.

        For tests and reports; the stream never calls it.  True at once when ``background`` is
        False or after :meth:`close`.
        """
        with self._lock:
            wanted = self._n_requested
            return self._done.wait_for(lambda: self._n_done >= wanted or self._closed, timeout)

    # -- read-only answers -----------------------------------------------------------------------

    @property
    def n(self) -> int:
        """Observations held (<= ``history``)."""
        return len(self._y)

    @property
    def history(self) -> int:
        return self._history

    @property
    def min_obs(self) -> int:
        return self._min_obs

    @property
    def background(self) -> bool:
        return self._background

    @property
    def mode(self) -> str:
        """``"unfitted"`` until a fit is published, then ``"fitted"``."""
        return "unfitted" if self._fit is None else "fitted"

    @property
    def coefficients(self) -> dict[str, float] | None:
        """``{"intercept": s, feature: s per unit, ...}`` of the published fit, or None."""
        fit = self._fit
        if fit is None:
            return None
        return {"intercept": fit.intercept, **dict(zip(FEATURES, fit.coef))}

    @property
    def errors(self) -> list[float]:
        """Out-of-sample residuals ``seconds - prediction``, newest last (a copy, <= ``history``)."""
        with self._lock:
            return list(self._errors)

    @property
    def fits_run(self) -> int:
        """Fits published so far."""
        return self._fits_run

    def snapshot(self) -> dict:
        """JSON-serialisable state: coefficients by feature, fit and out-of-sample errors, counters.

        Examples
        --------
        >>> import json
        >>> s = FeatureServiceModel().snapshot()
        >>> s["mode"], s["coefficients"], s["n"], s["errors_mae_s"]
        ('unfitted', None, 0, None)
        >>> _ = json.dumps(s)
        """
        with self._lock:
            fit = self._fit
            errs = [abs(e) for e in self._errors]
            return {
                "mode": "unfitted" if fit is None else "fitted",
                "background": self._background,
                "n": len(self._y),
                "history": self._history,
                "min_obs": self._min_obs,
                "coefficients": self.coefficients,
                "dropped": None if fit is None else list(fit.dropped),
                "fit_n": None if fit is None else fit.n,
                "fit_rmse_s": None if fit is None else fit.rmse_s,
                "fit_mae_s": None if fit is None else fit.mae_s,
                "errors_n": len(errs),
                "errors_mae_s": math.fsum(errs) / len(errs) if errs else None,
                "errors_p95_abs_s": nearest_rank_quantile(errs, 0.95) if errs else None,
                "fits_requested": self._n_requested,
                "fits_run": self._fits_run,
                "fits_coalesced": self._fits_coalesced,
                "fits_failed": self._fits_failed,
                "last_error": self._last_error,
                "fitting": self._fitting,
                "closed": self._closed,
            }

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop the worker thread (idempotent); a fit in progress finishes first, within ``timeout``."""
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

    def __enter__(self) -> FeatureServiceModel:  # noqa: PYI034  (typing.Self needs Python 3.11)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"FeatureServiceModel(history={self._history}, min_obs={self._min_obs}, "
            f"background={self._background}, n={self.n}, mode={self.mode!r})"
        )


def _run_fit(X: np.ndarray, y: np.ndarray) -> _Fit | Exception:
    """Fit and summarise one window; an exception is returned, not raised (it keeps the last fit).

    Features that never varied in the window are dropped (coefficient 0): an all-zero one (no
    state information) cannot be scaled, and a constant one is the intercept's.
    """
    try:
        varied = X.max(axis=0) > X.min(axis=0)
        intercept, fitted = _fit_nonneg(X[:, varied], y)
        coef = np.zeros(X.shape[1])
        coef[varied] = fitted
        resid = y - (intercept + X @ coef)
        dropped = tuple(f for f, v in zip(FEATURES, varied) if not v)
        return _Fit(intercept, tuple(float(c) for c in coef), dropped, len(y),
                    float(np.sqrt(np.mean(resid**2))), float(np.mean(np.abs(resid))))
    except Exception as exc:  # noqa: BLE001 - a failed fit must not kill the worker
        return exc


# ---------------------------------------------------------------------------
# pure helpers
# ---------------------------------------------------------------------------


#: the quantile of the bytes a row left promoted that :class:`HeapForecast` expects of the next batch
#: (chosen on six LR1S runs, four under the serial collector: it caught 17 of 22 full collections
#: before they happened, with 8 false alarms; the median caught 10 with 2)
PROMOTION_QUANTILE = 0.9
#: :meth:`HeapForecast.collection_near` says a full collection is near where the old generation's free
#: part is below this many times the most any batch promoted (chosen on the capacity probes of
#: ``paper-collected-heap``, parallel collector, 4 GiB driver: on LR1T it named the batch before 20 of
#: 25 full collections, with 12 false alarms in 708 batches; on LR1S 12 of 13, with 8 in 900)
COLLECTION_NEAR_FACTOR = 1.25
#: full collections whose pauses :meth:`HeapForecast.full_pause_s` keeps (the largest counts)
FULL_PAUSES_KEPT = 5


class HeapForecast:
    """Whether a batch of ``rows`` rows will stop for the driver JVM's garbage collector.

    In local mode the driver runs the tasks, and its collector stops them: a *young* collection
    when eden, where new objects go, fills, and a *full* one, the long pause, when the old
    generation, where survivors are promoted, fills.  Both are predictable from the heap after the
    last batch (the ``eden_*`` and ``old_*`` fields of Spark's progress, which
    :class:`lmstream_kit.engine.listener.JvmMemory` adds) and two rates learned per row from the
    batches before: the eden bytes a row allocates (eden's growth, plus a full eden for each
    collection in between) and the old-generation bytes a row leaves promoted (the old
    generation's growth over batches without a full collection).  :meth:`observe` each
    progress; :meth:`features` says ``young_gc_due`` and ``full_gc_due`` (1.0 or 0.0) for a
    candidate batch, or {} before it has learned.

    LR1S under the serial collector (a run's progress, in MB): eden fills in every batch, the old
    generation grows by 25-82 MB a 3,000-row batch (the forecast expects its 90th percentile), and
    the batch after the one that leaves it within that of its committed size collects it all:

    >>> h = HeapForecast()
    >>> mb = 2**20
    >>> def progress(rows, eden, old, committed=613, young=1, full=0):
    ...     return {"numInputRows": rows, "eden_used_bytes": eden * mb, "eden_committed_bytes": 245 * mb,
    ...             "old_used_bytes": old * mb, "old_committed_bytes": committed * mb,
    ...             "jvm_gc_count": young + full, "jvm_full_gc_count": full}
    >>> for eden, old in ((134, 395), (197, 427), (5, 509), (75, 549), (124, 574), (193, 602)):
    ...     h.observe(progress(3000, eden, old))
    >>> h.features(3000)                       # 602 + up to 82 > 613: the next batch collects it all
    {'young_gc_due': 1.0, 'full_gc_due': 1.0}
    >>> h.observe(progress(3000, 56, 396, committed=638, full=1)); h.features(3000)   # eden fills every batch
    {'young_gc_due': 1.0, 'full_gc_due': 0.0}
    """

    _NEEDS = tuple(f"{pool}_{what}_bytes" for pool in HEAP_POOLS for what in ("used", "committed"))

    def __init__(self, history: int = 30) -> None:
        self._alloc: deque[float] = deque(maxlen=history)  # eden bytes a row allocates
        self._promoted: deque[float] = deque(maxlen=history)  # old-generation bytes a row leaves
        self._batch_promoted: deque[float] = deque(maxlen=history)  # old-generation bytes a batch left
        self._full_pauses: deque[float] = deque(maxlen=FULL_PAUSES_KEPT)  # collection s of full-collection batches
        self._last: dict[str, float] | None = None
        # what features() reads, computed once per batch here and not at each of the gate's polls: a
        # numpy call there waited for the GIL behind the process's other threads (a poll cost 330
        # us on average with heap_admit on against 54 without, in the sweep paper-collected-heap)
        self._alloc_per_row: float | None = None  # the median of _alloc
        self._promoted_per_row = 0.0  # the PROMOTION_QUANTILE of _promoted

    def observe(self, progress: Mapping[str, Any], rows: float | None = None) -> None:
        """Spark's progress of a batch (with the heap after it); one without the heap's fields is skipped.

        ``rows``: the batch's rows as :meth:`features` will be asked about them (the spool rows the
        batch admitted).  Spark's ``numInputRows`` counts a source once per read (twice in a
        self-join), so it is only the fallback.
        """
        now = {k: float(progress[k]) for k in (*self._NEEDS, "jvm_gc_count", "jvm_full_gc_count", "jvm_gc_ms",
                                                "numInputRows")
               if isinstance(progress.get(k), numbers.Real) and math.isfinite(progress[k])}
        if now.get("jvm_full_gc_count", 0.0) > 0 and now.get("jvm_gc_ms", 0.0) > 0:
            self._full_pauses.append(now["jvm_gc_ms"] / 1000.0)
        if not all(k in now for k in self._NEEDS):
            return
        last, self._last = self._last, now
        rows = float(rows) if rows is not None else now.get("numInputRows", 0.0)
        if last is None or "jvm_gc_count" not in now or rows <= 0:
            return
        collections, full = now["jvm_gc_count"], now.get("jvm_full_gc_count", 0.0)
        # what went into eden: its growth, plus the full eden each collection emptied
        allocated = now["eden_used_bytes"] - last["eden_used_bytes"] + collections * last["eden_committed_bytes"]
        if allocated >= 0:
            self._alloc.append(allocated / rows)
            self._alloc_per_row = statistics.median(self._alloc)
        if full == 0 and now["old_used_bytes"] >= last["old_used_bytes"]:
            self._promoted.append((now["old_used_bytes"] - last["old_used_bytes"]) / rows)
            self._batch_promoted.append(now["old_used_bytes"] - last["old_used_bytes"])
            # a high quantile of the promotion: a batch that promotes more than most is the one that overflows
            self._promoted_per_row = nearest_rank_quantile(list(self._promoted), PROMOTION_QUANTILE)

    def features(self, rows: float) -> dict[str, float]:
        """``young_gc_due`` and ``full_gc_due`` for a batch of ``rows`` rows admitted now ({} before any rate)."""
        last, alloc = self._last, self._alloc_per_row
        if last is None or alloc is None:
            return {}
        rows = max(0.0, float(rows))
        young = last["eden_used_bytes"] + alloc * rows > last["eden_committed_bytes"]
        full = last["old_used_bytes"] + self._promoted_per_row * rows > last["old_committed_bytes"]
        return {"young_gc_due": float(young), "full_gc_due": float(full)}

    def rows_fitting(self) -> float | None:
        """The rows a batch may hold before it promotes more than the old generation has free, by
        the promotion per row :meth:`features` expects (None before that is known, or where a row
        promotes nothing).

        >>> h = HeapForecast(); mb = 2**20
        >>> def progress(old):
        ...     return {"numInputRows": 1000, "eden_used_bytes": 0, "eden_committed_bytes": 500 * mb,
        ...             "old_used_bytes": old * mb, "old_committed_bytes": 2000 * mb,
        ...             "jvm_gc_count": 1, "jvm_full_gc_count": 0}
        >>> h.rows_fitting() is None
        True
        >>> for old in (200, 500, 900, 1300):          # 0.3-0.4 MB a row
        ...     h.observe(progress(old))
        >>> h.rows_fitting()                             # 700 MB free at 0.4 MB a row
        1750.0
        """
        last, per_row = self._last, self._promoted_per_row
        if last is None or not per_row > 0:
            return None
        return max(0.0, last["old_committed_bytes"] - last["old_used_bytes"]) / per_row

    def collection_near(self, factor: float = COLLECTION_NEAR_FACTOR) -> bool:
        """Whether the old generation's free part is below ``factor`` times the most a batch promoted so
        far: the next batch, whatever its size, is likely to stop for a full collection (False before
        any batch's promotion is known).

        The parallel collector starts a full collection before the old generation is full, once a young
        collection may promote more than is free, so this looks at the free part, not at one batch's
        rows (:meth:`features`).

        >>> h = HeapForecast(); mb = 2**20
        >>> def progress(old, full=0):
        ...     return {"numInputRows": 1000, "eden_used_bytes": 0, "eden_committed_bytes": 500 * mb,
        ...             "old_used_bytes": old * mb, "old_committed_bytes": 2000 * mb,
        ...             "jvm_gc_count": 1 + full, "jvm_full_gc_count": full, "jvm_gc_ms": 1400 * full + 100}
        >>> h.collection_near()
        False
        >>> for old in (200, 500, 900, 1300):          # 300-400 MB a batch
        ...     h.observe(progress(old))
        >>> h.collection_near()                          # 700 MB free, more than 1.25 x 400
        False
        >>> h.observe(progress(1600)); h.collection_near(), h.full_pause_s()   # 400 MB free
        (True, None)
        >>> h.observe(progress(300, full=1)); h.collection_near(), h.full_pause_s()
        (False, 1.5)
        """
        last = self._last
        if last is None or not self._batch_promoted:
            return False
        free = last["old_committed_bytes"] - last["old_used_bytes"]
        return free < factor * max(self._batch_promoted)

    def full_pause_s(self) -> float | None:
        """The longest collection time of the last few batches that ran a full collection, seconds (their
        young collections included); None before one ran."""
        return max(self._full_pauses) if self._full_pauses else None


#: a batch thrashed in the driver's collector where a full collection ran in it and the collector took at
#: least this share of its processing (LR1T at 34,896 rows/s, 4 GiB driver, lr1t-capacity-2026-12-05:
#: lmstream's batches of 560,000-630,000 rows left the collector 46-95% of 8-21 s; asap's of 76,000-
#: 150,000 rows, at 38,055 rows/s, ran their full collections in a few batches and kept the bound)
THRASH_GC_SHARE = 0.4
#: a thrashing batch cuts :class:`RowCap` to this share of its rows
CAP_CUT = 0.5
#: a batch that held at least half the cap and ran no full collection raises the cap by this factor
CAP_GROWTH = 1.25
#: the cap is never cut below this share of the rows of the batch that first set it
CAP_FLOOR_SHARE = 0.125


class RowCap:
    """A cap on a batch's rows where large batches thrash in the driver's collector.

    A batch in which a full collection ran and the collector took at least
    :data:`THRASH_GC_SHARE` of the processing cuts the cap to :data:`CAP_CUT` of its rows (or of
    the cap, where that is lower); a batch that held at least half the cap and ran no full
    collection raises it by :data:`CAP_GROWTH`: additive-increase, multiplicative-decrease on the
    batch's rows, as a sender's window is sized to what the path carries.  Before the first
    thrashing batch there is no cap (:attr:`cap` is None).  The cap is never cut below
    :data:`CAP_FLOOR_SHARE` of the rows of the batch that first set it.

    Why: a stateful query whose state fills most of the heap (LR1T's join at 35,000 rows/s in a
    4 GiB driver) keeps a batch's own rows live beside it while the batch runs; a batch too large
    for what the heap has left makes full collections that free little, over and over, and the
    batch's time grows from seconds to tens of seconds.  No model of the batch's bytes sees it
    coming; the batches' sizes do.

    >>> cap = RowCap()
    >>> cap.observe(rows=600_000, processing_s=3.4, gc_s=0.9, full_gcs=0); cap.cap is None
    True
    >>> cap.observe(rows=600_000, processing_s=8.7, gc_s=4.0, full_gcs=1); cap.cap    # 46% in the collector
    300000.0
    >>> cap.observe(rows=290_000, processing_s=2.0, gc_s=0.3, full_gcs=0); cap.cap    # held, no full one
    375000.0
    >>> cap.observe(rows=100_000, processing_s=1.0, gc_s=0.1, full_gcs=0); cap.cap    # far below: no news
    375000.0
    >>> for _ in range(5):
    ...     cap.observe(rows=300_000, processing_s=6.0, gc_s=5.0, full_gcs=2)
    >>> cap.cap                                                                        # the floor
    75000.0
    """

    def __init__(self) -> None:
        self.cap: float | None = None
        self._floor = 0.0

    def observe(self, *, rows: float, processing_s: float, gc_s: float, full_gcs: float) -> None:
        """A completed batch: its rows, processing seconds, and the collector's seconds and full
        collections in it (Spark's progress of that batch)."""
        if not (rows > 0 and processing_s > 0) or not all(math.isfinite(v) for v in (rows, processing_s, gc_s)):
            return
        if full_gcs > 0 and gc_s >= THRASH_GC_SHARE * processing_s:
            if self.cap is None:
                self._floor = CAP_FLOOR_SHARE * rows
            self.cap = max(self._floor, CAP_CUT * min(float(rows), self.cap if self.cap is not None else math.inf))
        elif self.cap is not None and full_gcs == 0 and rows >= 0.5 * self.cap:
            self.cap *= CAP_GROWTH


def window_end_at(t: float, period_s: float) -> float:
    """The latest window end (a multiple of ``period_s``) at or before ``t``; an exact tie counts.

    >>> window_end_at(119.9999999999, 60), window_end_at(119.9, 60), window_end_at(-1, 60)
    (120.0, 60.0, -60.0)
    """
    return float(math.floor((t + _TIE_EPS_S) / period_s) * period_s)


def window_ends_passed(
    closed_end: float | None,
    seconds: Iterable[float],
    period_s: float,
    lateness_s: float,
) -> tuple[float | None, list[float]]:
    """The window ends a watermark passes as event seconds arrive: the one rule for window closes.

    Windows end at multiples of ``period_s`` (the slide of a sliding window, the length of a
    tumbling one).  ``closed_end`` is the end of the latest window already passed (None before any
    data); each second in ``seconds``, in arrival order, moves the watermark to itself minus
    ``lateness_s``, and every window end after ``closed_end`` that the watermark reaches (an exact
    tie counts) is passed.  The first data passes nothing: windows ending at or before it hold none
    of its rows, so ``closed_end`` starts at the end just before it.  Returns the new
    ``closed_end`` and the ends passed, oldest first.  :class:`~lmstream_kit.results.WindowResults`
    (which batch emits which window) and the admission controller (what pending data would close)
    both count with it.

    >>> window_ends_passed(None, [64, 66], 60, 5)          # [0, 60) held no row: nothing closes
    (60.0, [])
    >>> window_ends_passed(60.0, [90, 124, 185], 60, 5)    # 124 passes 120; 185 passes 180
    (180.0, [120.0, 180.0])
    >>> window_ends_passed(None, [0, 30, 65], 60, 5)       # 65's watermark reaches 60 exactly
    (60.0, [60.0])
    """
    period = _finite("period_s", period_s)
    if period <= 0.0:
        raise ConfigError(f"period_s must be > 0, got {period_s!r}")
    lateness = _finite("lateness_s", lateness_s)
    passed: list[float] = []
    for second in seconds:
        second = _finite("second", second, nonneg=False)
        if closed_end is None:
            closed_end = window_end_at(second, period)
            continue
        end = window_end_at(closed_end, period) + period
        while end <= second - lateness + _TIE_EPS_S:
            passed.append(end)
            closed_end = end
            end += period
    return (None if closed_end is None else float(closed_end)), passed


def windows_closed(
    seconds_before: float | None,
    seconds_after: float,
    period_s: float,
    lateness_s: float,
    *,
    first_s: float | None = None,
) -> int:
    """How many window ends the watermark passes when the largest event second seen moves on.

    Windows end at multiples of ``period_s`` (the slide of a sliding window, the length of a
    tumbling one); the watermark is the largest second seen minus ``lateness_s``, and a window
    ending at ``e`` closes once the watermark reaches ``e``.  So the count is the multiples ``e``
    with ``low < e <= seconds_after - lateness_s``, where ``low`` is ``seconds_before -
    lateness_s``.  Before any data (``seconds_before`` None), windows ending at or before the first
    data hold nothing: ``low`` is ``first_s``, the smallest second of the first data (default
    ``seconds_after``, which counts none).

    Parameters
    ----------
    seconds_before : float or None
        Largest event second seen before the batch (None: no data yet).
    seconds_after : float
        Largest event second seen once the batch is in.
    period_s : float
        Event seconds between window ends (> 0).
    lateness_s : float
        The watermark's delay, event seconds (>= 0).
    first_s : float or None, optional
        Smallest event second of the first data; used only when ``seconds_before`` is None.

    Examples
    --------
    Sliding 30 s windows by 5 s, 5 s of lateness (watermark 107 -> 113 passes 110):

    >>> windows_closed(112, 118, 5, 5), windows_closed(100, 112, 5, 5)
    (1, 2)

    Tumbling 60 s windows, 5 s of lateness (an exact tie counts as reached):

    >>> windows_closed(64, 66, 60, 5), windows_closed(66, 119, 60, 5), windows_closed(119, 125, 60, 5)
    (1, 0, 1)

    First data, and no movement:

    >>> windows_closed(None, 112, 5, 5), windows_closed(None, 112, 5, 5, first_s=100)
    (0, 1)
    >>> windows_closed(118, 118, 5, 5), windows_closed(118, 110, 5, 5)
    (0, 0)
    """
    after = _finite("seconds_after", seconds_after, nonneg=False)
    period = _finite("period_s", period_s)
    if period <= 0.0:
        raise ConfigError(f"period_s must be > 0, got {period_s!r}")
    lateness = _finite("lateness_s", lateness_s)
    if seconds_before is None:  # the first data: it starts where its smallest second is
        first = after if first_s is None else _finite("first_s", first_s, nonneg=False)
        closed, _ = window_ends_passed(None, [first], period, lateness)
    else:  # the last window end the watermark had reached
        low = _finite("seconds_before", seconds_before, nonneg=False) - lateness
        closed = math.floor((low + _TIE_EPS_S) / period) * period
    return len(window_ends_passed(closed, [after], period, lateness)[1])


def _error_stats(errors: Sequence[float], spikes: Sequence[bool]) -> dict[str, float | None]:
    def summary(values: list[float]) -> tuple[float | None, float | None]:
        if not values:
            return None, None
        return math.fsum(values) / len(values), nearest_rank_quantile(values, 0.95)

    mae, p95 = summary([abs(e) for e in errors])
    spike_mae, spike_p95 = summary([abs(e) for e, s in zip(errors, spikes) if s])
    return {"mae_s": mae, "p95_abs_s": p95, "spike_mae_s": spike_mae, "spike_p95_abs_s": spike_p95}


def compare_errors(
    observations: Iterable[tuple[Mapping[str, float], float]],
    *,
    history: int = 200,
    min_obs: int = 12,
) -> dict:
    """Out-of-sample errors of the bytes-only and the feature model on one trace.

    Each ``(features, seconds)`` is predicted by both models, then learned by both: a
    :class:`~lmstream_kit.stats.ServiceTimeModel` on ``features["bytes"]`` and a
    :class:`FeatureServiceModel` (``background=False``), both keeping ``history`` batches.  Only
    the batches the feature model can predict (after its first ``min_obs``) are scored, for both.
    *Spike* batches are those whose seconds exceed 1.5 times the median of the whole trace.

    Returns
    -------
    dict
        ``n`` (batches scored), ``n_spikes``, ``spike_threshold_s``, and for ``"bytes_only"`` and
        ``"features"`` the ``mae_s``, ``p95_abs_s``, ``spike_mae_s`` and ``spike_p95_abs_s`` (None
        where no batch is scored).

    Examples
    --------
    Every 3rd batch closes a window and takes 1 s more; the bytes do not tell which:

    >>> trace = [({"bytes": 1000 * (1 + i % 2), "windows_closed": int(i % 3 == 2)},
    ...           1.0 + 0.001 * (1 + i % 2) + (i % 3 == 2)) for i in range(30)]
    >>> out = compare_errors(trace, min_obs=6)
    >>> out["n"], out["n_spikes"], round(out["bytes_only"]["spike_mae_s"], 3), out["features"]["spike_mae_s"] < 1e-9
    (24, 8, 0.71, True)
    """
    rows = [(f, _finite("seconds", s)) for f, s in observations]
    bytes_model = ServiceTimeModel(history=history)
    errors: dict[str, list[float]] = {"bytes_only": [], "features": []}
    scored: list[float] = []
    with FeatureServiceModel(history=history, min_obs=min_obs, background=False) as model:
        for features, seconds in rows:
            x = _vector(features)
            predicted = model.predict(features)
            if predicted is not None:
                errors["features"].append(seconds - predicted)
                errors["bytes_only"].append(seconds - bytes_model.predict(x[0]))
                scored.append(seconds)
            model.observe(features, seconds)
            bytes_model.update(x[0], seconds)
    threshold = 1.5 * float(np.median([s for _, s in rows])) if rows else None
    spikes = [threshold is not None and s > threshold for s in scored]
    return {
        "n": len(scored),
        "n_spikes": sum(spikes),
        "spike_threshold_s": threshold,
        **{name: _error_stats(errs, spikes) for name, errs in errors.items()},
    }
