"""Waiting on what another process does: poll a condition until a deadline, never sleep a
guessed time. A loaded machine then only makes a test slower, not wrong.

No pytest here, so that the benchmark can start the same servers (sentinels.py, clusters.py):
a failed wait is an AssertionError, which pytest reports as the test's failure."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Return once `condition()` is true; raise AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def at_once(work: list[Callable[[], object]], timeout: float = 300) -> list[BaseException]:
    """Run each of `work` on a thread of its own, started together; what they raised, a
    TimeoutError for each still running after `timeout`."""
    start = threading.Barrier(len(work))
    raised: list[BaseException] = []

    def run(one: Callable[[], object]) -> None:
        start.wait()
        try:
            one()
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            raised.append(exc)

    threads = [threading.Thread(target=run, args=(one,)) for one in work]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [
        TimeoutError(f"{thread.name} still running") for thread in threads if thread.is_alive()
    ]
    return raised + stuck
