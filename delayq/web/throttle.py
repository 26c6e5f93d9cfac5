"""Slowing down token guessing: after FAILURES wrong tokens from one client address within
WINDOW seconds, its logins are refused with 429 and Retry-After until the oldest failure
ages out, right token or not (else the limit would only count, not stop, a guesser).

In-process and in memory: `delayq web` is one process, and a restart forgetting the count
costs a guesser a restart per few tries. The table of addresses is bounded so that a flood
from many addresses cannot grow it without end.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

FAILURES = 5
WINDOW = 60.0
MAX_ADDRESSES = 10_000


class LoginThrottle:
    def __init__(
        self,
        failures: int = FAILURES,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures = failures
        self.window = window
        self.clock = clock
        self._failed: dict[str, deque[float]] = {}

    def retry_after(self, address: str) -> int | None:
        """Whole seconds until `address` may try again, or None when it may now."""
        recent = self._recent(address)
        if len(recent) < self.failures:
            return None
        return max(1, math.ceil(recent[0] + self.window - self.clock()))

    def failed(self, address: str) -> int:
        """Count a wrong token from `address`; how many it has within the window now."""
        if address not in self._failed and len(self._failed) >= MAX_ADDRESSES:
            self._forget_the_quiet()
        recent = self._recent(address)
        recent.append(self.clock())
        self._failed[address] = recent
        return len(recent)

    def succeeded(self, address: str) -> None:
        self._failed.pop(address, None)

    def _recent(self, address: str) -> deque[float]:
        recent = self._failed.get(address, deque())
        while recent and recent[0] <= self.clock() - self.window:
            recent.popleft()
        return recent

    def _forget_the_quiet(self) -> None:
        """Drop addresses with no failure in the window; if all are busy, the oldest."""
        horizon = self.clock() - self.window
        for address in [a for a, times in self._failed.items() if times[-1] <= horizon]:
            del self._failed[address]
        while len(self._failed) >= MAX_ADDRESSES:
            del self._failed[next(iter(self._failed))]
