"""Handlers that show what lives as long as the runner: the event loop they run on, and an
`on_shutdown` function. The function is registered for the whole test process, so it does
something only for a test that armed it (`armed["log"]`)."""

from __future__ import annotations

import asyncio
from typing import Any

import delayq
from tests.sample_handlers.jobs import _append

armed: dict[str, Any] = {}
loops_seen: list[int] = []


async def loop_id(data: dict[str, Any]) -> str:
    """Log which event loop this call runs on."""
    loop = id(asyncio.get_running_loop())
    loops_seen.append(loop)
    _append(data["log"], f"loop {loop}")
    return "ok"


@delayq.on_shutdown
async def report_shutdown() -> None:
    """Log the loop the runner's shutdown runs on (then fail, if the test asked for it)."""
    if "log" not in armed:
        return
    _append(armed["log"], f"shutdown on loop {id(asyncio.get_running_loop())}")
    if armed.get("raise_"):
        raise RuntimeError("cleanup failed")


@delayq.on_shutdown
def report_plain_shutdown() -> None:
    """A plain function: called before the async one registered before it (last first)."""
    if "log" in armed:
        _append(armed["log"], "plain shutdown")
