"""Durations as people write them: ``5s``, ``1m30s``, ``1h30m``, ``1d``, ``250ms``.

One spelling for reading and writing: ``rehydrate schedule --every 90s`` is listed as ``every
1m30s``, by ``rehydrate schedules`` and the dashboard alike, and what is listed can be typed back.
:func:`format_duration` writes whole microseconds (the resolution of ``Every`` and of the times a
schedule's envelope keeps), and :func:`parse_duration` reads the text back exactly: it adds the
parts as integers and rounds once, so ``parse_duration(format_duration(d)) == d`` for every
duration of whole microseconds (``tests/test_durations.py`` checks it).
"""

from __future__ import annotations

import math
import re
from typing import Final

from rehydrate.errors import InvalidArgumentError

__all__ = ["format_duration", "parse_duration"]

#: Each unit in microseconds.
_UNITS_US: Final = {"ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000, "d": 86_400_000_000}
_PART: Final = re.compile(r"(\d+)?(?:\.(\d+))?(ms|s|m|h|d)")
_PARTS: Final = re.compile(r"(?:(?:\d+(?:\.\d+)?|\.\d+)(?:ms|s|m|h|d))+")
_HINT: Final = "use a number of seconds or e.g. 1500ms, 5s, 2m, 1h, 1m30s"


def parse_duration(text: str) -> float:
    """Seconds from ``1500ms``, ``5s``, ``2m``, ``1h``, ``1d``, ``1m30s``, ``1.5h`` or plain
    seconds (``2.5``); :class:`~rehydrate.errors.InvalidArgumentError` for anything else, or a
    negative or infinite duration."""
    cleaned = text.strip().lower()
    try:
        seconds = float(cleaned)
    except ValueError:
        if not _PARTS.fullmatch(cleaned):
            raise InvalidArgumentError(f"invalid duration {text!r}: {_HINT}") from None
        # Exact: each part is an integer count of 10**-digits units, summed as integers over a
        # common power of ten, and divided once (int / int rounds correctly to the nearest float).
        digits = max(len(fraction or "") for _, fraction, _ in _PART.findall(cleaned))
        scale = 10**digits
        total = 0
        for whole, fraction, unit in _PART.findall(cleaned):
            fraction = fraction or ""
            count = int((whole or "0") + fraction) * 10 ** (digits - len(fraction))
            total += count * _UNITS_US[unit]
        try:
            seconds = total / (scale * 1_000_000)
        except OverflowError:  # more than a float holds: refused below, as ``inf`` is
            seconds = math.inf
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgumentError(f"invalid duration {text!r}: it must be finite and not negative")
    return seconds


def _decimal(count: int, unit: int) -> str:
    """``count / unit`` written exactly, without trailing zeros (``1500, 1000`` -> ``1.5``)."""
    whole, rest = divmod(count, unit)
    if not rest:
        return str(whole)
    width = len(str(unit)) - 1
    return f"{whole}.{rest:0{width}d}".rstrip("0")


def format_duration(seconds: float) -> str:
    """``seconds`` as it would be written: ``5s``, ``1m30s``, ``1h30m``, ``1d``, ``250ms``,
    ``1.5s``, ``0s``; rounded to the microsecond. Read back by :func:`parse_duration`."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        raise TypeError(f"a duration is a number of seconds, not {type(seconds).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a duration is finite and not negative, got {seconds!r}")
    left = round(seconds * 1_000_000)
    if left == 0:
        return "0s"
    if left < 1_000_000:  # under a second: milliseconds (``250ms``, ``0.5ms``)
        return _decimal(left, 1_000) + "ms"
    parts = []
    for unit in ("d", "h", "m"):
        count, left = divmod(left, _UNITS_US[unit])
        if count:
            parts.append(f"{count}{unit}")
    if left:
        parts.append(_decimal(left, 1_000_000) + "s")
    return "".join(parts)
