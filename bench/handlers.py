"""The jobs delayq (and the baseline) run in the benchmark: a no-op that INCRs a Redis
counter, and one that records how late it started. DELAYQ_HANDLERS=bench.handlers."""

from __future__ import annotations

import os
import time
from typing import Any

import redis

import delayq

from . import env

COUNTER_KEY = "bench:count"
LATENESS_KEY = "bench:lateness"

_client: redis.Redis | None = None


def client() -> redis.Redis:
    """The handlers' own connection to delayq's Redis database, opened on first use."""
    global _client
    if _client is None:
        _client = redis.Redis.from_url(
            os.environ.get("DELAYQ_REDIS_URL") or env.redis_url("delayq")
        )
    return _client


def incr(data: Any) -> None:
    """The no-op job: one INCR."""
    client().incr(COUNTER_KEY)


def record_lateness(data: Any) -> None:
    """Push (start - due) in seconds; due is the job's own run_at."""
    started = time.time()
    job = delayq.current_job()
    if job is None or job.run_at is None:
        raise RuntimeError("record_lateness must run as a delayq job")
    client().rpush(LATENESS_KEY, repr(started - job.run_at))
