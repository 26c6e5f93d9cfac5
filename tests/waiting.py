"""Waiting on what another process does: poll a condition until a deadline, never sleep a
guessed time. A loaded machine then only makes a test slower, not wrong.

No pytest here, so that the benchmark can start the same servers (sentinels.py, clusters.py):
a failed wait is an AssertionError, which pytest reports as the test's failure."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Return once `condition()` is true; raise AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
