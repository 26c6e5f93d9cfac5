"""A queue's concurrency limit through the API, on both backends: the limit is kept in the
table; a job running elsewhere holds its slot, counted when the limit is set and again after
Redis lost everything, until its lease lapses; jobs held back stay pending, in due order;
bad limits write nothing."""

from __future__ import annotations

import pytest

import delayq
from delayq.errors import BadInput
from delayq.store.index.keys import slots_key
from delayq.store.table import leases
from delayq.store.table.model import Job, Status
from tests.sample_handlers.jobs import read_log

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0
LEASE = 60.0  # the suite's runs keep the default lease


def add_many(queue: delayq.Queue, log: str, count: int) -> list[int]:
    return [
        queue.add(H, "record", {"log": log, "n": f"x-{n}"}, at=NOW - 10 + n, queue="x", now=NOW)
        for n in range(count)
    ]


def run_elsewhere(queue: delayq.Queue, job_id: int) -> None:
    """Job `job_id` is running in another run, whose lease lasts until NOW + LEASE."""
    assert leases.mark_running(queue.table, [job_id], "elsewhere", NOW + LEASE, NOW)
    queue.index.schedule.remove("x", [job_id])


def test_a_limit_is_kept_read_back_and_lifted_alone(queue: delayq.Queue, log: str) -> None:
    add_many(queue, log, 1)
    assert queue.limit("x", concurrency=4, now=NOW)["x"].concurrency == 4
    assert queue.limit("x", rate="5/s", now=NOW)["x"][3:] == (5, 1.0, 4)  # the other stays
    assert queue.limited()["x"].concurrency == 4
    assert queue.index.flow.read(["x"])["x"].concurrency == 4  # type: ignore[union-attr]
    lifted = queue.limit("x", concurrency=None, now=NOW)["x"]
    assert (lifted.rate, lifted.concurrency) == ((5, 1.0), None)
    assert queue.limit("x", rate=None, now=NOW)["x"].limited is False
    assert queue.limited() == {}


def test_a_job_running_elsewhere_holds_its_slot_when_the_limit_is_set(
    queue: delayq.Queue, log: str
) -> None:
    ids = add_many(queue, log, 3)
    run_elsewhere(queue, ids[0])
    queue.limit("x", concurrency=1, now=NOW)

    queue.run(now=NOW)
    assert read_log(log) == []  # the one slot is the running job's
    assert [Job.get_by_id(job_id).status for job_id in ids[1:]] == [Status.PENDING] * 2

    leases.finish(queue.table, ids[0], "elsewhere", Status.SUCCESS, "done", NOW + 1)
    queue.index.free_slots("x", [ids[0]])  # as the other run does when its job ends
    queue.run(now=NOW + 1)
    assert read_log(log) == ["x-1", "x-2"]  # in due order, one at a time


def test_running_slots_come_back_from_the_table_after_redis_lost_everything(
    queue: delayq.Queue, log: str
) -> None:
    ids = add_many(queue, log, 3)
    queue.limit("x", concurrency=1, now=NOW)
    run_elsewhere(queue, ids[0])
    queue.index.flow.hold_slots("x", [(ids[0], NOW + LEASE)])
    queue.index.client.flushdb()

    queue.run(now=NOW)  # rebuilds the schedule, puts the limit and its slot back: runs none
    assert read_log(log) == []
    assert queue.index.client.zscore(slots_key("x"), str(ids[0])) == NOW + LEASE

    # Its run died: once its lease lapsed, the slot is free and the job itself comes back.
    queue.run(now=NOW + LEASE + 1)
    assert sorted(read_log(log)) == ["x-0", "x-1", "x-2"]
    assert [Job.get_by_id(job_id).status for job_id in ids] == [Status.SUCCESS] * 3


@pytest.mark.parametrize(
    "value, message",
    [
        (0, "invalid concurrency 0: it must be between 1 and 10,000"),
        (10_001, "it must be between 1 and 10,000"),
        (-3, "invalid concurrency -3: expected a whole number"),
        (2.5, "invalid concurrency 2.5: expected a whole number"),
        (True, "invalid concurrency True"),
        ("4", None),
        ("four", "invalid concurrency 'four': expected a whole number"),
        ("\ud800", "invalid concurrency '\\ud800'"),
        (10**400, "it must be between 1 and 10,000"),
    ],
)
def test_bad_limits_are_refused_and_write_nothing(
    queue: delayq.Queue, log: str, value: object, message: str | None
) -> None:
    add_many(queue, log, 1)
    if message is None:
        assert queue.limit("x", concurrency=value, now=NOW)["x"].concurrency == 4  # type: ignore[arg-type]
        return
    with pytest.raises(BadInput) as refused:
        queue.limit("x", concurrency=value, now=NOW)  # type: ignore[arg-type]
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert queue.limited() == {}


def test_a_limit_must_name_what_it_sets(queue: delayq.Queue, log: str) -> None:
    add_many(queue, log, 1)
    with pytest.raises(BadInput, match="give rate= or concurrency="):
        queue.limit("x", now=NOW)
    assert queue.limited() == {}
