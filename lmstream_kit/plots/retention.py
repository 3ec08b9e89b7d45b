"""Figures of a stream that runs for days: the spool's retention per batch, and a soak's memory over time.

Pure: per-batch records (``spool_bytes`` and ``spool_first_seq``, from
:class:`lmstream_kit.retention.SpoolRetention`, and ``start_seq``) or a soak's samples
(``benchmarks/soak.py``'s ``samples.jsonl``: ``t_s`` and the byte counts) in, a plotly figure out.
A live figure is redrawn from all the records so far after every batch (a
:class:`widgets.recordpanel.RecordPanel` copies it into its ``FigureWidget``).

>>> recs = [{"batch_id": 0, "rows": 0, "spool_bytes": 0, "spool_first_seq": 0, "start_seq": None},
...         {"batch_id": 1, "rows": 5, "spool_bytes": 2048, "spool_first_seq": 0, "start_seq": 0},
...         {"batch_id": 2, "rows": 5, "spool_bytes": 1024, "spool_first_seq": 2, "start_seq": 3}]
>>> fig = spool_retention_figure(recs, change=(2, "keep for 1 h"))
>>> [(t.name, list(t.x), list(t.y)) for t in fig.data]  # doctest: +NORMALIZE_WHITESPACE
[('spool data kept (KiB)', [0, 1, 2], [0.0, 2.0, 1.0]),
 ('first dataset kept (spool_first_seq)', [0, 1, 2], [0, 0, 2]),
 ("batch's first dataset (start_seq)", [1, 2], [0, 3])]
>>> fig.layout.title.text, [s.x0 for s in fig.layout.shapes], [a.text for a in fig.layout.annotations]
('Spool retention per micro-batch', [2], ['keep for 1 h'])
>>> samples = [{"t_s": 0, "driver_rss_bytes": 2**20, "spool_bytes": 0},
...            {"t_s": 60, "driver_rss_bytes": 2**21, "spool_bytes": 2**20}]
>>> [(t.name, t.x.tolist(), t.y.tolist()) for t in soak_figure(samples, warmup_s=30).data]  # doctest: +NORMALIZE_WHITESPACE
[("driver's Python RSS", [0.0, 1.0], [1.0, 2.0]), ('JVM RSS', [], []), ('Python workers RSS', [], []),
 ('spool on disk', [0.0, 1.0], [0.0, 1.0])]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

__all__ = ["SOAK_MEMORY", "soak_figure", "spool_retention_figure"]

#: the RSS a soak samples (``benchmarks/soak.py``'s ``MEMORY_KEYS``), with the name each is drawn under
SOAK_MEMORY: dict[str, str] = {
    "driver_rss_bytes": "driver's Python",
    "jvm_rss_bytes": "JVM",
    "workers_rss_bytes": "Python workers",
}

_MIB = 2**20


def _rows(records: Any) -> list[Mapping[str, Any]]:
    """The records as mappings sorted by batch id (a DataFrame, an iterable of dicts or None)."""
    if records is None:
        return []
    if isinstance(records, pd.DataFrame):
        records = records.to_dict("records")
    rows = [r for r in records if r.get("batch_id") is not None]
    return sorted(rows, key=lambda r: r["batch_id"])


def _given(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def spool_retention_figure(records: Any, *, change: tuple[int, str] | None = None,
                           disk_held_until: float | None = None, title: str = "Spool retention per micro-batch",
                           height: int = 400) -> go.Figure:
    """The spool's data kept after each batch, and the first dataset kept beside each batch's first dataset.

    Parameters
    ----------
    records : list of dict or DataFrame
        Per-batch records (a stream's ``records`` or ``metrics.jsonl``), in any order.  Those with
        ``spool_bytes`` give the KiB kept (left axis) and ``spool_first_seq`` (right axis, a step);
        the data batches with a ``start_seq`` give the batch's first dataset (right axis, dotted).
        The gap between the two steps is what retention keeps behind the running batch.
    change : (batch_id, label), optional
        A live change of retention: a dashed line at the batch it took effect at, labelled.
    disk_held_until : float, optional
        When (wall clock, like the records' ``admitted_at``) the disk stopped looking full: a dotted
        red line "after the full disk" at the first batch admitted after it (none if there is none).
    title, height
        The figure's title and height (a live copy says so in its title).
    """
    rows = _rows(records)
    kept = [r for r in rows if _given(r.get("spool_bytes"))]
    spans = [r for r in rows if _given(r.get("start_seq")) and r.get("rows", 1)]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_scatter(x=[r["batch_id"] for r in kept], y=[r["spool_bytes"] / 1024 for r in kept],
                    name="spool data kept (KiB)", mode="lines+markers", secondary_y=False)
    fig.add_scatter(x=[r["batch_id"] for r in kept], y=[r.get("spool_first_seq") for r in kept], line_shape="hv",
                    name="first dataset kept (spool_first_seq)", mode="lines+markers", secondary_y=True)
    fig.add_scatter(x=[r["batch_id"] for r in spans], y=[r["start_seq"] for r in spans], line_shape="hv",
                    line_dash="dot", name="batch's first dataset (start_seq)", mode="lines+markers",
                    secondary_y=True)
    if change is not None:
        fig.add_vline(x=change[0], line_dash="dash", annotation_text=change[1])
    if disk_held_until is not None:
        after = [r["batch_id"] for r in rows
                 if _given(r.get("admitted_at")) and r["admitted_at"] > disk_held_until]
        if after:
            fig.add_vline(x=after[0], line_dash="dot", line_color="firebrick", annotation_text="after the full disk",
                          annotation_position="bottom right")
    fig.update_layout(title=title, height=height, xaxis_title="batch id", legend={"orientation": "h", "y": -0.25})
    fig.update_yaxes(title_text="KiB kept", secondary_y=False, rangemode="tozero")
    fig.update_yaxes(title_text="spool dataset", secondary_y=True, rangemode="tozero")
    return fig


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _series(samples: Iterable[Mapping[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """``(minutes, MiB)`` of the samples from ``t_s`` 0 on with a number for ``key`` (as ``soak.series``)."""
    hours, values = [], []
    for s in samples:
        t, v = _number(s.get("t_s")), _number(s.get(key))
        if t is None or v is None or t < 0:
            continue
        hours.append(t / 3600.0)
        values.append(v)
    return np.asarray(hours, dtype=float) * 60, np.asarray(values, dtype=float) / _MIB


def soak_figure(samples: Iterable[Mapping[str, Any]], *, warmup_s: float, host: str | None = None,
                result: str | None = None, memory: Mapping[str, str] | None = None,
                spool_key: str = "spool_bytes") -> go.Figure:
    """A soak's resident memory (top) and spool (bottom) over time, with its warm-up shaded.

    Parameters
    ----------
    samples : list of dict
        A soak's samples (``benchmarks/soak.py``'s ``samples.jsonl``): ``t_s`` (seconds since the
        stream started) and byte counts; a sample without a number for a key is left out of its line.
    warmup_s : float
        The warm-up, shaded on both rows and labelled "warm-up".
    host, result : str, optional
        Where the soak was measured and its result's name, for the title
        ("Soak on HOST: memory and spool over time (measured, RESULT)").
    memory : dict of str to str, optional
        The RSS keys to draw, in order, with their names (default :data:`SOAK_MEMORY`).
    spool_key : str
        The spool's key in the samples.
    """
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.65, 0.35], vertical_spacing=0.08)
    for key, label in (SOAK_MEMORY if memory is None else memory).items():
        x, y = _series(samples, key)
        fig.add_scatter(x=x, y=y, name=f"{label} RSS", mode="lines", row=1, col=1)
    x, y = _series(samples, spool_key)
    fig.add_scatter(x=x, y=y, name="spool on disk", mode="lines", row=2, col=1)
    for row in (1, 2):
        fig.add_vrect(x0=0, x1=warmup_s / 60, fillcolor="grey", opacity=0.15, line_width=0, row=row, col=1)
    fig.add_annotation(x=warmup_s / 120, y=1.0, xref="x", yref="y domain", text="warm-up", showarrow=False)
    where = f" on {host}" if host else ""
    measured = f" (measured, {result})" if result else " (measured)" if host else ""
    fig.update_layout(title=f"Soak{where}: memory and spool over time{measured}", height=520,
                      legend={"orientation": "h", "y": -0.15})
    fig.update_yaxes(title_text="RSS (MiB)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="MiB", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text="minutes since the stream started", row=2, col=1)
    return fig
