"""The comparison benchmark: queries x policies x traffic, repeated, on one SparkSession.

``lmstream-kit bench`` (and :func:`run_bench`) runs every cell of the sweep as a
:class:`~lmstream_kit.live.LiveStream` to the end of its traffic, one after the
other on one SparkSession, and writes into ``out``:

``runs/<query>-<policy>-<traffic>-r<rep>/``
    each cell's run directory (metrics.jsonl, spark_progress.jsonl, run.json, spool);
``cells.jsonl``
    one line per finished cell, appended as it finishes (a crash keeps them);
``results.parquet`` (or ``.csv``)
    one row per cell and repetition (see :func:`cell_row` for the columns);
``batches.parquet``
    one row per data micro-batch of every cell (Figs. 1, 8, 9);
``capacity.parquet``
    one row per probe of the capacity search (with ``--capacity``);
``bench.json``
    the configuration, machine and versions;
``report.html``
    the self-contained report (:mod:`lmstream_kit.report`).

Fairness: cells with the same traffic and repetition get the same seed, so every
policy sees the same offered rows; the policies of one (query, traffic, rep) run
back to back, so drift of a noisy machine hits them alike; each query first runs
a short discarded warm-up before its first measured run on a JVM (a cell or a capacity probe),
longer on a fresh JVM (``jvm_warmup_s``), so no measured run pays for the JVM's cold code.

Time is compressed by ``speedup``: windows, slides, the fixed trigger and the
offered rate are in simulated seconds; latencies are measured in wall seconds,
where the bound of a sliding query is ``slide / speedup``.  For tumbling
queries the bound used for ``within_bound`` and the capacity search is the
window's length (a tumbling window's slide), ``range / speedup``; the
controller's own tumbling target (the running mean of past maximum latencies)
is a moving target that a steady run exceeds about half of the time, so it
cannot serve as a pass/fail bound.

CPU per cell is read from the OS (:mod:`lmstream_kit.cpu`): the driver JVM, the
Python workers it spawns and the kit's own process.

The modules: :mod:`~lmstream_kit.bench.config` (:class:`BenchConfig` and its cells),
:mod:`~lmstream_kit.bench.capacity` (the capacity search), :mod:`~lmstream_kit.bench.cells`
(one cell's summaries), :mod:`~lmstream_kit.bench.run` (running the sweep) and
:mod:`~lmstream_kit.bench.outputs` (the files written and read).  Every name is importable from here.
"""

from __future__ import annotations

from .capacity import CAPACITY_SHARE as CAPACITY_SHARE
from .capacity import CapacitySearch
from .capacity import _capacity as _capacity
from .cells import _CELL_SUMMARY as _CELL_SUMMARY
from .cells import batch_rows, bound_s, cell_row
from .config import ALL_QUERIES, BenchConfig
from .config import ProgressFn as ProgressFn
from .config import _config_dict as _config_dict
from .config import _names as _names
from .outputs import _kit_version as _kit_version
from .outputs import command_line as command_line
from .outputs import load_bench, machine_info
from .outputs import write_outputs as write_outputs
from .outputs import write_reports as write_reports
from .run import BenchResult, run_bench
from .run import _Runner as _Runner

#: the doctests of the modules above, run by ``doctest.testmod`` of this package too
__test__ = {"CapacitySearch": CapacitySearch}

__all__ = [
    "ALL_QUERIES",
    "BenchConfig",
    "BenchResult",
    "CapacitySearch",
    "batch_rows",
    "bound_s",
    "cell_row",
    "load_bench",
    "machine_info",
    "run_bench",
]
