"""The bench report's pages: the self-contained HTML report and the Markdown for ``docs/reproduction.md``.

:func:`write_report` is the package's only I/O.

>>> reproduction_markdown(pd.DataFrame(), pd.DataFrame(), None, {}).splitlines()[0]
'# LMStream reproduction'
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
from plotly.offline import get_plotlyjs

from .common import CAPTIONS, _empty, _policies, split_load, table4_caption
from .figures import (
    fig_avg_latency,
    fig_batch_timeline,
    fig_capacity,
    fig_fixed_latency_growth,
    fig_row_cost,
    fig_throughput,
    pick_timeline_queries,
)
from .formatting import (
    _CPU_FORMATS,
    _SUMMARY_FORMATS,
    _SUMMARY_HEADERS,
    _capacity_formats,
    _cell_summary,
    _claims_display,
    _display,
    _meta_items,
    _table4_display,
)
from .goals import goals
from .paper import claims
from .tables import capacity_table, cpu_table, prediction_errors, time_shares

# ---------------------------------------------------------------------------------------------
# HTML report

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; }
td:first-child, th:first-child { text-align: left; }
table.meta td { text-align: left; }
figure { margin: 1.5em 0; }
figcaption { font-size: 0.9em; color: #444; margin-top: 0.3em; }
p.missing { color: #a33; font-style: italic; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; white-space: pre-wrap; }
.scroll { overflow-x: auto; }
"""


def _html_table(display: pd.DataFrame, css_class: str = "data") -> str:
    if display.empty:
        return '<p class="missing">not in this sweep: no rows</p>'
    return display.to_html(index=False, escape=True, border=0, classes=css_class, na_rep="–")


def _missing_note(text: str) -> str:
    return f'<p class="missing">{html.escape(text)}</p>'


