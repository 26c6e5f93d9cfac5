"""The schedule: one Redis sorted set per queue (member = job id, score = due time), the
claims a run holds between taking members out of it and leasing their rows, and each
queue's wake-up list that a looping run blocks on.

The schedule only says *when*; the table says *whether*: losing it costs a rebuild from
the table (worker/rebuilds.py), never a job.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any, NamedTuple, cast

import redis
from redis.client import Pipeline
from redis.commands.core import Script

from .clusters import HashSlotWaits, is_cluster
from .flow import START_SLACK, FlowUnknown
from .keys import (
    QUEUES_KEY,
    flow_key,
    horizon_key,
    queue_key,
    schedule_key,
    slots_key,
    starts_key,
    text,
)

ADD_CHUNK = 10000


class Claimed(list[tuple[str, float]]):
    """What a claim took, (member, due) each; `rate_limited` if its queue has a rate limit,
    `slotted` if it has a concurrency limit (each member took a running slot)."""

    rate_limited = False
    slotted = False

    @property
    def start_at_once(self) -> bool:
        """Whether its queue has a limit: what the claim took is started at once, never
        leased ahead (a grant would lapse, a slot would wait)."""
        return self.rate_limited or self.slotted


def load_script(client: redis.Redis, name: str) -> Script:
    source = (resources.files(__package__) / "lua" / f"{name}.lua").read_text()
    return client.register_script(source)


class Schedule:
    """The per-queue schedules and claims on one Redis client."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._claim_due = load_script(client, "claim_due")
        self._add_jobs = load_script(client, "add_jobs")
        # A Cluster runs no script inside a pipeline, and blocks on one hash slot's keys at once.
        self._cluster = is_cluster(client)
        self._wake_waits = HashSlotWaits(client) if self._cluster else None

    def add(self, queue: str, job_id: int, run_at: float) -> bool:
        return self.add_many(queue, [(job_id, run_at)])

    def add_many(self, queue: str, entries: Sequence[tuple[int, float]]) -> bool:
        """Put jobs of one queue on its schedule, waking a looping run if one is now due
        soonest; up to ADD_CHUNK entries cost one round trip. Whether the queue has a
        horizon (`add_packed`)."""
        chunks = [entries[start : start + ADD_CHUNK] for start in range(0, len(entries), ADD_CHUNK)]
        return self.add_packed(queue, [packed(chunk) for chunk in chunks])

    def add_packed(self, queue: str, texts: Sequence[str], keep_existing: bool = False) -> bool:
        """Put jobs of one queue on its schedule, each text "due id due id ..." (`packed`, or
        a rebuild's batch as the database wrote it: `due_rows.DueBatch`); with
        `keep_existing`, members already there keep their scores (a rebuild: they were put
        there after the table was read). Whether the queue has a horizon: a queue without
        one (new, or its keys lost with Redis) is noted in the registry here, in a second
        round trip, so that runs visit it whatever any process remembers having noted."""
        if not texts:
            return True
        flag = "NX" if keep_existing else ""
        keys = [schedule_key(queue), queue_key(queue, "wake"), horizon_key(queue)]
        if self._cluster or len(texts) == 1:
            replies = [self._add_jobs(keys=keys, args=[flag, chunk]) for chunk in texts]
        else:
            pipe = self.client.pipeline(transaction=False)
            for chunk in texts:
                self._add_jobs(keys=keys, args=[flag, chunk], client=pipe)
            replies = pipe.execute()
        if all(int(has_horizon) for _, has_horizon in replies):
            return True
        self.client.sadd(QUEUES_KEY, queue)
        return False

    def add_by_queue(self, entries: Iterable[tuple[str, int, float]]) -> None:
        """Put jobs of any queues on their schedules, (queue, id, due) each: one add_many a
        queue."""
        by_queue: dict[str, list[tuple[int, float]]] = {}
        for queue, job_id, due in entries:
            by_queue.setdefault(queue, []).append((job_id, due))
        for queue, grouped in by_queue.items():
            self.add_many(queue, grouped)

    def remove(self, queue: str, job_ids: Iterable[int]) -> int:
        """Drop jobs from a queue's schedule; returns how many were there."""
        return self.remove_members(queue, [str(job_id) for job_id in job_ids])

    def remove_members(self, queue: str, members: Sequence[str]) -> int:
        """Drop members (ids or junk another producer wrote) from a queue's schedule."""
        return int(self.client.zrem(schedule_key(queue), *members)) if members else 0

    def claim_due(
        self,
        queue: str,
        now: float,
        limit: int,
        startable: int | None = None,
        lease_until: float | None = None,
    ) -> Claimed:
        """Atomically take up to `limit` due members out of the schedule, oldest first, as
        text: a member written by another producer may not be an id; none while the queue
        is paused. A limited queue gives at most what its rate window and running slots
        allow, and at most `startable` (what the run can start at once; None: `limit`); a
        slot taken is held until `lease_until` (None: `now`, so only a run that frees it at
        once may leave it out). FlowUnknown if Redis lost the queue's flow settings
        (flow.restore)."""
        keys = [schedule_key(queue), queue_key(queue, "claimed"), flow_key(queue)]
        keys += [starts_key(queue), slots_key(queue)]
        start_cap = limit if startable is None else startable
        held_until = now if lease_until is None else lease_until
        args: list[str | int] = [repr(now), limit, repr(START_SLACK), start_cap, repr(held_until)]
        flat = self._claim_due(keys=keys, args=args)
        if not isinstance(flat, list):
            raise FlowUnknown(queue)
        flags = 0
        if len(flat) == 2 and isinstance(flat[0], list):
            flat, flags = flat[0], int(flat[1])
        claimed = Claimed((text(flat[i]), float(flat[i + 1])) for i in range(0, len(flat), 2))
        claimed.rate_limited = bool(flags & 1)
        claimed.slotted = bool(flags & 2)
        return claimed

    def drop_claims(self, pipe: Pipeline, queue: str, members: Sequence[str]) -> None:
        """Add to `pipe` the forgetting of claims whose rows are now leased (or dropped)."""
        if members:
            pipe.zrem(queue_key(queue, "claimed"), *members)

    def lost(self, queue: str, job_ids: Sequence[int], claimed_before: float) -> list[int]:
        """Those of `job_ids` neither on the schedule nor claimed since `claimed_before`,
        dropping older claims first: a run leases its claims within milliseconds, so an old
        claim belongs to a run that died."""
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
        scheduled = self.scores(queue, job_ids)
        return [job_id for job_id in job_ids if job_id not in scheduled]

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

    def due_count(self, queues: Sequence[str], now: float) -> int:
        """Members due by `now` across `queues`, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.zcount(schedule_key(queue), "-inf", repr(now))
        return sum(int(count) for count in pipe.execute())

    def heads(self, queues: Sequence[str]) -> dict[str, float]:
        """The earliest due time of each non-empty queue, in one round trip."""
        found = self.backlog(queues, 0.0)
        return {queue: head for queue, (_, _, head) in found.items() if head is not None}

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

    def earliest(self, queue: str, count: int) -> list[tuple[str, float]]:
        """The first `count` (member, score) of a queue's schedule, soonest first, unclaimed."""
        scored = self.client.zrange(schedule_key(queue), 0, count - 1, withscores=True)
        return [(text(member), float(score)) for member, score in cast(list, scored)]

    def wait_for_wake(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until a job due sooner is added to one of `queues`, or `timeout` passes."""
        keys = [queue_key(queue, "wake") for queue in queues]
        if self._wake_waits is not None:
            return self._wake_waits.wait(keys, max(timeout, 0.001))
        return self.client.blpop(keys, timeout=max(timeout, 0.001)) is not None

    def between(
        self, queue: str, low: float | None, high: float | None, batch: int = 20000
    ) -> Iterable[list[str]]:
        """The members of a queue's schedule due after `low` and by `high` (None: no bound),
        in pages of `batch`, soonest first."""
        low_bound = "-inf" if low is None else f"({low!r}"
        high_bound = "+inf" if high is None else repr(high)
        offset = 0
        while page := self.client.zrangebyscore(
            schedule_key(queue), low_bound, high_bound, start=offset, num=batch
        ):
            yield [text(member) for member in cast(list[bytes], page)]
            if len(page) < batch:
                return
            offset += batch

    def members(self, queue: str, batch: int = 5000) -> Iterable[list[tuple[str, float]]]:
        """Every (member, score) of a queue's schedule, in batches, without blocking Redis."""
        scan = self.client.zscan_iter(schedule_key(queue), count=batch)
        while chunk := list(itertools.islice(scan, batch)):
            yield [(text(member), float(score)) for member, score in chunk]

    def size(self, queue: str) -> int:
        return int(self.client.zcard(schedule_key(queue)))


class Packed(NamedTuple):
    """Entries as add_jobs.lua takes them, and the earliest due time among them."""

    text: str
    earliest: float


def packed_by_queue(rows: Sequence[Mapping[str, Any]], ids: Sequence[int]) -> dict[str, Packed]:
    """New rows (each with its `queue` and `run_at`) and their ids as add_jobs.lua takes
    them, one text a queue; at most ADD_CHUNK rows, so each text is one call."""
    if len(rows) > ADD_CHUNK:
        raise ValueError(f"{len(rows)} rows: pack at most {ADD_CHUNK} at once")
    by_queue: dict[str, list[str]] = {}
    earliest: dict[str, float] = {}
    for row, job_id in zip(rows, ids, strict=True):
        queue, run_at = row["queue"], float(row["run_at"])
        entry = f"{run_at!r} {job_id}"
        if (entries := by_queue.get(queue)) is None:
            by_queue[queue], earliest[queue] = [entry], run_at
        else:
            entries.append(entry)
            earliest[queue] = min(earliest[queue], run_at)
    return {
        queue: Packed(" ".join(entries), earliest[queue]) for queue, entries in by_queue.items()
    }


def packed(entries: Sequence[tuple[int, float]]) -> str:
    """(id, due) entries as add_jobs.lua takes them: "due id due id ...", each due exact."""
    return " ".join(f"{float(run_at)!r} {job_id}" for job_id, run_at in entries)
