"""lmstream_kit.plots: one home for every figure builder; the notebooks' figures (no kernel, no Spark)."""

from __future__ import annotations

import ast
import doctest
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
from lmstream_kit.plots import gpu_ops_grid_figure, soak_figure, spool_retention_figure, within_bound_figure

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


# --------------------------------------------------------------------------- running for days (notebook 12)


def _retention_records(seed: int) -> list[dict]:
    """Batches 0..7 (batch 0 empty without a span, batch 4 empty with an empty one), admitted 1.5 s apart
    from t=100; shuffled."""
    rng = np.random.default_rng(seed)
    records, seq = [], 0
    for b in range(8):
        n = 0 if b in (0, 4) else int(rng.integers(1, 4))
        records.append({"batch_id": b, "rows": 10 * n, "start_seq": seq if b else None,
                        "end_seq": seq + n if b else None, "spool_bytes": int(rng.integers(0, 10_000)),
                        "spool_first_seq": max(0, seq - 3), "admitted_at": 100.0 + 1.5 * b})
        seq += n
    records.append({"batch_id": 8, "rows": 10, "start_seq": seq, "end_seq": seq + 1, "spool_bytes": None,
                    "admitted_at": 112.0})  # a record without retention's fields: no spool point
    return [records[i] for i in rng.permutation(len(records))]


def test_spool_retention_figure_draws_kept_bytes_and_both_first_datasets_by_batch():
    records = _retention_records(11)
    by_id = sorted(records, key=lambda r: r["batch_id"])
    kept = [r for r in by_id if r["spool_bytes"] is not None]
    spans = [r for r in by_id if r["rows"]]
    fig = spool_retention_figure(records)
    kib, first, start = fig.data
    assert [t.name for t in fig.data] == ["spool data kept (KiB)", "first dataset kept (spool_first_seq)",
                                          "batch's first dataset (start_seq)"]
    assert list(kib.x) == list(first.x) == list(range(8))
    assert list(kib.y) == [r["spool_bytes"] / 1024 for r in kept]
    assert list(first.y) == [r["spool_first_seq"] for r in kept]
    assert list(start.x) == [1, 2, 3, 5, 6, 7, 8]
    assert list(start.y) == [r["start_seq"] for r in spans] and start.y[0] == 0
    assert [t.mode for t in fig.data] == ["lines+markers"] * 3
    assert [t.yaxis for t in fig.data] == ["y", "y2", "y2"]
    assert (kib.line.shape, first.line.shape, start.line.shape) == (None, "hv", "hv")
    assert (first.line.dash, start.line.dash) == (None, "dot")
    assert fig.layout.title.text == "Spool retention per micro-batch" and fig.layout.height == 400
    assert fig.layout.xaxis.title.text == "batch id"
    assert (fig.layout.yaxis.title.text, fig.layout.yaxis2.title.text) == ("KiB kept", "spool dataset")
    assert fig.layout.yaxis2.overlaying == "y" and fig.layout.yaxis2.side == "right"
    assert fig.layout.yaxis.rangemode == fig.layout.yaxis2.rangemode == "tozero"
    assert fig.layout.shapes == () and fig.layout.annotations == ()
    # a DataFrame of the same records draws the same figure
    assert spool_retention_figure(pd.DataFrame(records)).to_dict() == fig.to_dict()


def test_spool_retention_figure_marks_the_change_and_the_first_batch_after_the_full_disk():
    records = _retention_records(12)
    fig = spool_retention_figure(records, change=(5, "keep for 1 h"), disk_held_until=104.0,
                                 title="Spool retention per micro-batch (live)", height=380)
    change, disk = fig.layout.shapes
    assert (change.type, change.x0, change.x1, change.line.dash, change.line.color) == ("line", 5, 5, "dash", None)
    # batch 3 is admitted at 104.5 s, the first after 104 s
    assert (disk.type, disk.x0, disk.x1, disk.line.dash, disk.line.color) == ("line", 3, 3, "dot", "firebrick")
    assert [(a.text, a.x, a.yanchor) for a in fig.layout.annotations] == [
        ("keep for 1 h", 5, "top"), ("after the full disk", 3, "bottom")]
    assert fig.layout.title.text == "Spool retention per micro-batch (live)" and fig.layout.height == 380
    # no batch admitted after the hold: no disk marker
    late = spool_retention_figure(records, disk_held_until=112.0)
    assert late.layout.shapes == () and late.layout.annotations == ()


def test_spool_retention_figure_of_no_records_has_its_three_empty_traces():
    fig = spool_retention_figure([])
    assert [(t.name, list(t.x), list(t.y)) for t in fig.data] == [
        ("spool data kept (KiB)", [], []), ("first dataset kept (spool_first_seq)", [], []),
        ("batch's first dataset (start_seq)", [], [])]
    assert spool_retention_figure(None).to_dict() == fig.to_dict()
    # a record without rows or a span (a journal's older line) has its spool point and no span point
    [kib, first, start] = spool_retention_figure([{"batch_id": 3, "spool_bytes": 512, "spool_first_seq": 2}]).data
    assert (list(kib.y), list(first.y), list(start.x)) == ([0.5], [2], [])


