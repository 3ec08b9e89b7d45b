"""Execute every notebook in notebooks/ with papermill and render each to HTML.

    python scripts/run_notebooks.py            # full parameters (longer streams), about 20 minutes
    python scripts/run_notebooks.py --quick    # the notebooks' own small defaults (as CI runs them)
    python scripts/run_notebooks.py --only 02_device_mapping --only lab_01_latency_bounds

Everything goes to ``runs/notebooks/<time>/`` (or ``--out``): for each notebook the
executed copy ``<name>.ipynb``, its HTML ``<name>.html`` and its run directory
``<name>/`` (metrics, Spark timings, ``summary.json``); the kernel's stderr goes to
``<name>.log``.  One line per notebook
shows its progress; a notebook that fails gets a one-line error (the failing
cell's exception and message) and the others still run.  The exit status is 1
if any notebook failed, 2 on bad arguments.

``make notebooks`` (``scripts/notebooks.sh``) runs this in ``.venv``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the full parameters per notebook (names without .ipynb); ``--quick`` uses the notebooks' own
#: defaults, and a notebook missing here runs with its defaults too
FULL_PARAMS: dict[str, dict] = {
    "00_quickstart": {"speedup": 2.5, "batches": 12, "batches_after": 10},
    "01_dynamic_batching": {"speedup": 2.0, "batches": 20},
    "02_device_mapping": {"speedup": 2.0, "batches": 5},
    "03_parameter_optimization": {"speedup": 2.5, "batches": 24, "frozen_batches": 8, "released_batches": 8,
                                  "optimizer": {}},
    "04_policy_comparison": {"queries": ["LR1S", "LR1T", "LR2S", "CM1S", "CM1T", "CM2S"],
                             "traffic": ["random"], "duration_s": 60.0, "speedup": 4.0, "warmup_s": 20.0},
    "05_custom_controller": {"speedup": 2.5, "batches": 8, "batches_after": 8},
    "06_your_own_query": {"speedup": 2.0, "batches": 12, "attach_batches": 10},
    "07_fork_join": {"duration_s": 60, "rate": 40000, "python_events": 1_000_000},
    "08_parallelism_tuning": {"duration_s": 60, "sim_dags": "LR1S,LR2S,CM1S,Q3,Q5,Q7", "sim_duration_s": 240},
    "lab_01_latency_bounds": {"speedup": 2.5, "batches": 6},
}


def _one_line(exc: BaseException) -> str:
    """The failing cell's exception as one line (no traceback)."""
    ename = getattr(exc, "ename", None)
    if ename is not None:  # papermill's PapermillExecutionError
        evalue = str(getattr(exc, "evalue", "") or "").strip().splitlines()
        where = f" (cell {exc.exec_count})" if getattr(exc, "exec_count", None) is not None else ""
        return f"{ename}: {evalue[0] if evalue else ''}{where}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def render_html(executed: Path, html: Path) -> None:
    """Render an executed notebook to one HTML file (its plotly figures carry plotly.js offline)."""
    import nbformat
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nbformat.read(executed, as_version=4))
    html.write_text(body, encoding="utf-8")


