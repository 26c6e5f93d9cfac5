"""Per-key locks (`add(..., lock="order:42")`): the key a job may carry (check_lock, as a job is
added; lock_of, as a run leases it), and the locks in a run: a claimed job with a lock starts
only once it holds the lock (store/table/locks.py), and lets go as its handler returns, handing
the lock to the earliest job waiting on it (store/index/lock_waits.py), which goes back on its
schedule at its due time. A job that finds its lock held goes back to pending, in the lock's
wait list, parked on the schedule until it is woken: it is not a failure and uses no retry.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from ..errors import BadInput
from ..store.index import PARKED_FOR, Index, Waiter, packed
from ..store.table import LOCK_MAX, ClaimedJob, Jobs, Leases, Locks, Table

logger = logging.getLogger(__name__)


def check_lock(lock: str | None) -> str | None:
    """A job's lock key: text of 1 to LOCK_MAX characters that UTF-8 can hold, or None."""
    if lock is None:
        return None
    if not isinstance(lock, str):
        raise BadInput("lock must be text")
    if lock == "":
        raise BadInput("lock is empty; name the key the jobs share, like order:42")
    try:
        lock.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput("lock is not valid UTF-8") from None
    if len(lock) > LOCK_MAX:
        raise BadInput(f"lock is {len(lock)} characters; the limit is {LOCK_MAX}")
    return lock


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
        taken = Locks(self.table).take_many(_by_key(keyed, due_by_id), now)
        waiting = {job_id for job_id, key in keyed.items() if taken.get(key) != job_id}
        if waiting:
            self._wait({job_id: keyed[job_id] for job_id in waiting}, queue, due_by_id, now)
            logger.info("queue %s: %d jobs wait for their locks", queue, len(waiting))
        return [job for job in jobs if job.id not in waiting]

    def _wait(
        self, keyed: dict[int, str], queue: str, due_by_id: Mapping[int, float], now: float
    ) -> None:
        """Put leased jobs whose locks are held ({id: key}) back to pending, on their locks'
        wait lists, and park them; a job whose lock came free meanwhile is handed it and
        goes back on the schedule at its due time instead. A few round trips for them all."""
        Leases(self.table).release(list(keyed), self.token, now)
        waits = self.index.lock_waits
        waiters = {job_id: Waiter(job_id, queue, due_by_id[job_id]) for job_id in keyed}
        waits.join_each([(keyed[job_id], waiter) for job_id, waiter in waiters.items()])
        # After joining: a holder letting go between our try and the join hands the lock to
        # the earliest of us, or, finding no one waiting, frees it for this second try.
        freed = Locks(self.table).take_many(_by_key(keyed, due_by_id), now)
        for key, job_id in freed.items():
            waiter = waiters.pop(job_id)
            Locks(self.table).hand_over(key, waiter.job_id, waiter.job_id, now)  # reserved
            waits.leave(key, waiter)
            self.index.schedule.add(queue, waiter.job_id, waiter.due)
        parked = packed([(job_id, now + PARKED_FOR) for job_id in waiters])
        # NX: a holder that woke one meanwhile put it back at its due time, which stays.
        self.index.schedule.add_packed(queue, [parked], keep_existing=True)


def _by_key(keyed: dict[int, str], due_by_id: Mapping[int, float]) -> dict[str, list[int]]:
    """{key: its jobs of `keyed` ({id: key}), earliest due first}."""
    by_key: dict[str, list[int]] = {}
    for job_id in sorted(keyed, key=lambda job_id: (due_by_id[job_id], job_id)):
        by_key.setdefault(keyed[job_id], []).append(job_id)
    return by_key


def let_go(table: Table, index: Index, jobs: list[ClaimedJob], now: float) -> None:
    """The jobs ended or went back: hand each one's lock to the earliest job waiting on
    it, or free it. If the database or Redis fails, the lock is taken over once this
    job's row has left RUNNING, and the waiting jobs come back when their parking ends."""
    held = [(key, job.id) for job in jobs if (key := lock_of(job)) is not None]
    if not held:
        return
    try:
        _hand_on(table, index, held, now)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        logger.warning("could not hand on the locks %s: %s", [key for key, _ in held], exc)


def _hand_on(table: Table, index: Index, held: list[tuple[str, int]], now: float) -> None:
    """Hand on locks `held`, (key, job id) each: to the earliest waiter still pending, or to
    no one; a few round trips for them all while the waiters are pending."""
    waits = index.lock_waits
    first = waits.pop_each([key for key, _ in held])
    pending = set(Jobs(table).still_pending([w.job_id for w in first if w is not None]))
    free: list[tuple[str, int]] = []
    woken: list[tuple[str, int, float]] = []
    for (key, job_id), waiter in zip(held, first, strict=True):
        while waiter is not None and waiter.job_id not in pending:
            waiter = waits.pop(key)  # cancelled, or run meanwhile: the next one
            if waiter is not None and Jobs(table).still_pending([waiter.job_id]):
                pending.add(waiter.job_id)
        if waiter is None:
            free.append((key, job_id))
        elif Locks(table).hand_over(key, job_id, waiter.job_id, now):
            woken.append((waiter.queue, waiter.job_id, waiter.due))
        else:  # another run took the lock over from this job: the waiter waits on
            waits.join(key, waiter)
    Locks(table).let_go_many(free)
    # One that joined after its list was found empty tried the lock before it was freed:
    # wake it, to take it now.
    late = waits.pop_each([key for key, _ in free]) if free else []
    woken += [(waiter.queue, waiter.job_id, waiter.due) for waiter in late if waiter is not None]
    index.schedule.add_by_queue(woken)
