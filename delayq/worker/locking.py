"""Per-key locks in a run (`add(..., lock="order:42")`): a claimed job with a lock starts only
once it holds the lock (store/locks.py), and lets go as its handler returns, handing the lock
to the earliest job waiting on it (store/lock_waits.py), which goes back on its schedule at
its due time. A job that finds its lock held goes back to pending, in the lock's wait list,
parked on the schedule until it is woken: it is not a failure and uses no retry.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from ..store import leases, locks, queries
from ..store.index import Index
from ..store.lock_waits import PARKED_FOR, Waiter
from ..store.schedule import packed
from ..store.table import ClaimedJob, Table

logger = logging.getLogger(__name__)


def lock_of(job: ClaimedJob) -> str | None:
    """The lock key a job's params name, or None; most jobs have none, found without
    parsing their params."""
    if '"lock"' not in job.params:
        return None
    try:
        key = json.loads(job.params).get("lock")
    except (ValueError, AttributeError):
        return None  # a bad row fails its own job when it is called
    return key if isinstance(key, str) and key else None


class Locking:
    """Taking and letting go of the jobs' locks, for one run."""

    def __init__(self, table: Table, index: Index, token: str) -> None:
        self.table = table
        self.index = index
        self.token = token

    def take(
        self, queue: str, jobs: list[ClaimedJob], due_by_id: Mapping[int, float], now: float
    ) -> list[ClaimedJob]:
        """Of `jobs`, just leased, those free to start: without a lock, or holding theirs
        now, each lock to the earliest due of those that share it. The others go back to
        pending and wait on their locks."""
        keyed = {job.id: key for job in jobs if (key := lock_of(job)) is not None}
        if not keyed:
            return jobs
        taken: set[str] = set()
        waiting: set[int] = set()
        for job in sorted(jobs, key=lambda job: (due_by_id[job.id], job.id)):
            key = keyed.get(job.id)
            if key is None:
                continue
            if key not in taken and locks.take(self.table, key, job.id, now):
                taken.add(key)
            else:
                self._wait(key, Waiter(job.id, queue, due_by_id[job.id]), now)
                waiting.add(job.id)
        if waiting:
            logger.info("queue %s: %d jobs wait for their locks", queue, len(waiting))
        return [job for job in jobs if job.id not in waiting]

    def _wait(self, key: str, waiter: Waiter, now: float) -> None:
        """Put a leased job whose lock is held back to pending, on the lock's wait list, and
        park it; if the lock came free meanwhile, it is the job's, and the job goes back on
        the schedule at its due time instead."""
        leases.release(self.table, [waiter.job_id], self.token, now)
        waits = self.index.lock_waits
        waits.join(key, waiter)
        # After joining: a holder letting go between our try and the join hands the lock to
        # us, or, finding no one waiting, frees it for this second try.
        if locks.take(self.table, key, waiter.job_id, now):
            locks.hand_over(self.table, key, waiter.job_id, waiter.job_id, now)  # reserved
            waits.leave(key, waiter)
            self.index.schedule.add(waiter.queue, waiter.job_id, waiter.due)
            return
        parked = packed([(waiter.job_id, now + PARKED_FOR)])
        # NX: a holder that woke it meanwhile put it back at its due time, which stays.
        self.index.schedule.add_packed(waiter.queue, [parked], keep_existing=True)


def let_go(table: Table, index: Index, jobs: list[ClaimedJob], now: float) -> None:
    """The jobs ended or went back: hand each one's lock to the earliest job waiting on
    it, or free it. If the database or Redis fails, the lock is taken over once this
    job's row has left RUNNING, and the waiting jobs come back when their parking ends."""
    for job in jobs:
        key = lock_of(job)
        if key is None:
            continue
        try:
            _hand_on(table, index, key, job.id, now)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            logger.warning("could not hand on lock %r of job %d: %s", key, job.id, exc)


def _hand_on(table: Table, index: Index, key: str, job_id: int, now: float) -> None:
    waits = index.lock_waits
    while (waiter := waits.pop(key)) is not None:
        if not queries.still_pending(table, [waiter.job_id]):
            continue  # cancelled, or run meanwhile: the next one
        if locks.hand_over(table, key, job_id, waiter.job_id, now):
            index.schedule.add(waiter.queue, waiter.job_id, waiter.due)
        else:  # another run took the lock over from this job: it waits on
            waits.join(key, waiter)
        return
    locks.hand_over(table, key, job_id, None, now)
    # One that joined after the list was found empty tried the lock before it was freed:
    # wake it, to take it now.
    if (late := waits.pop(key)) is not None:
        index.schedule.add(late.queue, late.job_id, late.due)
