"""ScheduleIndex: the Redis side of delayq — one sorted set per queue (member = job id,
score = due time), a registry of queue names, and a marker that says the index is complete.

The index only says *when*; the table says *whether*. Everything here can be rebuilt from the
table (`rebuild_from`), so losing Redis costs a rebuild, never a job.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import resources

import redis

DEFAULT_QUEUE_KEY = "delay_queue_job"
QUEUES_KEY = "delay_queue_queues"
# Set after a full rebuild; its absence means Redis lost data (or never had it) and the
# next run must rebuild the schedule from the table before trusting it.
INDEXED_KEY = "delay_queue_indexed"


def schedule_key(queue: str) -> str:
    """The sorted-set key of a queue; the default queue's is fixed by the contract."""
    return DEFAULT_QUEUE_KEY if queue == "default" else f"{DEFAULT_QUEUE_KEY}:{queue}"


def queue_key(queue: str, suffix: str) -> str:
    """A helper key of a queue, in the schedule's hash slot so scripts work on a Cluster."""
    return f"{{{schedule_key(queue)}}}:{suffix}"


def _load_script(client: redis.Redis, name: str) -> redis.commands.core.Script:
    source = resources.files("delayq").joinpath("lua", f"{name}.lua").read_text()
    return client.register_script(source)


class ScheduleIndex:
    """The per-queue schedules on one Redis client."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._claim_due = _load_script(client, "claim_due")

    def add(self, queue: str, job_id: int, run_at: float) -> None:
        """Index one job: one round trip."""
        self.add_many(queue, [(job_id, run_at)])

    def add_many(self, queue: str, entries: Sequence[tuple[int, float]]) -> None:
        """Index several jobs of one queue in one round trip."""
        if not entries:
            return
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, len(entries), 5000):
            chunk = entries[start : start + 5000]
            pipe.zadd(schedule_key(queue), {str(job_id): run_at for job_id, run_at in chunk})
        pipe.sadd(QUEUES_KEY, queue)
        pipe.execute()

    def remove(self, queue: str, job_ids: Iterable[int]) -> int:
        """Drop jobs from a queue's schedule; returns how many were there."""
        members = [str(job_id) for job_id in job_ids]
        return int(self.client.zrem(schedule_key(queue), *members)) if members else 0

    def claim_due(self, queue: str, now: float, limit: int) -> list[tuple[str, float]]:
        """Atomically take up to `limit` due members out of the schedule, oldest first.

        Members come back as text: a member written by another producer may not be an id.
        """
        flat = self._claim_due(keys=[schedule_key(queue)], args=[repr(now), limit])
        return [(_text(flat[i]), float(flat[i + 1])) for i in range(0, len(flat), 2)]

    def missing(self, queue: str, job_ids: Sequence[int]) -> list[int]:
        """Those of `job_ids` that are not in the queue's schedule."""
        if not job_ids:
            return []
        scores = self.client.zmscore(schedule_key(queue), [str(job_id) for job_id in job_ids])
        return [job_id for job_id, score in zip(job_ids, scores, strict=True) if score is None]

    def queues(self) -> list[str]:
        """Names of every queue that has ever been indexed."""
        return sorted(_text(name) for name in self.client.smembers(QUEUES_KEY))

    def register(self, queues: Iterable[str]) -> None:
        """Record queue names so that a plain `run` visits them."""
        names = list(queues)
        if names:
            self.client.sadd(QUEUES_KEY, *names)

    def is_complete(self) -> bool:
        """False when Redis has lost the index (or never held it) and it must be rebuilt."""
        return bool(self.client.exists(INDEXED_KEY))

    def rebuild_from(self, batches: Iterable[Sequence[tuple[str, int, float]]]) -> int:
        """Index every (queue, id, due) the table yields, then mark the index complete."""
        count = 0
        for batch in batches:
            by_queue: dict[str, list[tuple[int, float]]] = {}
            for queue, job_id, due in batch:
                by_queue.setdefault(queue, []).append((job_id, due))
            for queue, entries in by_queue.items():
                self.add_many(queue, entries)
            count += len(batch)
        self.client.set(INDEXED_KEY, "1")
        return count

    def size(self, queue: str) -> int:
        return int(self.client.zcard(schedule_key(queue)))


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
