"""A bench directory's files: results, batches, capacity and bench.json written and loaded,
the reports, and the machine, version and command line recorded with them."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Optional

from ..exceptions import ConfigError


def machine_info() -> dict:
    """CPU model, cores, memory and OS of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import psutil

        memory = round(psutil.virtual_memory().total / 2**30, 1)
    except Exception:
        memory = None
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": memory, "os": platform.platform()}


def machine_boot() -> Optional[str]:
    """This machine's boot, as a short id (Linux's ``boot_id``; None elsewhere): a bench resumed on another
    VM, or after a reboot, tells its probes and cells apart by it, since such a machine's speed may differ.

    >>> b = machine_boot(); b is None or (len(b) == 8 and b == machine_boot())
    True
    """
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="utf-8") as fh:
            return fh.read().strip().replace("-", "")[:8] or None
    except OSError:
        return None


def write_run_results(out: Path, stem: str, meta: dict, runs: list[dict]) -> Path:
    """A benchmark script's results: ``<out>/<stem>-<host>-<time>.json`` (meta and runs) and the runs as CSV.

    ``meta`` gets the machine (host name, CPU, cores, memory, OS), the Python version and the
    time.  Returns the JSON file's path.
    """
    import csv
    import socket
    import time

    host = socket.gethostname().split(".")[0] or "host"
    meta = {"machine": {"host": host, **machine_info()}, "python": platform.python_version(), **meta,
            "when": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}-{host}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"meta": meta, "runs": runs}, indent=1) + "\n")
    with open(path.with_suffix(".csv"), "w", newline="") as fh:
        fields = list(dict.fromkeys(k for run in runs for k in run))  # runs may differ in their columns
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(runs)
    return path


def write_outputs(out: Path, results, batches, capacity, meta: dict, fmt: str = "parquet") -> None:
    """Write results, batches, capacity and bench.json into ``out``."""
    if fmt == "csv":
        results.to_csv(out / "results.csv", index=False)
    else:
        results.to_parquet(out / "results.parquet", index=False)
    batches.to_parquet(out / "batches.parquet", index=False)
    capacity.to_parquet(out / "capacity.parquet", index=False)
    tmp = out / "bench.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
    os.replace(tmp, out / "bench.json")


def write_reports(out: Path, results, batches, capacity, meta: dict, *, reproduction: Optional[Path] = None,
                  notes: Optional[str] = None) -> None:
    from .. import report

    report.write_report(out / "report.html", results, batches, capacity, meta)
    if reproduction is not None:
        reproduction = Path(reproduction)
        reproduction.parent.mkdir(parents=True, exist_ok=True)
        reproduction.write_text(report.reproduction_markdown(results, batches, capacity, meta, notes=notes))


def load_bench(out) -> tuple:
    """``(results, batches, capacity, meta)`` of a bench directory."""
    import pandas as pd

    out = Path(out)
    if (out / "results.parquet").exists():
        results = pd.read_parquet(out / "results.parquet")
    elif (out / "results.csv").exists():
        results = pd.read_csv(out / "results.csv")
    else:
        raise ConfigError(f"{out} is not a bench directory (no results.parquet or results.csv)")
    batches = pd.read_parquet(out / "batches.parquet") if (out / "batches.parquet").exists() else pd.DataFrame()
    capacity = (pd.read_parquet(out / "capacity.parquet") if (out / "capacity.parquet").exists()
                else pd.DataFrame())
    meta = json.loads((out / "bench.json").read_text()) if (out / "bench.json").exists() else {}
    return results, batches, capacity, meta


def source_commit() -> str | None:
    """The git commit the kit runs from (with ``-dirty`` where its files differ), None outside a checkout."""
    import subprocess

    here = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                text=True, timeout=10)
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no", "--",
                                "lmstream_kit"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _kit_version() -> str:
    try:
        from importlib.metadata import version

        return version("lmstream_kit")
    except Exception:
        return "unknown"


def command_line() -> str:
    return " ".join(["lmstream-kit", *sys.argv[1:]])
