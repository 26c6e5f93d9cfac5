"""`async def` handlers: one event loop per runner process, on a thread of its own, that every
async call of every pass shares (a client a handler keeps between calls is bound to it); it
cancels each call at its time limit, as arq does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

from ..base.threads import keep_signals_off_this_thread
from .interrupts import JobTimeout

T = TypeVar("T")
# How long closing waits for the tasks to take their cancellation and the loop to stop: a
# handler that swallows it, or blocks the loop, is left behind on the daemon thread.
CLOSE_SECONDS = 5.0


class EventLoopThread:
    """An asyncio loop running on its own thread until `close`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="delayq-asyncio", daemon=True)
        self._thread.start()

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        """Run `call` on the loop and wait for its result here; if this thread is interrupted
        while it waits (its time limit, a second stop signal), `call` is cancelled."""
        future = asyncio.run_coroutine_threadsafe(call, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        """Cancel what is still running, finish async generators and the loop's default
        executor as `asyncio.run` does, and stop the loop."""
        if self.loop.is_closed() or not self._thread.is_alive():
            return
        finishing = asyncio.run_coroutine_threadsafe(self._finish(), self.loop)
        with contextlib.suppress(
            concurrent.futures.TimeoutError, concurrent.futures.CancelledError
        ):
            finishing.result(timeout=CLOSE_SECONDS)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=CLOSE_SECONDS)

    def _serve(self) -> None:
        keep_signals_off_this_thread()
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    async def _finish(self) -> None:
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.loop.shutdown_asyncgens()
        await self.loop.shutdown_default_executor()


async def under_limit(awaitable: Awaitable[T], limit: float) -> T:
    """Await `awaitable` in this task, cancelling it after `limit` seconds (asyncio.timeout
    from Python 3.11): not in a task of its own, so whatever it raises reaches the caller's
    `except`, not the loop. JobTimeout when the limit ran out, even if the handler swallowed
    the cancellation; the handler's own TimeoutError stays its own failure."""
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
        if not expired:
            raise
    finally:
        deadline.cancel()
    if expired:
        raise JobTimeout()
    return result
