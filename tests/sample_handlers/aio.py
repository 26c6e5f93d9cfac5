"""`async def` handlers for the tests; like jobs.py, every call appends to data["log"]."""

from __future__ import annotations

import asyncio
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


class Notifier:
    """An async method on a class, as a business handler might be."""

    async def send(self, data: dict[str, Any]) -> str:
        await asyncio.sleep(0)
        _append(data["log"], f"sent {data['to']}")
        return f"sent {data['to']}"
