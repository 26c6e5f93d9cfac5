"""Filling the scale workload's table: pending jobs through `Queue.add_many` (timed: that is a
figure), finished rows through multi-row INSERTs of the benchmark's own (setup, not timed),
and what the table then holds: rows by status, InnoDB's data and index sizes.

Pending jobs are due uniformly 1 to 30 days ahead; finished rows are 90 % success and 10 %
failed, last changed uniformly over the past 60 days, each run a few seconds before it
finished and added up to a week before it ran. Both are dealt over the same four queues.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import delayq
from delayq.store.table.model import Status

from . import env
from .servers import PrivateMariaDB

QUEUES = ("default", "mail", "sms", "billing")
BATCH = 10_000
DAY = 86400.0
HANDLER = (env.HANDLERS, "incr")


@dataclass
class Added:
    """add_many's timing: the jobs of each batch and the seconds its call took."""

    batches: list[tuple[int, float]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)

    @property
    def jobs(self) -> int:
        return sum(count for count, _ in self.batches)

    def rate(self) -> float:
        return self.jobs / sum(spent for _, spent in self.batches)

    def last_tenth_rate(self) -> float:
        """Jobs/s over the batches that added the last tenth of the jobs (at least one)."""
        wanted, count, spent = max(1, self.jobs // 10), 0, 0.0
        for jobs, seconds in reversed(self.batches):
            count, spent = count + jobs, spent + seconds
            if count >= wanted:
                break
        return count / spent


def add_pending(queue: delayq.Queue, n: int, seed: int, keep_ids: bool = False) -> Added:
    """n pending jobs through add_many, BATCH at a time; only the calls are timed."""
    pick = random.Random(seed)
    added = Added()
    started = time.monotonic()
    for start in range(0, n, BATCH):
        now = time.time()
        specs = [
            delayq.JobSpec(
                *HANDLER,
                {"order": i},
                at=now + DAY * (1 + 29 * pick.random()),
                queue=QUEUES[i % len(QUEUES)],
            )
            for i in range(start, min(n, start + BATCH))
        ]
        began = time.perf_counter()
        ids = queue.add_many(specs)
        added.batches.append((len(specs), time.perf_counter() - began))
        if keep_ids:
            added.ids += ids
        if _tenth(start // BATCH, n):
            elapsed = time.monotonic() - started
            env.log(f"scale: add_many {start + len(specs):,}/{n:,} jobs ({elapsed:.0f}s)")
    return added


def _tenth(batch: int, n: int) -> bool:
    """Whether the batch just done ends a tenth of n rows (for the progress log)."""
    batches = -(-n // BATCH)
    return batches >= 10 and (batch + 1) % (batches // 10) == 0


def remove_added(
    queue: delayq.Queue, server: PrivateMariaDB, database: str, ids: list[int]
) -> None:
    """Take jobs add_pending added back out: their rows and their schedule entries."""
    conn = server.connect(database)
    try:
        with conn.cursor() as cursor:
            for start in range(0, len(ids), BATCH):
                chunk = ids[start : start + BATCH]
                cursor.execute(
                    "SELECT id, queue FROM delay_queue WHERE id IN %s AND status = %s",
                    (chunk, int(Status.PENDING)),
                )
                by_queue: dict[str, list[int]] = {}
                for job_id, name in cursor.fetchall():
                    by_queue.setdefault(name, []).append(int(job_id))
                for name, members in by_queue.items():
                    queue.index.schedule.remove(name, members)
                cursor.execute("DELETE FROM delay_queue WHERE id IN %s", (chunk,))
    finally:
        conn.close()


def insert_finished(
    server: PrivateMariaDB, database: str, n: int, seed: int, oldest: float, newest: float
) -> None:
    """n finished rows changed between `oldest` and `newest` days ago, INSERTed directly."""
    pick = random.Random(seed)
    now = time.time()
    conn = server.connect(database)
    started = time.monotonic()
    try:
        with conn.cursor() as cursor:
            cursor.execute("SET time_zone = '+00:00'")  # FROM_UNIXTIME gives UTC, as delayq's
            for done, values in enumerate(_finished_rows(pick, n, now, oldest, newest)):
                cursor.execute(
                    "INSERT INTO delay_queue "
                    "(params, message, status, created, modified, run_at, queue) VALUES " + values
                )
                if _tenth(done, n):
                    elapsed = time.monotonic() - started
                    env.log(f"scale: finished rows {(done + 1) * BATCH:,}/{n:,} ({elapsed:.0f}s)")
    finally:
        conn.close()


def _finished_rows(
    pick: random.Random, n: int, now: float, oldest: float, newest: float
) -> Iterator[str]:
    """VALUES lists of BATCH rows each; every value is a number or a fixed literal."""
    success, failed = int(Status.SUCCESS), int(Status.FAILED)
    declined = "'RuntimeError: card declined'"
    rows: list[str] = []
    for i in range(n):
        params = f'{{"class": "{HANDLER[0]}", "method": "{HANDLER[1]}", "data": {{"order": {i}}}}}'
        ok = pick.random() < 0.9
        modified = now - DAY * (newest + (oldest - newest) * pick.random())
        run_at = modified - 5 * pick.random()
        created = run_at - 7 * DAY * pick.random()
        rows.append(
            f"('{params}',{'NULL' if ok else declined},"
            f"{success if ok else failed},FROM_UNIXTIME({created:.0f}),"
            f"FROM_UNIXTIME({modified:.0f}),{run_at:.3f},'{QUEUES[i % len(QUEUES)]}')"
        )
        if len(rows) == BATCH:
            yield ",".join(rows)
            rows = []
    if rows:
        yield ",".join(rows)


def counts(server: PrivateMariaDB, database: str) -> dict[str, int]:
    """Rows by status word."""
    conn = server.connect(database)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT status, COUNT(*) FROM delay_queue GROUP BY status")
            return {Status(status).word: int(count) for status, count in cursor.fetchall()}
    finally:
        conn.close()


def sizes(server: PrivateMariaDB, database: str) -> dict[str, int]:
    """InnoDB's data_length and index_length of delay_queue, after fresh statistics."""
    conn = server.connect(database)
    try:
        with conn.cursor() as cursor:
            cursor.execute("ANALYZE TABLE delay_queue")
            cursor.fetchall()
            cursor.execute(
                "SELECT data_length, index_length FROM information_schema.TABLES "
                "WHERE table_schema = %s AND table_name = 'delay_queue'",
                (database,),
            )
            data, index = cursor.fetchone()
            return {"data_bytes": int(data), "index_bytes": int(index)}
    finally:
        conn.close()


def middle_pending_id(server: PrivateMariaDB, database: str) -> int:
    """A pending job's id from the middle of the table: what `show` and the job page open."""
    conn = server.connect(database)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT MIN(id), MAX(id) FROM delay_queue")
            low, high = cursor.fetchone()
            cursor.execute(
                "SELECT id FROM delay_queue WHERE id >= %s AND status = %s ORDER BY id LIMIT 1",
                ((int(low) + int(high)) // 2, int(Status.PENDING)),
            )
            row = cursor.fetchone() or (low,)
            return int(row[0])
    finally:
        conn.close()


def push_back_due(server: PrivateMariaDB, database: str, within: float) -> int:
    """Pending jobs of a kept table that fell due (or will within `within` s) since it was
    loaded move 30 days on, so that "nothing due" stays true; how many moved."""
    conn = server.connect(database)
    try:
        with conn.cursor() as cursor:
            return int(
                cursor.execute(
                    "UPDATE delay_queue SET run_at = run_at + %s WHERE status = %s AND run_at < %s",
                    (30 * DAY, int(Status.PENDING), time.time() + within),
                )
            )
    finally:
        conn.close()
