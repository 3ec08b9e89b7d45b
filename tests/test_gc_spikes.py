"""benchmarks/gc_spikes.py without Spark: its axes' bad values are one-line errors, and a run's row names its setting."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load():
    name = "gc_spikes_benchmark"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "gc_spikes.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_bad_axes_and_controller_parameters_are_one_line_errors(capsys):
    gc = _load()
    assert gc.main(["--gc-margins", "off,maybe"]) == 2
    assert capsys.readouterr().err.strip() == "error: unknown gc margin 'maybe'; known: off, on"
    assert gc.main(["--controller", "quantile=2"]) == 2
    assert capsys.readouterr().err.strip() == "error: controller quantile must be < 1, got 2"
    assert gc.main(["--controller", "bogus"]) == 2
    assert capsys.readouterr().err.strip() == "error: --controller takes KEY=VALUE, got 'bogus'"
    assert gc.main(["--collectors", "zgc"]) == 2
    assert "unknown collector 'zgc'" in capsys.readouterr().err


def test_a_runs_row_names_its_gc_margin_and_counts_its_collections():
    gc = _load()
    batches = [{"processing_s": p, "spark_jvm_gc_ms": g, "max_latency_s": lat, "bound_s": 2.5}
               for p, g, lat in ((1.0, 50.0, 2.0), (1.0, 40.0, 2.0), (3.0, 1900.0, 3.5), (1.1, 60.0, 2.1))]
    result = {"batches": batches, "collections": {"PS Scavenge": 3, "PS MarkSweep": 1}, "cpu_s": 8.0, "rows": 4000}
    row = gc.summarize("4g", "parallel-fixed", 0, result, 1.5, "default", "on")
    assert (row["gc_margin"], row["spikes"], row["full_gcs"], row["young_gcs"]) == ("on", 1, 1, 3)
    assert row["within_bound"] == 0.75 and row["cpu_s_per_mrows"] == 2000.0
