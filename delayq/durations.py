"""Durations ("90s", "15m", "2h", "1d", plain seconds) and ISO 8601 instants as seconds.

The only module besides cli/ that knows about datetimes; the core works in epoch seconds.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

from .errors import BadInput

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
YEAR = 365 * 86400
# Longer than anything delayq waits for or looks back over, short enough that `now` minus
# it is still a date every database and datetime can hold.
MAX_DURATION = 100 * YEAR
# The latest a job may fall due: a due time further out is a unit mix-up (milliseconds
# for seconds) or a sentinel like year 9999, and would only break what shows it.
HORIZON = 10 * YEAR
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
    if seconds > MAX_DURATION:
        raise BadInput(f"{name} {text!r} is longer than {MAX_DURATION // YEAR} years")
    return seconds


def check_due(run_at: float, now: float, name: str = "the due time") -> float:
    """`run_at` if it can be a job's due time: after 1970 and at most HORIZON after `now`."""
    if not math.isfinite(run_at):
        raise BadInput(f"{name} must be a finite time, not {run_at}")
    if run_at < 0:
        raise BadInput(f"{name} is before 1970; give a time after 1970-01-01")
    if run_at > now + HORIZON:
        raise BadInput(f"{name} is more than {HORIZON // YEAR} years ahead, the furthest allowed")
    return run_at


def parse_instant(text: str) -> float:
    """Epoch seconds of an ISO 8601 date-time; without an offset it is local time."""
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except (ValueError, OverflowError, OSError):
        # OverflowError and OSError: a date the platform's time functions cannot place.
        raise BadInput(
            f"--at {text!r} is not an ISO 8601 date-time; use e.g. 2026-11-22T18:30:00+01:00"
        ) from None


def format_instant(epoch: float | None) -> str:
    """Local ISO 8601 text of an epoch time, to the millisecond, or '-' when unknown."""
    if epoch is None:
        return "-"
    try:
        return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="milliseconds")
    except (ValueError, OverflowError, OSError):
        # A row another producer wrote with a due time no calendar here can show.
        return f"{epoch:g} (epoch seconds)"


def format_delta(seconds: float) -> str:
    """A short human rendering of a number of seconds: 45s, 12m, 3h, 2d."""
    magnitude = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if magnitude >= size:
            return f"{seconds / size:.1f}{unit}".replace(".0", "")
    return f"{seconds:.1f}s".replace(".0s", "s")
