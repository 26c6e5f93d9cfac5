"""The Redis mirror of each queue's flow settings (queue_settings.py holds them durably): a
hash per queue that claim_due.lua reads, so that no run on any host claims from a paused
queue, with no flag of its own. A queue whose hash Redis lost (a restart without persistence,
a FLUSHALL, a failover to a replica behind) is put back from the table before it is claimed
from (delayq/flow/settings.py: `restore`): a missing hash never reads as "running".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from typing import NamedTuple

import redis
from redis.client import Pipeline

from .clusters import is_cluster
from .keys import flow_key, queue_key, slots_key, starts_key, text

# How long after its claim a job of a rate-limited queue may still start: its grant counts
# for the rate's period plus this, and a run that could not start it by then hands it back,
# so that no window of start times holds more than the rate allows.
START_SLACK = 0.1


class QueueFlow(NamedTuple):
    """A queue's flow settings, as the settings table holds them and this mirror gives them
    back: paused since `paused_at` (None: running), last resumed at `resumed_at` (None: never
    paused, or never resumed), at change number `version`; its rate limit, at most
    `rate_count` starts in any `rate_period` seconds, and its concurrency limit, at most
    `concurrency` jobs running at once (None: no such limit)."""

    paused_at: float | None = None
    resumed_at: float | None = None
    version: int = 0
    rate_count: int | None = None
    rate_period: float | None = None
    concurrency: int | None = None

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @property
    def rate(self) -> tuple[int, float] | None:
        """(starts, seconds) of its rate limit, or None."""
        if self.rate_count is None or self.rate_period is None:
            return None
        return self.rate_count, self.rate_period

    @property
    def limited(self) -> bool:
        """Whether it has a rate or a concurrency limit."""
        return self.rate is not None or self.concurrency is not None


RUNNING = QueueFlow()


class FlowUnknown(Exception):
    """Redis holds no flow settings for the queue: they must come back from the table."""


class Flow:
    """The queues' flow settings as mirrored in Redis, on one client."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        source = (resources.files(__package__) / "lua" / "mirror_flow.lua").read_text()
        self._mirror = client.register_script(source)
        self._cluster = is_cluster(client)

    def mirror(self, settings: Mapping[str, QueueFlow]) -> None:
        """Write each queue's settings, unless Redis holds a later version of them; one round
        trip (a queue at a time on a Cluster, which runs no script in a pipeline)."""
        pipe = None if self._cluster else self.client.pipeline(transaction=False)
        for queue, flow in settings.items():
            args = [str(flow.version), _field(flow.paused_at), _field(flow.resumed_at)]
            args += ["", ""] if flow.rate is None else [str(flow.rate[0]), repr(flow.rate[1])]
            args.append("" if flow.concurrency is None else str(flow.concurrency))
            self._mirror(keys=[flow_key(queue)], args=args, client=pipe)
        if pipe is not None:
            pipe.execute()

    def forget(self, queues: Sequence[str]) -> None:
        """Drop the queues' mirrors: until they are written again, a claim asks the table."""
        if queues:
            self.client.delete(*[flow_key(queue) for queue in queues])

    def read(self, queues: Sequence[str]) -> dict[str, QueueFlow | None]:
        """{queue: its mirrored settings, or None where Redis holds none}, one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.hmget(flow_key(queue), FIELDS)
        return {
            queue: _parsed(*fields) for queue, fields in zip(queues, pipe.execute(), strict=True)
        }

    def rate_free_at(self, limits: Mapping[str, tuple[int, float]], now: float) -> dict[str, float]:
        """{queue: when its rate limit next lets a job start} of the rate-limited queues
        `limits` ({queue: (starts, seconds)}): now, or when the grant that fills its window
        leaves it; one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for queue, (count, period) in limits.items():
            since = f"({now - period - START_SLACK!r}"
            pipe.zrevrangebyscore(starts_key(queue), "+inf", since, count - 1, 1, withscores=True)
        free_at = {}
        for (queue, (_, period)), found in zip(limits.items(), pipe.execute(), strict=True):
            free_at[queue] = found[0][1] + period + START_SLACK if found else now
        return free_at

    def free_slots(self, pipe: Pipeline, queue: str, members: Sequence[str]) -> None:
        """Add to `pipe` the freeing of a concurrency-limited queue's slots held by `members`
        (their jobs ended, went back, or were never leased), and the waking of a looping run
        that sleeps until a slot is free."""
        if members:
            pipe.zrem(slots_key(queue), *members)
            pipe.lpush(queue_key(queue, "wake"), "1")
            pipe.ltrim(queue_key(queue, "wake"), 0, 0)

    def return_grants(
        self, pipe: Pipeline, queue: str, members: Sequence[str], claimed_at: float
    ) -> None:
        """Add to `pipe` the giving back of a rate-limited queue's start grants that the claim
        at `claimed_at` took for `members`, none of which starts (claim_due.lua names each
        grant by its member and the claim's time), and the waking of a looping run that
        sleeps until the window frees."""
        if members:
            pipe.zrem(starts_key(queue), *[f"{member}@{claimed_at!r}" for member in members])
            pipe.lpush(queue_key(queue, "wake"), "1")
            pipe.ltrim(queue_key(queue, "wake"), 0, 0)

    def renew_slots(self, pipe: Pipeline, queue: str, members: Sequence[str], until: float) -> None:
        """Add to `pipe` the renewal of the slots `members` still hold, to `until`; a slot
        already freed is not taken again."""
        if members:
            pipe.zadd(slots_key(queue), dict.fromkeys(members, until), xx=True, gt=True)

    def slots_free_at(self, limits: Mapping[str, int], now: float) -> dict[str, float]:
        """{queue: when a running slot is next free} of the concurrency-limited queues
        `limits` ({queue: its concurrency limit}): now, or when the lease that fills its last
        slot lapses (a slot its job frees before then wakes a looping run); one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for queue, limit in limits.items():
            pipe.zrevrangebyscore(slots_key(queue), "+inf", f"({now!r}", limit - 1, 1, True)
        return {
            queue: found[0][1] if found else now
            for queue, found in zip(limits, pipe.execute(), strict=True)
        }

    def hold_slots(self, queue: str, held: Sequence[tuple[int, float]]) -> None:
        """Take running slots for jobs (id, when its lease lapses) of a concurrency-limited
        queue, keeping a later lease a slot holds already."""
        if held:
            slots = {str(job_id): until for job_id, until in held}
            self.client.zadd(slots_key(queue), slots, gt=True)

    def reset_slots(self, queue: str, held: Sequence[tuple[int, float]]) -> None:
        """Make the queue's running slots those of `held` (id, when its lease lapses): a
        concurrency limit being set counts the jobs running already, one lifted keeps none."""
        self.client.delete(slots_key(queue))
        self.hold_slots(queue, held)

    def paused(self, queues: Sequence[str]) -> set[str]:
        """Those of `queues` Redis says are paused (one it lost the settings of is not here)."""
        return {queue for queue, flow in self.read(queues).items() if flow and flow.paused}


def _field(value: float | None) -> str:
    return "" if value is None else repr(value)


FIELDS = ["version", "paused_at", "resumed_at", "rate_count", "rate_period", "concurrency"]
Field = bytes | str | None


def _parsed(
    version: Field,
    paused_at: Field,
    resumed_at: Field,
    count: Field,
    period: Field,
    concurrency_limit: Field,
) -> QueueFlow | None:
    if version is None or paused_at is None:
        return None
    return QueueFlow(
        _time(paused_at),
        _time(resumed_at),
        int(text(version)),
        _integer(count),
        _time(period),
        _integer(concurrency_limit),
    )


def _integer(value: Field) -> int | None:
    return int(text(value)) if value else None


def _time(value: bytes | str | None) -> float | None:
    return float(text(value)) if value else None
