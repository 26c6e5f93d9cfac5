"""What delayq keeps beside the table (the registry of queues, each queue's horizon, the
sweep's place in a backlog) never outranks it: a Redis that lost some or all of it, or a
process that remembers having written it, loses no job and delays none past the bounds
docs/internals.md gives."""

from __future__ import annotations

import dataclasses
import time

import pytest

from delayq import JobSpec
from delayq.store.index.keys import QUEUES_KEY, horizon_key, schedule_key
from delayq.store.table import counts
from delayq.store.table.counts import Counts
from delayq.worker import recovery
from delayq.worker.rebuilds import Rebuild
from tests.conftest import mysql_connect, with_kept_counts

H = "tests.sample_handlers.jobs"
HOUR = 3600.0


@pytest.fixture
def make(make_queue):
    """Queues with the shipped settings, each its own client (a web application's, a runner)."""
    return lambda: make_queue()


def schedule(queue, name: str = "default") -> dict[int, float]:
    entries = queue.index.client.zrange(schedule_key(name), 0, -1, withscores=True)
    return {int(member): score for member, score in entries}


def status(queue, job_id: int) -> str:
    return queue.show(job_id)["status"]


def test_a_long_lived_producers_job_runs_after_redis_lost_its_data(make, log):
    """The producer noted `mail` in a Redis that is gone; at the rebuild `mail` had no
    pending row. Its next job must still be found and run."""
    producer, runner = make(), make()
    producer.add(H, "record", {"log": log, "n": 1}, queue="mail")
    assert runner.run().succeeded == 1
    runner.index.client.flushdb()
    runner.run()  # the rebuild, with nothing pending in mail

    job_id = producer.add(H, "record", {"log": log, "n": 2}, queue="mail")

    assert runner.run().succeeded == 1
    assert status(producer, job_id) == "success"


def test_a_foreign_producers_queue_is_found_from_the_table(backend, make, log):
    """A producer in another language notes its queue once (SADD); after Redis lost that,
    its rows (INSERT + ZADD) are still found, from the table."""
    runner = make()
    runner.index.client.flushdb()
    runner.run()  # the rebuild: nothing pending anywhere
    foreign = runner.add(H, "record", {"log": log}, queue="php")  # stands for the INSERT
    runner.index.client.srem(QUEUES_KEY, "php")  # as if it never noted the queue again

    assert runner.run().succeeded == 1
    assert status(runner, foreign) == "success"
    assert "php" in {name.decode() for name in runner.index.client.smembers(QUEUES_KEY)}


def test_a_redis_flushed_during_a_horizon_walk_stops_nothing(make, log, monkeypatch):
    """The walk's lock goes with Redis's data: the run takes the rebuild up, it does not end
    with "Cannot reacquire a lock that's no longer owned"."""
    from delayq.worker import rebuilds

    monkeypatch.setattr(rebuilds, "BATCH", 20)
    queue = make()
    now = time.time()
    later = [JobSpec(H, "record", {"log": log}, at=now + HOUR + n * 10) for n in range(100)]
    ids = queue.add_many(later, now=now)
    walking_at = now + 15 * 60  # the limit is near: the run raises it and walks
    batches = 0

    def flush_midway() -> None:
        nonlocal batches
        batches += 1
        if batches == 2:
            queue.index.client.flushdb()

    Rebuild(queue.table, queue.index).due_first(lambda: walking_at, flush_midway)

    due_by_then = {
        job_id for n, job_id in enumerate(ids) if now + HOUR + n * 10 <= walking_at + HOUR
    }
    assert due_by_then <= set(schedule(queue))
    assert queue.run(now=now + 2 * HOUR).succeeded == len(ids)


def test_a_lost_horizon_is_walked_again_from_the_first_row(make, log):
    """A queue's horizon hash gone alone (an eviction, a DEL) while its rows wait beyond the
    old limit: the next limit is set by a walk, so the rows up to it reach the schedule."""
    queue = make()
    now = time.time()
    ids = queue.add_many(
        [JobSpec(H, "record", {"log": log}, at=now + HOUR + n * 30) for n in range(10)], now=now
    )
    assert schedule(queue) == {}
    queue.index.client.delete(horizon_key("default"))

    queue.run(now=now + 240)  # the new limit: now + 240 s + an hour

    assert set(ids[:8]) <= set(schedule(queue))  # due by then: on the schedule
    assert queue.run(now=now + HOUR + 7 * 30).succeeded == 8  # each on time


def test_a_new_queues_first_limit_is_on_the_callers_clock(make, log):
    queue = make()
    now = time.time() + 600  # the shared clock (Redis's) may differ from this host's

    queue.add(H, "record", {"log": log}, at=now + 2 * HOUR, queue="sms", now=now)

    limit = float(queue.index.client.hget(horizon_key("sms"), "limit"))
    assert limit == pytest.approx(now + HOUR, abs=1)


