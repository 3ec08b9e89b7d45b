"""DS2's scaling rule (OSDI'18) for micro-batches: the baseline the tuners are compared with.

DS2 visits the operators upstream first and sets each one's parallelism to
``ceil(target input rate / true rate per instance)``, where the true rate is records over *useful*
time (waiting for input or output left out), and an operator's target input rate is its upstream's
true output rate scaled by the upstream's own change.

In a micro-batch every record of a batch must be processed within the batch's budget (its latency
bound), so an operator's target rate is ``records_in / budget``, and its true rate per task is
``records_in / useful_s``: the rule becomes ``ceil(useful_s * growth / (budget * utilisation))``
(its useful task-seconds, scaled by the expected growth of the input, over the seconds one task
may be busy).  The upstream scaling is the ``growth`` factor: on these chains every stage's input
grows with the batch's rows.  Like DS2 it assumes that work divides evenly over the instances and
that an instance costs nothing by itself, so per-task overheads and waves beyond the cores are
invisible to it (that is what a learned tuner can do better).

>>> from lmstream_kit.tune.operators import OperatorSample
>>> s = OperatorSample("j0.s0", 0, 0, 1, "COMPLETE", tasks=2, records_in=10_000, records_out=10, run_s=3.0,
...                    cpu_s=3.0, useful_s=3.0, wall_s=1.6, true_rate=3333.3, load=0.75, bottleneck=True)
>>> ds2_parallelism([s], budget_s=2.0)
{'j0.s0': 3}
>>> ds2_parallelism([s], budget_s=2.0, growth=2.0, high=4)
{'j0.s0': 4}
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ..exceptions import ConfigError
from .operators import OperatorSample

__all__ = ["ds2_parallelism"]


def ds2_parallelism(samples: Iterable[OperatorSample], *, budget_s: float, utilisation: float = 0.7,
                    growth: float = 1.0, low: int = 1, high: int = 64,
                    bounds: Mapping[str, tuple[int, int]] | None = None) -> dict[str, int]:
    """DS2's parallelism for each sampled operator (see the module); ``bounds`` per key override ``low``/``high``."""
    if not (budget_s > 0 and math.isfinite(budget_s)):
        raise ConfigError(f"budget_s must be a finite number > 0, got {budget_s!r}")
    if not 0 < utilisation <= 1:
        raise ConfigError(f"utilisation must be in (0, 1], got {utilisation!r}")
    if not (growth > 0 and math.isfinite(growth)):
        raise ConfigError(f"growth must be a finite number > 0, got {growth!r}")
    out = {}
    for s in samples:
        lo, hi = (bounds or {}).get(s.key, (low, high))
        need = math.ceil(s.useful_s * growth / (budget_s * utilisation) - 1e-9) if s.useful_s > 0 else lo
        out[s.key] = int(min(max(need, lo), hi))
    return out
