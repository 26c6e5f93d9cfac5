"""A queue's rate and concurrency limits as the user writes them and reads them back: "10/s"
is at most 10 job starts in any second, 4 is at most 4 of its jobs running at once. Parsed
here, where they are defined, by the API, the command line and the web page alike; kept by
settings.py, counted by the claim (store/index/lua/claim_due.lua).
"""

from __future__ import annotations

import re

from ..base.durations import shown
from ..errors import BadInput

# A rate limit's periods, and its most starts per period: its window is a sorted set in Redis.
_RATE_PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE_NAMES = {period: unit for unit, period in _RATE_PERIODS.items()}
MAX_RATE_COUNT = 100_000
_RATE = re.compile(r"^\s*(\d+)\s*/\s*([a-z]+)\s*$", re.IGNORECASE)


def parse_rate(text: str) -> tuple[int, float]:
    """ "10/s", "600/m", "36000/h" → (starts, seconds)."""
    found = _RATE.match(text) if isinstance(text, str) else None
    unit = found.group(2).lower() if found else ""
    if not found or unit not in _RATE_PERIODS:
        raise BadInput(f"invalid rate {shown(text)}: expected starts per s, m or h, like 10/s")
    digits = found.group(1)
    count = int(digits) if len(digits) <= 9 else MAX_RATE_COUNT + 1
    if not 1 <= count <= MAX_RATE_COUNT:
        raise BadInput(
            f"invalid rate {shown(text)}: the count must be between 1 and {MAX_RATE_COUNT:,}"
        )
    return count, _RATE_PERIODS[unit]


MAX_CONCURRENCY_LIMIT = 10_000


def parse_concurrency_limit(value: object) -> int:
    """A concurrency limit, 4 or "4", → 4: how many of a queue's jobs may run at once."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not (isinstance(text, str) and text.isascii() and text.isdigit()):
        raise BadInput(f"invalid concurrency {shown(value)}: expected a whole number, like 4")
    count = int(text) if len(text) <= 9 else MAX_CONCURRENCY_LIMIT + 1
    if not 1 <= count <= MAX_CONCURRENCY_LIMIT:
        raise BadInput(
            f"invalid concurrency {shown(value)}: it must be between 1 and "
            f"{MAX_CONCURRENCY_LIMIT:,}"
        )
    return count


def format_rate(rate: tuple[int, float]) -> str:
    """(10, 1.0) → "10/s"; a period no unit names, in seconds: "10/90s"."""
    count, period = rate
    unit = _RATE_NAMES.get(period)
    return f"{count}/{unit}" if unit else f"{count}/{period:g}s"
