"""Claiming a batch: due members out of the schedule (atomically, in Redis), their rows leased
to this run (a guarded UPDATE), their order noted for recovery; and handing unstarted jobs
back to the schedule. A Claimer holds only what stays fixed for a run, so the main thread and
the bookkeeping thread (leasing a backlog's next batch) can both use it; what a claim asks of
the queue's pause, limits and locks, it asks the queue's Gate (delayq/flow/gate.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ..base.durations import format_instant
from ..flow.gate import Gate
from ..store.index import Index, Tally, handler_label, job_id_of
from ..store.table import ClaimedJob, DueRows, Leases, Outcomes, Table
from .handlers import handler_of

logger = logging.getLogger(__name__)


@dataclass
class Batch:
    """Jobs claimed and leased together: those won, in the order they run."""

    size: int  # how many were asked for
    claimed: list[tuple[str, float]]
    due_by_id: dict[int, float]
    jobs: list[ClaimedJob]
    leased_at: float = 0.0  # monotonic
    missed: int = 0
    dropped: int = 0
    noted: bool = False  # whether its order (after the batch before it) was noted
    rate_limited: bool = False  # its queue has a rate limit: start its jobs by START_SLACK
    slotted: bool = False  # its queue has a concurrency limit: each job holds a slot
    claimed_at: float = 0.0  # the claim's time, when its queue's window counts the grants

    @property
    def start_at_once(self) -> bool:
        """Whether its queue has a limit: its jobs start at once, none is leased ahead."""
        return self.rate_limited or self.slotted


class Claimer:
    def __init__(
        self,
        table: Table,
        index: Index,
        token: str,
        lease: float,
        since: float,
        php_classes: Mapping[str, str],
    ) -> None:
        self.table = table
        self.index = index
        self.token = token
        self.lease = lease
        self.since = since  # a job due longer ago than this is missed, not run
        self.php_classes = php_classes  # to count a PHP producer's missed job by its handler

    def claim(
        self,
        gate: Gate,
        before: list[int],
        now: float,
        size: int,
        notes_starts: bool = False,
        startable: int | None = None,
    ) -> Batch | None:
        """Claim up to `size` due members of the queue of `gate` (of a rate-limited queue, up
        to `startable`: what the run can start at once), lease their rows and note their order
        after `before` (the batch still running, so that recovery can tell which job was
        running) or, for a run noting each start, that it does; None if none is due. The
        caller counts it."""
        queue = gate.queue
        claimed = gate.claim_due(now, size, startable, now + self.lease)
        if not claimed:
            return None
        batch = Batch(
            size,
            claimed,
            {},
            [],
            rate_limited=claimed.rate_limited,
            slotted=claimed.slotted,
            claimed_at=now,
        )
        for member, score in claimed:
            job_id = job_id_of(member)
            if job_id is None:
                batch.dropped += 1
                logger.warning("queue %s: dropped index member %r: not a job id", queue, member)
            else:
                batch.due_by_id[job_id] = score
        try:
            runnable, jobs = self._lease(batch, gate, now)
        except Exception:
            # The claim took them off the schedule: a database that fails the lease (a
            # failover, a primary turned read-only) would leave their rows pending with no
            # entry until the orphan sweep, 30 s on. Their rows decide, as ever.
            self._put_back_unleased(gate, batch)
            raise
        if len(jobs) < len(runnable):
            self._put_back_not_due(queue, [job.id for job in jobs], runnable, now)
        batch.dropped += len(runnable) - len(jobs)
        # A job whose lock another job holds goes back to pending, to wait for it.
        jobs = gate.admit(jobs, batch.due_by_id, now)
        batch.jobs = without_jobs_in_hand(jobs, set(before))
        batch.jobs.sort(key=lambda job: (batch.due_by_id[job.id], job.id))
        order = before + [job.id for job in batch.jobs]
        members = [member for member, _ in claimed]
        # The slots and start grants of members not leased come free now (none of them
        # starts here: an entry of a job that ran already, one not due, one whose lock is
        # held); a slot held by a job this run calls already (its lease lapsed in a stall,
        # and it came back) stays with that call.
        unleased = _not_in(members, order)
        self.index.leased(
            queue,
            members,
            self.token,
            [] if notes_starts else order,
            notes_starts,
            unslotted=unleased if batch.slotted else [],
            ungranted=unleased if batch.rate_limited else [],
            claimed_at=now,
        )
        batch.noted = notes_starts or len(order) > 1
        return batch

    def _lease(self, batch: Batch, gate: Gate, now: float) -> tuple[list[int], list[ClaimedJob]]:
        """Mark the claimed jobs due too long ago missed, and lease the others' rows; the
        ids tried and the jobs won."""
        late = self._late(gate, batch.due_by_id, now)
        batch.missed = self._mark_missed(batch, gate.queue, late, now)
        on_time = set(batch.due_by_id) - set(late)
        runnable = [job_id for job_id in batch.due_by_id if job_id in on_time]
        batch.leased_at = time.monotonic()
        jobs = Leases(self.table).mark_running(
            runnable, self.token, now + self.lease, now, due_by=now
        )
        return runnable, jobs

    def _put_back_unleased(self, gate: Gate, batch: Batch) -> None:
        """Claimed jobs whose rows the database would not lease go back on the schedule, and
        the running slots and start grants the claim took for them come free: none of them
        runs here."""
        due_by_id = batch.due_by_id
        try:
            self.index.schedule.add_many(gate.queue, list(due_by_id.items()))
            gate.give_back(batch, list(due_by_id))
        except Exception as exc:  # noqa: BLE001 - the orphan sweep puts them back later
            logger.warning("could not put %d claimed jobs back yet: %s", len(due_by_id), exc)

    def _late(self, gate: Gate, due_by_id: dict[int, float], now: float) -> list[int]:
        """The claimed jobs due longer ago than the window, counted from the queue's last
        resume for a job that fell due while it was paused: a pause never makes a job late."""
        cutoff = now - self.since
        late = [job_id for job_id, due in due_by_id.items() if due < cutoff]
        if not late:
            return []
        resumed_at = gate.resumed_at()
        return [job_id for job_id in late if max(due_by_id[job_id], resumed_at) < cutoff]

    def hand_back(
        self, queue: str, jobs: list[ClaimedJob], due_by_id: dict[int, float], now: float
    ) -> None:
        """Unstarted (or abandoned) jobs go back to pending and onto the schedule at once."""
        if not jobs:
            return
        try:
            released = Leases(self.table).release([job.id for job in jobs], self.token, now)
            self.index.schedule.add_many(
                queue, [(job_id, due_by_id[job_id]) for job_id, _ in released]
            )
        except Exception as exc:  # noqa: BLE001 - their leases bring them back anyway
            logger.error("could not hand %d jobs back (%s); their leases will", len(jobs), exc)

    def _put_back_not_due(
        self, queue: str, won: list[int], runnable: list[int], now: float
    ) -> None:
        """Entries whose rows are pending but due later (the row moved past a stale entry a
        walk of the table left) go back at the rows' own due times."""
        taken = set(won)
        later = DueRows(self.table).pending_due_after(
            [job_id for job_id in runnable if job_id not in taken], now
        )
        if later:
            self.index.schedule.add_many(queue, later)
            logger.info(
                "queue %s: %d entries were early; back at their rows' times", queue, len(later)
            )

    def _mark_missed(self, batch: Batch, queue: str, ids: list[int], now: float) -> int:
        if not ids:
            return 0
        message = (
            f"missed: due more than {self.since:g}s before the run at "
            f"{format_instant(now)}; `delayq retry ID` runs it"
        )
        missed, occurrences = Outcomes(self.table).mark_missed_and_rearm(
            ids, self.token, message, now
        )
        batch.dropped += len(ids) - len(missed)
        self.index.schedule.add_many(queue, occurrences)
        tally = Tally(queue)
        for job in missed:
            tally.count(handler_label(*handler_of(job.params, self.php_classes)), "missed", now)
        try:
            self.index.tallies.add(tally)
        except Exception as exc:  # noqa: BLE001 - metrics are best-effort; the table has them
            logger.warning("could not count %d missed jobs in the metrics: %s", len(missed), exc)
        logger.warning("%d jobs missed the run window (ids %s)", len(missed), _preview(ids))
        return len(missed)


def without_jobs_in_hand(jobs: list[ClaimedJob], in_hand: Collection[int]) -> list[ClaimedJob]:
    """`jobs` less those this run is calling already. Such a job is back in a claim when
    its lease lapsed during a stall (a locked table, a paused process) and another run put
    it back on the schedule: the lease is this run's again, and the call in hand records
    its outcome under it. Calling it a second time would run it twice."""
    if not in_hand:
        return jobs
    again = [job.id for job in jobs if job.id in in_hand]
    if again:
        logger.warning(
            "jobs %s came back while this run still calls them (their leases lapsed); "
            "the calls in hand settle them",
            _preview(again),
        )
    return [job for job in jobs if job.id not in in_hand]


def _not_in(members: list[str], job_ids: list[int]) -> list[str]:
    kept = {str(job_id) for job_id in job_ids}
    return [member for member in members if member not in kept]


def _preview(ids: list[int]) -> str:
    shown = ", ".join(str(job_id) for job_id in ids[:10])
    return shown + (", ..." if len(ids) > 10 else "")
