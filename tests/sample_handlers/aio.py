"""`async def` handlers for the tests; like jobs.py, every call appends to data["log"]."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import delayq
from tests.sample_handlers.jobs import _append


async def slow(data: dict[str, Any]) -> str:
    """Mark the start, await data["seconds"], then record the finish (or the cancellation)."""
    _append(data["log"], f"start {data.get('n', '')}")
    try:
        await asyncio.sleep(float(data.get("seconds", 0)))
    except asyncio.CancelledError:
        _append(data["log"], f"cancelled {data.get('n', '')}")
        raise
    _append(data["log"], f"done {data.get('n', '')}")
    return "awaited"


async def whoami(data: dict[str, Any]) -> str:
    """The job's own id, read from delayq.current_job() inside the coroutine."""
    await asyncio.sleep(0)
    job = delayq.current_job()
    _append(data["log"], f"job {job.id if job else None}")
    return f"job {job.id if job else None}"


async def fail(data: dict[str, Any]) -> None:
    await asyncio.sleep(0)
    raise ValueError("async boom")


async def upstream_timeout(data: dict[str, Any]) -> None:
    """Times out on its own account, as an HTTP client would, well within its limit."""
    await asyncio.wait_for(asyncio.sleep(5), 0.01)


class Notifier:
    """An async method on a class, as a business handler might be."""

    async def send(self, data: dict[str, Any]) -> str:
        await asyncio.sleep(0)
        _append(data["log"], f"sent {data['to']}")
        return f"sent {data['to']}"


def pool_threads() -> int:
    """How many of a runner's pool threads are alive in this process."""
    return sum(1 for thread in threading.enumerate() if thread.name == "delayq-pool")


async def count_pool_threads(data: dict[str, Any]) -> None:
    """Log how many pool threads exist while this coroutine runs."""
    await asyncio.sleep(0.05)
    _append(data["log"], f"pool threads {pool_threads()}")


async def ignores_cancel(data: dict[str, Any]) -> str:
    """Swallow the first cancellation (a bare `except BaseException` in a retry helper does
    this), then await a little more."""
    _append(data["log"], "start")
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        _append(data["log"], "ignored cancel")
    await asyncio.sleep(5)
    _append(data["log"], "done")
    return "finished anyway"
