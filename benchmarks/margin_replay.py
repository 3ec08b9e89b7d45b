"""Replay the lmstream batches of stored benches under other margin quantiles (offline, no Spark).

    .venv/bin/python benchmarks/margin_replay.py benchmarks/results/paper-* benchmarks/results/cold-start-*

For every lmstream run of the given bench directories (``runs/*lmstream*/metrics.jsonl``), the
batches are fed in order to a fresh :class:`~lmstream_kit.controller.AdmissionController` (the
bytes model, ``min_margin_s=0.5``, the kit's ``cold_start``) for each quantile; before each batch
the controller's margin for it is read, as it would have admitted it.  A batch admitted on the
estimate (reason ``admit``) would have been admitted earlier by the difference between that margin
and the 0.97 one, so its latency moves by that much; every other batch keeps its latency.  The
batch sizes are held as they were: a larger margin makes smaller batches, which process faster,
so the late counts of the larger quantiles are upper bounds, and the margin's share of the bound
says what they cost (the part of the bound not spent batching).

It also sorts the recorded late batches: among a run's first ``cold_start`` batches, right after a
late batch (its data waited behind it), or an error beyond the margin (a spike), or other.

Writes ``margin-replay-<host>-<time>.json`` into ``--out`` and prints a table.  Simulated: it
replays recorded batches, it does not run them.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmstream_kit.controller import AdmissionController, BatchObservation  # noqa: E402

BASE_QUANTILE = 0.97


def batches_of(run: Path) -> list[dict]:
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("rows") and r.get("max_latency_s") is not None and r.get("bound_s"):
            out.append(r)
    return out


def margins(batches: list[dict], quantile: float) -> list[float]:
    """The margin a fresh controller at ``quantile`` keeps for each batch before it runs."""
    ctl = AdmissionController(slide_s=float(batches[0]["bound_s"]), quantile=quantile, min_margin_s=0.5)
    out = []
    for r in batches:
        margin = ctl.margin_s
        if ctl.n_observed < ctl.param_value("cold_start"):
            margin = max(margin, ctl.model.predict(float(r["bytes"])))
        out.append(margin)
        ctl.observe(BatchObservation(rows=int(r["rows"]), nbytes=int(r["bytes"]),
                                     processing_s=float(r["processing_s"]), max_latency_s=float(r["max_latency_s"])))
    return out


def kind(batches: list[dict], i: int, cold: int) -> str:
    r = batches[i]
    if i < cold:
        return "first batches"
    if i > 0 and batches[i - 1].get("within_bound") is False:
        return "after a late one"
    if r.get("predicted_s") is not None and r.get("margin_s") is not None and \
            r["processing_s"] - r["predicted_s"] > r["margin_s"]:
        return "error beyond the margin"
    return "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("benches", nargs="+", type=Path)
    ap.add_argument("--quantiles", default="0.95,0.97,0.99,0.995")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--probes", action="store_true",
                    help="the capacity probes' runs too, where a bench kept them (git keeps only the cells')")
    args = ap.parse_args()
    quantiles = [float(q) for q in args.quantiles.split(",")]
    runs = sorted(run for bench in args.benches for run in (bench / "runs").glob("*lmstream*")
                  if (run / "metrics.jsonl").exists() and (args.probes or not run.name.startswith("capacity-")))
    totals = {q: {"late": 0, "batches": 0, "margin_share": 0.0} for q in quantiles}
    recorded = {"late": 0, "batches": 0, "kinds": {}}
    cold = AdmissionController(slide_s=1.0).param_value("cold_start")
    for run in runs:
        batches = batches_of(run)
        if len(batches) < 3:
            continue
        base = margins(batches, BASE_QUANTILE)
        for q in quantiles:
            mine = base if q == BASE_QUANTILE else margins(batches, q)
            for r, m, b in zip(batches, mine, base):
                shift = m - b if r.get("decision_reason") == "admit" else 0.0
                totals[q]["late"] += r["max_latency_s"] - shift > r["bound_s"] + 1e-9
                totals[q]["batches"] += 1
                totals[q]["margin_share"] += m / r["bound_s"]
        for i, r in enumerate(batches):
            recorded["batches"] += 1
            if r.get("within_bound") is False:
                recorded["late"] += 1
                k = kind(batches, i, cold)
                recorded["kinds"][k] = recorded["kinds"].get(k, 0) + 1
    rows = [{"quantile": q, "late": t["late"], "batches": t["batches"], "late_share": t["late"] / t["batches"],
             "mean_margin_share_of_bound": t["margin_share"] / t["batches"]} for q, t in totals.items()]
    print(f"{len(runs)} lmstream runs, {recorded['batches']} batches, {recorded['late']} late as recorded: "
          + ", ".join(f"{n} {k}" for k, n in sorted(recorded["kinds"].items(), key=lambda kv: -kv[1])))
    print("quantile  late  share   margin / bound (mean)")
    for row in rows:
        print(f"{row['quantile']:<8}  {row['late']:4d}  {row['late_share']:6.2%}  {row['mean_margin_share_of_bound']:.3f}")
    result = {"machine": {"host": platform.node(), "python": platform.python_version()},
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "simulated": "replay of recorded batches",
              "benches": [str(b) for b in args.benches], "probes": args.probes, "runs": len(runs),
              "recorded": recorded, "quantiles": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"margin-replay-{platform.node()}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
