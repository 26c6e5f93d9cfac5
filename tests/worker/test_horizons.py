"""The horizon (store/index/horizons.py): Redis holds each queue's jobs due within the next hour,
the table alone the later ones; runs raise the limit as time nears it and walk the rows it
passes onto the schedule, so every job still runs once, on time and never early. The whole
suite runs with the default horizon (tests/conftest.py); these tests are about it."""

from __future__ import annotations

import time

import pytest

from delayq import JobSpec
from delayq.config import MAX_HORIZON, load_settings
from delayq.errors import ConfigError
from delayq.store.index.keys import INDEXED_KEY, horizon_key, schedule_key
from delayq.store.table.model import Status

H = "tests.sample_handlers.jobs"
HOUR = 3600.0


def schedule(queue, name: str = "default") -> dict[int, float]:
    entries = queue.index.client.zrange(schedule_key(name), 0, -1, withscores=True)
    return {int(member): score for member, score in entries}


def limit(queue, name: str = "default") -> float:
    return float(queue.index.client.hget(horizon_key(name), "limit"))


def statuses(queue, ids: list[int]) -> list[str]:
    return [queue.show(job_id)["status"] for job_id in ids]


def test_a_job_due_beyond_the_horizon_waits_in_the_table_alone(queue, log):
    now = time.time()
    near = queue.add(H, "record", {"log": log}, at=now + 600, now=now)
    far = queue.add(H, "record", {"log": log}, at=now + 2 * HOUR, now=now)

    assert limit(queue) == pytest.approx(now + HOUR, abs=60)
    assert schedule(queue) == {near: pytest.approx(now + 600)}
    assert statuses(queue, [near, far]) == ["pending", "pending"]
    # every look still sees it: peek from the table beyond the limit, counts from the table
    assert [entry.id for entry in queue.peek(5)] == [near, far]
    assert queue.status()["queues"]["default"]["pending"] == 2
    assert b'delayq_pending_jobs{queue="default"} 2.0' in queue.metrics()


def test_a_new_queue_meets_its_horizon_from_its_first_add(queue, log):
    now = time.time()
    specs = [
        JobSpec(H, "record", {"log": log}, at=now + 300 + n * 600, queue="mail") for n in range(12)
    ]

    ids = queue.add_many(specs, now=now)

    assert limit(queue, "mail") == pytest.approx(now + HOUR, abs=60)
    assert set(schedule(queue, "mail")) == set(ids[:6])  # due within the hour


def test_a_large_add_puts_exactly_its_jobs_due_within_the_hour_on_the_schedule(queue):
    # Several parts, some with no job due within the hour: those leave Redis alone.
    now = time.time()
    near = range(0, 6000, 1000)
    specs = [JobSpec(H, "echo", n, at=now + (600 if n in near else 2 * 86400)) for n in range(6000)]

    ids = queue.add_many(specs, now=now)

    assert schedule(queue) == {ids[n]: pytest.approx(now + 600) for n in near}
    assert queue.status()["queues"]["default"]["pending"] == 6000


def test_runs_raise_the_limit_and_every_job_runs_once_on_time_never_early(queue, log):
    now = time.time()
    ids = queue.add_many(
        [JobSpec(H, "record", {"log": log, "n": n}, at=now + n * 36) for n in range(300)], now=now
    )
    due_at = {job_id: now + n * 36 for n, job_id in enumerate(ids)}
    ran_at: dict[int, float] = {}
    Job = queue.table.model

    for clock in range(int(now), int(now + 3 * HOUR) + 120, 60):  # a cron run a minute
        queue.run(now=clock)
        done = Job.select(Job.id).where(Job.status == Status.SUCCESS, Job.id.in_(ids))
        for (job_id,) in done.tuples():
            ran_at.setdefault(job_id, clock)
        assert max(schedule(queue).values(), default=0) <= limit(queue)
        assert limit(queue) >= clock + HOUR * 11 / 12  # raised before it was near

    assert set(ran_at) == set(ids)
    assert all(due_at[job_id] <= ran_at[job_id] < due_at[job_id] + 60 for job_id in ids)
    with open(log) as lines:
        assert sorted(lines.read().split()) == sorted(str(n) for n in range(300))


