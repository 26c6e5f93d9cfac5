"""Handlers for the soak: each execution appends "<kind> <n> <attempt> <pid> <row id> <time>"
to data["log"] as it starts, so the soak counts executions from the handlers' own record, not
from delayq's, knows which jobs a process it kills had begun, and when each began. Each kind
comes as a plain function and as an `async def` (`<kind>_async`) that behaves the same."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import delayq
from tests.sample_handlers.jobs import _append


def _note(data: dict[str, Any], kind: str) -> int:
    job = delayq.current_job()
    attempt, job_id = (job.attempt, job.id) if job else (-1, -1)
    line = f"{kind} {data['n']} {attempt} {os.getpid()} {job_id} {time.time():.3f}"
    _append(data["log"], line)
    return attempt


def ok(data: dict[str, Any]) -> str:
    _note(data, "ok")
    return "ok"


def fail_once(data: dict[str, Any]) -> str:
    """Fails on the first attempt, succeeds on the retry."""
    if _note(data, "try") == 0:
        raise ConnectionError("flaky downstream")
    _note(data, "ok")
    return "ok"


def hang_once(data: dict[str, Any]) -> str:
    """Hangs past its time limit on the first attempt, succeeds on the retry."""
    if _note(data, "try") == 0:
        time.sleep(3600)
    _note(data, "ok")
    return "ok"


def refuse(data: dict[str, Any]) -> None:
    _note(data, "refused")
    raise delayq.NoRetry("not retryable")


async def ok_async(data: dict[str, Any]) -> str:
    await asyncio.sleep(0)
    return ok(data)


async def fail_once_async(data: dict[str, Any]) -> str:
    await asyncio.sleep(0)
    return fail_once(data)


async def hang_once_async(data: dict[str, Any]) -> str:
    """Awaits past its time limit on the first attempt (the run cancels it there)."""
    if _note(data, "try") == 0:
        await asyncio.sleep(3600)
    _note(data, "ok")
    return "ok"


async def refuse_async(data: dict[str, Any]) -> None:
    await asyncio.sleep(0)
    refuse(data)


def tick(data: dict[str, Any]) -> str:
    """An occurrence of recurring series data["n"]."""
    _note(data, "tick")
    return "tick"


def bounce(data: dict[str, Any]) -> str:
    """A debounced job: data["n"] is "<key>.<version>", the version of its latest replace."""
    _note(data, "bounce")
    return "bounce"


def probe(data: dict[str, Any]) -> str:
    """The job added to each queue once the faults stop: data["n"] names the queue."""
    _note(data, "probe")
    return "probe"
