"""Signals in a run: the per-job time limit (SIGALRM) and a graceful stop on SIGTERM/SIGINT.

Both only work in the main thread, where Python delivers signals; elsewhere (a run started
from an application thread) jobs run without a time limit and the caller handles stopping.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import FrameType

logger = logging.getLogger(__name__)


class JobTimeout(BaseException):  # noqa: N818 - a BaseException so `except Exception` in a handler cannot swallow it
    """Raised inside a handler that ran past its time limit."""


class Abandoned(BaseException):  # noqa: N818
    """Raised inside a handler when a second stop signal asks to give the job up at once."""


class SignalInterrupt(KeyboardInterrupt):
    """SIGINT in a run no graceful stop listens for (an API run on the main thread) stops the
    run; told apart by its type from a KeyboardInterrupt a handler raises, its job's failure."""


SignalHandler = Callable[[int, FrameType | None], object]
# A graceful stop: the signals a service manager and Ctrl-C send.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# What a handler's call lets through: the run is told to stop, not the job to fail.
RUN_STOPS: tuple[type[BaseException], ...] = (Abandoned, SignalInterrupt)


class _Clock:
    """The running job's deadline, and when the interval timer is set to fire.

    Setting the timer is a system call, which at thousands of jobs a second would show: so
    it is only set when off or late. One firing before the running job's deadline (set for
    an earlier job) re-arms itself for the rest; one firing between jobs turns itself off.
    """

    deadline = math.inf  # monotonic; inf while no job runs
    grace_ends = math.inf  # monotonic: when a stop's grace ends for the job running then
    fires_at: float | None = None  # monotonic; None while the timer is off

    def expire(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        self.fires_at = None
        if self.deadline == math.inf:
            return  # between jobs: nothing to stop, and the timer stays off
        if now >= self.deadline:
            self.deadline = math.inf
            raise JobTimeout()
        if now >= self.grace_ends:
            self.deadline = self.grace_ends = math.inf
            raise Abandoned()
        self.set(min(self.deadline, self.grace_ends) - now)

    def end_grace_in(self, seconds: float) -> None:
        self.grace_ends = time.monotonic() + seconds
        if self.fires_at is None or self.fires_at > self.grace_ends:
            self.set(seconds)

    def set(self, seconds: float) -> None:
        self.fires_at = time.monotonic() + seconds
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-6))

    def clear(self) -> None:
        self.deadline, self.grace_ends, self.fires_at = math.inf, math.inf, None
        signal.setitimer(signal.ITIMER_REAL, 0)


_clock = _Clock()


@contextmanager
def time_limits() -> Iterator[bool]:
    """Install the SIGALRM handler for a run; yields whether time limits can apply."""
    handlers: dict[int, SignalHandler] = {signal.SIGALRM: _clock.expire}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # no graceful stop routes it
        handlers[signal.SIGINT] = _interrupt
    with routing(handlers) as routed:
        try:
            yield routed
        finally:
            if routed:
                _clock.clear()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise SignalInterrupt()


def arm(seconds: float) -> None:
    """Start the current job's clock (inside `time_limits`)."""
    deadline = time.monotonic() + seconds
    _clock.deadline = deadline
    if _clock.fires_at is None or _clock.fires_at > deadline:
        _clock.set(seconds)


def disarm() -> None:
    """The job is over; a timer still set turns itself off when it fires."""
    _clock.deadline = math.inf


class GracefulStop:
    """First SIGTERM/SIGINT: finish the current job (on the main thread, within the grace) or
    the jobs in flight, hand the rest back, stop. Second: abandon what has not finished, back
    to the schedule, at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.grace: float | None = None  # set while calls run under SIGALRM (`grace_on_alarm`)
        # Set while many calls are in flight: what the run does on a first signal, in words.
        self.in_flight: Callable[[], str] | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def request(self, signum: int, frame: FrameType | None = None) -> None:
        if self.signum is not None:
            raise Abandoned()
        self.signum = signum
        name = signal.Signals(signum).name
        if self.in_flight is not None:
            logger.warning("received %s: %s", name, self.in_flight())
            return
        within = ""
        if self.grace is not None:
            _clock.end_grace_in(self.grace)
            within = f" within {self.grace:g}s"
        logger.warning(
            "received %s: finishing the current job%s, handing the rest back", name, within
        )


@contextmanager
def grace_on_alarm(stop: GracefulStop | None, grace: float) -> Iterator[None]:
    """Inside `time_limits`, while handlers run on the main thread: a stop gives the job in
    progress `grace` seconds, then the alarm abandons it as a second signal would, rather
    than a service manager's stop timeout killing the run with SIGKILL."""
    if stop is None:
        yield
        return
    stop.grace = grace
    try:
        yield
    finally:
        stop.grace = None  # out of `time_limits`, SIGALRM no longer has its handler


@contextmanager
def graceful_stop() -> Iterator[GracefulStop]:
    """Route SIGTERM and SIGINT to a GracefulStop for the duration of the block."""
    stop = GracefulStop()
    with routing(dict.fromkeys(STOP_SIGNALS, stop.request)):
        yield stop


@contextmanager
def routing(handlers: Mapping[int, SignalHandler]) -> Iterator[bool]:
    """Route each signal to its handler for the duration of the block; yields whether it
    could: Python runs signal handlers on the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        yield True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