@pytest.mark.wide_horizon
def test_the_widest_horizon_holds_a_job_due_in_a_month_on_the_schedule(queue, log):
    """DELAYQ_HORIZON at its maximum, 10 years (the `wide_horizon` variant): Redis holds
    every job, as before the horizon, for whoever sets it so."""
    now = time.time()
    job_id = queue.add(H, "record", {"log": log}, at=now + 30 * 86400, now=now)

    assert limit(queue) == pytest.approx(now + MAX_HORIZON, abs=60)
    assert schedule(queue) == {job_id: pytest.approx(now + 30 * 86400)}
    assert queue.run(now=now + 30 * 86400 - 1).succeeded == 0
    assert queue.run(now=now + 30 * 86400).succeeded == 1


def test_a_pending_job_moved_beyond_the_limit_leaves_the_schedule(queue, log):
    now = time.time()
    job_id = queue.add(H, "record", {"log": log}, at=now + 600, now=now)

    assert queue.retry(job_id, delay=3 * HOUR, now=now) == job_id

    assert schedule(queue) == {}
    assert queue.run(now=now + 700).succeeded == 0
    assert queue.run(now=now + 2.5 * HOUR).succeeded == 0  # the raise walks it back on
    assert schedule(queue) == {job_id: pytest.approx(now + 3 * HOUR)}
    assert queue.run(now=now + 3 * HOUR + 1).succeeded == 1


def test_an_entry_earlier_than_its_row_is_never_run_early(queue, log):
    """A walk that read a row just before it moved later puts back a stale entry: the claim
    leaves the row pending and puts the entry back at the row's own time."""
    now = time.time()
    job_id = queue.add(H, "record", {"log": log}, at=now + 1800, now=now)
    queue.index.client.zadd(schedule_key("default"), {str(job_id): now - 5})

    report = queue.run(now=now)

    assert (report.succeeded, report.dropped) == (0, 1)
    assert queue.show(job_id)["status"] == "pending"
    assert schedule(queue) == {job_id: pytest.approx(now + 1800)}
    assert queue.run(now=now + 1801).succeeded == 1


def test_after_redis_lost_its_data_the_rebuild_stops_at_the_new_limit(queue, log):
    now = time.time()
    due = queue.add(H, "record", {"log": log}, at=now - 1, now=now)
    soon = queue.add(H, "record", {"log": log}, at=now + 1800, now=now)
    later = queue.add(H, "record", {"log": log}, at=now + 3 * HOUR, now=now)
    queue.index.client.flushdb()

    report = queue.run(now=now)

    assert (report.succeeded, report.reindexed) == (1, 2)
    assert queue.show(due)["status"] == "success"
    assert schedule(queue) == {soon: pytest.approx(now + 1800)}
    assert queue.index.client.exists(INDEXED_KEY)
    assert limit(queue) == pytest.approx(now + HOUR, abs=60)
    assert queue.run(now=now + 3 * HOUR + 1).succeeded == 2
    assert statuses(queue, [soon, later]) == ["success", "success"]


def test_reconcile_compares_up_to_the_limit(queue, log):
    now = time.time()
    soon = queue.add(H, "record", {"log": log}, at=now + 1800, now=now)
    queue.add(H, "record", {"log": log}, at=now + 3 * HOUR, now=now)
    gone = queue.add(H, "record", {"log": log}, at=now + 1900, now=now)
    queue.cancel(gone)
    queue.index.client.zadd(schedule_key("default"), {str(gone): now + 1900})
    queue.index.schedule.remove("default", [soon])

    result = queue.reconcile()

    assert (result.reindexed["default"], result.removed["default"]) == (1, 1)
    assert schedule(queue) == {soon: pytest.approx(now + 1800)}


def test_init_gives_a_horizon_to_a_queue_an_earlier_version_left_without_one(queue, log):
    now = time.time()
    queue.add(H, "record", {"log": log}, at=now + 600, now=now)
    queue.index.client.delete(horizon_key("default"))

    queue.init()

    assert limit(queue) == pytest.approx(now + HOUR, abs=60)


@pytest.mark.parametrize("value", ["5m", "3651d", "soon", "-1h"])
def test_a_horizon_out_of_bounds_is_refused(value):
    with pytest.raises(ConfigError, match="DELAYQ_HORIZON"):
        load_settings({"DELAYQ_HORIZON": value}).validate()


def test_a_horizon_within_bounds_is_taken():
    assert load_settings({"DELAYQ_HORIZON": "6h"}).validate().horizon == 6 * HOUR
