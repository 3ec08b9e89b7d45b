"""Workloads: one module per query; importing this package registers the built-ins.

Adding a workload is a matter of a new module that calls
:func:`lmstream_kit.workloads.base.register` and an import line below.
"""

from . import cm1, cm2s, lr1, lr2s, passthrough  # noqa: F401  (registers CM1S/T, CM2S, LR1S/T, LR2S, PASSTHROUGH)
from .base import WORKLOADS, Workload, get_workload, register

__all__ = ["WORKLOADS", "Workload", "get_workload", "register"]
