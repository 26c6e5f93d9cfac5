"""The pool's own bookkeeping, on real threads: which calls count as stuck, and the heap of
deadlines the main thread asks on every turn."""

from __future__ import annotations

import threading

from delayq.store.table.model import ClaimedJob, Status
from delayq.store.table.outcomes import Outcome
from delayq.worker.pool import Pool
from tests.support.waiting import wait_for

LONG = 3600.0


def job(job_id: int) -> ClaimedJob:
    return ClaimedJob(job_id, "{}", "", 0, "default", None, None, None, None, None, None)


def succeeded(claimed: ClaimedJob) -> Outcome:
    return Outcome(job=claimed, status=Status.SUCCESS, message="", finished_at=0.0)


def crashed(claimed: ClaimedJob, exc: BaseException, started: float) -> Outcome:
    return Outcome(job=claimed, status=Status.FAILED, message=repr(exc), finished_at=0.0)


def collect_until(pool: Pool, count: int) -> list[int]:
    done: list[int] = []
    wait_for(
        lambda: done.extend(f.job.id for f in pool.collect(0.05)) or len(done) >= count,
        30,
        f"{count} calls to finish",
    )
    return done


def test_a_thread_given_up_on_is_stuck_until_its_handler_returns():
    release = threading.Event()

    def call(claimed: ClaimedJob) -> Outcome:
        release.wait(30)
        return succeeded(claimed)

    pool = Pool(2, call, crashed, lambda claimed: 0.05)
    pool.start([job(1)])

    expired = []
    wait_for(lambda: expired.extend(pool.expire()) or expired, 30, "the time limit")
    assert [call.job.id for call in expired] == [1]
    assert pool.stuck == 1 and pool.busy == 0
    assert pool.next_deadline() is None

    release.set()  # the handler returns; its late result is refused
    wait_for(lambda: pool.stuck == 0, 30, "the stuck thread to come out")
    assert pool.collect(0.0) == []
    pool.close()


def test_deadlines_of_finished_calls_do_not_pile_up_behind_one_long_call():
    release = threading.Event()

    def call(claimed: ClaimedJob) -> Outcome:
        if claimed.id == 0:
            release.wait(30)
        return succeeded(claimed)

    # The long call's deadline is the soonest: settled entries below it leave only by the
    # heap being rebuilt.
    pool = Pool(2, call, crashed, lambda claimed: LONG / 2 if claimed.id == 0 else LONG)
    pool.start([job(0)])
    first = pool.next_deadline()
    for job_id in range(1, 1001):
        pool.start([job(job_id)])
        assert collect_until(pool, 1) == [job_id]
        assert len(pool._deadlines) <= 2 * 2 + 64 + 1

    assert pool.next_deadline() == first
    release.set()
    assert collect_until(pool, 1) == [0]
    assert pool.next_deadline() is None and pool.stuck == 0
    pool.close()
