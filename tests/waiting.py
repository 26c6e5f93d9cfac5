"""Waiting on what another process does: poll a condition until a deadline, never sleep a
guessed time. A loaded machine then only makes a test slower, not wrong."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Return once `condition()` is true; fail the test naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
