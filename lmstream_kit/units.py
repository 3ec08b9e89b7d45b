"""Numbers as people read them: bytes in KiB/MiB, values with units, a dash for missing ones.

>>> format_bytes(150 * 1024), format_value(2.5, " s"), format_value(float("nan"))
('150.0 KiB', '2.50 s', '-')
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["format_bytes", "format_value"]


def format_bytes(nbytes: Any) -> str:
    """``nbytes`` in B, KiB, MiB or GiB (one decimal above bytes); ``-`` when it is not a number.

    >>> format_bytes(4096), format_bytes(1.5 * 2**30), format_bytes(512), format_bytes(None)
    ('4.0 KiB', '1.5 GiB', '512 B', '-')
    """
    try:
        value = float(nbytes)
    except (TypeError, ValueError):
        return "-"
    if not math.isfinite(value):
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def format_value(value: Any, unit: str = "", digits: int = 2) -> str:
    """A float with ``digits`` decimals and thousands separators, an int as is; ``-`` for None/NaN.

    >>> format_value(1234.5678, " rows/s", 0), format_value(12000), format_value(None)
    ('1,235 rows/s', '12,000', '-')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    return f"{value:,}{unit}"
