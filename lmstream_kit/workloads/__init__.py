"""Workloads: one module per query, holding its Spark query and its twin program.

Importing this package registers the built-ins; adding a workload is a matter of a new module that
calls :func:`~lmstream_kit.workloads.base.register` (or ``register_pair``) and an import line below.
A user's own query is a :func:`define_workload` in a file of theirs, found by
:func:`load_workload` (``"path/to/file.py:NAME"`` or ``"package.module:NAME"``).
"""

from . import cm1, cm2s, lr1, lr2s, passthrough  # noqa: F401  (registers CM1S/T, CM2S, LR1S/T, LR2S, PASSTHROUGH)
from .base import WORKLOADS, Workload, get_workload, register, register_pair
from .custom import define_workload
from .loader import load_workload

__all__ = ["WORKLOADS", "Workload", "define_workload", "get_workload", "load_workload", "register", "register_pair"]
