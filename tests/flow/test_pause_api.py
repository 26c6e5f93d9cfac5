"""Pausing a queue through the API, on both backends: a paused queue's due jobs are claimed by
no run and never turned missed; after the resume they run once each, late counting from the
resume; the pause is kept in the table, so a Redis that lost everything still holds it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

import delayq
from delayq.store.table.model import Job, Status
from tests.sample_handlers.jobs import read_log

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0
DAY = 86400.0


def add(queue: delayq.Queue, log: str, n: int, at: float, name: str = "sms") -> int:
    return queue.add(H, "record", {"log": log, "n": n}, at=at, queue=name, now=NOW)


def status_of(job_id: int) -> int:
    return Job.get_by_id(job_id).status


def test_a_paused_queue_runs_nothing_and_its_jobs_run_once_after_the_resume(
    queue: delayq.Queue, log: str
) -> None:
    sms = [add(queue, log, n, NOW - 5) for n in (1, 2)]
    other = add(queue, log, 3, NOW - 5, name="email")
    paused = queue.pause("sms", now=NOW - 1)
    assert paused["sms"].paused_at == NOW - 1

    report = queue.run(now=NOW)

    assert read_log(log) == ["3"]  # the other queue runs on
    assert report.ran == 1 and status_of(other) == Status.SUCCESS
    assert [status_of(job_id) for job_id in sms] == [Status.PENDING, Status.PENDING]
    assert queue.paused() == {"sms": paused["sms"]}

    resumed = queue.resume("sms", now=NOW + 1)
    assert resumed["sms"].paused_at is None and resumed["sms"].resumed_at == NOW + 1
    queue.run(now=NOW + 2)
    assert sorted(read_log(log)) == ["1", "2", "3"]
    assert queue.paused() == {}


def test_pause_and_resume_are_idempotent_and_the_first_pause_says_since_when(
    queue: delayq.Queue,
) -> None:
    first = queue.pause("sms", now=NOW)["sms"]
    again = queue.pause("sms", now=NOW + 60)["sms"]
    assert again.paused_at == NOW and again.version == first.version
    resumed = queue.resume("sms", now=NOW + 120)["sms"]
    assert queue.resume("sms", now=NOW + 180)["sms"] == resumed
    # A queue never paused is left as it is: resuming it moves no overdue window.
    assert queue.resume("email", now=NOW)["email"].resumed_at is None


def test_a_paused_queues_due_jobs_are_never_missed_and_lateness_counts_from_the_resume(
    queue: delayq.Queue, log: str
) -> None:
    on_time = add(queue, log, 1, NOW)
    queue.pause("sms", now=NOW + 1)
    queue.run(now=NOW + 3 * DAY)  # far past the one-day window: still paused
    assert status_of(on_time) == Status.PENDING

    queue.resume("sms", now=NOW + 3 * DAY)
    queue.run(now=NOW + 3 * DAY + 60)  # due three days ago, resumed a minute ago: runs
    assert status_of(on_time) == Status.SUCCESS and read_log(log) == ["1"]

    late = add(queue, log, 2, NOW + 3 * DAY + 100)
    queue.pause("sms", now=NOW + 3 * DAY + 200)
    queue.resume("sms", now=NOW + 3 * DAY + 300)
    queue.run(now=NOW + 3 * DAY + 300 + DAY + 1)  # a day after the resume: missed
    assert status_of(late) == Status.MISSED and read_log(log) == ["1"]


def test_a_pause_outlives_a_redis_that_lost_everything(
    make_queue: Callable[..., delayq.Queue], log: str
) -> None:
    queue = make_queue()
    job_id = add(queue, log, 1, NOW - 5)
    queue.pause("sms", now=NOW - 1)
    queue.index.client.flushdb()
    after = add(queue, log, 2, NOW - 4)  # on a schedule Redis has again

    queue.run(now=NOW)  # rebuilds the schedule, and the pause from the table

    assert read_log(log) == []
    assert queue.index.flow.paused(["sms"]) == {"sms"}
    queue.resume("sms", now=NOW + 1)
    queue.index.client.flushdb()
    queue.run(now=NOW + 2)
    assert sorted(read_log(log)) == ["1", "2"]
    assert {status_of(job_id), status_of(after)} == {Status.SUCCESS}


def test_adds_and_cancels_go_on_while_a_queue_is_paused(queue: delayq.Queue, log: str) -> None:
    queue.pause("sms", now=NOW)
    kept = add(queue, log, 1, NOW + 10)
    cancelled = add(queue, log, 2, NOW + 10)
    queue.cancel(cancelled)
    assert status_of(kept) == Status.PENDING and status_of(cancelled) == Status.CANCELLED


@pytest.mark.parametrize("names", [(), ("bad name",), ("sms", "x" * 65)])
def test_a_bad_queue_name_pauses_nothing(queue: delayq.Queue, names: tuple[str, ...]) -> None:
    with pytest.raises(delayq.BadInput):
        queue.pause(*names)
    assert queue.paused() == {}


def test_a_pause_takes_effect_for_a_run_that_has_its_queues_mirror_cached(
    queue: delayq.Queue, log: str
) -> None:
    add(queue, log, 1, NOW - 5)
    queue.run(now=NOW)  # the mirror now holds "running"
    add(queue, log, 2, NOW - 4)
    client = redis.Redis.from_url(queue.settings.redis_url)
    assert client.exists("{delay_queue_job:sms}:flow")
    queue.pause("sms", now=NOW)
    queue.run(now=NOW + 1)
    assert read_log(log) == ["1"]
    client.close()


def test_a_pause_an_older_redis_forgot_is_put_back_before_the_next_claim(
    queue: delayq.Queue, log: str
) -> None:
    """A failover to a replica that had not yet seen the pause: its hash says "running", at
    an older version than the table's; the run's sweep puts the table's back first."""
    add(queue, log, 1, NOW - 5)
    queue.pause("sms", now=NOW - 1)
    client = redis.Redis.from_url(queue.settings.redis_url)
    client.hset("{delay_queue_job:sms}:flow", mapping={"version": 0, "paused_at": ""})

    queue.run(now=NOW)

    assert read_log(log) == []
    assert queue.index.flow.paused(["sms"]) == {"sms"}
    client.close()
