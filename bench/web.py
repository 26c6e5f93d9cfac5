"""The web page at scale: `delayq web`'s overview and job search against a table of 1M rows
on MariaDB, each answer timed through the whole Starlette app (routing, queries, templates),
median of several requests, against the issue's 300 ms.

    python -m bench.web [--rows 1000000] [--database-url URL] [--redis-url URL]

The rows are loaded with multi-row INSERTs as bench/loader.py does (setup, not measured): 90 %
succeeded, 5 % failed, 3 % pending, 2 % cancelled, over four queues and 30 days of
`modified`, half of them with an `ext`. It TRUNCATEs `delay_queue` of the database it is
given and FLUSHDBs the Redis database it is given, so point it at databases of its own.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone

import delayq
from delayq.config import Settings
from delayq.store.table.counts import Counts
from delayq.store.table.model import Status

from . import baseline, env

LIMIT_MS = 300.0
CHUNK = 10_000
REQUESTS = 7
QUEUES = ("default", "mail", "sms", "billing")
HANDLER = "bench.handlers"
DAY = 86400.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.web", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--database-url", default=env.DATABASE_URL)
    parser.add_argument("--redis-url", default=env.redis_url("delayq"))
    parser.add_argument("--keep", action="store_true", help="reuse the rows already loaded")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from starlette.testclient import TestClient

    from delayq.web import create_app

    settings = Settings(database_url=args.database_url, redis_url=args.redis_url).validate()
    queue = delayq.connect(settings, handlers=[HANDLER])
    queue.init()
    if not args.keep:
        load(queue, args.database_url, args.rows, time.time())
    client = TestClient(create_app(queue))
    timings = {path: time_requests(client, path) for path in paths(queue)}
    missed = {path: ms for path, ms in timings.items() if ms > LIMIT_MS}
    for path, ms in timings.items():
        print(f"{ms:8.1f} ms  {path}{'  MISS' if path in missed else ''}", flush=True)
    print(json.dumps({"rows": args.rows, "median_ms": timings}, sort_keys=True))
    queue.close()
    return 1 if missed else 0


def paths(queue: delayq.Queue) -> list[str]:
    """The overview in both windows and searches an operator makes, over the loaded rows."""
    newest = int(queue.db.execute_sql("SELECT MAX(id) FROM delay_queue").fetchone()[0])
    return [
        "/",
        "/?window=day",
        "/jobs",
        "/jobs?status=failed",
        "/jobs?status=failed&queue=sms",
        "/jobs?queue=billing",
        f"/jobs?ext=order:{newest // 3 // 2 * 2}",
        "/jobs?since=1h",
        f"/jobs?handler={HANDLER}",
        f"/jobs?before_id={newest // 2}",
        f"/jobs?status=failed&before_id={newest // 2}",
        f"/jobs/{newest // 2}",
    ]


def time_requests(client: object, path: str) -> float:
    """Median milliseconds of REQUESTS answers to `path` (after one untimed warm-up)."""
    get = client.get  # type: ignore[attr-defined]
    if get(path).status_code != 200:
        raise SystemExit(f"bench.web: {path} did not answer 200")
    spent = []
    for _ in range(REQUESTS):
        started = time.perf_counter()
        get(path)
        spent.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(spent), 1)


def load(queue: delayq.Queue, database_url: str, rows: int, now: float) -> None:
    queue.db.execute_sql("TRUNCATE TABLE delay_queue")
    Counts(queue.table).correct()  # a TRUNCATE fires no trigger: the kept counts start at 0
    queue.index.client.flushdb()
    env.log(f"bench.web: loading {rows} rows")
    started = time.perf_counter()
    db = baseline.connect_mysql(database_url)
    pending: dict[str, dict[str, float]] = {name: {} for name in QUEUES}
    try:
        with db.cursor() as cursor:
            for batch in _batches(rows, now):
                values = ",".join(cursor.mogrify("(%s,%s,%s,%s,%s,%s)", row) for row in batch)
                cursor.execute(
                    "INSERT INTO delay_queue "
                    f"(params, ext_string, status, queue, run_at, modified) VALUES {values}"
                )
                first = cursor.lastrowid  # one statement: consecutive ids from this one
                for offset, row in enumerate(batch):
                    if row[2] == Status.PENDING:
                        pending[row[3]][str(first + offset)] = row[4]
    finally:
        db.close()
    for name, members in pending.items():
        for start in range(0, len(members), CHUNK):
            part = dict(list(members.items())[start : start + CHUNK])
            queue.index.schedule.add_many(name, [(int(key), due) for key, due in part.items()])
    queue.index.registry.register(list(QUEUES))
    queue.init()
    env.log(f"bench.web: loaded in {time.perf_counter() - started:.0f}s")


def _batches(rows: int, now: float) -> Iterator[list[tuple[object, ...]]]:
    pick = random.Random(15)
    params = json.dumps({"class": HANDLER, "method": "incr", "data": {"n": 1}})
    batch: list[tuple[object, ...]] = []
    for n in range(rows):
        roll = pick.random()
        status = (
            Status.SUCCESS
            if roll < 0.90
            else Status.FAILED
            if roll < 0.95
            else Status.PENDING
            if roll < 0.98
            else Status.CANCELLED
        )
        # Older ids changed longer ago, as a table that has run for a month.
        changed = now - 30 * DAY * (1 - n / rows) - pick.random() * 60
        due = now + pick.random() * DAY if status == Status.PENDING else changed
        ext = f"order:{n}" if n % 2 == 0 else ""
        stamp = datetime.fromtimestamp(min(changed, now), timezone.utc).replace(tzinfo=None)
        batch.append((params, ext, int(status), QUEUES[n % len(QUEUES)], due, stamp))
        if len(batch) == CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch


if __name__ == "__main__":
    sys.exit(main())
