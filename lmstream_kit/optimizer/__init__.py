"""Online inflection-point optimizer (LMStream Section III-E, Eq. 10), off the stream's thread.

:mod:`.fit` is the pure model (:func:`fit_proposal`, :func:`dither`, :class:`BatchSample`) and
:mod:`.runner` the live :class:`InflectionOptimizer` that runs it on a background thread.

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

from .fit import GRID_STEP, MIN_X_RANGE, TIE_TOLERANCE, BatchSample, FitResult, dither, fit_proposal
from .runner import InflectionOptimizer

__all__ = [
    "GRID_STEP",
    "MIN_X_RANGE",
    "TIE_TOLERANCE",
    "BatchSample",
    "FitResult",
    "InflectionOptimizer",
    "dither",
    "fit_proposal",
]
