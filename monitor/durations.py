"""Human durations ("90s", "5m", "1h30m", "7d") <-> whole seconds."""

from __future__ import annotations

import math
import re

__all__ = ["MAX_DURATION_S", "format_duration", "parse_duration"]

# Longer is a typo, and beyond it millisecond arithmetic on int64 gets close to overflowing.
MAX_DURATION_S = 100 * 365.25 * 86400

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(value: object) -> float:
    """Seconds from a number (seconds) or a string like "1h30m"; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("a duration must be a string like '5m' or a number of seconds")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        if not text:
            raise ValueError("empty duration")
        pos, seconds = 0, 0.0
        for match in _PART.finditer(text):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(text):
            raise ValueError(
                f"invalid duration {value!r}: use a number with a unit, e.g. 30s, 5m, 1h30m, 7d"
            )
    else:
        raise ValueError("a duration must be a string like '5m' or a number of seconds")
    if seconds < 0:
        raise ValueError(f"duration {value!r} is negative")
    if not math.isfinite(seconds) or seconds > MAX_DURATION_S:
        raise ValueError(f"duration {value!r} is not finite or longer than 100 years")
    return seconds


def format_duration(seconds: float) -> str:
    """Shortest exact spelling: 3600 -> "1h", 5400 -> "90m", 0 -> "0s"."""
    if seconds == 0:
        return "0s"
    for unit in ("w", "d", "h", "m", "s"):
        size = _UNITS[unit]
        if seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{round(seconds * 1000)}ms"
