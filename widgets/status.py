"""The dashboard's status text: which run, :func:`~widgets.status_line`, the last change and value set.

Also the one-line form of an error that a control or a redraw shows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.units import format_bytes

from . import status_line
from .figures import change_markers

__all__ = ["status_text"]


def _one_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, after its type name unless it is a :class:`ConfigError`.

    >>> _one_line(RuntimeError("boom\\nsecond line")), _one_line(ConfigError("bad value"))
    ('RuntimeError: boom', 'bad value')
    """
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    if isinstance(exc, ConfigError):
        return line or type(exc).__name__
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _clock(epoch: Any) -> str | None:
    try:
        value = float(epoch)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(value) or value <= 0:
        return None
    return time.strftime("%H:%M:%S", time.localtime(value))


def _last_change(records: Sequence[Mapping]) -> str | None:
    """``"batch 7 (12:00:01): slide_s=5"`` for the newest batch that recorded changes, else None."""
    markers = change_markers(list(records))
    if not markers:
        return None
    bid, label = markers[-1]
    when = None
    for rec in records:
        if rec.get("batch_id") != bid:
            continue
        changes = rec.get("changes")
        times = []
        if isinstance(changes, list):
            for c in changes:
                if isinstance(c, Mapping):
                    times.append(c.get("at", c.get("wall_time")))
        when = next((t for t in map(_clock, reversed(times)) if t), None) or _clock(rec.get("completed_at"))
    return f"batch {bid}" + (f" ({when})" if when else "") + f": {label}"


def status_text(
    head: Sequence[str],
    records: Sequence[Mapping],
    *,
    last_applied: tuple[str, Any, float] | None = None,
    last_error: str | None = None,
) -> str:
    """``head`` (the source), the status line, the last change, the last value set and why a redraw failed.

    >>> status_text(["live: workload LR2S, policy lmstream"], [], last_error="ValueError: bad")
    'live: workload LR2S, policy lmstream | no micro-batch yet | redraw failed: ValueError: bad'
    """
    parts = list(head)
    parts.append(status_line(records))
    last = _last_change(records)
    if last:
        parts.append(f"last change: {last}")
    if last_applied is not None:
        key, value, at = last_applied
        if key == "inflection_point":
            value = format_bytes(value)
        elif isinstance(value, float):
            value = f"{value:g}"
        parts.append(f"set {key}={value} at {_clock(at)}")
    if last_error:
        parts.append(f"redraw failed: {last_error}")
    return " | ".join(parts)
