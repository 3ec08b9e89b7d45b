"""lmstream_kit.plots: one home for every figure builder; the notebooks' figures (no kernel, no Spark)."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import lmstream_kit.report.figures as report_figures
import widgets.figures as widget_figures
from lmstream_kit import plots, report
from lmstream_kit.plots import gpu_ops_grid_figure, within_bound_figure

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- one home


def test_every_public_builder_is_defined_in_the_plots_package():
    builders = [n for n in plots.__all__ if callable(getattr(plots, n))]
    old = set(widget_figures.__all__) | set(report_figures.__all__)
    assert old <= set(plots.__all__), sorted(old - set(plots.__all__))
    assert {"within_bound_figure", "gpu_ops_grid_figure", "latency_figure", "fig_capacity"} <= set(builders)
    for name in builders:
        module = getattr(plots, name).__module__
        assert module.startswith("lmstream_kit.plots."), f"{name} is defined in {module}"


@pytest.mark.parametrize("module", [widget_figures, report_figures, report], ids=lambda m: m.__name__)
def test_the_old_homes_re_export_the_same_objects(module):
    moved = [n for n in module.__all__ if hasattr(plots, n)]
    assert moved, module.__name__
    for name in moved:
        assert getattr(module, name) is getattr(plots, name), f"{module.__name__}.{name}"


@pytest.mark.parametrize("path", ["widgets/figures.py", "lmstream_kit/report/figures.py"])
def test_the_old_homes_define_no_function(path):
    tree = ast.parse((ROOT / path).read_text())
    defined = [type(n).__name__ for n in ast.walk(tree)
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))]
    assert defined == [], f"{path} defines {defined}: it only re-exports lmstream_kit.plots"


def _fresh(code: str) -> None:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("first", ["lmstream_kit.plots.bench", "lmstream_kit.report", "widgets.figures",
                                   "lmstream_kit.report.figures"])
def test_any_import_order_works(first):
    """plots.bench reads the report's helpers and the report re-exports plots.bench: no import cycle."""
    _fresh(
        f"import {first}\n"
        "import pandas as pd\n"
        "from lmstream_kit.report import fig_avg_latency, fig_capacity\n"
        "from lmstream_kit.plots import within_bound_figure\n"
        "fig = within_bound_figure(pd.DataFrame({'policy': ['asap'], 'within_bound': [0.5]}), 1.0)\n"
        "assert fig.data[0].marker.color == ('#7f7f7f',), fig.data[0].marker.color\n"
        "assert fig_capacity(None) is None\n"
    )


def test_importing_plots_pulls_in_no_report_widgets_or_spark():
    _fresh(
        "import sys\n"
        "import lmstream_kit.plots\n"
        "loaded = [m for m in ('lmstream_kit.report', 'widgets', 'ipywidgets', 'pyspark', 'lmstream_kit.live',\n"
        "                      'lmstream_kit.engine') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_notebooks_build_no_figure_inline(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    for inline in ("plotly.graph_objects", "go.Figure", "make_subplots", "add_trace"):
        assert inline not in code, f"{notebook.name} builds a figure inline ({inline}): use lmstream_kit.plots"


# --------------------------------------------------------------------------- within the bound (notebook 01)


def test_within_bound_figure_has_one_bar_per_policy_in_row_order():
    cells = pd.DataFrame({"within_bound": [0.25, 0.875, 1.0], "batches": [4, 8, 5]},
                         index=pd.Index(["fixed", "lmstream", "asap"], name="policy"))
    fig = within_bound_figure(cells, 1.234)
    [bar] = fig.data
    assert bar.type == "bar"
    assert list(bar.x) == ["fixed", "lmstream", "asap"]
    assert list(bar.y) == [25.0, 87.5, 100.0]
    assert list(bar.text) == ["25%", "88%", "100%"]
    assert list(bar.marker.color) == ["#d62728", "#1f77b4", "#7f7f7f"]
    assert bar.textposition == "outside"
    assert fig.layout.title.text == "Micro-batches within the 1.23 s bound"
    assert fig.layout.yaxis.title.text == "% of data batches"
    assert list(fig.layout.yaxis.range) == [0, 110] and fig.layout.height == 360


def test_within_bound_figure_reads_a_policy_column_like_the_index():
    rng = np.random.default_rng(7)
    shares = rng.uniform(0.0, 1.0, size=2)
    by_column = pd.DataFrame({"policy": ["lmstream", "my-plugin"], "within_bound": shares})
    fig = within_bound_figure(by_column, 3.0)
    assert fig.to_dict() == within_bound_figure(by_column.set_index("policy"), 3.0).to_dict()
    [bar] = fig.data
    assert list(bar.y) == pytest.approx([shares[0] * 100, shares[1] * 100])
    assert list(bar.text) == [f"{round(shares[0] * 100)}%", f"{round(shares[1] * 100)}%"]
    assert list(bar.marker.color) == ["#1f77b4", "#BAB0AC"]  # a plug-in's policy: light grey


def test_within_bound_figure_keeps_a_missing_share_as_a_gap():
    fig = within_bound_figure(pd.DataFrame({"policy": ["fixed"], "within_bound": [float("nan")]}), 2.0)
    assert math.isnan(fig.data[0].y[0]) and list(fig.data[0].text) == ["nan%"]


# --------------------------------------------------------------------------- GPU operators (notebook 02)


def _grid(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    sizes, points = [16, 128, 512, 1024], [64, 150, 300]
    counts = np.sort(rng.integers(0, 7, size=(len(points), len(sizes))), axis=1)
    grid = pd.DataFrame(counts, columns=[f"{s} KiB" for s in sizes],
                        index=pd.Index([f"{p} KiB" for p in points], name="inflection point"))
    grid.columns.name = "partition size"
    return grid


def test_gpu_ops_grid_figure_is_one_heatmap_of_the_counts():
    grid = _grid(3)
    fig = gpu_ops_grid_figure(grid, operators=6, workload="LR2S")
    [heat] = fig.data
    assert heat.type == "heatmap"
    assert list(heat.x) == ["16 KiB", "128 KiB", "512 KiB", "1024 KiB"]
    assert list(heat.y) == ["64 KiB", "150 KiB", "300 KiB"]
    assert np.asarray(heat.z).tolist() == grid.to_numpy().tolist()
    assert np.asarray(heat.text).tolist() == grid.to_numpy().tolist()
    assert heat.texttemplate == "%{text}"
    assert heat.colorbar.title.text == "GPU ops"
    assert heat.colorscale[0][1] != heat.colorscale[-1][1]  # a scale, not one colour
    assert fig.layout.title.text == "LR2S: operators on the GPU (of 6)"
    assert fig.layout.xaxis.title.text == "partition size"
    assert fig.layout.yaxis.title.text == "inflection point"
    assert fig.layout.height == 380


def test_gpu_ops_grid_figure_without_a_workload():
    fig = gpu_ops_grid_figure(_grid(4), operators=11)
    assert fig.layout.title.text == "Operators on the GPU (of 11)"
