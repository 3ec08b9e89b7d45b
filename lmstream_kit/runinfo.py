"""What ``run.json`` says about a stream: its configuration when it starts, its totals when it stops.

Both read a :class:`~lmstream_kit.live.LiveStream`'s public state; the stream writes them.
"""

from __future__ import annotations

import platform
import time
from typing import Any

from . import __version__
from .record import controller_target_s

__all__ = ["final_run_info", "run_info"]


def run_info(stream: Any, previous: dict) -> dict:
    """The run's configuration as ``run.json`` records it when the stream starts."""
    return {
        "workload": stream.workload.name,
        "policy": stream.policy.name,
        "trigger_s": stream.policy.trigger_s,
        "traffic": stream.traffic_spec if stream.input_dir is None else "input-dir",
        "input_dir": str(stream.input_dir) if stream.input_dir else None,
        "spool": stream.spool.uri,
        "rate": stream.rate,
        "spread": getattr(stream.traffic, "std", None),
        "speedup": stream.speedup,
        "seed": stream.seed,
        "duration_s": stream.duration_s,
        "slide_s": stream.slide_s,
        "window_range_s": stream.workload.window_range_s,
        "target_s": controller_target_s(stream.slide_s, stream.speedup),
        "bound_s": stream.bound_s,
        "master": stream.master if not stream.engine.external else stream.engine.master,
        "query_name": stream.name,
        "read": stream.read_mode,
        "kit_version": __version__,
        "python": platform.python_version(),
        "started_at": stream.started_at,
        "restarts": int(previous.get("restarts", -1)) + 1,
    }


def final_run_info(stream: Any) -> dict:
    """The totals ``run.json`` gets when the stream stops: what was fed, processed and rejected."""
    stream.spool.refresh()
    records = stream.records
    data = [r for r in records if r["rows"] > 0]
    completed = stream.loop.book.completed_end
    info = {
        "stopped_at": time.time(),
        "feed_rows": stream.spool.total_rows(),
        "feed_datasets": stream.spool.end_seq,
        "rows_processed": sum(r["rows"] for r in data),
        "batches": len(records),
        "total_rows": stream.spool.total_rows(0, completed),
        "processed_through_seq": completed,
    }
    rows_bad = getattr(stream.feed, "total_rows_bad", None)
    if rows_bad is not None:
        info["rows_rejected"] = rows_bad
    return info
