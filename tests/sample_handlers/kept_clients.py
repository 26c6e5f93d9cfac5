"""Async handlers that keep their clients between jobs and passes, as an application's module
does: a redis.asyncio client and an httpx.AsyncClient made at import, closed by a function
registered with delayq.on_shutdown. The test names their servers in KEPT_* variables; the
module is imported by runners only (the test adds its jobs with check=False).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import httpx
import redis
import redis.asyncio

import delayq
from tests.sample_handlers.jobs import _append

# The name the kept connections give themselves, so the test finds them in CLIENT LIST.
CLIENT_NAME = "delayq-test-kept-client"
COUNTER = "kept:calls"
# Port 1: nothing listens, so a runner started without the test's variables fails loudly.
REDIS_URL = os.environ.get("KEPT_REDIS_URL", "redis://127.0.0.1:1/0")

cache = redis.asyncio.Redis.from_url(REDIS_URL, client_name=CLIENT_NAME)
api = httpx.AsyncClient(base_url=os.environ.get("KEPT_HTTP_URL", "http://127.0.0.1:1"), timeout=10)


async def call(data: dict[str, Any]) -> str:
    """One request to the test's server and one INCR, both on the kept clients; logs the
    job's wave and number, when it started and ended, and which process and loop ran it."""
    started = time.time()
    response = await api.get("/", params={"n": data["n"]})
    response.raise_for_status()
    await cache.incr(COUNTER)
    loop = id(asyncio.get_running_loop())
    line = f"{data['wave']} {data['n']} {started:.6f} {time.time():.6f} {os.getpid()} {loop}"
    _append(data["log"], line)
    return f"called {data['n']}"


def ready(data: dict[str, Any]) -> None:
    """Tells the test that the runner is up and claiming."""
    _append(data["log"], "ready")


@delayq.on_shutdown
async def close_clients() -> None:
    """Close both clients, then note in KEPT_SHUTDOWN_LOG how many connections named
    CLIENT_NAME the server still lists (0: they are really gone, before the process is)."""
    await api.aclose()
    await cache.aclose()
    _append(os.environ["KEPT_SHUTDOWN_LOG"], f"closed; named clients left {_named_left()}")


def _named_left(patience: float = 2.0) -> int:
    """How many connections named CLIENT_NAME the server lists, once none are or after
    `patience` seconds: the server sees a closed socket a moment after it is closed."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        deadline = time.monotonic() + patience
        while True:
            left = sum(1 for entry in client.client_list() if entry.get("name") == CLIENT_NAME)
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.02)
    finally:
        client.close()
