"""Durations ("90s", "15m", "2h", "1d", plain seconds) and ISO 8601 instants as seconds.

The only module besides cli/ that knows about datetimes; the core works in epoch seconds.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

from .errors import BadInput

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)


def parse_duration(text: str | float | int, name: str = "duration") -> float:
    """Seconds in `text`: a non-negative number, optionally suffixed s, m, h, d or w."""
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        match = _DURATION.match(text)
        if not match:
            raise BadInput(f"{name} {text!r} is not a duration; use seconds or 90s, 15m, 2h, 1d")
        seconds = float(match.group(1)) * _UNITS[(match.group(2) or "s").lower()]
    if not math.isfinite(seconds) or seconds < 0:
        raise BadInput(f"{name} must be a non-negative number of seconds, not {text!r}")
    return seconds


def parse_instant(text: str) -> float:
    """Epoch seconds of an ISO 8601 date-time; without an offset it is local time."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadInput(
            f"--at {text!r} is not an ISO 8601 date-time; use e.g. 2026-11-22T18:30:00+01:00"
        ) from None
    return value.timestamp()


def format_instant(epoch: float | None) -> str:
    """Local ISO 8601 text of an epoch time, to the millisecond, or '-' when unknown."""
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="milliseconds")


def format_delta(seconds: float) -> str:
    """A short human rendering of a number of seconds: 45s, 12m, 3h, 2d."""
    magnitude = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if magnitude >= size:
            return f"{seconds / size:.1f}{unit}".replace(".0", "")
    return f"{seconds:.1f}s".replace(".0s", "s")
