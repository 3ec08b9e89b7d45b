"""What ``run.json`` says about a stream: its configuration when it starts, its totals when it stops.

Both read a :class:`~lmstream_kit.live.LiveStream`'s public state; the stream writes them.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from . import __version__
from .exceptions import ConfigError
from .metrics import METRICS_FILE, batch_key, iter_jsonl, iter_part, journal_parts, part_order, read_released
from .record import controller_target_s

__all__ = ["final_run_info", "processed_totals", "recorded_workload", "run_info"]


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


def processed_totals(metrics_path: os.PathLike | str) -> dict:
    """``rows_processed`` and ``batches`` over every start of a run, from its ``metrics.jsonl``.

    Every rotated part counts (:func:`~lmstream_kit.metrics.read_journal`), and so do the parts
    retention deleted, through the totals it kept of them in ``metrics.released.json``.  A batch
    that a crash left uncommitted runs again after the restart under the same batch id, over the
    same datasets: its newest record counts, once (also where the two records are on either side
    of a deleted part's end).

    >>> import tempfile, json
    >>> path = Path(tempfile.mkdtemp()) / "metrics.jsonl"
    >>> _ = path.write_text("".join(json.dumps(r) + "\\n" for r in
    ...     [{"batch_id": 0, "rows": 5}, {"batch_id": 1, "rows": 7}, {"batch_id": 1, "rows": 7}]))
    >>> processed_totals(path)
    {'rows_processed': 12, 'batches': 2}
    """
    path = Path(metrics_path)
    for _ in range(5):  # retention may delete a part while it is read: read again
        released = read_released(path.parent)
        done = part_order(f"x.{released.get('through_part')}.jsonl")
        rows: dict[tuple, int] = {}
        parts = [p for p in journal_parts(path) if done is None or part_order(p) > done]
        for source in [*parts, path]:  # a part folded but not yet deleted is counted once
            for record in (iter_jsonl(source) if source is path else iter_part(source)):  # never a part whole
                key = batch_key(record)
                if key is not None:
                    rows[key] = int(record.get("rows") or 0)
        if read_released(path.parent) == released:
            break
    last_key = released.get("last_key")
    if last_key is not None:
        rows.pop(tuple(last_key), None)  # counted in the released totals
    return {"rows_processed": sum(rows.values()) + int(released.get("rows_processed", 0)),
            "batches": len(rows) + int(released.get("batches", 0))}


def final_run_info(stream: Any) -> dict:
    """The totals ``run.json`` gets when the stream stops: what was fed, processed and rejected."""
    stream.spool.refresh()
    completed = stream.loop.book.completed_end
    info = {
        "stopped_at": time.time(),
        "feed_rows": stream.spool.total_rows(),
        "feed_datasets": stream.spool.end_seq,
        **processed_totals(Path(stream.run_dir) / METRICS_FILE),
        "total_rows": stream.spool.total_rows(0, completed),
        "processed_through_seq": completed,
    }
    rows_bad = getattr(stream.feed, "total_rows_bad", None)
    if rows_bad is not None:
        info["rows_rejected"] = rows_bad
    return info


def recorded_workload(run_dir: os.PathLike | str) -> str | None:
    """The workload whose run ``run_dir`` holds, as its ``run.json`` names it; None when it names none.

    None too where there is no ``run.json`` (a new run directory).  A ``run.json`` that cannot be
    read as a run's record is a ConfigError naming it: a stream started there would fail on it
    after Spark started.

    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> recorded_workload(run) is None
    True
    >>> _ = (run / "run.json").write_text('{"workload": "CM2S", "policy": "fixed"}')
    >>> recorded_workload(run)
    'CM2S'
    """
    path = Path(run_dir) / "run.json"
    if not path.exists():
        return None
    try:
        info = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # not JSON, or not UTF-8
        raise ConfigError(f"{path} is not valid JSON ({exc}): not a run's run.json") from None
    if not isinstance(info, dict):
        raise ConfigError(f"{path} is not a JSON object: not a run's run.json")
    workload = info.get("workload")
    if workload is not None and not isinstance(workload, str):
        raise ConfigError(f"{path} names no workload by name (workload: {workload!r}): not a run's run.json")
    return workload
