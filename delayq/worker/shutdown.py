"""`delayq.on_shutdown`: what a handler module wants done when its runner ends, such as closing
the clients its handlers kept between calls. An `async def` function is awaited on the event
loop the async handlers ran on, before that loop closes; a plain one is called on the runner's
own thread. Each has SHUTDOWN_SECONDS; one that raises or hangs is logged and left behind,
and changes nothing about the run's outcome or exit code.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from . import interrupts
from .eventloop import EventLoopThread
from .tracebacks import describe

SHUTDOWN_SECONDS = 10.0
logger = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[[], Any])

# In the order they were registered; run last first, as atexit and ExitStack do, so a client
# opened after another (and perhaps on top of it) is closed before it.
_functions: list[Callable[[], Any]] = []


def on_shutdown(function: F) -> F:
    """Have `function` called when the runner ends (`@delayq.on_shutdown`); returned as is.
    Registering the same function again changes nothing."""
    if not callable(function):
        raise TypeError(f"on_shutdown takes a function, not {type(function).__name__}")
    if function not in _functions:
        _functions.append(function)
    return function


def run_shutdown_functions(event_loop: Callable[[], EventLoopThread]) -> None:
    """Call every registered function, last registered first; `event_loop` gives the loop
    the async ones are awaited on (started if no async handler ran)."""
    for function in reversed(_functions):
        name = getattr(function, "__qualname__", repr(function))
        try:
            if inspect.iscoroutinefunction(function):
                _await_on(event_loop(), function)
            else:
                _call_bounded(function)
        except interrupts.RUN_STOPS:
            raise
        except BaseException as exc:  # noqa: BLE001 - a cleanup's failure is logged, never the run's
            logger.error("on_shutdown function %s failed: %s", name, describe(exc))


def _await_on(loop: EventLoopThread, function: Callable[[], Any]) -> None:
    future = asyncio.run_coroutine_threadsafe(
        asyncio.wait_for(function(), SHUTDOWN_SECONDS), loop.loop
    )
    try:
        # A function that blocks the loop itself never lets wait_for fire: give up from here.
        future.result(SHUTDOWN_SECONDS + 1)
    except (asyncio.TimeoutError, concurrent.futures.TimeoutError):
        future.cancel()
        raise TimeoutError(f"still running after {SHUTDOWN_SECONDS:g}s; left behind") from None


def _call_bounded(function: Callable[[], Any]) -> None:
    """On the main thread, under SIGALRM's limit as a handler is; elsewhere without one."""
    with interrupts.time_limits() as limited:
        if limited:
            interrupts.arm(SHUTDOWN_SECONDS)
        try:
            function()
        except interrupts.JobTimeout:
            raise TimeoutError(f"still running after {SHUTDOWN_SECONDS:g}s; stopped") from None
        finally:
            if limited:
                interrupts.disarm()
