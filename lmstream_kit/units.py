"""Numbers as people read them: bytes in KiB/MiB, values with units, a dash for missing ones.

>>> format_bytes(150 * 1024), format_value(2.5, " s"), format_value(float("nan"))
('150.0 KiB', '2.50 s', '-')
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Any

__all__ = ["format_bytes", "format_value", "parse_bytes", "parse_duration"]


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


#: seconds per unit of a duration, Spark's interval words and their short forms
_UNITS = {
    "week": 604800.0, "w": 604800.0, "day": 86400.0, "d": 86400.0,
    "hour": 3600.0, "hr": 3600.0, "h": 3600.0,
    "minute": 60.0, "min": 60.0, "m": 60.0,
    "second": 1.0, "sec": 1.0, "s": 1.0,
    "millisecond": 1e-3, "ms": 1e-3, "microsecond": 1e-6, "us": 1e-6,
}
_TERM = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]+)\s*")


def parse_duration(value: Any, what: str = "duration") -> float:
    """Seconds in ``value``: a number of seconds, a ``timedelta``, or text as Spark writes intervals.

    Text is one or more ``<number> <unit>`` terms (``"20 seconds"``, ``"1 minute 30 s"``,
    ``"500 ms"``, ``"interval 2 hours"``); units are Spark's words in singular or plural
    and their short forms.  Raises ConfigError (a ValueError) naming ``what`` and the value.

    >>> parse_duration("20 seconds"), parse_duration("1 minute 30 s"), parse_duration(2.5)
    (20.0, 90.0, 2.5)
    >>> parse_duration("10 parsecs", "window")
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: window must be a number of seconds or a duration such as '20 seconds', got '10 parsecs'
    """
    from .exceptions import ConfigError

    bad = ConfigError(f"{what} must be a number of seconds or a duration such as '20 seconds', got {value!r}")
    if isinstance(value, bool):
        raise bad
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        text = text[len("interval"):] if text.startswith("interval") else text
        if re.fullmatch(r"\s*[0-9]*\.?[0-9]+\s*", text):
            text += " s"  # a bare number is seconds
        seconds, pos = 0.0, 0
        for term in _TERM.finditer(text):
            if term.start() != pos:
                raise bad
            unit = term.group(2)
            unit = unit[:-1] if unit.endswith("s") and unit[:-1] in _UNITS and len(unit) > 2 else unit
            if unit not in _UNITS:
                raise bad
            seconds += float(term.group(1)) * _UNITS[unit]
            pos = term.end()
        if pos == 0 or pos != len(text):
            raise bad
    else:
        raise bad
    if not math.isfinite(seconds) or seconds < 0:
        raise bad
    return seconds


_BYTE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
               "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(value: Any, what: str = "size") -> int:
    """Bytes in ``value``: an integer, or text such as ``"64 MiB"``, ``"1GiB"``, ``"500 MB"``.

    KiB/MiB/GiB/TiB are powers of 1024, kB/MB/GB/TB powers of 1000.  Raises ConfigError (a
    ValueError) naming ``what`` and the value.

    >>> parse_bytes("64 MiB"), parse_bytes("1.5GB"), parse_bytes(4096)
    (67108864, 1500000000, 4096)
    >>> parse_bytes("ten gigs", "retention size")
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: retention size must be a number of bytes or a size such as '512 MiB', got 'ten gigs'
    """
    from .exceptions import ConfigError

    bad = ConfigError(f"{what} must be a number of bytes or a size such as '512 MiB', got {value!r}")
    if isinstance(value, bool):
        raise bad
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        if m is None or m.group(2).lower() not in _BYTE_UNITS:
            raise bad
        number = float(m.group(1)) * _BYTE_UNITS[m.group(2).lower()]
    else:
        raise bad
    if not math.isfinite(number) or number < 0:
        raise bad
    return int(number)
