"""A queue's rate limit through the API, on both backends: a run starts no more than the
window allows, the jobs held back stay pending (no failure, no retry) and start in due order
as the window frees; the limit is kept in the table, so a Redis that lost everything still
holds it; lifting it lets the rest go at once; bad rates write nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import delayq
from delayq.store.index.keys import schedule_key
from delayq.store.table.model import Job, Status
from tests.sample_handlers.jobs import read_log

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0


def add_many(queue: delayq.Queue, log: str, count: int, name: str = "sms") -> list[int]:
    return [
        queue.add(
            H, "record", {"log": log, "n": f"{name}-{n}"}, at=NOW - 10 + n, queue=name, now=NOW
        )
        for n in range(count)
    ]


def test_a_run_starts_what_the_window_allows_and_the_rest_wait_pending_in_order(
    queue: delayq.Queue, log: str
) -> None:
    ids = add_many(queue, log, 5)
    other = add_many(queue, log, 1, name="email")
    limited = queue.limit("sms", rate="2/s", now=NOW - 1)
    assert limited["sms"].rate == (2, 1.0)

    queue.run(now=NOW)
    assert sorted(read_log(log)) == ["email-0", "sms-0", "sms-1"]
    held = [Job.get_by_id(job_id) for job_id in ids[2:]]
    # Held back, not failed: pending at their own due times, no retry, no lost lease.
    assert [(job.status, job.run_at, job.retry_times, job.lost_leases) for job in held] == [
        (Status.PENDING, NOW - 10 + n, 0, 0) for n in (2, 3, 4)
    ]
    assert Job.select().count() == 6
    assert Job.get_by_id(other[0]).status == Status.SUCCESS

    queue.run(now=NOW + 0.5)  # the window still holds both grants
    assert len(read_log(log)) == 3
    queue.run(now=NOW + 1.2)  # both grants left the window: two more, next in due order
    assert read_log(log)[3:] == ["sms-2", "sms-3"]
    assert list(queue.limited()) == ["sms"]


def test_a_limit_outlives_a_redis_that_lost_everything(
    make_queue: Callable[..., delayq.Queue], log: str
) -> None:
    queue = make_queue()
    add_many(queue, log, 4)
    queue.limit("sms", rate="1/m", now=NOW - 1)
    queue.index.client.flushdb()

    queue.run(now=NOW)  # rebuilds the schedule, and the limit from the table

    assert read_log(log) == ["sms-0"]
    assert queue.index.flow.read(["sms"])["sms"].rate == (1, 60.0)  # type: ignore[union-attr]
    queue.limit("sms", rate=None, now=NOW + 1)
    queue.run(now=NOW + 2)  # lifted: the rest at once
    assert read_log(log) == [f"sms-{n}" for n in range(4)]
    assert queue.limited() == {}


@pytest.mark.parametrize("rate", ["0/s", "10/x", "-1/s", "100001/s", "99999999999999999/h", "x"])
def test_a_bad_rate_limits_nothing(queue: delayq.Queue, rate: str) -> None:
    with pytest.raises(delayq.BadInput):
        queue.limit("sms", rate=rate)
    assert queue.limited() == {}


def test_entries_of_jobs_that_ran_already_spend_no_starts_of_the_window(
    queue: delayq.Queue, log: str
) -> None:
    """A failover that rolled back claims, or a Redis restarted from an older snapshot, puts
    back entries whose jobs ran already: a claim drops them, and the grants it took for them
    come back, or each would cost the queue a start (at 2/s, ten of them five seconds)."""
    ran = add_many(queue, log, 10)
    queue.run(now=NOW)
    assert len(read_log(log)) == 10
    queue.limit("sms", rate="2/s", now=NOW)
    queue.index.client.zadd(schedule_key("sms"), {str(job_id): NOW - 10 for job_id in ran})
    fresh = queue.add(H, "record", {"log": log, "n": "fresh"}, at=NOW - 1, queue="sms", now=NOW)

    report = queue.run(now=NOW + 1)

    assert (report.dropped, report.succeeded) == (10, 1)
    assert Job.get_by_id(fresh).status == Status.SUCCESS
