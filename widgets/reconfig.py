"""The reconfiguration panel: a stream's journal as a table, and its changes on the latency plot.

:class:`ReconfigPanel` shows the live reconfigurations of a running
:class:`~lmstream_kit.live.LiveStream` (redrawn after every micro-batch) or of a finished run
directory: every transaction of the run's journal (``reconfig.jsonl``, :mod:`lmstream_kit.journal`)
with its state, the batch it applied from and why it aborted, and the batch latency with each
committed change marked, its downtime in the hover (:mod:`lmstream_kit.plots.reconfig`, pure
plotly).  A :class:`~widgets.dashboard.Dashboard` adds it below its figures once a run has a journal.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from lmstream_kit.journal import JOURNAL_FILE, Journal
from lmstream_kit.plots.reconfig import downtime_s, reconfiguration_figure

from .recordpanel import RecordPanel

__all__ = ["ReconfigPanel", "journal_table_html", "read_transactions"]

_COLUMNS = ("txn", "op", "change", "state", "batch", "downtime s", "why")


def read_transactions(run_dir: Path) -> list[dict]:
    """The run's journal, one dict per transaction (empty without a journal)."""
    if not (Path(run_dir) / JOURNAL_FILE).is_file():
        return []
    return Journal(run_dir).transactions()


def _cell(value: Any) -> str:
    return "" if value is None else html.escape(str(value))


def journal_table_html(transactions: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]] = (),
                       *, last: int = 12) -> str:
    """The last ``last`` transactions as an HTML table, newest first.

    >>> t = [{"txn": 1, "op": "restart", "old": 0, "value": 1, "state": "committed", "batch_id": 4},
    ...      {"txn": 2, "op": "flumina_logic", "old": "initial", "value": "v2", "state": "aborted",
    ...       "reason": "logic 'v2' failed on batch 9"}]
    >>> page = journal_table_html(t)
    >>> page.index("flumina_logic") < page.index("restart"), "initial -&gt; v2" in page, "failed on batch 9" in page
    (True, True, True)
    """
    rows = []
    for t in list(transactions)[-last:][::-1]:
        batch = t.get("batch_id")
        down = downtime_s(records, int(batch)) if batch is not None and t.get("state") == "committed" else None
        why = t.get("reason") or (f"recovered: {t.get('how')}" if t.get("recovered") else "")
        cells = (t.get("txn"), t.get("op"), f"{t.get('old')} -> {t.get('value')}", t.get("state"), batch,
                 f"{down:.2f}" if down is not None else None, why)
        color = {"aborted": "#b00020", "committed": "#1b5e20"}.get(str(t.get("state")), "#555")
        rows.append("<tr>" + "".join(
            f'<td style="padding:1px 8px;{"color:" + color if i == 3 else ""}">{_cell(c)}</td>'
            for i, c in enumerate(cells)) + "</tr>")
    head = "".join(f'<th style="padding:1px 8px;text-align:left">{c}</th>' for c in _COLUMNS)
    body = "".join(rows) or f'<tr><td colspan="{len(_COLUMNS)}">no reconfiguration yet</td></tr>'
    return (f"<b>Reconfigurations</b> (the journal, {len(transactions)} in all, newest first)"
            f'<table style="font-size:90%;border-collapse:collapse"><tr>{head}</tr>{body}</table>')


class ReconfigPanel(RecordPanel):
    """The journal's transactions and the latency plot with each committed change marked.

    Parameters
    ----------
    source : LiveStream or path
        A stream, or a run directory (replay).

    Attributes
    ----------
    figures : dict of str to plotly FigureWidget
        ``reconfig`` (empty where ipywidgets is missing).
    table : ipywidgets.HTML or None
        The journal's table, redrawn after every batch.
    widget : ipywidgets.VBox or None
        What a notebook cell displays.
    """

    figure_keys = ("reconfig",)
    css_class = "lmstream-reconfig"

    def _layout(self, W: Any) -> Any:
        self.table = W.HTML(value="")
        self.table.add_class("lmstream-journal")
        return W.VBox([self.table, self.figures["reconfig"]])

    def _figures(self, records: list[dict]) -> dict[str, go.Figure]:
        self._transactions = read_transactions(self.run_dir)  # read once per redraw; the table uses it too
        return {"reconfig": reconfiguration_figure(records, self._transactions)}

    def _redrawn(self, records: list[dict]) -> None:
        table = getattr(self, "table", None)
        if table is not None:
            table.value = journal_table_html(getattr(self, "_transactions", []), records)
