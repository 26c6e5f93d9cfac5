"""Flow control at run time: one Gate per queue's turn of a pass, the one thing a claim and a
drain ask about the queue's pause, limits and locks. Before a job starts: has the queue been
paused since its jobs were claimed (asked at most every PAUSE_LOOK), has its rate grant lapsed.
For a claim: the claim itself, the queue's settings put back first if Redis lost them; when
the queue last resumed; which of the leased jobs hold their locks. After jobs end or go back:
one call frees their running slots and hands their locks on. And the running slots a pass
holds (HeldSlots), which the heartbeat renews with the leases.

The limits themselves are counted in Redis, by the claim (store/index/lua/claim_due.lua): a
Gate keeps only what a run holds of them between the claim and the job's end.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from ..store.index import START_SLACK, Claimed, FlowUnknown, Index
from ..store.table import ClaimedJob, Table
from . import locking
from .settings import restore, settings_of

logger = logging.getLogger(__name__)

# How often a drain holding jobs it has not started asks whether their queue was paused
# meanwhile: a job claimed before `delayq pause` returned starts no later than this after it.
PAUSE_LOOK = 0.25


class HeldSlots:
    """The running slots a pass's jobs of concurrency-limited queues hold, {queue: ids}: the
    gates add a job's as it is claimed and free it as the job ends or goes back, and the
    heartbeat renews those held with the leases, so that a slot lapses with its lease (a
    killed run's) and never while its job runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, set[int]] = {}

    def hold(self, queue: str, job_ids: list[int]) -> None:
        with self._lock:
            self._held.setdefault(queue, set()).update(job_ids)

    def release(self, queue: str, job_ids: list[int]) -> list[int]:
        """Stop holding the slots of those of `job_ids` that held one; returns them."""
        with self._lock:
            held = self._held.get(queue, set())
            released = [job_id for job_id in job_ids if job_id in held]
            held.difference_update(released)
            return released

    def held(self) -> dict[str, list[int]]:
        with self._lock:
            return {queue: sorted(ids) for queue, ids in self._held.items() if ids}

    def renew(self, index: Index, until: float) -> None:
        """Renew the slots held to `until`, before the leases of their jobs: a slot must not
        lapse while its job, whose lease is renewed, still runs. If Redis does not answer,
        the leases are renewed all the same: a job run twice is worse than a limit exceeded."""
        held = self.held()
        if not held:
            return
        try:
            index.hold_slots(held, until)
        except Exception as exc:  # noqa: BLE001 - the claims that would use them fail too
            logger.warning("could not renew the running slots of %s: %s", ", ".join(held), exc)


class Claim(Protocol):
    """What a gate needs to know of a claim: whether its queue had a rate limit (each job
    took a start grant, at `claimed_at`) or a concurrency limit (each job took a slot)."""

    rate_limited: bool
    slotted: bool
    claimed_at: float


class Gate:
    """One queue's flow control for one turn of a pass. Its claims may run on the bookkeeping
    thread (a backlog's next batch); what it keeps between calls, the pause look and the
    start grants of jobs in hand, only the drain's main thread reads and writes."""

    def __init__(
        self,
        table: Table,
        index: Index,
        queue: str,
        token: str,
        clock: Callable[[], float],
        held: HeldSlots,
    ) -> None:
        self.table = table
        self.index = index
        self.queue = queue
        self.clock = clock
        self.held = held  # the pass's, which the heartbeat renews
        self.locking = locking.Locking(table, index, token)
        self._paused = False  # the queue was paused: what waits goes back, nothing starts
        self._looked_at = float("-inf")  # monotonic
        # Of a rate-limited queue's jobs in hand: when their claim took their start grants.
        self._granted_at: dict[int, float] = {}

    # Before a job starts.

    def paused(self, holding: bool) -> bool:
        """Whether the queue has been paused since the jobs in hand were claimed (the claim
        itself refuses a paused queue), asked at most every PAUSE_LOOK while the drain is
        `holding` jobs it has not started; once seen paused, it stays so for the turn."""
        if self._paused or not holding:
            return self._paused
        if time.monotonic() - self._looked_at >= PAUSE_LOOK:
            self._looked_at = time.monotonic()
            self._paused = settings_of(self.table, self.index.flow, self.queue).paused
            if self._paused:
                logger.info("queue %s was paused; handing back the jobs not started", self.queue)
        return self._paused

    def lapsed(self, waiting: Iterable[ClaimedJob]) -> list[ClaimedJob]:
        """Those of the jobs `waiting` to start whose start grants are about to lapse: claimed
        longer than half the start slack ago. A grant covers a start until START_SLACK after
        the claim, and the other half is the thread's to begin the call."""
        if not self._granted_at:
            return []
        cutoff = self.clock() - START_SLACK / 2
        return [job for job in waiting if self._granted_at.get(job.id, cutoff) < cutoff]

    # What a claim needs.

    def claim_due(self, now: float, size: int, startable: int | None, until: float) -> Claimed:
        """The claim of up to `size` due members (of a limited queue, up to `startable`, each
        slot held `until`), after putting the queue's flow settings back from the table if
        Redis lost them: a paused or limited queue must not read as free because Redis
        forgot it."""
        while True:
            try:
                return self.index.schedule.claim_due(self.queue, now, size, startable, until)
            except FlowUnknown:
                restore(self.table, self.index.flow, [self.queue])

    def resumed_at(self) -> float:
        """When the queue last resumed (0: never paused), from which a job that fell due
        while it was paused counts as late."""
        return settings_of(self.table, self.index.flow, self.queue).resumed_at or 0.0

    def admit(
        self, jobs: list[ClaimedJob], due_by_id: Mapping[int, float], now: float
    ) -> list[ClaimedJob]:
        """Of `jobs`, just leased, those free to start: without a lock, or holding theirs
        now. The others go back to pending and wait on their locks (locking.py)."""
        return self.locking.take(self.queue, jobs, due_by_id, now)

    def give_back(self, claim: Claim, job_ids: Sequence[int]) -> None:
        """The running slots and start grants `claim` took for jobs none of which runs here
        (their rows would not lease) come free; one round trip each."""
        if claim.slotted:
            self.index.free_slots(self.queue, list(job_ids))
        if claim.rate_limited:
            members = [str(job_id) for job_id in job_ids]
            self.index.return_grants(self.queue, members, claim.claimed_at)

    def took(self, claim: Claim, jobs: Sequence[ClaimedJob]) -> None:
        """The drain has `jobs` of `claim` in hand: hold their running slots, for the
        heartbeat to renew, and note when their start grants were taken."""
        if claim.slotted:
            self.held.hold(self.queue, [job.id for job in jobs])
        if claim.rate_limited:
            self._granted_at.update((job.id, claim.claimed_at) for job in jobs)

    # After jobs end or go back.

    def let_go(self, jobs: list[ClaimedJob]) -> None:
        """Free the running slots and hand on the locks of jobs that ended or went back, so
        that the next job may start at once; if Redis does not answer, each slot lapses with
        the lease it was last renewed to (locking.py says what comes of a lock)."""
        for job in jobs:
            self._granted_at.pop(job.id, None)
        locking.let_go(self.table, self.index, jobs, self.clock())
        released = self.held.release(self.queue, [job.id for job in jobs])
        if not released:
            return
        try:
            self.index.free_slots(self.queue, released)
        except Exception as exc:  # noqa: BLE001 - the slots lapse with their leases
            logger.warning(
                "could not free %d running slots of %s: %s", len(released), self.queue, exc
            )

    def taken_over(self, job_ids: list[int]) -> None:
        """Another run took these jobs over (this run's leases lapsed): their running slots
        are that run's now, neither ours to renew nor to free."""
        self.held.release(self.queue, job_ids)