def build_report(
    results: pd.DataFrame,
    batches: pd.DataFrame,
    capacity: pd.DataFrame | None,
    meta: Mapping | None,
) -> str:
    """A complete, self-contained HTML page for the sweep.

    The page has a header (machine, versions, time compression, the command),
    the claims table, Figs. 1, 6, 7, 8, 9 and the capacity figure, each with a
    caption naming the paper's figure (or a "not in this sweep" note when the
    sweep lacks its data), then Table IV, the CPU table, the capacity table and
    every result row.  plotly.js is embedded once, in the page head; every string
    from the data is HTML-escaped (in figure labels too, since plotly reads them
    as pseudo-HTML).  The output depends only on the inputs (figure ids are fixed).
    """
    meta = dict(meta or {})
    all_results = results if not _empty(results) else pd.DataFrame()
    results, _ = split_load(all_results)  # overload cells: Fig. 1 and the claims (per rate) only
    batches = all_batches = batches if not _empty(batches) else pd.DataFrame()
    batches, over_batches = split_load(batches)
    policies = set(_policies(results)) | set(_policies(batches))

    sections: list = []  # (caption key, figure or None, missing note)
    fixed_note = "not in this sweep: needs the fixed policy"
    fig1 = (fig_fixed_latency_growth(over_batches, meta, compare="lmstream") if not over_batches.empty
            else fig_fixed_latency_growth(batches, meta))
    sections.append(("fig1", fig1, fixed_note))
    bars_note = "" if "fixed" in policies else " (not in this sweep: needs the fixed policy, the paper's Baseline)"
    have_results = not results.empty
    sections.append(("fig6", fig_avg_latency(results) if have_results else None, "not in this sweep: no results"))
    sections.append(("fig7", fig_throughput(results) if have_results else None, "not in this sweep: no results"))
    picked = pick_timeline_queries(results)
    for key, kind in (("fig8", "sliding"), ("fig9", "tumbling")):
        query = picked[kind]
        if query is None:
            sections.append((key, None, f"not in this sweep: needs a {kind}-window query"))
        else:
            note = f"not in this sweep: no per-batch records for {query}"
            sections.append((key, fig_batch_timeline(batches, query), note))
    sections.append(
        ("capacity", fig_capacity(capacity), "not in this sweep: the capacity search was skipped")
    )
    sections.append(("row_cost", fig_row_cost(all_batches), "not in this sweep: no per-batch records"))

    parts: list = []
    n_fig = 0
    for key, fig, missing in sections:
        caption = CAPTIONS[key]
        if key in ("fig6", "fig7"):
            caption += bars_note
        if key in ("fig8", "fig9"):
            query = picked["sliding" if key == "fig8" else "tumbling"]
            if query is not None:
                caption += f" Query: {query}."
        body = ""
        if fig is not None:
            n_fig += 1
            body = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"lmstream-fig-{n_fig}")
        else:
            body = _missing_note(missing)
        parts.append(f"<figure>\n{body}\n<figcaption>{html.escape(caption)}</figcaption>\n</figure>")

    claims_table = claims(all_results, capacity, all_batches)
    goals_html = _html_table(_goals_display(goals(all_results, capacity, trigger_s=meta.get("trigger_s"), batches=all_batches)))
    near = split_load(all_results, "capacity")[1]
    near_html = "" if near.empty else (
        f"<h2>At {_capacity_share(meta)} of asap's capacity</h2>\n<p>{html.escape(CAPTIONS['at_capacity'])}</p>\n"
        f'<div class="scroll">{_html_table(_display(_cell_summary(near), _SUMMARY_FORMATS).rename(columns=_SUMMARY_HEADERS))}</div>'
    )
    shares = time_shares(results, "lmstream")
    cpu = cpu_table(results)
    cap = capacity_table(capacity)

    head_js = ""
    if n_fig:
        head_js = (
            '<script type="text/javascript">window.PlotlyConfig = {MathJaxConfig: "local"};</script>\n'
            f'<script type="text/javascript">{get_plotlyjs()}</script>'
        )
    meta_rows = "\n".join(
        f"<tr><th>{html.escape(label)}</th><td>{html.escape(text)}</td></tr>"
        for label, text in _meta_items(meta)
    )
    command = html.escape(str(meta.get("command") or "–"))
    cap_html = (
        _html_table(_display(cap, _capacity_formats(cap)))
        if not cap.empty
        else _missing_note("not in this sweep: the capacity search was skipped")
    )
    results_html = (
        _html_table(_display(results, {}), "data results") if not results.empty
        else _missing_note("not in this sweep: no results")
    )
    cpu_html = (
        _html_table(_display(cpu, _CPU_FORMATS)) if not cpu.empty
        else _missing_note("not in this sweep: no results")
    )
    shares_html = (
        _html_table(_table4_display(shares)) if not shares.empty
        else _missing_note("not in this sweep: needs the lmstream policy")
    )
    errors = prediction_errors(batches)
    errors_html = "" if errors.empty else (  # benches before the per-batch prediction have no section
        f"<h2>Service-time prediction</h2>\n<p>{html.escape(_PREDICTION_CAPTION)}</p>\n"
        f'<div class="scroll">{_html_table(_display(errors, {}))}</div>'
    )
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>LMStream reproduction report</title>
<style>{_CSS}</style>
{head_js}
</head>
<body>
<h1>LMStream reproduction report</h1>
<p>Spark micro-batch streaming latency and throughput under the lmstream, fixed-trigger and asap policies,
set beside the LMStream paper (Section V). The paper's Baseline is our <code>fixed</code> policy.</p>
<table class="meta">
{meta_rows}
</table>
<p>Command:</p>
<pre><code>{command}</code></pre>
<h2>Claims</h2>
<p>{html.escape(CAPTIONS["claims"])}</p>
{_html_table(_claims_display(claims_table))}
<h2>Goals</h2>
<p>{html.escape(CAPTIONS["goals"])}</p>
<div class="scroll">{goals_html}</div>
{near_html}
<h2>Figures</h2>
{chr(10).join(parts)}
<h2>Time shares (Table IV)</h2>
<p>{html.escape(table4_caption(meta))}</p>
<div class="scroll">{shares_html}</div>
<h2>CPU per million rows</h2>
<p>{html.escape(CAPTIONS["cpu"])}</p>
<div class="scroll">{cpu_html}</div>
{errors_html}
<h2>Capacity</h2>
<p>{html.escape(CAPTIONS["capacity"])}</p>
<div class="scroll">{cap_html}</div>
<h2>All results</h2>
<p>{html.escape(CAPTIONS["results"])}</p>
<div class="scroll">{results_html}</div>
<p><small>Generated by lmstream_kit.report from the sweep's data frames.</small></p>
</body>
</html>
"""
    return page


def write_report(
    path: str | Path,
    results: pd.DataFrame,
    batches: pd.DataFrame,
    capacity: pd.DataFrame | None,
    meta: Mapping | None,
) -> Path:
    """Write :func:`build_report`'s page to ``path`` (parents created); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(build_report(results, batches, capacity, meta), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# Markdown reproduction report


def _md_cell(value: Any) -> str:
    text = html.escape(str(value), quote=False).replace("|", "\\|")
    return " ".join(text.split())


def _md_table(display: pd.DataFrame) -> str:
    if display.empty:
        return "_not in this sweep: no rows_"
    header = "| " + " | ".join(_md_cell(c) for c in display.columns) + " |"
    rule = "|" + "|".join("---" for _ in display.columns) + "|"
    body = ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in display.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def _md_duration(meta: Mapping) -> str:
    try:
        start = datetime.fromisoformat(str(meta.get("started_at")))
        end = datetime.fromisoformat(str(meta.get("finished_at")))
    except ValueError:
        return ""
    seconds = (end - start).total_seconds()
    return f" ({seconds / 60:.1f} min)" if seconds >= 0 else ""


_OVERLOAD_CAPTION = (
    "The overload cells (bench --overload): each policy once on the query, constant traffic at a rate "
    "above the fixed trigger's capacity, where its maximum latency grows batch after batch (Fig. 1). "
    "Means as above; the claims compare the policies at this rate too."
)

