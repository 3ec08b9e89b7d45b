"""The twin executor: a workload's per-batch query in the driver, on cudf for the GPU side.

Why
---
The RAPIDS Accelerator has no shim for Spark 4.2 or 4.3, and a single GPU
machine may not have its jar at all.  There the GPU-side part of each
micro-batch runs here instead: Spark still runs the stream (source, offsets,
checkpoint, admission control) with a pass-through query, and the driver hands
each admitted span of the spool to :meth:`TwinExecutor.process`, which runs the
workload's query operator by operator on the device the
:class:`~lmstream_kit.mapper.DeviceMapper` chose: cudf on the GPU, pandas on
the CPU.  The same code runs on pandas for both sides, and that is what CI
checks against Spark's own results (``tests/test_twin_spark.py``), batch by
batch; ``tests/test_twin.py`` checks that the results do not change with the
device plan.

Design
------
* :mod:`~lmstream_kit.twin.backends` -- ``get_backend("pandas" | "pandas-device" | "cudf")``;
  backends convert from and to Arrow and move frames between devices through Arrow.
  ``pandas-device`` is pandas posing as a second device, so that every transition
  path runs without a GPU.
* :mod:`~lmstream_kit.twin.program` -- ``twin_program(name)``: a
  :class:`TwinProgram` per workload whose operators carry Spark's exec names
  (``program.dag`` is the mapper's input) and mirror Spark's physical plan for the
  workload; state operators (``StateStoreRestoreExec``, ``StateStoreSaveExec``,
  ``StreamingSymmetricHashJoinExec``, ``EventTimeWatermarkExec``) stay on the CPU.
  The module docstring lists the Spark semantics they follow (watermark, late
  rows, emission, no-data batches).  Each query's program is defined beside its
  Spark query, in its workload module (:attr:`Workload.twin
  <lmstream_kit.workloads.base.Workload.twin>`); the operators they are built of
  and the windowed aggregation shared by four of them live in this module.
* :mod:`~lmstream_kit.twin.executor` -- :class:`TwinExecutor`:
  ``process(table, batch_id, plan) -> TwinResult`` (``table``, ``op_seconds``,
  ``devices``, ``transitions``, ...), ``state_dict()`` / ``load_state()``.

Twins exist for all six queries: LR2S, CM1S, CM1T, CM2S (windowed
aggregations) and LR1S, LR1T (the stream-stream self-join).  Only pandas (exact)
and pandas-device give bit-identical results under every plan; on cudf the
floating-point sums of a partial aggregation may differ in the last bits
(another summation order), as Spark's own do between partitionings.

cudf
----
* cudf is an optional extra: ``pip install 'lmstream_kit[gpu]'`` (cudf-cu12 26.6:
  the last line that still takes pandas 2.x; 26.10 needs pandas 3).
* It is imported lazily and never at import time of this package (which imports
  only :mod:`~lmstream_kit.twin.program` at once: the executor, the backends and
  pandas load on first use of their names).
  :func:`cudf_available` imports it first in a child process with a timeout,
  because without a usable GPU ``import cudf`` may raise anything or even crash
  the interpreter, and only then in this process inside ``try/except Exception``;
  it returns ``(ok, reason)`` and caches the answer.  ``LMSTREAM_KIT_NO_CUDF=1``
  skips the probe.

Example
-------
CM2S over four batches (simulated seconds 0, 30, 61 and 70), all on the CPU
and with the aggregations pinned to the (pandas stand-in) GPU: the same rows.
Windows close once the watermark (the latest second seen before the batch,
minus 5) reaches their end: 330 rows in the third batch, 636 in the fourth.

>>> import numpy as np
>>> from lmstream_kit.mapper import DeviceMapper
>>> from lmstream_kit.twin import TwinExecutor, cudf_available, twin_program
>>> from lmstream_kit.workloads import get_workload
>>> program = twin_program("CM2S")
>>> wl = get_workload("CM2S")
>>> batches = [wl.make_rows(s, 300, np.random.default_rng(s)) for s in (0, 30, 61, 70)]
>>> cpu = TwinExecutor(program, gpu_backend="pandas-device")
>>> gpu = TwinExecutor(program, gpu_backend="pandas-device")
>>> plan = DeviceMapper(pins={"Aggregation": "GPU"}).map(program.dag, partition_bytes=4096)
>>> [e.exec_name for e in plan.entries if e.device == "GPU"]
['HashAggregateExec', 'HashAggregateExec', 'HashAggregateExec']
>>> for i, rows in enumerate(batches):
...     a, b = cpu.process(rows, i), gpu.process(rows, i, plan)
...     print(i, a.table.num_rows, a.table.equals(b.table), b.transitions)
0 0 True 6
1 0 True 6
2 330 True 6
3 636 True 6
>>> cudf_available()[0] in (True, False)
True
"""

from importlib import import_module

from .program import TwinOp, TwinProgram, twin_program

#: names this package exports from its heavier submodules (they import pandas), loaded on first use
_LAZY = {
    "TwinExecutor": "executor",
    "TwinResult": "executor",
    "cudf_available": "backends",
    "get_backend": "backends",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "TwinExecutor",
    "TwinOp",
    "TwinProgram",
    "TwinResult",
    "cudf_available",
    "get_backend",
    "twin_program",
]
