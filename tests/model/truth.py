"""What the table says, read with plain SQL (not delayq's queries, whose answers are under
test), and what Redis holds about one row, for a failure's message."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import peewee
import redis

from delayq.config import DEFAULT_QUEUE
from delayq.store.index.keys import INDEXED_KEY, QUEUES_KEY, horizon_key, schedule_key

PENDING, RUNNING = 1, 2


@dataclass(frozen=True)
class Row:
    """A pending row as the checks need it."""

    id: int
    queue: str
    run_at: float
    lock: str | None


@dataclass(frozen=True)
class Flow:
    """A queue's settings as the table holds them."""

    paused: bool
    rate_limited: bool


class Truth:
    """Reads of the table on a Queue's database connection, each one statement."""

    def __init__(self, db: peewee.Database) -> None:
        self.db = db
        self.mark = db.param

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return list(self.db.execute_sql(sql.replace("%s", self.mark), args).fetchall())

    def pending(self) -> list[Row]:
        """Every pending row, in due order (ties by id)."""
        found = [
            Row(int(job_id), str(queue), float(run_at), _lock(params))
            for job_id, queue, run_at, params in self._rows(
                "SELECT id, queue, run_at, params FROM delay_queue WHERE status = %s", (PENDING,)
            )
        ]
        return sorted(found, key=lambda row: (row.run_at, row.id))

    def count_by_queue(self, status: int) -> Counter[str]:
        return Counter(
            {
                str(queue): int(count)
                for queue, count in self._rows(
                    "SELECT queue, COUNT(*) FROM delay_queue WHERE status = %s GROUP BY queue",
                    (status,),
                )
            }
        )

    def due_of(self, ids: list[int]) -> dict[int, float]:
        """{id: run_at} of those of `ids` that exist."""
        if not ids:
            return {}
        marks = ", ".join(["%s"] * len(ids))
        rows = self._rows(f"SELECT id, run_at FROM delay_queue WHERE id IN ({marks})", tuple(ids))
        return {int(job_id): float(run_at) for job_id, run_at in rows}

    def ids(self) -> list[int]:
        return sorted(int(job_id) for (job_id,) in self._rows("SELECT id FROM delay_queue"))

    def flows(self) -> dict[str, Flow]:
        rows = self._rows("SELECT queue, paused_at, rate_count FROM delay_queue_settings")
        return {
            str(queue): Flow(paused_at is not None, rate_count is not None)
            for queue, paused_at, rate_count in rows
        }


def _lock(params: str) -> str | None:
    try:
        key = json.loads(params).get("lock")
    except (ValueError, AttributeError):
        return None
    return key if isinstance(key, str) else None


# What Redis holds about a pending row, as `cause_of` names it.
UNVISITED = "its entry is on the schedule of a queue runs do not visit"
UNKNOWN = "neither its entry nor its queue is known to Redis"
LATER = "its entry is later than its row"
DUE = "its entry is there, at or before its row's time"
NO_HORIZON = "it has no entry and its queue no horizon"
BEYOND = "it has no entry and is due after its queue's horizon limit"
LOST = "it has no entry though due within its queue's horizon limit"


def cause_of(client: redis.Redis, row: Row) -> str:
    """Which of the above holds for `row`."""
    score = client.zscore(schedule_key(row.queue), str(row.id))
    registered = row.queue == DEFAULT_QUEUE or client.sismember(QUEUES_KEY, row.queue)
    if score is not None:
        if not registered:
            return UNVISITED
        return LATER if score > row.run_at + 1e-3 else DUE
    if not registered:
        return UNKNOWN
    limit = client.hget(horizon_key(row.queue), "limit")
    if limit is None:
        return NO_HORIZON
    return BEYOND if row.run_at > float(limit) else LOST


def what_redis_holds(client: redis.Redis, row: Row) -> str:
    """The row's schedule entry, its queue's registration and horizon, and the completeness
    marker: what a failure's reader needs to tell one cause from another."""
    pipe = client.pipeline(transaction=False)
    pipe.zscore(schedule_key(row.queue), str(row.id))
    pipe.sismember(QUEUES_KEY, row.queue)
    pipe.hgetall(horizon_key(row.queue))
    pipe.exists(INDEXED_KEY)
    score, registered, horizon, complete = pipe.execute()
    limit = horizon.get(b"limit")
    return (
        f"entry {'none' if score is None else repr(score)}, "
        f"queue {'registered' if registered else 'NOT registered'}, "
        f"horizon limit {'none' if limit is None else limit.decode()}"
        f"{' (walk under way)' if b'walk' in horizon else ''}, "
        f"schedule {'complete' if complete else 'NOT marked complete'}"
    )
