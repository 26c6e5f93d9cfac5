"""`async def` handlers: one event loop per run, on a thread of its own, that every async call
of the run shares. The thread that calls a handler (the main thread, or a slot) hands the
coroutine over and waits for it; the loop cancels it at its time limit, as arq does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..threads import keep_signals_off_this_thread
from . import forks
from .interrupts import JobTimeout

T = TypeVar("T")


class EventLoopThread:
    """An asyncio loop running on its own thread until `close`."""

    def __init__(self, runner_pid: int) -> None:
        self.runner_pid = runner_pid
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="delayq-asyncio", daemon=True)
        self._thread.start()

    def run(self, awaitable: Awaitable[T], limit: float, enter: Callable[[], Any]) -> T:
        """Await `awaitable` on the loop, with `enter()` called first inside its task (to set
        the job's context there), and wait for its result here. Past `limit` seconds it is
        cancelled and JobTimeout raised; if this thread is interrupted while it waits (the
        main thread's own time limit, a second stop signal) it is cancelled too."""
        limited = _limited(_contained(awaitable, self.runner_pid), limit, enter)
        future = asyncio.run_coroutine_threadsafe(limited, self.loop)
        try:
            return future.result()
        except _Escaped as escaped:
            raise escaped.exc from None
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        """Cancel what is still running and stop the loop."""
        if self.loop.is_closed():
            return
        done = concurrent.futures.Future[None]()
        self.loop.call_soon_threadsafe(self._shut_down, done)
        with contextlib.suppress(concurrent.futures.TimeoutError):
            done.result(timeout=5)
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        keep_signals_off_this_thread()
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    def _shut_down(self, done: concurrent.futures.Future[None]) -> None:
        for task in asyncio.all_tasks(self.loop):
            task.cancel()
        self.loop.call_soon(self.loop.stop)  # one more turn: the tasks see their cancellation
        done.set_result(None)


class _Escaped(Exception):  # noqa: N818
    """Carries a KeyboardInterrupt or SystemExit that an async handler raised to the thread
    waiting for it: raised inside a task, asyncio would let it out of the loop and end it."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(type(exc).__name__)
        self.exc = exc


async def _limited(awaitable: Awaitable[T], limit: float, enter: Callable[[], Any]) -> T:
    # A task runs in a copy of the context it was created in, which is the loop thread's:
    # the job's context is set again here, for this task only.
    enter()
    return await under_limit(awaitable, limit)


async def _contained(awaitable: Awaitable[T], runner_pid: int) -> T:
    try:
        return await awaitable
    except (KeyboardInterrupt, SystemExit) as exc:
        raise _Escaped(exc) from None
    finally:  # a child the handler forked on the loop's thread would serve the loop forever
        forks.leave_if_forked(runner_pid)


async def under_limit(awaitable: Awaitable[T], limit: float) -> T:
    """Await `awaitable` in this task, cancelling the task after `limit` seconds (what
    asyncio.timeout does from Python 3.11). Awaited here, not in a task of its own, so that
    whatever the handler raises, KeyboardInterrupt included, reaches the caller's `except`
    instead of the event loop. JobTimeout when the limit ran out, even if the handler
    swallowed the cancellation; the handler's own TimeoutError stays its own failure."""
    task = asyncio.current_task()
    assert task is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    deadline = asyncio.get_running_loop().call_later(limit, expire)
    try:
        result = await awaitable
    except asyncio.CancelledError:
        if expired:
            raise JobTimeout() from None
        raise
    finally:
        deadline.cancel()
    if expired:
        raise JobTimeout()
    return result
