"""Bad input through the Python API: refused with BadInput before anything is written, the
same rules the command line goes through (tests/cli/test_cli.py drives those)."""

from __future__ import annotations

import math
import time

import pytest

from delayq import BadInput, JobSpec, Status
from delayq.base.durations import FURTHEST_AHEAD
from delayq.store.index.keys import schedule_key
from delayq.store.table.model import Job

NOW = 1_800_000_000.0
H = "tests.sample_handlers.jobs"


def stored(queue) -> tuple[int, int]:
    return Job.select().count(), queue.index.client.zcard(schedule_key("default"))


def test_cancel_by_an_empty_ext_is_refused_and_leaves_jobs_without_ext_pending(queue):
    now = time.time()  # due within the horizon: on the schedule, where a cancel would take them
    once = queue.add(H, "echo", delay=60, now=now)
    timer = queue.add(H, "echo", delay=60, every=3600, now=now)

    with pytest.raises(BadInput, match="--ext is empty"):
        queue.cancel(ext="", now=now)

    assert [Job.get_by_id(job_id).status for job_id in (once, timer)] == [Status.PENDING] * 2
    assert Job.get_by_id(timer).every == 3600
    assert stored(queue) == (2, 2)


BAD_TIMES = {
    "at-nan": {"at": math.nan},
    "at-inf": {"at": math.inf},
    "at-minus-inf": {"at": -math.inf},
    "at-before-1970": {"at": -1.0},
    "at-year-9999": {"at": 253_370_764_800.0},
    "at-beyond-furthest-ahead": {"at": NOW + FURTHEST_AHEAD + 1},
    "at-huge-int": {"at": 10**400},
    "at-text": {"at": "next tuesday"},
    "delay-nan": {"delay": math.nan},
    "delay-inf": {"delay": math.inf},
    "delay-negative": {"delay": -1.0},
    "delay-beyond-furthest-ahead": {"delay": FURTHEST_AHEAD + 1},
    "delay-1e30": {"delay": 1e30},
    "every-nan": {"every": math.nan},
    "every-inf": {"every": math.inf},
    "every-beyond-furthest-ahead": {"every": FURTHEST_AHEAD + 1},
    "timeout-inf": {"timeout": math.inf},
    "timeout-1e30": {"timeout": 1e30},
}


@pytest.mark.parametrize("fields", BAD_TIMES.values(), ids=BAD_TIMES.keys())
def test_add_refuses_a_time_no_job_may_be_due_at_and_writes_nothing(queue, fields):
    with pytest.raises(BadInput):
        queue.add(H, "echo", now=NOW, **fields)
    with pytest.raises(BadInput):
        queue.add(H, "echo", ext="k", replace=True, now=NOW, **fields)
    good = JobSpec(H, "echo", delay=5)
    with pytest.raises(BadInput):
        queue.add_many([good, JobSpec(H, "echo", **fields), good], now=NOW)

    assert stored(queue) == (0, 0)


def test_the_earliest_and_the_furthest_a_job_may_be_due_are_accepted(queue):
    # Added in 1970 itself: later, a due time of 0 is before the window a run looks back over.
    first = queue.add(H, "echo", at=0.0, now=60.0)
    last = queue.add(H, "echo", at=NOW + FURTHEST_AHEAD, every=FURTHEST_AHEAD, now=NOW)

    assert (queue.show(first)["run_at"], queue.show(last)["run_at"]) == (0.0, NOW + FURTHEST_AHEAD)


def test_retry_refuses_a_delay_beyond_the_furthest_a_job_may_be_due(queue):
    job_id = queue.add(H, "echo", now=NOW)
    queue.run(now=NOW + 1)

    with pytest.raises(BadInput, match="10 years ahead"):
        queue.retry(job_id, delay=FURTHEST_AHEAD + 1, now=NOW + 2)

    assert Job.select().count() == 1


STRAY_MEMBERS = ["²", "٣", "abc", "-1", "007", "1e3", "9" * 30, str(2**63)]


def test_a_run_drops_schedule_members_that_are_not_job_ids_with_a_line_each(queue, log, caplog):
    good = queue.add(H, "record", {"log": log, "n": 1}, now=NOW)
    queue.index.client.zadd(schedule_key("default"), dict.fromkeys(STRAY_MEMBERS, NOW))

    with caplog.at_level("WARNING", logger="delayq"):
        report = queue.run(now=NOW + 1)

    assert queue.show(good)["status"] == "success"
    assert report.dropped == len(STRAY_MEMBERS)
    assert queue.index.schedule.size("default") == 0
    dropped = [r.getMessage() for r in caplog.records if "not a job id" in r.getMessage()]
    assert len(dropped) == len(STRAY_MEMBERS)
    assert all(repr(member) in " ".join(dropped) for member in STRAY_MEMBERS)


def test_peek_and_reconcile_pass_over_members_that_are_not_job_ids(queue):
    # On the real clock: reconcile compares the schedule with the table up to the horizon.
    now = time.time()
    job_id = queue.add(H, "echo", delay=60, now=now)
    queue.index.client.zadd(schedule_key("default"), dict.fromkeys(STRAY_MEMBERS, now))

    assert [entry.id for entry in queue.peek(20)] == [job_id]
    assert queue.reconcile().removed["default"] == len(STRAY_MEMBERS)
    assert queue.index.schedule.size("default") == 1
