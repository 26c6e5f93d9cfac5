"""The registry: what delayq notes about itself in Redis — the names of every queue ever
indexed (so that a plain `run` visits them), the record of the last run (for `delayq
status`), the marker that says the schedule holds every pending row of the table, and which
server each queue's keys were last seen on, and the database server the table was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import cast

import redis
from redis.cluster import RedisCluster
from redis.lock import Lock

from ...config import DEFAULT_QUEUE
from .clusters import is_cluster
from .keys import (
    COUNTS_CHECKED_KEY,
    DATABASE_FAILOVER_KEY,
    DATABASE_SERVER_KEY,
    INDEXED_KEY,
    JOURNAL_TTL,
    LAST_RUN_KEY,
    QUEUES_KEY,
    REBUILD_KEY,
    REBUILDING_KEY,
    queue_key,
    text,
)

# A rebuild's lock lapses this long after its holder last renewed it (between two batches).
REBUILD_LOCK_TTL = 30.0
# The field of the rebuild's hash that holds when it began (each queue's walk is noted in its
# horizon: store/index/horizons.py).
BEGUN = "(begun)"


@dataclass(frozen=True)
class ServerNote:
    """The server a queue's keys were last seen on, by its replication id, and when; and
    when a run last found them on a new one (None: never)."""

    replication_id: str
    seen: float
    moved: float | None


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
        if names := list(queues):
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
        """Record that every pending row of the table is on the schedule; a rebuild's marks
        go first, so a marker deleted later by hand starts a rebuild from the beginning."""
        self.client.delete(REBUILD_KEY)
        self.client.set(INDEXED_KEY, "1")

    def rebuild_lock(self) -> Lock:
        """The lock of the one run that rebuilds the schedule at a time; it lapses unless
        renewed, so a rebuild whose run died is taken over."""
        return Lock(self.client, REBUILDING_KEY, timeout=REBUILD_LOCK_TTL, thread_local=False)

    def rebuild_begun(self, now: float) -> tuple[float, bool]:
        """When the rebuild under way began, and whether it begins now (at `now`)."""
        fresh = bool(self.client.hsetnx(REBUILD_KEY, BEGUN, repr(now)))
        return float(self.client.hget(REBUILD_KEY, BEGUN) or now), fresh

    def take_counts_check(self, every: float) -> bool:
        """Whether this run checks the kept counts now: the first to ask in each `every`."""
        return bool(self.client.set(COUNTS_CHECKED_KEY, "1", nx=True, ex=int(every)))

    def sweep_mark(self, queue: str) -> str:
        """Where the last sweep for lost entries stopped in `queue`'s overdue rows (a
        `DueCursor` mark), or "" to begin from the oldest."""
        return text(self.client.get(queue_key(queue, "swept")) or "")

    def note_sweep(self, queue: str, mark: str | None) -> None:
        """The next sweep begins at `mark` (None: from the oldest again)."""
        if mark is None:
            self.client.delete(queue_key(queue, "swept"))
        else:
            self.client.set(queue_key(queue, "swept"), mark, ex=int(JOURNAL_TTL))

    def replication_id(self, queue: str) -> str | None:
        """The replication id of the server that holds `queue`'s keys, or None where INFO is
        refused. A replica promoted to primary starts a history of its own under a new id."""
        try:
            if is_cluster(self.client):
                cluster = cast(RedisCluster, self.client)
                node = cluster.get_node_from_key(queue_key(queue, "server"))
                info = cluster.info("replication", target_nodes=node)
            else:
                info = self.client.info("replication")
        except redis.ResponseError:  # a managed Redis that renames or refuses INFO
            return None
        found = info.get("master_replid")
        return str(found) if found else None

    def server_note(self, queue: str) -> ServerNote | None:
        fields = {
            text(key): text(value)
            for key, value in self.client.hgetall(queue_key(queue, "server")).items()
        }
        try:
            moved = fields.get("moved")
            return ServerNote(
                fields["replication_id"], float(fields["seen"]), float(moved) if moved else None
            )
        except (KeyError, ValueError):  # none yet (or not one delayq wrote)
            return None

    def note_server(self, queue: str, note: ServerNote) -> None:
        self.client.hset(
            queue_key(queue, "server"),
            mapping={
                "replication_id": note.replication_id,
                "seen": repr(note.seen),
                "moved": "" if note.moved is None else repr(note.moved),
            },
        )

    def swap_database_server(self, identity: str) -> str | None:
        """Note `identity` as the database server the table is on; the one noted before (None:
        none was). One atomic GETSET, so of the runs that meet a new server, one hears of the
        old."""
        previous = self.client.getset(DATABASE_SERVER_KEY, identity)
        return None if previous is None else text(previous)

    def note_database_failover(self, found: Mapping[str, str]) -> None:
        """Keep what the check after the last database failover found, for `delayq doctor`."""
        with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(DATABASE_FAILOVER_KEY)
            pipe.hset(DATABASE_FAILOVER_KEY, mapping={key: value for key, value in found.items()})
            pipe.expire(DATABASE_FAILOVER_KEY, int(JOURNAL_TTL))  # as long as its journal lives
            pipe.execute()

    def database_failover(self) -> dict[str, str]:
        """What `note_database_failover` kept; empty when no failover was found."""
        fields = self.client.hgetall(DATABASE_FAILOVER_KEY)
        return {text(key): text(value) for key, value in fields.items()}
