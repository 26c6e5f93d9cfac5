"""Slowing down token guessing: after FAILURES wrong tokens from one address within WINDOW
seconds, its logins get 429 until the oldest failure ages out, right token or not (else the
limit would only count, not stop, a guesser). In memory: `delayq web` is one process, and a
restart costs a guesser a restart per few tries. The address table is bounded against floods."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

FAILURES = 5
WINDOW = 60.0
MAX_ADDRESSES = 10_000


@dataclass
class LoginThrottle:
    failures: int = FAILURES
    window: float = WINDOW
    clock: Callable[[], float] = time.monotonic
    _failed: dict[str, deque[float]] = field(default_factory=dict, init=False)

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
        window_start = self.clock() - self.window
        for address in [a for a, times in self._failed.items() if times[-1] <= window_start]:
            del self._failed[address]
        while len(self._failed) >= MAX_ADDRESSES:
            del self._failed[next(iter(self._failed))]