_PREDICTION_CAPTION = (
    "How far each lmstream batch's processing time was from the controller's prediction at admission "
    "(seconds; the service model is the bench's --service-model). Spikes are batches that took more than "
    "1.5 times their cell's median; under_spike_s is how much longer than predicted they took on average."
)


def reproduction_markdown(
    results: pd.DataFrame,
    batches: pd.DataFrame,
    capacity: pd.DataFrame | None,
    meta: Mapping | None,
    notes: str | None = None,
) -> str:
    """Markdown for ``docs/reproduction.md``.

    Sections: how it was generated (the command), the setup (machine, versions,
    time compression), the claims (paper vs ours, agrees/differs), latency and
    throughput per query and policy, Table IV, CPU per million rows, the capacity
    search (when it ran) and, when ``notes`` is given, "Where we differ and why".
    Shares are percentages with one decimal, seconds have 3 significant digits.
    From ``batches`` only the lmstream controller's prediction errors are read (a
    section when the batches carry the prediction); the per-cell results summarise
    the rest.
    """
    meta = dict(meta or {})
    all_results = results if not _empty(results) else pd.DataFrame()
    results, overload = split_load(all_results)
    all_batches = batches if not _empty(batches) else pd.DataFrame()
    errors = prediction_errors(split_load(batches)[0] if not _empty(batches) else None)
    out: list = ["# LMStream reproduction", ""]
    out += [
        (
            "This page compares the LMStream paper's evaluation (Section V) with a sweep run by "
            "`lmstream_kit`. The paper's throughput-oriented Baseline (Spark with a 10 s trigger) is our "
            "`fixed` policy; `asap` admits everything whenever the engine is idle."
        ),
        "",
        "## How it was generated",
        "",
        f"Started {meta.get('started_at', '–')}, finished {meta.get('finished_at', '–')}{_md_duration(meta)}:",
        "",
        "```",
        str(meta.get("command") or "–"),
        "```",
        "",
        "## Setup",
        "",
    ]
    out += [f"- **{label}**: {_md_cell(text)}" for label, text in _meta_items(meta)]
    out += ["", "## Claims", "", _md_table(_claims_display(claims(all_results, capacity, all_batches))), ""]
    out += ["## Goals", "", CAPTIONS["goals"], "",
            _md_table(_goals_display(goals(all_results, capacity, trigger_s=meta.get("trigger_s"), batches=all_batches))), ""]
    near = split_load(all_results, "capacity")[1]
    if not near.empty:
        out += [f"## At {_capacity_share(meta)} of asap's capacity", "", CAPTIONS["at_capacity"], "",
                _md_table(_display(_cell_summary(near), _SUMMARY_FORMATS).rename(columns=_SUMMARY_HEADERS)), ""]

    out += [
        "## Latency and throughput per query",
        "",
        (
            "Means over repetitions. Latencies and bounds in wall seconds; `within_bound` is the share of "
            "micro-batches whose maximum latency met the bound; throughput is rows per second of "
            "processing, sustained is rows per wall second."
        ),
        "",
        _md_table(_display(_cell_summary(results), _SUMMARY_FORMATS).rename(columns=_SUMMARY_HEADERS)),
        "",
        "## Time shares (Table IV)",
        "",
        table4_caption(meta),
        "",
    ]
    shares = time_shares(results, "lmstream")
    out += [
        _md_table(_table4_display(shares)) if not shares.empty else "_not in this sweep: needs the lmstream policy_",
        "",
        "## CPU per million rows",
        "",
        CAPTIONS["cpu"],
        "",
        _md_table(_display(cpu_table(results), _CPU_FORMATS)),
        "",
    ]
    if not overload.empty:
        out += ["## At an overload (Fig. 1)", "", _OVERLOAD_CAPTION, "",
                _md_table(_display(_cell_summary(overload), _SUMMARY_FORMATS).rename(columns=_SUMMARY_HEADERS)),
                ""]
    if not errors.empty:
        out += ["## Service-time prediction", "", _PREDICTION_CAPTION, "", _md_table(_display(errors, {})), ""]
    cap = capacity_table(capacity)
    if not cap.empty:
        out += ["## Capacity", "", CAPTIONS["capacity"], "", _md_table(_display(cap, _capacity_formats(cap))), ""]
    if notes:
        out += ["## Where we differ and why", "", notes.strip(), ""]
    return "\n".join(out).rstrip() + "\n"


def _goals_display(table: pd.DataFrame) -> pd.DataFrame:
    met = {True: "met", False: "not met"}
    return _display(table[["what", "target", "measured", "met", "gap"]],
                    {"met": lambda m: met.get(m, "not measured") if m is not None else "not measured",
                     "gap": lambda g: str(g) if g else "–"})


def _capacity_share(meta: Mapping) -> str:
    """The share of asap's capacity the bench's at-capacity cells ran at, in words (``80%``)."""
    share = (meta.get("config") or {}).get("at_capacity")
    return f"{float(share):.0%}" if isinstance(share, (int, float)) else "a share"