def _soak_samples(seed: int) -> list[dict]:
    """A sample every 30 s for 5 min with seeded byte counts; some values missing or not numbers."""
    rng = np.random.default_rng(seed)
    samples = [{"t_s": 30.0 * i, "driver_rss_bytes": int(rng.integers(100, 200)) * 2**20,
                "jvm_rss_bytes": int(rng.integers(400, 800)) * 2**20,
                "workers_rss_bytes": int(rng.integers(200, 300)) * 2**19,
                "spool_bytes": int(rng.integers(0, 64)) * 2**18} for i in range(11)]
    samples[2]["jvm_rss_bytes"] = None
    samples[3]["workers_rss_bytes"] = float("nan")
    samples[4]["driver_rss_bytes"] = True  # a flag is not a number of bytes
    del samples[5]["spool_bytes"]
    samples.insert(0, {"t_s": -10.0, "driver_rss_bytes": 2**30})  # before the stream started
    return samples


def test_soak_figure_draws_rss_and_spool_in_mib_over_minutes_with_the_warm_up_shaded():
    samples = _soak_samples(5)
    fig = soak_figure(samples, warmup_s=90.0, host="vm-2", result="soak-vm-1")
    assert [t.name for t in fig.data] == ["driver's Python RSS", "JVM RSS", "Python workers RSS", "spool on disk"]

    def expect(key):
        kept = [s for s in samples if s["t_s"] >= 0 and isinstance(s.get(key), (int, float))
                and not isinstance(s[key], bool) and math.isfinite(s[key])]
        return [s["t_s"] / 60 for s in kept], [s[key] / 2**20 for s in kept]

    for trace, key, missing in zip(fig.data, ("driver_rss_bytes", "jvm_rss_bytes", "workers_rss_bytes", "spool_bytes"),
                                   (4, 2, 3, 5), strict=True):
        minutes, mib = expect(key)
        assert len(trace.x) == 10 and 30.0 * missing / 60 not in list(trace.x), trace.name
        assert list(trace.x) == pytest.approx(minutes) and list(trace.y) == pytest.approx(mib), trace.name
        assert trace.mode == "lines"
    assert [(t.xaxis, t.yaxis) for t in fig.data] == [("x", "y")] * 3 + [("x2", "y2")]
    # the warm-up: one grey band per row from 0 to 1.5 min, labelled at its middle on the top row
    bands = [(s.type, s.x0, s.x1, s.xref, s.yref, s.fillcolor, s.opacity, s.line.width) for s in fig.layout.shapes]
    assert bands == [("rect", 0, 1.5, "x", "y domain", "grey", 0.15, 0),
                     ("rect", 0, 1.5, "x2", "y2 domain", "grey", 0.15, 0)]
    [label] = fig.layout.annotations
    assert (label.text, label.x, label.y, label.xref, label.yref) == ("warm-up", 0.75, 1.0, "x", "y domain")
    assert fig.layout.title.text == "Soak on vm-2: memory and spool over time (measured, soak-vm-1)"
    assert (fig.layout.yaxis.title.text, fig.layout.yaxis2.title.text) == ("RSS (MiB)", "MiB")
    assert fig.layout.xaxis2.title.text == "minutes since the stream started" and fig.layout.xaxis.title.text is None
    assert fig.layout.xaxis.matches == "x2"  # the rows share their time axis
    assert fig.layout.height == 520


def test_soak_figure_draws_the_memory_asked_for_and_another_spool_key():
    samples = [{"t_s": 0, "jvm_rss_bytes": 3 * 2**20, "spool_data_bytes": 2**19, "spool_bytes": 2**22},
               {"t_s": 120, "jvm_rss_bytes": 5 * 2**20, "spool_data_bytes": 2**20, "spool_bytes": 2**23}]
    fig = soak_figure(samples, warmup_s=60, memory={"jvm_rss_bytes": "Spark's JVM"}, spool_key="spool_data_bytes")
    assert [(t.name, list(t.x), list(t.y)) for t in fig.data] == [
        ("Spark's JVM RSS", [0.0, 2.0], [3.0, 5.0]), ("spool on disk", [0.0, 2.0], [0.5, 1.0])]
    assert [s.x1 for s in fig.layout.shapes] == [1.0, 1.0]
    assert fig.layout.title.text == "Soak: memory and spool over time"
    assert soak_figure(samples, warmup_s=60, host="h").layout.title.text == "Soak on h: memory and spool over time (measured)"


def test_the_retention_figures_examples_run():
    import lmstream_kit.plots.retention as module

    failed, tried = doctest.testmod(module, raise_on_error=False, verbose=False)
    assert tried >= 5 and failed == 0


def test_row_cost_figure_draws_each_batchs_processing_per_million_rows_per_query_and_policy():
    from lmstream_kit.plots.bench import fig_row_cost

    batches = pd.DataFrame({
        "query": ["LR2S"] * 4 + ["CM1S"] * 2,
        "policy": ["asap", "asap", "lmstream", "lmstream", "asap", "lmstream"],
        "rows": [100_000, 0, 900_000, 400_000, 50_000, 300_000],  # a no-data batch costs nothing per row
        "processing_s": [0.34, 0.2, 2.0, 0.9, 0.4, 1.5],
    })
    fig = fig_row_cost(batches)
    traces = [(t.name, list(t.x), [round(y, 3) for y in t.y], t.xaxis) for t in fig.data]
    assert traces == [("lmstream", [900_000, 400_000], [2.222, 2.25], "x"), ("asap", [100_000], [3.4], "x"),
                      ("lmstream", [300_000], [5.0], "x2"), ("asap", [50_000], [8.0], "x2")]
    assert [a.text for a in fig.layout.annotations] == ["LR2S", "CM1S"]  # one panel per query, in sweep order
    assert fig.layout.xaxis.type == fig.layout.yaxis2.type == "log"
    assert [t.showlegend for t in fig.data] == [True, True, False, False]  # a policy once in the legend
    assert fig_row_cost(batches.assign(rows=0)) is None and fig_row_cost(pd.DataFrame()) is None
