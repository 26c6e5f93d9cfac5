"""The registry: what delayq notes about itself in Redis — the names of every queue ever
indexed (so that a plain `run` visits them), the record of the last run (for `delayq
status`), and the marker that says the schedule holds every pending row of the table.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis

from ..config import DEFAULT_QUEUE
from .keys import INDEXED_KEY, LAST_RUN_KEY, QUEUES_KEY, text


class Registry:
    """Queue names, the last run and the index-complete marker, on one Redis client."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def queues(self) -> list[str]:
        """Names of every queue that has ever been indexed."""
        return sorted(text(name) for name in self.client.smembers(QUEUES_KEY))

    def known_queues(self) -> list[str]:
        """Every queue ever indexed, and always the default one, which producers that write
        rows themselves use without registering it."""
        return sorted({DEFAULT_QUEUE, *self.queues()})

    def register(self, queues: Iterable[str]) -> None:
        """Record queue names so that a plain `run` visits them."""
        names = list(queues)
        if names:
            self.client.sadd(QUEUES_KEY, *names)

    def record_run(
        self, started_at: float, duration: float, outcome: str, jobs: int, loop: bool = False
    ) -> None:
        """Note this run for `delayq status`, in one write: a pass when it ends; a loop when
        it starts, as it beats (`duration` then runs to the beat) and when it ends."""
        self.client.hset(
            LAST_RUN_KEY,
            mapping={
                "started_at": repr(started_at),
                "duration": repr(duration),
                "outcome": outcome,
                "jobs": str(jobs),
                "loop": "1" if loop else "0",
            },
        )

    def last_run(self) -> dict[str, str]:
        """The fields `record_run` wrote last; empty when no run has recorded itself."""
        return {text(key): text(value) for key, value in self.client.hgetall(LAST_RUN_KEY).items()}

    def is_complete(self) -> bool:
        """False when Redis has lost the schedule (or never held it) and it must be rebuilt."""
        return bool(self.client.exists(INDEXED_KEY))

    def mark_complete(self) -> None:
        """Record that every pending row of the table is on the schedule."""
        self.client.set(INDEXED_KEY, "1")
