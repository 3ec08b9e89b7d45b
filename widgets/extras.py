"""The panels a :class:`~widgets.dashboard.Dashboard` adds below its figures when a run's data calls for them.

Each entry of :data:`EXTRA_PANELS` names a panel and says

``wanted(run_dir, records)``
    whether the run has the panel's data (the dashboard looks at construction, and in live mode
    again at every redraw until it is there);
``build(source)``
    the panel, from the dashboard's source (its stream in live mode, its run directory in replay):
    an object with ``widget`` (or None), ``figures`` (FigureWidgets by key), ``snapshot()`` (static
    figures by key) and ``close()``; in live mode it follows the stream by itself;
``figures(run_dir, records)``
    the panel's static figures of ``records``, keyed like its ``figures``: what replay's batch
    slider shows and what :meth:`Dashboard.snapshot` returns in replay mode.

A capability with a panel of its own adds an entry here, not a branch in the dashboard.  A panel's
module is imported only when its ``wanted`` or ``build`` runs, so that ``import widgets.dashboard``
stays cheap.

>>> [e.name for e in EXTRA_PANELS]
['flumina', 'tuning', 'reconfig', 'lag']
>>> flumina_wanted(".", [{"batch_id": 0, "flumina_passes": 2}]), flumina_wanted("/nowhere", [{"batch_id": 0}])
(True, False)
>>> tuning_wanted(".", [{"batch_id": 0, "operators": []}, {"batch_id": 1, "operators": [{"key": "j0.s0"}]}])
True
>>> lag_wanted(".", [{"batch_id": 0, "source_lag": 0}]), lag_wanted(".", [{"batch_id": 1, "source_lag": 12}])
(False, True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import plotly.graph_objects as go

__all__ = ["EXTRA_PANELS", "ExtraPanel", "flumina_wanted", "lag_wanted", "reconfig_wanted", "tuning_wanted"]


class ExtraPanel(NamedTuple):
    """A panel the dashboard shows when ``wanted(run_dir, records)`` (see the module's doc)."""

    name: str
    wanted: Callable[[Path, Sequence[Mapping]], bool]
    build: Callable[[Any], Any]
    figures: Callable[[Path, Sequence[Mapping]], dict[str, go.Figure]]


def flumina_wanted(run_dir: Any, records: Sequence[Mapping]) -> bool:
    """A Flumina fork/join run: a record with ``flumina_passes``, or the plan in the run's state directory."""
    if any(r.get("flumina_passes") is not None for r in records):
        return True
    from .flumina import read_plan

    return read_plan(Path(run_dir)) is not None


def _flumina_panel(source: Any) -> Any:
    from .flumina import FluminaPanel

    return FluminaPanel(source)


def _flumina_figures(run_dir: Path, records: Sequence[Mapping]) -> dict[str, go.Figure]:
    from lmstream_kit.plots.flumina import flumina_figures

    from .flumina import read_plan

    return flumina_figures(list(records), read_plan(Path(run_dir)))


def tuning_wanted(run_dir: Any, records: Sequence[Mapping]) -> bool:
    """A run with operator metrics (OperatorMetrics or the ParallelismTuner): a record with a non-empty ``operators``."""
    return any(isinstance(r.get("operators"), (list, tuple)) and len(r["operators"]) > 0 for r in records)


def _tuning_panel(source: Any) -> Any:
    from .tuning import TunerPanel

    return TunerPanel(source)


def _tuning_figures(run_dir: Path, records: Sequence[Mapping]) -> dict[str, go.Figure]:
    from lmstream_kit.plots.tuning import tuner_figures

    return tuner_figures(list(records))


def reconfig_wanted(run_dir: Any, records: Sequence[Mapping]) -> bool:
    """A run with live reconfigurations: its journal exists (written at the first change)."""
    from lmstream_kit.journal import JOURNAL_FILE

    return (Path(run_dir) / JOURNAL_FILE).is_file()


def _reconfig_panel(source: Any) -> Any:
    from .reconfig import ReconfigPanel

    return ReconfigPanel(source)


def _reconfig_figures(run_dir: Path, records: Sequence[Mapping]) -> dict[str, go.Figure]:
    from lmstream_kit.plots.reconfig import reconfiguration_figure

    from .reconfig import read_transactions

    return {"reconfig": reconfiguration_figure(list(records), read_transactions(Path(run_dir)))}


def lag_wanted(run_dir: Any, records: Sequence[Mapping]) -> bool:
    """A source that fell behind its input (Spark's Kafka source, attached): a record with a ``source_lag``
    above 0.  Sources that always read up to their latest offset (Spark's ``rate`` source) show no panel."""
    return any((r.get("source_lag") or 0) > 0 for r in records)


def _lag_panel(source: Any) -> Any:
    from .lag import LagPanel

    return LagPanel(source)


def _lag_figures(run_dir: Path, records: Sequence[Mapping]) -> dict[str, go.Figure]:
    from lmstream_kit.plots import source_lag_figure

    return {"source_lag": source_lag_figure(list(records))}


#: the panels a dashboard may add, in display order
EXTRA_PANELS: tuple[ExtraPanel, ...] = (
    ExtraPanel("flumina", flumina_wanted, _flumina_panel, _flumina_figures),
    ExtraPanel("tuning", tuning_wanted, _tuning_panel, _tuning_figures),
    ExtraPanel("reconfig", reconfig_wanted, _reconfig_panel, _reconfig_figures),
    ExtraPanel("lag", lag_wanted, _lag_panel, _lag_figures),
)
