"""ScheduleIndex: the Redis side of delayq — one sorted set per queue (member = job id,
score = due time), each queue's wake-up list and journal (journal.py), a registry of queue
names, a marker that says the index is complete, and the shared clock (Redis's TIME).

The index only says *when*; the table says *whether*. Everything here can be rebuilt from the
table (`rebuild_from`), so losing Redis costs a rebuild, never a job.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources

import redis
from redis.commands.core import Script

from .journal import Journal
from .keys import (
    INDEXED_KEY,
    JOURNAL_TTL,
    LAST_RUN_KEY,
    QUEUES_KEY,
    queue_key,
    schedule_key,
    text,
)
from .tallies import HandlerLabels, Tally

ADD_CHUNK = 2000
CLOCK_REFRESH = 60.0


def _load_script(client: redis.Redis, name: str) -> Script:
    source = (resources.files(__package__) / "lua" / f"{name}.lua").read_text()
    return client.register_script(source)


class ScheduleIndex:
    """The per-queue schedules on one Redis client."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._claim_due = _load_script(client, "claim_due")
        self._add_jobs = _load_script(client, "add_jobs")
        self._offset = 0.0
        self._known_queues: set[str] = set()
        self.journal = Journal(client)
        self.handler_labels = HandlerLabels(client)
        self._offset_checked = float("-inf")

    def now(self) -> float:
        """Epoch seconds on Redis's clock, so hosts with skewed clocks agree on what is due.

        Measured once a minute as an offset to the local clock; an offset within the
        measurement's own uncertainty (half a round trip, plus a millisecond) counts as zero.
        """
        local = time.time()
        if time.monotonic() - self._offset_checked > CLOCK_REFRESH:
            self._measure_offset()
        return local + self._offset

    def _measure_offset(self) -> None:
        before = time.time()
        seconds, micros = self.client.time()
        after = time.time()
        self._offset = clock_offset(before, seconds + micros / 1e6, after)
        self._offset_checked = time.monotonic()

    def add(self, queue: str, job_id: int, run_at: float) -> None:
        """Index one job: one round trip."""
        self.add_many(queue, [(job_id, run_at)])

    def add_many(self, queue: str, entries: Sequence[tuple[int, float]]) -> None:
        """Index jobs of one queue, waking a looping run if one is now due soonest.

        Up to ADD_CHUNK entries cost one round trip: the script call, plus a SADD the first
        time this client meets the queue.
        """
        if not entries:
            return
        keys = [schedule_key(queue), queue_key(queue, "wake")]
        chunks = [entries[start : start + ADD_CHUNK] for start in range(0, len(entries), ADD_CHUNK)]
        if len(chunks) == 1 and queue in self._known_queues:
            self._add_jobs(keys=keys, args=_score_args(chunks[0]))
            return
        pipe = self.client.pipeline(transaction=False)
        for chunk in chunks:
            self._add_jobs(keys=keys, args=_score_args(chunk), client=pipe)
        pipe.sadd(QUEUES_KEY, queue)
        pipe.execute()
        self._known_queues.add(queue)

    def remove(self, queue: str, job_ids: Iterable[int]) -> int:
        """Drop jobs from a queue's schedule; returns how many were there."""
        return self.remove_members(queue, [str(job_id) for job_id in job_ids])

    def remove_members(self, queue: str, members: Sequence[str]) -> int:
        """Drop members (ids or junk another producer wrote) from a queue's schedule."""
        return int(self.client.zrem(schedule_key(queue), *members)) if members else 0

    def claim_due(self, queue: str, now: float, limit: int) -> list[tuple[str, float]]:
        """Atomically take up to `limit` due members out of the schedule, oldest first.

        Members come back as text: a member written by another producer may not be an id.
        """
        keys = [schedule_key(queue), queue_key(queue, "claimed")]
        flat = self._claim_due(keys=keys, args=[repr(now), limit])
        return [(text(flat[i]), float(flat[i + 1])) for i in range(0, len(flat), 2)]

    def leased(
        self,
        queue: str,
        members: Sequence[str],
        token: str,
        order: Sequence[int],
        notes_starts: bool = False,
    ) -> None:
        """The claimed members are now leased (or dropped) in the table: forget the claims,
        and note the order run `token` will call the batch in (see `orders`), or that it
        notes each job it starts (`note_starts`); one round trip.
        """
        pipe = self.client.pipeline(transaction=False)
        if members:
            pipe.zrem(queue_key(queue, "claimed"), *members)
        if notes_starts:
            pipe.hset(queue_key(queue, "journal"), f"starts:{token}", "1")
        if len(order) > 1:
            # If the run dies, recovery can tell the job that was running from the ones that
            # never started.
            key = queue_key(queue, "journal")
            pipe.hset(key, f"order:{token}", ",".join(map(str, order)))
            pipe.expire(key, JOURNAL_TTL)  # covers the outcomes journaled for this batch
        pipe.execute()

    def lost(self, queue: str, job_ids: Sequence[int], claimed_before: float) -> list[int]:
        """Those of `job_ids` neither on the schedule nor claimed since `claimed_before`.

        Claims older than that are dropped first: a run leases its claims within
        milliseconds, so an old claim belongs to a run that died.
        """
        if not job_ids:
            return []
        members = [str(job_id) for job_id in job_ids]
        pipe = self.client.pipeline(transaction=False)
        pipe.zremrangebyscore(queue_key(queue, "claimed"), "-inf", f"({claimed_before!r}")
        pipe.zmscore(schedule_key(queue), members)
        pipe.zmscore(queue_key(queue, "claimed"), members)
        _, scheduled, claimed = pipe.execute()
        return [
            job_id
            for job_id, on_schedule, in_flight in zip(job_ids, scheduled, claimed, strict=True)
            if on_schedule is None and in_flight is None
        ]

    def missing(self, queue: str, job_ids: Sequence[int]) -> list[int]:
        """Those of `job_ids` that are not in the queue's schedule."""
        if not job_ids:
            return []
        scores = self.client.zmscore(schedule_key(queue), [str(job_id) for job_id in job_ids])
        return [job_id for job_id, score in zip(job_ids, scores, strict=True) if score is None]

    def scores(self, queue: str, job_ids: Sequence[int]) -> dict[int, float]:
        """{id: due} of those of `job_ids` on the queue's schedule."""
        if not job_ids:
            return {}
        found = self.client.zmscore(schedule_key(queue), [str(job_id) for job_id in job_ids])
        return {
            job_id: float(score)
            for job_id, score in zip(job_ids, found, strict=True)
            if score is not None
        }

    def due_count(self, queues: Sequence[str]) -> int:
        """Members due now across `queues`, in one round trip."""
        now = self.now()
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.zcount(schedule_key(queue), "-inf", repr(now))
        return sum(int(count) for count in pipe.execute())

    def heads(self, queues: Sequence[str]) -> dict[str, float]:
        """The earliest due time of each non-empty queue, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.zrange(schedule_key(queue), 0, 0, withscores=True)
        heads = {}
        for queue, head in zip(queues, pipe.execute(), strict=True):
            if head:
                heads[queue] = float(head[0][1])
        return heads

    def backlog(
        self, queues: Sequence[str], now: float
    ) -> dict[str, tuple[int, int, float | None]]:
        """{queue: (entries, entries due by `now`, earliest due time or None)}, one round
        trip: ZCARD, ZCOUNT and the head, each O(log n)."""
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.zcard(schedule_key(queue))
            pipe.zcount(schedule_key(queue), "-inf", repr(now))
            pipe.zrange(schedule_key(queue), 0, 0, withscores=True)
        replies = pipe.execute()
        found = {}
        for position, queue in enumerate(queues):
            size, due, head = replies[3 * position : 3 * position + 3]
            found[queue] = (int(size), int(due), float(head[0][1]) if head else None)
        return found

    def wait_for_wake(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until a job due sooner is added to one of `queues`, or `timeout` passes."""
        keys = [queue_key(queue, "wake") for queue in queues]
        return self.client.blpop(keys, timeout=max(timeout, 0.001)) is not None

    def settle(
        self,
        queue: str,
        journaled_ids: Sequence[int],
        retries: Sequence[tuple[int, float]],
        started: tuple[str, Sequence[int]] | None = None,
        tally: Tally | None = None,
    ) -> None:
        """After outcomes reached the table: index their retries and forget their journal,
        and the start notes (run token, ids) of their jobs; add their tally in that write."""
        if retries:
            self.add_many(queue, retries)
        commands = []
        if tally:
            self.handler_labels.apply(tally)
            commands = tally.commands()
        self.journal.forget(queue, journaled_ids, started, commands)

    def add_tally(self, tally: Tally) -> None:
        """Add a tally on its own (missed jobs, found while claiming): one round trip."""
        if not tally:
            return
        self.handler_labels.apply(tally)
        pipe = self.client.pipeline(transaction=False)
        for command in tally.commands():
            pipe.execute_command(*command)
        pipe.execute()

    def record_run(self, started_at: float, duration: float, outcome: str, jobs: int) -> None:
        """Note this run for `delayq status`."""
        self.client.hset(
            LAST_RUN_KEY,
            mapping={
                "started_at": repr(started_at),
                "duration": repr(duration),
                "outcome": outcome,
                "jobs": str(jobs),
            },
        )

    def queues(self) -> list[str]:
        """Names of every queue that has ever been indexed."""
        return sorted(text(name) for name in self.client.smembers(QUEUES_KEY))

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
        self.mark_complete()
        return count

    def mark_complete(self) -> None:
        """Record that every pending row of the table is in the index."""
        self.client.set(INDEXED_KEY, "1")

    def members(self, queue: str, batch: int = 5000) -> Iterable[list[tuple[str, float]]]:
        """Every (member, score) of a queue's schedule, in batches, without blocking Redis."""
        chunk: list[tuple[str, float]] = []
        for member, score in self.client.zscan_iter(schedule_key(queue), count=batch):
            chunk.append((text(member), float(score)))
            if len(chunk) >= batch:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def size(self, queue: str) -> int:
        return int(self.client.zcard(schedule_key(queue)))

    def sizes(self, queues: Sequence[str]) -> Mapping[str, int]:
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.zcard(schedule_key(queue))
        return dict(zip(queues, (int(n) for n in pipe.execute()), strict=True))


def clock_offset(before: float, server: float, after: float) -> float:
    """How far the server's clock is ahead of ours, from one reading of it taken between two
    of ours; zero when that is within the reading's own uncertainty (half the round trip,
    plus a millisecond), so a well-synchronised host is never pushed early by noise."""
    offset = server - (before + after) / 2
    return offset if abs(offset) > (after - before) / 2 + 0.001 else 0.0


def _score_args(entries: Sequence[tuple[int, float]]) -> list[str]:
    args: list[str] = []
    for job_id, run_at in entries:
        args += [repr(float(run_at)), str(job_id)]
    return args
