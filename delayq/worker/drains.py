"""Draining one queue for one turn of a pass: claim due jobs in batches, start each, record
what each came to, and at the end hand back what did not start. Two ways to start a job:

- SequentialDrain (the default): one at a time on the main thread under SIGALRM's time
  limit; in a backlog (a full claim) the next batch is leased, and the group commits
  written, on the bookkeeping thread while this one runs.
- ConcurrentDrain (`--concurrency N`, concurrent.py): each job in the runner's pool (pool.py).

The Drain holds what both share: the jobs claimed and not started, the batch leased ahead,
the outcome buffer and the clean-up at the end. It owns its Turn, what it may take and what
it did, and hands it back to the pass when it ends. What it works with it is given, all in
one TurnNeeds: it never reaches the pass that made it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..flow.gate import Gate
from ..store.index import Journal
from ..store.table import ClaimedJob, Outcome, Written
from .bookkeeper import Bookkeeper
from .calls import Caller
from .claims import Batch, Claimer, without_jobs_in_hand
from .group_commits import OutcomeBuffer
from .heartbeat import HeldLeases
from .interrupts import Abandoned, GracefulStop
from .report import RunReport

logger = logging.getLogger(__name__)


@dataclass
class Turn:
    """A queue's share of a pass: how many jobs its drain may still claim and start, and what
    the drain did, for the pass to add up."""

    queue: str
    batch_size: int
    left: int | None  # jobs it may still claim; None: no other queue waits, all of them
    may_start: int | None  # jobs it may still start under --limit; None: no limit
    report: RunReport = field(default_factory=RunReport)
    calls: int = 0  # jobs started
    abandoned: int | None = None  # a second stop signal: how many calls it handed back

    def over(self) -> bool:
        """Whether the queue has taken its share of this turn."""
        return self.left is not None and self.left <= 0

    def at_limit(self) -> bool:
        return self.may_start is not None and self.calls >= self.may_start

    def room(self, pending: int) -> int:
        """How many jobs the next claim may take with `pending` claimed but not started: a
        batch at most, and within --limit and the turn (already charged for them)."""
        size = self.batch_size
        if self.may_start is not None:
            size = min(size, self.may_start - self.calls - pending)
        if self.left is not None:
            size = min(size, self.left)
        return size

    def took(self, batch: Batch) -> None:
        """Count a claimed batch against the turn and add it to the report."""
        if self.left is not None:
            self.left -= len(batch.jobs)
        self.report.claimed += len(batch.claimed)
        self.report.missed += batch.missed
        self.report.dropped += batch.dropped

    def count(self, written: Written | None) -> None:
        """Add what a write of outcomes did to the report."""
        if written is None:
            return
        self.report.succeeded += written.succeeded
        self.report.failed += written.failed
        self.report.retried += len(written.retries)
        self.report.deferred += len(written.deferred)
        for job_id in written.lost:
            logger.error(
                "job %d finished but its lease had been taken over; this outcome is refused", job_id
            )


@dataclass(frozen=True)
class TurnNeeds:
    """What a drain is given for its queue's turn, each named for what it is: the pass makes
    one per turn (Pass.needs_of), and the drain never reaches the pass itself."""

    claimer: Claimer  # claims batches (here or on the bookkeeping thread), hands jobs back
    gate: Gate  # the queue's pause, limits and locks, as claims and starts meet them
    buffer: OutcomeBuffer  # the turn's outcomes on their way to a group commit
    journal: Journal  # the batch order and start marks that recovery reads
    leases: HeldLeases  # the pass's token, lease deadline, and renewal on the main thread
    clock: Callable[[], float]  # the pass's clock: Redis's, or the `now` a run was given
    bookkeeper: Callable[[], Bookkeeper]  # the runner's bookkeeping thread, started on first use
    must_stop: Callable[[], bool]  # a stop signal, --limit reached or --max-seconds over
    show_progress: Callable[[float | None], None]  # a sign of life to a --processes parent
    stop: GracefulStop | None  # the stop signal's handler, told what a first signal does
    grace: float  # how long calls in flight may take to finish once the run stops


class Drain:
    """One queue's jobs for one turn of a pass: those claimed and not yet started wait here."""

    notes_starts = False  # whether each start is noted in the journal, or each batch's order

    def __init__(self, turn: Turn, needs: TurnNeeds, caller: Caller) -> None:
        self.turn = turn
        self.queue = turn.queue
        self.needs = needs
        self.caller = caller
        self.gate = needs.gate
        self.buffer = needs.buffer
        self.waiting: deque[ClaimedJob] = deque()
        self.due_by_id: dict[int, float] = {}  # of the jobs waiting or in flight
        self.upcoming: Future[Batch | None] | None = None  # leased on the bookkeeping thread
        self.noted = False  # whether the journal holds this run's order or start mark

    def drain(self) -> Turn:
        """Drain the queue for its turn; the turn, with what the drain did."""
        completed = abandoned = False
        try:
            self.pump()
            completed = True
        except Abandoned:  # a second stop signal: what has not finished goes back at once
            abandoned = True
        finally:
            if not (completed or abandoned):
                self.finish_in_flight()
            handed_back = self._hand_back_the_rest()
            self.close()
            self._flush(quietly=not completed)
            self.needs.journal.close()
            if self.noted:
                self.needs.journal.forget_order(self.queue, self.needs.leases.token)
        if abandoned:
            self.turn.abandoned = handed_back
        return self.turn

    def must_stop(self) -> bool:
        """Whether to start nothing more: the pass must stop, or the turn reached --limit."""
        if self.turn.at_limit():
            self.turn.report.stopped_early = True
            return True
        holding = bool(self.waiting) or self.upcoming is not None
        return self.gate.paused(holding) or self.needs.must_stop()

    def pump(self) -> None:
        """Start and record jobs until none is due or the run must stop."""
        raise NotImplementedError

    def finish_in_flight(self) -> None:
        """The pass failed: what the calls still running do about it."""

    def running(self) -> list[ClaimedJob]:
        """The drain is ending: give up on the calls still running, and return their jobs."""
        return []

    def close(self) -> None:
        """Let go of what the drain started."""

    def claim(self, size: int) -> Batch | None:
        """Claim and take up to `size` due jobs on this thread; None if none is due."""
        if size <= 0:
            return None
        claimer, now = self.needs.claimer, self.needs.clock()
        return self.take(
            claimer.claim(self.gate, [], now, size, self.notes_starts, self.startable())
        )

    def startable(self) -> int:
        """How many jobs this drain can start at once: a rate-limited queue's claim takes no
        more, since a start grant is good for START_SLACK only."""
        return 1

    def lease_ahead(self, size: int, before: list[int]) -> None:
        """Claim the next batch on the bookkeeping thread, while the jobs in hand run (none
        of a rate-limited queue: its grants would lapse while they wait)."""
        self.upcoming = self.needs.bookkeeper().submit(
            self.needs.claimer.claim,
            self.gate,
            before,
            self.needs.clock(),
            size,
            self.notes_starts,
            0,
        )

    def take(self, batch: Batch | None) -> Batch | None:
        """Queue up a claimed batch's jobs to start, less those already in hand."""
        if batch is None:
            return None
        self.turn.took(batch)
        self.needs.leases.deadline.leased(batch.leased_at)
        self.noted = self.noted or batch.noted
        batch.jobs = without_jobs_in_hand(batch.jobs, self.due_by_id.keys())
        self.waiting.extend(batch.jobs)
        self.due_by_id.update((job.id, batch.due_by_id[job.id]) for job in batch.jobs)
        self.gate.took(batch, batch.jobs)
        return batch

    def take_upcoming(self) -> Batch | None:
        """Take in the batch leased ahead, waiting for it; None if none was due."""
        upcoming, self.upcoming = self.upcoming, None
        assert upcoming is not None
        return self.take(upcoming.result())

    def record(self, outcomes: list[Outcome]) -> None:
        """Journal or write finished calls, then announce them: a hook sees a recorded one."""
        for outcome in outcomes:
            self.due_by_id.pop(outcome.job.id, None)
        self.gate.let_go([outcome.job for outcome in outcomes])
        more = bool(self.waiting) or self.busy()
        self.turn.count(self.buffer.add_many(outcomes, more_coming=more))
        for outcome in outcomes:
            self.caller.announce(outcome)

    def busy(self) -> bool:
        return False

    def hold_leases(self) -> None:
        """Before starting more jobs: if the heartbeat fell behind, drop the waiting jobs
        another run has taken over meanwhile; hand back those whose start grant lapsed."""
        if self.waiting:
            self._hand_back_lapsed_grants()
        leases = self.needs.leases
        if self.waiting and leases.deadline.may_lapse():
            held = leases.reassert(list(self.waiting))
            taken_over = [job.id for job in self.waiting if job.id not in held]
            for job_id in taken_over:  # not ours to run, nor to hand back
                del self.due_by_id[job_id]
            # Nor are their running slots ours to free: the run that took them holds them.
            self.gate.taken_over(taken_over)
            self.waiting = deque(job for job in self.waiting if job.id in held)

    def _hand_back_lapsed_grants(self) -> None:
        """A rate-limited queue's waiting jobs whose start grants are about to lapse (the
        Gate says which) go back to the schedule, at their places in due order. Their
        grants stay spent: handing them back never lets the window hold more."""
        lapsed = self.gate.lapsed(self.waiting)
        if not lapsed:
            return
        ids = {job.id for job in lapsed}
        self.waiting = deque(job for job in self.waiting if job.id not in ids)
        self.needs.claimer.hand_back(self.queue, lapsed, self.due_by_id, self.needs.clock())
        self.gate.let_go(lapsed)
        for job_id in ids:
            del self.due_by_id[job_id]
        logger.info(
            "queue %s: %d jobs not started in time for their rate grants; handed back",
            self.queue,
            len(lapsed),
        )

    def _hand_back_the_rest(self) -> int:
        """Jobs not started, the batch leased ahead and calls still running go back to
        pending (the late results of those calls are refused); how many calls were running."""
        if self.upcoming is not None:
            try:
                self.take_upcoming()
            except Exception as exc:  # noqa: BLE001 - already stopping; its leases bring it back
                logger.error(
                    "could not lease the next batch (%s); its leases will bring it back", exc
                )
        running = self.running()
        if running:
            logger.warning(
                "%d jobs were still running when the run stopped; handed back", len(running)
            )
        unfinished = list(self.waiting) + running
        self.waiting.clear()
        self.needs.claimer.hand_back(self.queue, unfinished, self.due_by_id, self.needs.clock())
        self.gate.let_go(unfinished)
        if running:
            started = (self.needs.leases.token, [job.id for job in running])
            self.needs.journal.forget(self.queue, [], started)
        return len(running)

    def _flush(self, quietly: bool) -> None:
        """Record what the buffer holds. If that fails, what is not in the table yet is
        written there alone (`salvage`): Redis, and the journal with it, may be what failed.
        Then the failure is raised, or with `quietly` (already failing) logged."""
        try:
            self.turn.count(self.buffer.flush())
            return
        except Exception as exc:
            failure = exc
        try:
            self.turn.count(self.buffer.salvage())
            fallback = "wrote them to the table alone"
        except Exception as exc:  # noqa: BLE001 - already failing
            # Journaled (by now, if Redis answers), they are settled by lease recovery.
            fallback = f"nor to the table alone ({exc}); the next run settles them"
        if not quietly:
            raise failure
        logger.error("could not record outcomes (%s); %s", failure, fallback)


class SequentialDrain(Drain):
    """Each job's handler on the main thread, one at a time, under its time limit."""

    def pump(self) -> None:
        while not self.must_stop():
            batch = self.take_upcoming() if self.upcoming is not None else None
            if batch is None and not self.turn.over():
                batch = self.claim(self.turn.room(0))
            if batch is None:
                return
            # A full batch means a backlog: lease the next one on the bookkeeping thread
            # while this one runs, and write its commits there too.
            room = self.turn.room(len(self.waiting))
            if len(batch.claimed) == batch.size and room > 0:
                self.buffer.write_on(self.needs.bookkeeper())
                self.lease_ahead(room, [job.id for job in self.waiting])
            self._call_waiting()

    def _call_waiting(self) -> None:
        while self.waiting and not self.must_stop():
            self.hold_leases()
            if not self.waiting:
                return
            job = self.waiting[0]
            self.turn.calls += 1
            self.needs.show_progress(self.caller.limit_of(job))
            outcome = self.caller.execute(job)
            self.waiting.popleft()  # not before: a job whose call the run abandons goes back
            self.record([outcome])
