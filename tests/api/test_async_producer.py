"""connect_async(): the Queue's producer and read calls as coroutines, answering and failing
as the sync calls do, never holding the event loop, and closing every connection it opened."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis

import delayq
from delayq.ops.overview import JobFilter
from delayq.store.table.model import Job
from tests.sample_handlers.jobs import read_log
from tests.support.callers import open_transaction
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0
Call = Callable[..., Awaitable[Any]]


async def producer_scenario(call: Call, log: str) -> list[Any]:
    """Every call an async application makes, with what each returned."""
    first = await call("add", H, "record", {"log": log}, delay=60, ext="order-1", now=NOW)
    specs = [delayq.JobSpec(H, "record", {"n": n}, delay=n, ext="batch") for n in (1, 2)]
    batch = await call("add_many", specs, now=NOW)
    recurring = await call("add", H, "record", None, cron="0 9 * * *", queue="mail", now=NOW)
    replaced = await call("add", H, "record", {"n": 3}, ext="order-1", replace=True, now=NOW)
    cancelled = await call("cancel", ext="batch", now=NOW)
    attempt = await call("retry", batch[0], delay=5, now=NOW)
    upcoming = await call("peek", 5)
    return [
        first, batch, recurring, replaced, cancelled, attempt,
        await call("show", first),
        await call("history", batch[0]),
        await call("schedule_of", recurring),
        await call("list_jobs", JobFilter(), now=NOW),
        await call("status", now=NOW),
        [(entry.queue, entry.id, entry.run_at) for entry in upcoming],
        await call("due_count"),
        await call("reach"),
    ]  # fmt: skip


def start_afresh(queue: delayq.Queue) -> None:
    """Empty table (ids from 1 again) and Redis, so a second scenario sees what the first did."""
    queue.db.execute_sql(
        "TRUNCATE TABLE delay_queue" if queue.table.mysql else "DELETE FROM delay_queue"
    )
    queue.index.client.flushdb()
    queue.init()


def test_each_call_answers_as_the_sync_call_does(queue, log):
    async def sync_call(name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(queue, name)(*args, **kwargs)

    async def through_async() -> list[Any]:
        async with delayq.connect_async(queue.settings) as aq:

            async def async_call(name: str, *args: Any, **kwargs: Any) -> Any:
                return await getattr(aq, name)(*args, **kwargs)

            return await producer_scenario(async_call, log)

    by_sync = asyncio.run(producer_scenario(sync_call, log))
    start_afresh(queue)
    by_async = asyncio.run(through_async())

    assert by_async == by_sync
    assert by_async[4] == 2 and by_async[6]["data"] == {"n": 3}  # the scenario did its work


ERRORS = [
    ("add", ("billing.jobs", "run"), {}),  # outside DELAYQ_HANDLERS
    ("add", (H, "record"), {"delay": "soon"}),
    ("add", (H, "record"), {"replace": True}),
    ("add_many", ([delayq.JobSpec(H, "record", queue="no spaces")],), {}),
    ("cancel", (), {}),
    ("show", (10**6,), {}),
    ("retry", (10**6,), {}),
    ("list_jobs", (JobFilter(),), {"limit": 0}),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), ERRORS)
def test_errors_are_the_sync_calls_errors_and_write_nothing(queue, name, args, kwargs):
    with pytest.raises(delayq.DelayqError) as by_sync:
        getattr(queue, name)(*args, **kwargs)

    async def through_async() -> None:
        async with delayq.connect_async(queue.settings) as aq:
            await getattr(aq, name)(*args, **kwargs)

    with pytest.raises(delayq.DelayqError) as by_async:
        asyncio.run(through_async())

    assert type(by_async.value) is type(by_sync.value)
    assert str(by_async.value) == str(by_sync.value)
    assert Job.select().count() == 0


def test_a_database_url_delayq_cannot_read_fails_as_connect_does(queue):
    settings = queue.settings.with_overrides(database_url="postgres://db/jobs")
    with pytest.raises(delayq.ConfigError) as by_sync:
        delayq.connect(settings)

    async def through_async() -> None:
        async with delayq.connect_async(settings) as aq:
            await aq.show(1)

    with pytest.raises(delayq.ConfigError) as by_async:
        asyncio.run(through_async())

    assert str(by_async.value) == str(by_sync.value)


TICK = 0.005
MAX_LAG = 0.05
ATTEMPTS = 5  # a loaded machine may stall any process once; a blocked loop stalls every time


async def adds_beside_a_ticker(aq: delayq.AsyncQueue, count: int) -> float:
    """Start `count` adds at once beside a task that sleeps TICK in turn; the most its wake-up
    came late: a call that held the loop shows here as the time it held it."""
    lags: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            started = time.perf_counter()
            await asyncio.sleep(TICK)
            lags.append(time.perf_counter() - started - TICK)

    ticking = asyncio.create_task(ticker())
    # Due within the horizon: each add writes its row and its entry on the schedule.
    await asyncio.gather(*(aq.add(H, "echo", n, delay=1800) for n in range(count)))
    done.set()
    await ticking
    return max(lags)


def test_300_concurrent_adds_never_hold_the_event_loop(queue):
    async def attempt() -> float:
        async with delayq.connect_async(queue.settings) as aq:
            return await adds_beside_a_ticker(aq, 300)

    lags = []
    for _ in range(ATTEMPTS):
        lags.append(asyncio.run(attempt()))
        if lags[-1] < MAX_LAG:
            break
    assert min(lags) < MAX_LAG, f"the loop stalled {[round(lag * 1000) for lag in lags]} ms"
    assert Job.select().count() == 300 * len(lags)
    assert queue.index.schedule.size("default") == 300 * len(lags)


def redis_clients(url: str) -> int:
    with redis.Redis.from_url(url) as client:
        return len(client.client_list()) - 1  # not this one


def database_connections(queue: delayq.Queue, path: Path) -> int:
    """Connections to the test database: MariaDB's sessions on it, or this process's open
    files of the SQLite database."""
    if queue.table.mysql:
        sessions = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE()"
        return queue.db.execute_sql(sessions).fetchone()[0] - 1  # not the test's own
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == str(path))


def producer_threads() -> int:
    return sum(thread.name == "delayq-producer" for thread in threading.enumerate())


def test_aclose_closes_every_connection_and_thread_it_opened(queue, backend):
    db_file = Path(backend["database_url"].removeprefix("sqlite:///"))
    # SQLite keeps a closed connection's file open while another connection of the process
    # holds a lock on it: the test's own connection is closed first, so its count means that.
    queue.db.close()
    before = (redis_clients(backend["redis_url"]), database_connections(queue, db_file))

    async def use_then_close() -> tuple[delayq.AsyncQueue, tuple[int, int]]:
        aq = delayq.connect_async(queue.settings)
        await asyncio.gather(*(aq.add(H, "echo", n) for n in range(50)))
        during = (redis_clients(backend["redis_url"]), database_connections(queue, db_file))
        await aq.aclose()
        return aq, during

    # Kept referenced while counting, so what the counts see is aclose's doing, not the GC's.
    aq, during = asyncio.run(use_then_close())

    assert during[0] > before[0] and during[1] > before[1]
    wait_for(
        lambda: (
            (redis_clients(backend["redis_url"]), database_connections(queue, db_file)) == before
        ),
        10,
        f"the connections to go back to {before}",
    )
    assert producer_threads() == 0


def test_a_call_after_aclose_fails_in_one_line_and_writes_nothing(queue):
    async def add_after_close() -> None:
        async with delayq.connect_async(queue.settings) as aq:
            await aq.reach()
        await aq.aclose()  # a second close does nothing
        await aq.add(H, "echo", 1)

    with pytest.raises(delayq.DelayqError, match="^this AsyncQueue is closed; open another"):
        asyncio.run(add_after_close())
    assert Job.select().count() == 0


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_an_async_add_joins_the_callers_open_transaction(queue, backend, log):
    # `using=` passes through to the Queue's add on a producer thread: the row is the
    # caller's until it commits, and runs after.
    transaction = open_transaction("dbapi", backend["database_url"])

    async def add_in_transaction() -> list[int]:
        async with delayq.connect_async(queue.settings) as aq:
            first = await aq.add(H, "record", {"log": log, "n": 1}, using=transaction.using)
            specs = [delayq.JobSpec(H, "record", {"log": log, "n": 2})]
            return [first, *await aq.add_many(specs, using=transaction.using)]

    try:
        ids = asyncio.run(add_in_transaction())
        assert (Job.select().count(), queue.run().ran) == (0, 0)
        transaction.commit()
    finally:
        transaction.close()

    assert queue.run().succeeded == 2
    assert sorted(read_log(log)) == ["1", "2"]
    assert [job.status for job in Job.select().where(Job.id.in_(ids))] == [10, 10]