@contextlib.contextmanager
def _stderr_to(log: Path):
    """Send this process's stderr (file descriptor 2) to ``log``; the kernel and its JVM inherit it.

    The kernel copies what its JVM writes into the cell outputs and also to the terminal, where it
    would break the one line per notebook.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(log, "ab") as fh:
            os.dup2(fh.fileno(), 2)
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def run_one(notebook: Path, out: Path, params: dict, *, html: bool = True, timeout_s: float = 900) -> Path:
    """Execute ``notebook`` into ``out`` with ``params`` (plus its run_dir); returns the executed copy.

    The kernel's own stderr (Spark's start-up lines) goes to ``out/<name>.log``.
    """
    import papermill

    name = notebook.stem
    executed = out / f"{name}.ipynb"
    with _stderr_to(out / f"{name}.log"):
        _execute(papermill, notebook, executed, params, out / name, out, timeout_s)
    if html:
        render_html(executed, out / f"{name}.html")
    return executed


def _execute(papermill, notebook: Path, executed: Path, params: dict, run_dir: Path, cwd: Path,
             timeout_s: float) -> None:
    papermill.execute_notebook(
        str(notebook),
        str(executed),
        parameters={**params, "run_dir": str(run_dir.resolve())},
        kernel_name="python3",  # this interpreter's own ipykernel (jupyter_client runs sys.executable)
        cwd=str(cwd),
        progress_bar=False,
        log_output=False,
        store_widget_state=False,  # widget state would add ~5 MB of plotly.js per FigureWidget
        execution_timeout=timeout_s,
        start_timeout=120,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the notebooks' small defaults, as CI runs them")
    parser.add_argument("--out", type=Path, help="output directory (default runs/notebooks/<time>)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only this notebook (name with or without .ipynb; repeatable)")
    parser.add_argument("--dir", type=Path, default=ROOT / "notebooks", help="where the notebooks are")
    parser.add_argument("--no-html", action="store_true", help="skip the HTML rendering")
    args = parser.parse_args(argv)

    try:
        import nbconvert  # noqa: F401
        import papermill  # noqa: F401
    except ImportError as exc:
        print(f"error: {exc.name} is missing: install the notebook extra (pip install -e '.[notebook]')",
              file=sys.stderr)
        return 2
    notebooks = sorted(args.dir.glob("*.ipynb"))
    wanted = {name.removesuffix(".ipynb") for name in args.only}
    unknown = wanted - {nb.stem for nb in notebooks}
    if unknown:
        known = ", ".join(nb.stem for nb in notebooks)
        print(f"error: no notebook named {', '.join(sorted(unknown))} in {args.dir} (known: {known})",
              file=sys.stderr)
        return 2
    if wanted:
        notebooks = [nb for nb in notebooks if nb.stem in wanted]
    if not notebooks:
        print(f"error: no notebooks in {args.dir}", file=sys.stderr)
        return 2
    out = args.out or ROOT / "runs" / "notebooks" / time.strftime("%Y%m%d-%H%M%S")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: cannot create {out}: {exc.strerror}", file=sys.stderr)
        return 2
    logging.getLogger("papermill").setLevel(logging.WARNING)  # its own per-cell chatter

    mode = "quick (the notebooks' defaults)" if args.quick else "full"
    print(f"running {len(notebooks)} notebooks, {mode} parameters, into {out}", flush=True)
    failed = []
    started = time.monotonic()
    for i, notebook in enumerate(notebooks, 1):
        params = {} if args.quick else FULL_PARAMS.get(notebook.stem, {})
        print(f"[{i}/{len(notebooks)}] {notebook.stem} ...", end=" ", flush=True)
        t0 = time.monotonic()
        try:
            run_one(notebook, out, params, html=not args.no_html)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            return 130
        except Exception as exc:  # noqa: BLE001  (one line per failure; the executed copy has the traceback)
            failed.append(notebook.stem)
            print(f"FAILED after {time.monotonic() - t0:.0f} s: {_one_line(exc)}", flush=True)
            continue
        shown = out / f"{notebook.stem}.{'ipynb' if args.no_html else 'html'}"
        print(f"ok ({time.monotonic() - t0:.0f} s) -> {_relative(shown)}", flush=True)
    total = time.monotonic() - started
    (out / "notebooks.json").write_text(json.dumps(
        {"mode": "quick" if args.quick else "full", "notebooks": [nb.stem for nb in notebooks],
         "failed": failed, "seconds": round(total, 1)}, indent=2) + "\n")
    if failed:
        print(f"{len(failed)} of {len(notebooks)} notebooks failed ({', '.join(failed)}); "
              f"the executed copies in {_relative(out)} show where", file=sys.stderr)
        return 1
    print(f"all {len(notebooks)} notebooks ran in {total:.0f} s; open {_relative(out)}/*.html")
    return 0


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
