"""Per-batch metric records as one frame, and the live changes they list.

Also what the record figures share: gaps for missing values, change markers, the empty state."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
import plotly.graph_objects as go

__all__ = ["EMPTY_TEXT", "change_markers", "records_frame"]

#: the annotation of a figure with nothing to show yet
EMPTY_TEXT = "no micro-batch yet"

_MARKER_COLOR = "#7F7F7F"

#: numeric columns (None/strings become NaN)
_NUMERIC = (
    "rows",
    "bytes",
    "max_latency_s",
    "avg_latency_s",
    "buffering_s",
    "processing_s",
    "throughput_rows_s",
    "completed_at",
    "target_s",
    "inflection_point",
    "partition_bytes",
    "gpu_ops",
    "mapping_s",
    "optimizer_s",
)
_OBJECT = ("changes", "device_plan")


# --------------------------------------------------------------------------- records


def records_frame(records: Any) -> pd.DataFrame:
    """The records as a DataFrame: one row per batch, sorted by ``batch_id``.

    Accepts a list (or any iterable) of dicts, a DataFrame or ``None``.  The
    columns the figures read always exist (numeric ones as floats, NaN where a
    record has ``None`` or lacks the field; ``changes`` and ``device_plan`` as
    objects); records without a ``batch_id`` are dropped.  The input is not
    modified.

    >>> df = records_frame([{"batch_id": 2, "rows": 5}, {"batch_id": 1, "rows": 0, "target_s": None}])
    >>> df["batch_id"].tolist(), df["rows"].tolist(), bool(df["target_s"].isna().all())
    ([1, 2], [0.0, 5.0], True)
    >>> len(records_frame(None)), len(records_frame([]))
    (0, 0)
    """
    if records is None:
        df = pd.DataFrame()
    elif isinstance(records, pd.DataFrame):
        df = records.copy()
    else:
        rows = [dict(r) for r in records]
        df = pd.DataFrame.from_records(rows) if rows else pd.DataFrame()
    if "batch_id" not in df.columns:
        df["batch_id"] = pd.Series(dtype="float64")
    df["batch_id"] = pd.to_numeric(df["batch_id"], errors="coerce")
    df = df[df["batch_id"].notna()].copy()
    df["batch_id"] = df["batch_id"].astype("int64")
    for col in _NUMERIC:
        if col in df.columns:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
        else:
            df[col] = pd.Series(float("nan"), index=df.index, dtype="float64")
    for col in _OBJECT:
        if col not in df.columns:
            df[col] = pd.Series([None] * len(df), index=df.index, dtype="object")
    return df.sort_values("batch_id", kind="stable").reset_index(drop=True)


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(isinstance(value, float) and math.isnan(value)) or value is pd.NA
    except TypeError:
        return False


def _fmt_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, float)) or hasattr(value, "__float__") and not isinstance(value, str):
        try:
            f = float(value)
        except (TypeError, ValueError):
            return str(value)
        if math.isfinite(f) and f == int(f) and abs(f) < 1e15:
            return str(int(f))
        return f"{f:.6g}"
    return str(value)


def _change_label(change: Any) -> str:
    if isinstance(change, Mapping):
        if "param" in change:
            return f"{change['param']}={_fmt_value(change.get('value'))}"
        if "change" in change:
            return str(change["change"])
        return ", ".join(f"{k}={_fmt_value(v)}" for k, v in change.items() if k != "at")
    return str(change)


def _parse_changes(value: Any) -> list:
    if _is_missing(value):
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return [value]
    if isinstance(value, Mapping):
        return [value]
    if isinstance(value, Iterable):
        return list(value)
    return [value]


def change_markers(records: Any) -> list[tuple[int, str]]:
    """``(batch_id, label)`` for every batch whose record lists live changes.

    A change is labelled ``param=value`` (integral values without ``.0``); the
    changes of one batch are joined with ``", "``.  Sorted by batch id.

    >>> change_markers([
    ...     {"batch_id": 7, "changes": [{"param": "mapper.inflection_point", "old": 153600.0,
    ...                                   "value": 65536.0, "at": 1.0}]},
    ...     {"batch_id": 3, "changes": [{"param": "slide_s", "value": 5},
    ...                                 {"param": "rate_scale", "value": 1.5}]},
    ...     {"batch_id": 4, "changes": None}])
    [(3, 'slide_s=5, rate_scale=1.5'), (7, 'mapper.inflection_point=65536')]
    """
    df = records_frame(records)
    out = []
    for bid, value in zip(df["batch_id"].tolist(), df["changes"].tolist(), strict=True):
        changes = _parse_changes(value)
        if changes:
            out.append((int(bid), ", ".join(_change_label(c) for c in changes)))
    return out


# --------------------------------------------------------------------------- shared by the figures


def _values(series: pd.Series, *, count: bool = False) -> list:
    """Python values of a numeric column, ``None`` for NaN (a gap in plotly)."""
    out = []
    for v in series.tolist():
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            out.append(None)
        elif count and float(v) == int(v):
            out.append(int(v))
        else:
            out.append(float(v))
    return out


def _ids(df: pd.DataFrame) -> list[int]:
    return [int(b) for b in df["batch_id"].tolist()]


def _data(df: pd.DataFrame) -> pd.DataFrame:
    """The data batches (rows > 0)."""
    return df[df["rows"].fillna(0) > 0]


def _empty(fig: go.Figure, text: str = EMPTY_TEXT) -> go.Figure:
    fig.add_annotation(
        text=text, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False, font={"size": 16}
    )
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False)
    return fig


def _add_markers(fig: go.Figure, df: pd.DataFrame) -> go.Figure:
    """A dashed vertical line and a label at every batch with changes."""
    for i, (bid, label) in enumerate(change_markers(df)):
        fig.add_shape(
            type="line", xref="x", yref="paper", x0=bid, x1=bid, y0=0, y1=1,
            line={"color": _MARKER_COLOR, "width": 1, "dash": "dash"},
        )
        fig.add_annotation(
            text=label, xref="x", yref="paper", x=bid, y=1.0 if i % 2 == 0 else 0.92,
            showarrow=False, xanchor="left", yanchor="top", font={"size": 10, "color": _MARKER_COLOR},
            bgcolor="rgba(255,255,255,0.7)",
        )
    return fig
