"""Workloads: one module per query; importing this package registers the built-ins.

Adding a workload is a matter of a new module that calls
:func:`lmstream_kit.workloads.base.register` and an import line below.
"""

from .base import WORKLOADS, Workload, get_workload, register
from . import cm2s, lr2s, passthrough  # noqa: F401  (registers CM2S, LR2S, PASSTHROUGH)

__all__ = ["WORKLOADS", "Workload", "get_workload", "register"]
