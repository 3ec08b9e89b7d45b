"""The tuner panel: each operator's parallelism, load and bottlenecks over time, and the tuner's last proposal.

:class:`TunerPanel` shows a running :class:`~lmstream_kit.live.LiveStream` with the
:class:`~lmstream_kit.tune.operators.OperatorMetrics` plug-in or the
:class:`~lmstream_kit.tune.tuner.ParallelismTuner` (redrawn after every micro-batch), or a finished
run directory.  The figures come from :mod:`lmstream_kit.plots.tuning` (pure plotly); below them a
small table gives, per operator, the last batch's parallelism, load, observed bottleneck, the
tuner's proposal and its reason.

>>> print(proposal_table_html([{"batch_id": 4, "tuner_policy": "ds2", "tuner_model": "ds2",
...     "operators": [{"key": "j0.s0", "tasks": 2, "load": 0.91, "bottleneck": True}],
...     "tuner_proposal": {"j0.s0": 3}, "tuner_reason": {"j0.s0": "apply: 2 -> 3"}}]))
<div class="lmstream-tuner-table"><b>batch 4</b> · policy ds2 · model ds2<table>
<tr><th>operator</th><th>tasks</th><th>load</th><th>bottleneck</th><th>proposal</th><th>reason</th></tr>
<tr><td>j0.s0</td><td>2</td><td>0.91</td><td>yes</td><td>3</td><td>apply: 2 -&gt; 3</td></tr>
</table></div>
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from lmstream_kit.plots.tuning import EMPTY_TUNING_TEXT, operator_keys, tuner_figures

from .extras import tuning_wanted
from .recordpanel import RecordPanel

__all__ = ["FIGURE_KEYS", "TunerPanel", "proposal_rows", "proposal_table_html"]

#: the panel's figures, by key
FIGURE_KEYS = ("parallelism", "bottlenecks", "overhead")


def proposal_rows(records: Sequence[Mapping]) -> list[dict]:
    """Per operator of the last batch with operator metrics: ``operator``, ``tasks``, ``load``,
    ``bottleneck``, ``proposal`` and ``reason`` (None where the tuner said nothing), upstream first.

    >>> proposal_rows([{"batch_id": 0, "operators": [{"key": "j0.s1", "tasks": 2, "load": 0.2, "bottleneck": False}],
    ...                 "tuner_proposal": {"j0.s1": 2}}])
    [{'operator': 'j0.s1', 'tasks': 2, 'load': 0.2, 'bottleneck': False, 'proposal': 2, 'reason': None}]
    """
    last = _last(records)
    if last is None:
        return []
    ops = {str(o["key"]): o for o in last["operators"] if isinstance(o, Mapping) and o.get("key") is not None}
    proposal = last.get("tuner_proposal") if isinstance(last.get("tuner_proposal"), Mapping) else {}
    reason = last.get("tuner_reason") if isinstance(last.get("tuner_reason"), Mapping) else {}
    return [{"operator": k, "tasks": ops[k].get("tasks"), "load": ops[k].get("load"),
             "bottleneck": ops[k].get("bottleneck"), "proposal": proposal.get(k), "reason": reason.get(k)}
            for k in operator_keys([last]) if k in ops]


def _last(records: Sequence[Mapping]) -> Mapping | None:
    """The last record (by batch id) with a non-empty ``operators`` list."""
    found = [r for r in records if tuning_wanted(None, [r]) and r.get("batch_id") is not None]
    return max(found, key=lambda r: int(r["batch_id"])) if found else None


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}"
    return html.escape(str(value))


def proposal_table_html(records: Sequence[Mapping]) -> str:
    """The last batch's operators, proposals and reasons as a small HTML table (see :func:`proposal_rows`)."""
    last = _last(records)
    if last is None:
        return f'<div class="lmstream-tuner-table"><i>{EMPTY_TUNING_TEXT}</i></div>'
    head = [f"<b>batch {int(last['batch_id'])}</b>"]
    for field, label in (("tuner_policy", "policy"), ("tuner_model", "model")):
        if last.get(field) is not None:
            head.append(f"{label} {html.escape(str(last[field]))}")
    cols = ("operator", "tasks", "load", "bottleneck", "proposal", "reason")
    rows = ["<tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"]
    rows += ["<tr>" + "".join(f"<td>{_cell(r[c])}</td>" for c in cols) + "</tr>" for r in proposal_rows(records)]
    return (f'<div class="lmstream-tuner-table">{" · ".join(head)}<table>\n' + "\n".join(rows)
            + "\n</table></div>")


class TunerPanel(RecordPanel):
    """Each operator's parallelism and load over time, bottlenecks observed and predicted, the
    reconfigurations, the tuner's overhead and its last proposal, of a stream or a run.

    Parameters
    ----------
    source : LiveStream or path
        A stream with operator metrics (live: redrawn after every batch) or a run directory (replay).

    Attributes
    ----------
    figures : dict of str to plotly FigureWidget
        ``parallelism``, ``bottlenecks`` and ``overhead`` (empty where ipywidgets is missing).
    table : ipywidgets.HTML or None
        The last batch's proposal and reason per operator (:func:`proposal_table_html`).
    widget : ipywidgets.VBox or None
        What a notebook cell displays.
    """

    figure_keys = FIGURE_KEYS
    css_class = "lmstream-tuner"

    def __init__(self, source: Any) -> None:
        self.table = None
        super().__init__(source)

    def _layout(self, W: Any) -> Any:
        self.table = W.HTML()
        return W.VBox([self.figures["parallelism"], self.figures["bottlenecks"],
                       W.HBox([self.figures["overhead"], self.table])])

    def _figures(self, records: list[dict]) -> dict[str, go.Figure]:
        return tuner_figures(records)

    def _redrawn(self, records: list[dict]) -> None:
        if self.table is not None:
            self.table.value = proposal_table_html(records)

    def table_html(self) -> str:
        """The last batch's proposal and reason per operator, as HTML."""
        return proposal_table_html(self.records)

    def _text(self) -> dict:
        return {**super()._text(), "text/html": self.table_html()}