def test_a_lost_entry_behind_a_long_paused_backlog_is_found(make, log, monkeypatch):
    """The sweep for lost entries reads a backlog a page further on each time, not only its
    oldest rows, so a lost entry behind them comes back before the queue resumes."""
    monkeypatch.setattr(recovery, "SWEEP_LIMIT", 10)
    queue = make()
    now = time.time()
    ids = queue.add_many(
        [JobSpec(H, "record", {"log": log}, at=now - 300 + n, queue="mail") for n in range(30)],
        now=now,
    )
    queue.pause("mail", now=now)
    lost = ids[24]
    queue.index.client.zrem(schedule_key("mail"), str(lost))

    queue.run(now=now)
    queue.run(now=now)

    assert lost in schedule(queue, "mail")


def test_a_foreign_insert_without_noting_its_queue_is_run(backend, make, log):
    """A row another producer INSERTs and ZADDs, in a queue never noted anywhere."""
    runner = make()
    if "mysql" in backend["database_url"]:
        conn = mysql_connect(backend["database_url"])
        with conn.cursor() as cursor:
            cursor.execute(
                "INSERT INTO delay_queue (params, run_at, queue) VALUES (%s, %s, 'node')",
                (
                    f'{{"class": "{H}", "method": "record", "data": {{"log": "{log}"}}}}',
                    time.time(),
                ),
            )
            job_id = cursor.lastrowid
        conn.close()
    else:
        job_id = runner.add(H, "record", {"log": log}, queue="node")
        runner.index.client.delete(QUEUES_KEY)
    runner.index.client.zadd(schedule_key("node"), {str(job_id): time.time()})

    assert runner.run().succeeded == 1


@with_kept_counts
def test_kept_counts_that_drifted_come_right_at_a_runs_hourly_check(make, log):
    """A count no trigger kept (a TRUNCATE, an edit by hand) is corrected by the first run
    of each hour, with no operator. Where triggers keep the counts: SQLite, and a MariaDB
    that trusts function creators."""
    queue = make()
    queue.add_many([JobSpec(H, "record", {"log": log}, delay=HOUR) for _ in range(3)])
    assert Counts(queue.table).installed()
    queue.db.execute_sql(f"DELETE FROM {counts.COUNTS_TABLE}")  # as an edit by hand would

    assert pending(queue) == 0
    queue.run()
    assert pending(queue) == 3

    queue.db.execute_sql(f"DELETE FROM {counts.COUNTS_TABLE}")
    queue.run()  # within the hour: the next turn is the next hour's
    assert pending(queue) == 0


def pending(queue) -> int:
    return queue.status()["queues"]["default"]["pending"]


def test_after_a_failover_jobs_beyond_the_horizon_are_neither_put_back_nor_counted(make, log):
    """A run that finds a queue on a new server looks at the rows added since: those due
    beyond the horizon stay off the schedule (a walk brings them), and are not said to be
    put back at each sweep of the next two minutes."""
    queue = make()
    queue.run()
    queue.add(H, "record", {"log": log}, delay=2 * HOUR)
    note = queue.index.registry.server_note("default")
    assert note is not None
    moved = dataclasses.replace(note, replication_id="the-old-primary")
    queue.index.registry.note_server("default", moved)

    assert queue.run().reindexed == 0
    assert schedule(queue) == {}


def test_init_sets_the_limits_on_the_clock_it_is_given(make):
    queue = make()
    later = time.time() + 2 * HOUR
    queue.index.client.flushdb()

    queue.init(now=later)

    limit = float(queue.index.client.hget(horizon_key("default"), "limit"))
    assert limit == pytest.approx(later + HOUR, abs=1)


def test_a_job_replaced_past_the_horizon_leaves_no_entry_at_its_old_time(make, log):
    """Added while its queue had no horizon (Redis had lost it), a job due in two hours got
    an entry; replaced since to 90 minutes, past the limit a walk gave the queue meanwhile,
    its old entry must go, or the walk that brings the row in keeps it (a walk leaves the
    entries it finds) and the job runs half an hour late."""
    producer, runner = make(), make()
    now = time.time()
    producer.add(H, "record", {"log": log}, queue="mail", now=now)  # the producer notes mail
    runner.index.client.flushdb()

    def replace(due: float) -> int:
        return producer.add(
            H, "record", {"log": log}, at=due, queue="mail", ext="order:1", replace=True, now=now
        )

    job_id = replace(now + 2 * HOUR)
    assert schedule(runner, "mail") == {job_id: pytest.approx(now + 2 * HOUR)}
    runner.run(now=now)  # the rebuild: mail's limit an hour ahead
    assert replace(now + 1.5 * HOUR) == job_id

    assert job_id not in schedule(runner, "mail")
    assert runner.run(now=now + 1.5 * HOUR + 1).succeeded == 1
    assert status(runner, job_id) == "success"
