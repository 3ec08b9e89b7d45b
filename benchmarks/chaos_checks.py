"""Checks the kill -9 chaos scripts share (``chaos_input.py``, ``chaos_reconfigure.py``)."""

from __future__ import annotations

import itertools
from pathlib import Path


def span_problems(run: Path) -> list[str]:
    """Whether every spooled dataset went into exactly one batch: the data batches' spans (the last
    record of each batch id: a batch replayed after a kill has the same id and span) tile the spool.

    Records come from :func:`lmstream_kit.metrics.read_jsonl` (a line a kill cut short is skipped);
    the spool's datasets from its index only, so that retention's deletions do not matter.
    """
    from lmstream_kit.feed.spool import Spool
    from lmstream_kit.metrics import read_jsonl

    last: dict[int, dict] = {}
    problems = []
    for r in read_jsonl(Path(run) / "metrics.jsonl"):
        b = int(r["batch_id"])
        if b in last and last[b].get("rows") and r.get("rows") and \
                (last[b]["start_seq"], last[b]["end_seq"]) != (r["start_seq"], r["end_seq"]):
            problems.append(f"batch {b} ran twice with different spans")
        last[b] = r
    data = sorted((r for r in last.values() if r.get("rows")), key=lambda r: r["batch_id"])
    gaps = [(a["batch_id"], b["batch_id"]) for a, b in itertools.pairwise(data) if a["end_seq"] != b["start_seq"]]
    problems += [f"batches {a} and {b} do not meet: datasets lost or read twice" for a, b in gaps]
    spool = Spool(Path(run) / "spool", create=False)
    if data and (data[0]["start_seq"] != 0 or data[-1]["end_seq"] != spool.end_seq):
        problems.append(f"the batches cover datasets {data[0]['start_seq']}..{data[-1]['end_seq']}, the spool "
                        f"0..{spool.end_seq}")
    if sum(int(r["rows"]) for r in data) != spool.total_rows():
        problems.append(f"the batches hold {sum(int(r['rows']) for r in data)} rows, the spool {spool.total_rows()}")
    return problems
