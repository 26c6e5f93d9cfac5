"""The jobs delayq (and the baseline) run in the benchmark: a no-op that INCRs a Redis
counter, and one that records how late it started. DELAYQ_HANDLERS=bench.handlers."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import redis
import redis.asyncio

import delayq

from . import env

COUNTER_KEY = "bench:count"
LATENESS_KEY = "bench:lateness"
IO_WAIT = 0.05

_client: redis.Redis | None = None


def client() -> redis.Redis:
    """The handlers' own connection to the benchmark's Redis database, opened on first use:
    the same server whatever Redis delayq runs on (bench.topologies), so that the job costs
    the same everywhere."""
    global _client
    if _client is None:
        _client = redis.Redis.from_url(env.redis_url("delayq"))
    return _client


def incr(data: Any) -> None:
    """The no-op job: one INCR."""
    client().incr(COUNTER_KEY)


def sleep_incr(data: Any) -> None:
    """A job that waits on I/O: 50 ms, then one INCR."""
    time.sleep(IO_WAIT)
    client().incr(COUNTER_KEY)


async def await_incr(data: Any) -> None:
    """An async job that waits on I/O: awaits 50 ms, then one INCR through asyncio."""
    await asyncio.sleep(IO_WAIT)
    await async_client().incr(COUNTER_KEY)


async def await_incr_own_client(data: Any) -> None:
    """await_incr with a client opened and closed by the job itself: what a handler that keeps
    no client between calls pays, beside await_incr's client kept for the runner's loop."""
    await asyncio.sleep(IO_WAIT)
    async with redis.asyncio.Redis.from_url(env.redis_url("delayq")) as own:
        await own.incr(COUNTER_KEY)


_async_client: redis.asyncio.Redis | None = None


def reset_async_client() -> None:
    """Forget the asyncio client, for a new event loop (bench.startup's bare loop)."""
    global _async_client
    _async_client = None


def async_client() -> redis.asyncio.Redis:
    """An asyncio client on the run's one event loop, opened on first use."""
    global _async_client
    if _async_client is None:
        _async_client = redis.asyncio.Redis.from_url(env.redis_url("delayq"))
    return _async_client


def sleep_record_lateness(data: Any) -> None:
    """Record how late it started, then wait 50 ms as on a remote call."""
    record_lateness(data)
    time.sleep(IO_WAIT)


def record_lateness(data: Any) -> None:
    """Push (start - due) in seconds; due is the job's own run_at."""
    started = time.time()
    job = delayq.current_job()
    if job is None or job.run_at is None:
        raise RuntimeError("record_lateness must run as a delayq job")
    client().rpush(LATENESS_KEY, repr(started - job.run_at))


RECORD_FILE = "BENCH_RECORD_FILE"


def record_start(data: Any) -> None:
    """Append "pid start due id" to the file BENCH_RECORD_FILE names (one write, O_APPEND:
    lines from several runners never mix), then sleep data["sleep"] seconds if given. For
    bench.scale, whose Redis may be FLUSHALLed under the runner: no Redis involved."""
    started = time.time()
    job = delayq.current_job()
    if job is None or job.run_at is None:
        raise RuntimeError("record_start must run as a delayq job")
    line = f"{os.getpid()} {started!r} {job.run_at!r} {job.id}\n".encode()
    fd = os.open(os.environ[RECORD_FILE], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    if isinstance(data, dict) and data.get("sleep"):
        time.sleep(float(data["sleep"]))
