"""The horizon: how far ahead of now a queue's schedule holds its pending jobs.

Redis holds each of a queue's pending jobs due by its horizon's limit; a job due later lives
in the table alone until the limit comes near it. So Redis's memory follows the jobs due in
the next hour, not the millions due in the coming months, and losing Redis costs a rebuild
of that hour. A queue's hash (keys.horizon_key):

  limit  epoch seconds. add_jobs.lua puts a job due by then on the schedule, and keeps a job
         due later off it (taking away an entry the job had), so no producer needs to know.
  walk   while the rows due by `limit` are being put on the schedule (worker/rebuilds.py):
         how far in due order (a `DueCursor` mark; "" before the first row). Absent once
         every pending row due by `limit` is there.

A queue without the hash has no horizon: every add puts its jobs on the schedule. That is
a new queue, or one whose hash Redis lost (a FLUSHALL, an eviction, a DEL, a Cluster shard
restarted empty) while its rows wait in the table, maybe beyond where any entry reaches. So
the hash's absence never says "nothing to walk": a run gives such a queue its horizon by
walking its rows from the first (worker/rebuilds.py), and a producer sets a limit without a
walk only for a queue it found without pending rows before writing its own (`start`). The
runs raise each limit as time nears it; the limit is written before the table is read, and
an add writes its row before its entry, so a row the walk does not see is one whose add saw
the new limit and put its entry itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from .keys import horizon_key, text

# A queue's limit is set `ahead` (DELAYQ_HORIZON, an hour by default) ahead of now, and
# raised again once it is less than `ahead` less a STEP of it ahead: each raise walks the rows
# due in about five minutes, a few thousand at ten million jobs due over a month.
STEP = 1 / 12


@dataclass(frozen=True)
class Horizon:
    """A queue's limit, and how far the walk of its rows due by the limit has gone: None
    when it is over, "" before its first row, else a `DueCursor` mark."""

    limit: float
    walk: str | None = None

    def needs_raising(self, now: float, ahead: float) -> bool:
        return self.walk is None and self.limit < now + ahead * (1 - STEP)


class Horizons:
    """The queues' horizons on one Redis client; a limit set here is `ahead` seconds ahead."""

    def __init__(self, client: redis.Redis, ahead: float) -> None:
        self.client = client
        self.ahead = ahead

    def read(self, queues: Sequence[str]) -> dict[str, Horizon]:
        """{queue: its horizon} of those of `queues` that have one, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.hmget(horizon_key(queue), ["limit", "walk"])
        found = {}
        for queue, (limit, walk) in zip(queues, pipe.execute(), strict=True):
            if limit is not None:
                found[queue] = Horizon(float(limit), None if walk is None else text(walk))
        return found

    def begin(self, queue: str, limit: float, walk: str) -> None:
        """Set `queue`'s limit, with its walk at `walk`: before the walk reads a row."""
        self.client.hset(horizon_key(queue), mapping={"limit": repr(limit), "walk": walk})

    def note(self, queue: str, walk: str | None) -> None:
        """The walk of `queue` has put back its rows up to the mark `walk` (None: all those
        due by the limit); written after the entries, so it never runs ahead of them."""
        if walk is None:
            self.client.hdel(horizon_key(queue), "walk")
        else:
            self.client.hset(horizon_key(queue), "walk", walk)

    def start(self, queue: str, limit: float) -> None:
        """Give `queue` the limit `limit` unless it has a horizon: only for a queue without
        pending rows, checked before its next rows are written (`Queue` does, at a client's
        first add to it), so that none of its rows can be missing from the schedule. A queue
        with pending rows and no horizon lost it with Redis's keys: a run walks it instead."""
        # HSETNX: a run that began a walk meanwhile has set a limit of its own.
        self.client.hsetnx(horizon_key(queue), "limit", repr(limit))
