"""Setting up a backlog fast, as README's "another producer" does: multi-row INSERTs of
`params`, `ext_string` and `run_at` (every other column has a default), then ZADD each id,
plus the queue name in `delay_queue_queues` so a plain `delayq run` visits it.

This is setup, not a measured figure: it lets the dispatch, idle, memory and lateness
workloads build their backlogs without depending on the speed (or health) of `q.add_many`,
which the enqueue workload measures on its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import redis

from . import baseline, env

CHUNK = 5000
SCHEDULE_KEY = "delay_queue_job"
QUEUES_KEY = "delay_queue_queues"


def load(method: str, run_ats: Sequence[float]) -> list[int]:
    """Pending jobs calling bench.handlers.<method>, one per due time; returns their ids."""
    params = json.dumps({"class": env.HANDLERS, "method": method, "data": None})
    db = baseline.connect_mysql(env.DATABASE_URL)
    client = redis.Redis.from_url(env.redis_url("delayq"))
    ids: list[int] = []
    try:
        for start in range(0, len(run_ats), CHUNK):
            chunk = run_ats[start : start + CHUNK]
            chunk_ids = _insert(db, params, chunk)
            client.zadd(
                SCHEDULE_KEY, {str(i): due for i, due in zip(chunk_ids, chunk, strict=True)}
            )
            ids += chunk_ids
        client.sadd(QUEUES_KEY, "default")
    finally:
        db.close()
    return ids


def _insert(db: object, params: str, run_ats: Sequence[float]) -> list[int]:
    """One multi-row INSERT ... RETURNING id (MariaDB >= 10.5), ids in row order."""
    with db.cursor() as cursor:  # type: ignore[attr-defined]
        values = ",".join(cursor.mogrify("(%s, '', %s)", (params, due)) for due in run_ats)
        cursor.execute(
            f"INSERT INTO delay_queue (params, ext_string, run_at) VALUES {values} RETURNING id"
        )
        # One statement assigns increasing ids in row order.
        return sorted(int(row[0]) for row in cursor.fetchall())
