"""The "one query per step" baseline: what a straightforward implementation of delayq's design
does, with plain pymysql + redis-py on the same `delay_queue` table and sorted set.

Adding a job is one INSERT (autocommit) and one ZADD. Running due jobs is, per due id: SELECT
the row, call the job, UPDATE its status, ZREM it. `python -m bench.baseline drain` runs that
loop in its own process, configured by the same DELAYQ_* variables as `delayq run`.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import pymysql
import redis

SCHEDULE_KEY = "delay_queue_job"
BATCH = 500
INSERT_SQL = (
    "INSERT INTO delay_queue (params, ext_string, queue, run_at, status, retry_times, "
    "created, modified) VALUES (%s, %s, %s, %s, 1, 0, %s, %s)"
)


def connect_mysql(url: str) -> pymysql.Connection:
    parts = urlsplit(url)
    return pymysql.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        database=parts.path.lstrip("/"),
        charset="utf8mb4",
        autocommit=True,
    )


def add(
    db: pymysql.Connection, client: redis.Redis, class_path: str, method: str, run_at: float
) -> int:
    """One job: one INSERT, committed, then one ZADD."""
    params = json.dumps({"class": class_path, "method": method, "data": None})
    created = datetime.fromtimestamp(time.time())
    with db.cursor() as cursor:
        cursor.execute(INSERT_SQL, (params, "", "default", run_at, created, created))
        job_id = int(cursor.lastrowid)
    client.zadd(SCHEDULE_KEY, {str(job_id): run_at})
    return job_id


def drain(db: pymysql.Connection, client: redis.Redis) -> int:
    """Run every due job, one statement per step; returns how many ran."""
    ran = 0
    handlers: dict[tuple[str, str], Callable[[Any], Any]] = {}
    while True:
        members = client.zrangebyscore(SCHEDULE_KEY, "-inf", time.time(), start=0, num=BATCH)
        if not members:
            return ran
        for member in members:
            ran += run_one(db, client, member, handlers)


def run_one(
    db: pymysql.Connection,
    client: redis.Redis,
    member: bytes,
    handlers: dict[tuple[str, str], Callable[[Any], Any]],
) -> int:
    """SELECT the row, call the job, UPDATE the status, ZREM the id."""
    with db.cursor() as cursor:
        cursor.execute("SELECT params FROM delay_queue WHERE id = %s AND status = 1", (member,))
        row = cursor.fetchone()
        if row is not None:
            payload = json.loads(row[0])
            status, message = call(handlers, payload)
            cursor.execute(
                "UPDATE delay_queue SET status = %s, message = %s, modified = NOW() WHERE id = %s",
                (status, message, member),
            )
    client.zrem(SCHEDULE_KEY, member)
    return 0 if row is None else 1


def call(
    handlers: dict[tuple[str, str], Callable[[Any], Any]], payload: dict[str, Any]
) -> tuple[int, str]:
    key = (payload["class"], payload["method"])
    try:
        if key not in handlers:
            handlers[key] = getattr(importlib.import_module(key[0]), key[1])
        handlers[key](payload.get("data"))
    except Exception as exc:  # noqa: BLE001 - a job's error fails the job, not the loop
        return 20, f"{type(exc).__name__}: {exc}"[:2000]
    return 10, ""


def main(argv: list[str]) -> int:
    if argv != ["drain"]:
        print("usage: python -m bench.baseline drain", file=sys.stderr)
        return 2
    db = connect_mysql(os.environ["DELAYQ_DATABASE_URL"])
    client = redis.Redis.from_url(os.environ["DELAYQ_REDIS_URL"])
    drain(db, client)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
