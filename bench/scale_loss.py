"""The scale workload's Redis loss: jobs due now, FLUSHALL, then two `delayq run --loop` a
second apart. How soon each starts a due job, how soon the index is whole again, what Redis
then holds a job, and the bare pipelined ZADD the rebuild cannot beat.
"""

from __future__ import annotations

import threading
import time

import redis

import delayq
from delayq.store.index.keys import INDEXED_KEY

from . import env
from .scale_load import QUEUES
from .scale_measure import RECORD, Site, mib, records, runner, wait_quietly
from .servers import peak_rss_kib

LOSS_JOBS = 200
LOSS_BATCH = "20"  # small claims, so that the second runner finds jobs left to take
ZADD_CHUNK = 1000


def redis_loss(site: Site) -> dict[str, float | None]:
    """LOSS_JOBS due now, FLUSHALL, then `run --loop` and a second one a second later: how
    soon each starts a due job, how soon the index is whole again, and what Redis holds."""
    record = site.record_file("loss")
    with site.queue() as queue:
        queue.add_many(
            delayq.JobSpec(*RECORD, {"sleep": 0.05}, queue=QUEUES[i % len(QUEUES)])
            for i in range(LOSS_JOBS)
        )
    pending = pending_rows(site)
    site.redis.client().flushall()
    before = site.redis.used_memory()
    timeout = 300 + pending / 5_000
    result: dict[str, float | None] = {}
    first_at = time.time()
    with runner(site, record, DELAYQ_BATCH_SIZE=LOSS_BATCH) as first:
        indexed = IndexWatch(site.redis.client(site.redis_db), timeout)
        time.sleep(1.0)
        second_at = time.time()
        with runner(site, record, DELAYQ_BATCH_SIZE=LOSS_BATCH) as second:
            complete_at = indexed.wait()
            result["index_complete_s"] = None if complete_at is None else complete_at - first_at
            wait_quietly(lambda: len(records(record)) >= LOSS_JOBS, timeout)
            result["runner_peak_rss_mib"] = mib(peak_rss_kib(first.pid))
            after = site.redis.used_memory()
        ran = records(record)
    result["first_job_s"] = _first_start(ran, first.pid, first_at)
    result["second_runner_first_job_s"] = _first_start(ran, second.pid, second_at)
    result["jobs_run"] = len(ran)
    # What the rebuild put back: the pending rows due within each queue's horizon.
    with site.queue() as queue:
        entries = schedule_entries(queue) + len(ran)
    result["pending_rows"] = pending
    result["index_entries"] = entries
    seconds = result["index_complete_s"]
    result["index_entries_per_s"] = entries / seconds if seconds else None
    # The rows beyond the horizon need no entry: the whole index covers every pending row.
    result["index_pending_rows_per_s"] = pending / seconds if seconds else None
    result["redis_bytes_per_job_rebuilt"] = (after - before) / pending
    result["bare_zadd_entries_per_s"] = bare_zadd(site, pending)
    return result


class IndexWatch:
    """When delay_queue_indexed appears, polled every 20 ms by a thread from now on."""

    def __init__(self, client: redis.Redis, timeout: float) -> None:
        self.client = client
        self.timeout = timeout
        self.seen_at: float | None = None
        self.thread = threading.Thread(target=self._poll, name="bench-indexed", daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.client.exists(INDEXED_KEY):
                self.seen_at = time.time()
                return
            time.sleep(0.02)

    def wait(self) -> float | None:
        """The time it appeared, or None if it did not within the timeout."""
        self.thread.join()
        if self.seen_at is None:
            env.log(f"scale: the index was not complete within {self.timeout:.0f}s")
        return self.seen_at


def schedule_entries(queue: delayq.Queue) -> int:
    """Entries on every queue's schedule."""
    return sum(queue.index.schedule.size(name) for name in queue.index.registry.known_queues())


def pending_rows(site: Site) -> int:
    conn = site.mariadb.connect(site.database)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM delay_queue WHERE status = 1")
            return int(cursor.fetchone()[0])
    finally:
        conn.close()


def _first_start(ran: list[tuple[int, float, float, int]], pid: int, since: float) -> float | None:
    starts = [started for who, started, _, _ in ran if who == pid]
    return min(starts) - since if starts else None


def bare_zadd(site: Site, n: int) -> float:
    """n entries ZADDed ZADD_CHUNK a command, ten commands a round trip, into a scratch key
    of another Redis db: what the rebuild's own writes to Redis cannot beat."""
    client = site.redis.client(2)
    key = "bench:scale:zadd"
    base = time.time()
    started = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    for start in range(0, n, ZADD_CHUNK):
        pipe.zadd(key, {str(i): base + i for i in range(start, min(n, start + ZADD_CHUNK))})
        if len(pipe) == 10:
            pipe.execute()
    pipe.execute()
    spent = time.perf_counter() - started
    client.unlink(key)
    return n / spent
