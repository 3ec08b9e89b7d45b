"""Each window's result latency and each policy's CPU per row, from benches of one tumbling query.

    .venv/bin/lmstream-kit bench --queries CM1T --traffic constant --rate 102400 --duration 300 \\
        --speedup 2 --controller quantile=0.97 --controller min_margin_s=0.5 \\
        --conf spark.driver.memory=4g --policies lmstream,asap --out benchmarks/results/cm1t-close-DAY/on
    .venv/bin/lmstream-kit bench ...the same... --policies lmstream --controller close_horizon=false \\
        --out benchmarks/results/cm1t-close-DAY/off
    .venv/bin/python benchmarks/window_close.py benchmarks/results/cm1t-close-DAY/on \\
        benchmarks/results/cm1t-close-DAY/off

A cell's ``result_latency_s`` is the mean over the windows it emitted; a 120 s cell of CM1T emits
one (the window that closes with second 65), while the controller has seen at most one batch.
This script lists every window a cell emitted (the batch that emitted it, its result latency, the
batches the window's data went in and why they were admitted), so the first window after a start
is told apart from the ones after it, and prints each cell's CPU seconds per million rows.  It
reads the benches' ``results.parquet`` and the cells' ``metrics.jsonl``; it runs nothing.  Writes
``window-close-<host>-<time>.json`` and ``.csv`` into ``--out`` (default: the first bench's parent).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmstream_kit.bench.outputs import load_bench, write_run_results  # noqa: E402
from lmstream_kit.metrics import read_journal  # noqa: E402


def windows_of(run: Path) -> list[dict]:
    """The windows a cell emitted, in order, each with the reasons of the batches since the last one."""
    out, reasons = [], Counter()
    for r in read_journal(run / "metrics.jsonl"):
        if r.get("rows"):
            reasons[str(r.get("decision_reason"))] += 1
        if r.get("windows_closed"):
            out.append({"batch_id": r["batch_id"], "windows": r["windows_closed"],
                        "result_latency_s": round(float(r["result_latency_s"]), 3),
                        "batches_since_last": dict(reasons)})
            reasons = Counter()
    return out


def cells_of(bench: Path) -> list[dict]:
    results, _, _, meta = load_bench(bench)
    controller = meta.get("config", {}).get("controller") or {}
    return [{
        "bench": str(bench), "query": row["query"], "policy": row["policy"], "rate": row["rate"],
        "controller": controller, "batches": int(row["batches"]),
        "cpu_s_per_mrows": round(float(row["cpu_s_per_mrows"]), 3), "within_bound": float(row["within_bound"]),
        "mean_result_latency_s": float(row["result_latency_s"]), "windows": windows_of(bench / row["run_dir"]),
    } for row in results.to_dict("records")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benches", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    cells = [c for bench in args.benches for c in cells_of(bench)]
    out = args.out or args.benches[0].resolve().parent
    path = write_run_results(out, "window-close", {"benches": [str(b) for b in args.benches]}, cells)
    for c in cells:
        latencies = ", ".join(f"{w['result_latency_s']:.2f}" for w in c["windows"])
        print(f"{Path(c['bench']).name:>6} {c['query']} {c['policy']:<9} {c['batches']:>4} batches  "
              f"{c['cpu_s_per_mrows']:7.2f} CPU s/M rows  result latency per window: {latencies}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
