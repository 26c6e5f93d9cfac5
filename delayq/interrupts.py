"""Signals in a run: the per-job time limit (SIGALRM) and a graceful stop on SIGTERM/SIGINT.

Both only work in the main thread, where Python delivers signals; elsewhere (a run started
from an application thread) jobs run without a time limit and the caller handles stopping.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

logger = logging.getLogger(__name__)


class JobTimeout(BaseException):  # noqa: N818 - a BaseException so `except Exception` in a handler cannot swallow it
    """Raised inside a handler that ran past its time limit."""


class Abandoned(BaseException):  # noqa: N818
    """Raised inside a handler when a second stop signal asks to give the job up at once."""


def in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def time_limits() -> Iterator[bool]:
    """Install the SIGALRM handler for a run; yields whether time limits can apply."""
    if not in_main_thread():
        yield False
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise JobTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def arm(seconds: float) -> None:
    """Start the current job's clock (inside `time_limits`)."""
    signal.setitimer(signal.ITIMER_REAL, seconds)


def disarm() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)


class GracefulStop:
    """First SIGTERM/SIGINT: finish the current job, hand the rest back, stop.
    Second: abandon the current job too (it goes back to the schedule)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def request(self, signum: int, frame: FrameType | None = None) -> None:
        if self.signum is not None:
            raise Abandoned()
        self.signum = signum
        logger.warning(
            "received %s: finishing the current job, handing the rest back",
            signal.Signals(signum).name,
        )


@contextmanager
def graceful_stop() -> Iterator[GracefulStop]:
    """Route SIGTERM and SIGINT to a GracefulStop for the duration of the block."""
    stop = GracefulStop()
    if not in_main_thread():
        yield stop
        return
    previous = {sig: signal.signal(sig, stop.request) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
