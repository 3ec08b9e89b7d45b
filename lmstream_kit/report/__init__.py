"""Figures, tables and reports for a benchmark sweep (the paper's Section V).

Pure functions of the data frames :mod:`lmstream_kit.bench` produces; the only I/O is
:func:`write_report`.  Every name is importable from here, whichever module defines it.

The frames:

``results``
    one row per sweep cell (query x policy x traffic x rate) and repetition;
``batches``
    one row per data micro-batch of every cell;
``capacity``
    one row per capacity-search probe run (``None`` or empty when the search was skipped);
``meta``
    a dict describing the run (command, machine, versions, time compression, sweep).

The modules:

:mod:`~lmstream_kit.report.figures`
    the paper's Fig. 1 (the fixed trigger's latency grows), Fig. 6 (average
    latency), Fig. 7 (throughput), Figs. 8 and 9 (maximum latency and batch size
    over time for a sliding and a tumbling query) and the capacity bars;
:mod:`~lmstream_kit.report.tables`
    Table IV (time shares), CPU per million rows and the capacity search (each query's and
    policy's bracket of rates, its status and repetitions);
:mod:`~lmstream_kit.report.paper`
    the paper's headline numbers and :func:`claims`, its four headline claims beside ours;
:mod:`~lmstream_kit.report.render`
    :func:`build_report`, a self-contained HTML page (plotly.js embedded once),
    and :func:`reproduction_markdown`, the Markdown for ``docs/reproduction.md``,
    with :mod:`~lmstream_kit.report.formatting` (the cells as shown);
:mod:`~lmstream_kit.report.common`
    the constants (policy order and colours, time components, captions) and
    the small data-frame helpers they all share.

Every function tolerates missing policies, queries, traffic kinds, columns and
NaN values: figures become ``None`` (or a figure saying "no data"), tables
come back empty, and claims that cannot be measured say what the sweep lacks.

The paper's "Baseline" (Spark with a 10 s processing-time trigger) is our
``fixed`` policy; ``asap`` admits everything whenever the engine is idle.

Example
-------
>>> import pandas as pd
>>> results = pd.DataFrame({
...     "query": ["LR1S", "LR1S"], "window_kind": ["sliding"] * 2,
...     "policy": ["lmstream", "fixed"], "traffic": ["constant"] * 2, "rep": [0, 0],
...     "rate": [1000.0] * 2, "avg_latency_s": [0.3, 1.0], "throughput_rows_s": [5000.0, 4000.0],
... })
>>> c = claims(results)
>>> c.loc[0, "ours"], c.loc[0, "where"], bool(c.loc[0, "agrees"])
('70.0% lower', 'LR1S (constant)', True)
"""

from __future__ import annotations

from .common import CAPTIONS as CAPTIONS
from .common import OVERHEAD_COMPONENTS as OVERHEAD_COMPONENTS
from .common import PASS_SHARE as PASS_SHARE
from .common import POLICY_COLORS as POLICY_COLORS
from .common import POLICY_ORDER as POLICY_ORDER
from .common import TIME_COMPONENTS as TIME_COMPONENTS
from .common import TRAFFIC_ORDER as TRAFFIC_ORDER
from .figures import (
    fig_avg_latency,
    fig_batch_timeline,
    fig_capacity,
    fig_fixed_latency_growth,
    fig_row_cost,
    fig_throughput,
    pick_timeline_queries,
)
from .paper import PAPER_LATENCY_REDUCTION as PAPER_LATENCY_REDUCTION
from .paper import PAPER_OVERHEAD_LIMIT as PAPER_OVERHEAD_LIMIT
from .paper import PAPER_THROUGHPUT_RATIO as PAPER_THROUGHPUT_RATIO
from .paper import PAPER_TIMELINE_QUERIES as PAPER_TIMELINE_QUERIES
from .paper import claims
from .render import build_report, reproduction_markdown, write_report
from .tables import capacity_brackets, capacity_table, cpu_table, time_shares

__all__ = [
    "build_report",
    "capacity_brackets",
    "capacity_table",
    "claims",
    "cpu_table",
    "fig_avg_latency",
    "fig_batch_timeline",
    "fig_capacity",
    "fig_fixed_latency_growth",
    "fig_row_cost",
    "fig_throughput",
    "pick_timeline_queries",
    "reproduction_markdown",
    "time_shares",
    "write_report",
]
