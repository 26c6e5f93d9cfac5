"""The slots' own bookkeeping, on real threads: which calls count as stuck, and the heap of
deadlines the main thread asks on every turn."""

from __future__ import annotations

import threading

from delayq.store.table.model import ClaimedJob, Status
from delayq.store.table.outcomes import Outcome
from delayq.worker.slots import Slots
from tests.support.waiting import wait_for

LONG = 3600.0


def job(job_id: int) -> ClaimedJob:
    return ClaimedJob(job_id, "{}", "", 0, "default", None, None, None, None, None, None)


def succeeded(claimed: ClaimedJob) -> Outcome:
    return Outcome(job=claimed, status=Status.SUCCESS, message="", finished_at=0.0)


def crashed(claimed: ClaimedJob, exc: BaseException, started: float) -> Outcome:
    return Outcome(job=claimed, status=Status.FAILED, message=repr(exc), finished_at=0.0)


def collect_until(slots: Slots, count: int) -> list[int]:
    done: list[int] = []
    wait_for(
        lambda: done.extend(f.job.id for f in slots.collect(0.05)) or len(done) >= count,
        30,
        f"{count} calls to finish",
    )
    return done


def test_a_thread_given_up_on_is_stuck_until_its_handler_returns():
    release = threading.Event()

    def call(claimed: ClaimedJob) -> Outcome:
        release.wait(30)
        return succeeded(claimed)

    slots = Slots(2, call, crashed, lambda claimed: 0.05)
    slots.start([job(1)])

    expired = []
    wait_for(lambda: expired.extend(slots.expire()) or expired, 30, "the time limit")
    assert [call.job.id for call in expired] == [1]
    assert slots.stuck == 1 and slots.busy == 0
    assert slots.next_deadline() is None

    release.set()  # the handler returns; its late result is refused
    wait_for(lambda: slots.stuck == 0, 30, "the stuck thread to come out")
    assert slots.collect(0.0) == []
    slots.close()


def test_deadlines_of_finished_calls_do_not_pile_up_behind_one_long_call():
    release = threading.Event()

    def call(claimed: ClaimedJob) -> Outcome:
        if claimed.id == 0:
            release.wait(30)
        return succeeded(claimed)

    # The long call's deadline is the soonest: settled entries below it leave only by the
    # heap being rebuilt.
    slots = Slots(2, call, crashed, lambda claimed: LONG / 2 if claimed.id == 0 else LONG)
    slots.start([job(0)])
    first = slots.next_deadline()
    for job_id in range(1, 1001):
        slots.start([job(job_id)])
        assert collect_until(slots, 1) == [job_id]
        assert len(slots._deadlines) <= 2 * 2 + 64 + 1

    assert slots.next_deadline() == first
    release.set()
    assert collect_until(slots, 1) == [0]
    assert slots.next_deadline() is None and slots.stuck == 0
    slots.close()
