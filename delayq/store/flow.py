"""The Redis mirror of each queue's flow settings (queue_settings.py holds them durably): a
hash per queue that claim_due.lua reads, so that no run on any host claims from a paused
queue, with no flag of its own. A queue whose hash Redis lost (a restart without persistence,
a FLUSHALL, a failover to a replica behind) is put back from the table before it is claimed
from: a missing hash never reads as "running".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources

import redis

from .clusters import is_cluster
from .keys import flow_key, starts_key, text
from .queue_settings import RUNNING, QueueFlow, flows
from .table import Table

# How long after its claim a job of a rate-limited queue may still start: its grant counts
# for the rate's period plus this, and a run that could not start it by then hands it back,
# so that no window of start times holds more than the rate allows.
START_SLACK = 0.1


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

    def paused(self, queues: Sequence[str]) -> set[str]:
        """Those of `queues` Redis says are paused (one it lost the settings of is not here)."""
        return {queue for queue, flow in self.read(queues).items() if flow and flow.paused}


def settings_of(table: Table, flow: Flow, queue: str) -> QueueFlow:
    """The queue's flow settings as Redis mirrors them, put back from the table first if
    Redis lost them."""
    found = flow.read([queue])[queue]
    return found if found is not None else restore(table, flow, [queue])[queue]


def restore(table: Table, flow: Flow, queues: Sequence[str]) -> dict[str, QueueFlow]:
    """Put the queues' settings back into Redis from the table (a queue without a row: its
    defaults), then return what Redis holds: a change mirrored meanwhile wins."""
    kept = flows(table, queues)
    flow.mirror({queue: kept.get(queue, RUNNING) for queue in queues})
    found = flow.read(queues)
    return {queue: found[queue] or kept.get(queue, RUNNING) for queue in queues}


def _field(value: float | None) -> str:
    return "" if value is None else repr(value)


FIELDS = ["version", "paused_at", "resumed_at", "rate_count", "rate_period"]
Field = bytes | str | None


def _parsed(
    version: Field, paused_at: Field, resumed_at: Field, count: Field, period: Field
) -> QueueFlow | None:
    if version is None or paused_at is None:
        return None
    rate_count = int(text(count)) if count else None
    return QueueFlow(
        _time(paused_at), _time(resumed_at), int(text(version)), rate_count, _time(period)
    )


def _time(value: bytes | str | None) -> float | None:
    return float(text(value)) if value else None
