"""Which jobs wait on each per-key lock, and in what order: a sorted set per lock key in
Redis, `delay_queue_lock:KEY` (member "ID:QUEUE", score: the job's due time). A job that
finds its lock held joins it and is parked on its queue's schedule for PARKED_FOR; the job
letting go of the lock hands it to the earliest one and puts that one back on the schedule
at its due time, so jobs sharing a lock run in due order and one waits for the lock, not for
a poll. The parking is the backstop: a wake-up lost with Redis costs a job PARKED_FOR late,
never the job. The table holds the locks themselves (locks.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple, cast

import redis

from .keys import text

LOCK_KEY_PREFIX = "delay_queue_lock:"
# How long a job that found its lock held stays off its due time on the schedule, unless the
# holder wakes it first: well inside the shortest horizon, so the schedule keeps it.
PARKED_FOR = 120.0


class Waiter(NamedTuple):
    """A job waiting on a lock: its id, its queue and its due time."""

    job_id: int
    queue: str
    due: float


class LockWaits:
    """The lock wait lists on one Redis client."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def join_each(self, waiting: list[tuple[str, Waiter]]) -> None:
        """Put each waiter on the list of its key, (key, waiter) each; one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for key, waiter in waiting:
            pipe.zadd(wait_key(key), {_member(waiter): waiter.due})
        pipe.execute()

    def join(self, key: str, waiter: Waiter) -> None:
        self.join_each([(key, waiter)])

    def leave(self, key: str, waiter: Waiter) -> None:
        self.client.zrem(wait_key(key), _member(waiter))

    def pop(self, key: str) -> Waiter | None:
        """Take the earliest job waiting on `key` off its list; None if none waits."""
        found = cast(list[Any], self.client.zpopmin(wait_key(key)))
        if not found:
            return None
        member, due = found[0]
        return _waiter(member, due)

    def pop_each(self, keys: list[str]) -> list[Waiter | None]:
        """`pop` of each of `keys`, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.zpopmin(wait_key(key))
        return [_waiter(*found[0]) if found else None for found in pipe.execute()]

    def waiting(self, key: str) -> list[Waiter]:
        """The jobs waiting on `key`, earliest first."""
        found = cast(list[Any], self.client.zrange(wait_key(key), 0, -1, withscores=True))
        return [_waiter(member, due) for member, due in found]


def wait_key(key: str) -> str:
    return LOCK_KEY_PREFIX + key


def _member(waiter: Waiter) -> str:
    return f"{waiter.job_id}:{waiter.queue}"


def _waiter(member: bytes | str, due: float) -> Waiter:
    job_id, _, queue = text(member).partition(":")
    return Waiter(int(job_id), queue, float(due))
