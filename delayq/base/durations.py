"""Durations ("90s", "15m", "2h", "1d", plain seconds) and ISO 8601 instants as seconds: the
only module besides cli/ that knows about datetimes; the core works in epoch seconds."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from typing import Any

from ..errors import BadInput

# What the API takes wherever it takes a length of time or a moment.
Duration = float | int | timedelta | str
Instant = float | int | datetime | str

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
YEAR = 365 * 86400
# Longer than anything delayq waits for or looks back over, short enough that `now` minus
# it is still a date every database and datetime can hold.
MAX_DURATION = 100 * YEAR
# The furthest a job may be due: a due time further out is a unit mix-up (milliseconds
# for seconds) or a sentinel like year 9999, and would only break what shows it.
FURTHEST_AHEAD = 10 * YEAR
_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)


def parse_duration(text: Duration, name: str = "duration") -> float:
    """Seconds in `text`: a number, a timedelta or 90s/15m/2h/1d/1w, 0 to MAX_DURATION."""
    seconds = seconds_of(text, name)
    if seconds < 0:
        raise BadInput(f"{name} must be a non-negative number of seconds, not {shown(text)}")
    if seconds > MAX_DURATION:
        raise BadInput(f"{name} {shown(text)} is longer than {MAX_DURATION // YEAR} years")
    return seconds


def seconds_of(value: Any, name: str) -> float:
    """Seconds in a number, a timedelta or a duration string, or BadInput naming `name`;
    only the type and finiteness are checked here, each caller checks its own range."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, str):
        if len(value) > 64:
            # A megabyte of digits is not parsed, and 64 characters keep the number finite.
            raise BadInput(
                f"{name} {shown(value)} is {len(value)} characters, too long for a duration"
            )
        if match := _DURATION.match(value):
            return float(match.group(1)) * _UNITS[(match.group(2) or "s").lower()]
        raise BadInput(f"{name} {shown(value)} is not a duration; use seconds or 90s, 15m, 2h, 1d")
    return _finite_number(value, name, "a number of seconds, a timedelta or a duration")


def instant_of(value: Any, name: str) -> float:
    """Epoch seconds of an aware datetime, an ISO 8601 string or epoch seconds; a naive
    datetime is refused, since which clock it means is a guess."""
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            raise BadInput(
                f"{name} is a naive datetime; give it a time zone, e.g. tzinfo=timezone.utc"
            )
        return value.timestamp()
    if isinstance(value, str):
        return parse_instant(value, name)
    return _finite_number(value, name, "epoch seconds, an aware datetime or ISO 8601 text")


def _finite_number(value: Any, name: str, expected: str) -> float:
    # bool is an int to Python, but True seconds is a mistake, not a duration.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadInput(f"{name} must be {expected}, not {shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        raise BadInput(f"{name} {shown(value)} is out of range") from None
    if not math.isfinite(number):
        raise BadInput(f"{name} must be a finite number, not {number}")
    return number


def shown(value: Any, limit: int = 40) -> str:
    """`value` as an error message may quote it: its repr (escaping control characters and
    lone surrogates), cut short, so a hostile or huge input still makes one short line."""
    try:
        text = repr(value) if isinstance(value, str | int | float) else type(value).__name__
    except ValueError:  # an int with more digits than Python will print
        text = "a huge number"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_due(run_at: float, now: float, name: str = "the due time") -> float:
    """`run_at` if it can be a job's due time: after 1970 and at most FURTHEST_AHEAD after
    `now`."""
    if not math.isfinite(run_at):
        raise BadInput(f"{name} must be a finite time, not {run_at}")
    if run_at < 0:
        raise BadInput(f"{name} is before 1970; give a time after 1970-01-01")
    if run_at > now + FURTHEST_AHEAD:
        raise BadInput(
            f"{name} is more than {FURTHEST_AHEAD // YEAR} years ahead, the furthest allowed"
        )
    return run_at


def parse_instant(text: str, name: str = "--at", naive_utc: bool = False) -> float:
    """Epoch seconds of an ISO 8601 date-time with its offset (`Z` or `+HH:MM`); without one,
    which zone `add` ran in (another machine, a container) would be a guess, so it is refused,
    unless `naive_utc`: then it is UTC, and a date alone its midnight (the web page's filters)."""
    try:
        # Python before 3.11 reads no `Z`; it is UTC.
        moment = datetime.fromisoformat(re.sub(r"[zZ]$", "+00:00", text.strip()))
    except ValueError:
        example = "2026-11-22T18:30:00" + ("" if naive_utc else "+01:00")
        raise BadInput(
            f"{name} {shown(text)} is not an ISO 8601 date-time; use e.g. {example}"
        ) from None
    if moment.utcoffset() is None:
        if not naive_utc:
            raise BadInput(
                f"{name} {shown(text)} has no time zone; add Z (UTC) or +HH:MM, "
                "e.g. 2026-11-22T18:30:00Z"
            )
        moment = moment.replace(tzinfo=timezone.utc)
    try:
        return moment.timestamp()
    except (OverflowError, OSError):  # a date the platform's time functions cannot place
        raise BadInput(f"{name} {shown(text)} is out of range") from None


def parse_utc_instant(text: str, name: str) -> float:
    return parse_instant(text, name, naive_utc=True)


def format_instant(epoch: float | None) -> str:
    """Local ISO 8601 text of an epoch time, to the millisecond, or '-' when unknown."""
    if epoch is None:
        return "-"
    try:
        return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="milliseconds")
    except (ValueError, OverflowError, OSError):
        # A row another producer wrote with a due time no calendar here can show.
        return f"{epoch:g} (epoch seconds)"


def format_duration(seconds: float) -> str:
    """A duration as one would write it: in the largest unit it is a whole number of (`1d`,
    `36h`, `90m`, `45s`, `0.25s`), so a setting reads back as it was most likely written and
    a period exactly, as `--every` takes it."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size:.0f}{unit}"
    return f"{seconds:.6f}".rstrip("0").rstrip(".") + "s"


def format_delta(seconds: float) -> str:
    """A short human rendering of a number of seconds: 45s, 12m, 3h, 2d."""
    magnitude = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if magnitude >= size:
            return f"{seconds / size:.1f}{unit}".replace(".0", "")
    return f"{seconds:.1f}s".replace(".0s", "s")
