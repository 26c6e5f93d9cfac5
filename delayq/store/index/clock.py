"""The clock every run and producer shares: Redis's TIME, kept as an offset to the local
clock, so that hosts with skewed clocks agree on what is due.
"""

from __future__ import annotations

import time

import redis

REFRESH = 60.0  # seconds between two readings of the server's clock


class Clock:
    """Epoch seconds on the clock of one Redis server, read once a minute."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._offset = 0.0
        self._checked = float("-inf")  # monotonic time of the last reading

    def now(self) -> float:
        local = time.time()
        if time.monotonic() - self._checked > REFRESH:
            before = time.time()
            seconds, micros = self.client.time()
            self._offset = clock_offset(before, seconds + micros / 1e6, time.time())
            self._checked = time.monotonic()
        return local + self._offset

    def known(self) -> float:
        """now() on the offset last read, never asking Redis: for the lease heartbeat, which
        renews leases in the table alone and must not wait on a Redis that is away."""
        return time.time() + self._offset


def clock_offset(before: float, server: float, after: float) -> float:
    """How far the server's clock is ahead of ours, from one reading of it taken between two
    of ours; zero when that is within the reading's own uncertainty (half the round trip,
    plus a millisecond), so a well-synchronised host is never pushed early by noise."""
    offset = server - (before + after) / 2
    return offset if abs(offset) > (after - before) / 2 + 0.001 else 0.0
