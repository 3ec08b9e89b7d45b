"""Live reconfigurations on a stream's time plot: each journal transaction at its batch, with its downtime.

Pure: per-batch records and the journal's transactions (:meth:`lmstream_kit.journal.Journal.transactions`)
in, a plotly figure out.  A committed transaction is drawn at the batch it applied from (its
``batch_id``).  Its *downtime* is the gap between the completions of the batch before it and that
batch, less the usual gap between completions (the median, or ``usual_s`` where it is known: a fixed
trigger's interval).

>>> recs = [{"batch_id": i, "rows": 10, "max_latency_s": 1.0, "completed_at": t}
...         for i, t in enumerate([0.0, 1.0, 2.0, 5.0, 6.0])]
>>> txns = [{"txn": 1, "op": "restart", "old": 0, "value": 1, "state": "committed", "batch_id": 3}]
>>> downtime_s(recs, 3), downtime_s(recs, 3, usual_s=2.0)
(2.0, 1.0)
>>> fig = reconfiguration_figure(recs, txns)
>>> fig.layout.title.text, [s.x0 for s in fig.layout.shapes], fig.data[1].hovertext
('Batch latency with reconfigurations marked', [3], ('restart: 0 -> 1, downtime 2.00 s',))
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

__all__ = ["downtime_s", "reconfiguration_figure"]


def _data(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted((r for r in records if r.get("rows") and r.get("completed_at") is not None),
                  key=lambda r: r["batch_id"])


def downtime_s(records: Sequence[Mapping[str, Any]], batch_id: int, *, usual_s: float | None = None) -> float | None:
    """Seconds with no batch completing around a change in force from ``batch_id`` beyond the usual gap."""
    data = _data(records)
    before = [r for r in data if r["batch_id"] < batch_id]
    at = next((r for r in data if r["batch_id"] >= batch_id), None)
    if not before or at is None:
        return None
    if usual_s is None:
        gaps = [b["completed_at"] - a["completed_at"] for a, b in zip(data, data[1:])]
        usual_s = statistics.median(gaps) if gaps else 0.0
    return max(0.0, at["completed_at"] - before[-1]["completed_at"] - usual_s)


def reconfiguration_figure(records: Sequence[Mapping[str, Any]], transactions: Sequence[Mapping[str, Any]],
                           *, usual_s: float | None = None) -> go.Figure:
    """Each batch's max latency, with a marker (and a dotted line) per committed reconfiguration."""
    data = _data(records)
    fig = go.Figure(go.Scatter(x=[r["batch_id"] for r in data], y=[r.get("max_latency_s") for r in data],
                               mode="lines+markers", name="max latency (s)"))
    done = [t for t in transactions if t.get("state") == "committed" and t.get("batch_id") is not None]
    top = max((r.get("max_latency_s") or 0.0 for r in data), default=0.0)
    hover = []
    for t in done:
        fig.add_vline(x=t["batch_id"], line_dash="dot", line_color="firebrick")
        down = downtime_s(records, int(t["batch_id"]), usual_s=usual_s)
        hover.append(f"{t['op']}: {t.get('old')} -> {t.get('value')}, downtime "
                     + (f"{down:.2f} s" if down is not None else "unknown"))
    fig.add_trace(go.Scatter(x=[t["batch_id"] for t in done], y=[top] * len(done), mode="markers+text",
                             text=[t["op"] for t in done], textposition="top center", name="reconfiguration",
                             marker=dict(color="firebrick", symbol="triangle-down", size=12),
                             hovertext=hover, hoverinfo="text"))
    fig.update_layout(title="Batch latency with reconfigurations marked", xaxis_title="batch id",
                      yaxis_title="max latency (wall s)")
    return fig
