"""Draining one queue for one turn of a pass: claim due jobs in batches, start each, record
what each came to, and at the end hand back what did not start. Two ways to start a job:

- SequentialDrain (the default): one at a time on the main thread under SIGALRM's time
  limit; in a backlog (a full claim) the next batch is leased, and the group commits
  written, on the bookkeeping thread while this one runs.
- ConcurrentDrain (`--concurrency N`, concurrent.py): each job on a free slot (slots.py).

The Drain holds what both share: the jobs claimed and not started, the batch leased ahead,
the outcome buffer and the clean-up at the end.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Protocol

from ..config import Settings
from ..store.index import Index
from ..store.outcomes import Outcome, Written
from ..store.table import ClaimedJob, Table
from .bookkeeper import Bookkeeper
from .calls import Caller
from .claims import Batch, Claimer, without_jobs_in_hand
from .heartbeat import LeaseDeadline
from .interrupts import GracefulStop
from .outcomes import OutcomeBuffer
from .report import RunReport

logger = logging.getLogger(__name__)


class Run(Protocol):
    """What a drain reads of the pass it serves, and asks of it (run.py's Run)."""

    settings: Settings
    table: Table
    index: Index
    token: str
    clock: Callable[[], float]
    claimer: Claimer
    deadline: LeaseDeadline
    report: RunReport
    stop: GracefulStop | None
    calls: int  # jobs started: a drain counts each as it starts it

    def bookkeeper(self) -> Bookkeeper: ...
    def turn_over(self) -> bool: ...
    def room(self, pending: int) -> int: ...
    def took(self, batch: Batch) -> None: ...
    def should_stop(self) -> bool: ...
    def show_progress(self, limit: float | None = None) -> None: ...
    def reassert_leases(self, jobs: Sequence[ClaimedJob]) -> set[int]: ...
    def count(self, written: Written | None) -> None: ...


class Drain:
    """One queue's jobs for one turn of `run`: those claimed and not yet started wait here."""

    notes_starts = False  # whether each start is noted in the journal, or each batch's order

    def __init__(self, run: Run, queue: str, caller: Caller) -> None:
        self.run = run
        self.queue = queue
        self.caller = caller
        self.buffer = OutcomeBuffer(run.table, run.index, queue, run.token)
        self.waiting: deque[ClaimedJob] = deque()
        self.due_by_id: dict[int, float] = {}  # of the jobs waiting or in flight
        self.upcoming: Future[Batch | None] | None = None  # leased on the bookkeeping thread
        self.noted = False  # whether the journal holds this run's order or start mark

    def drain(self) -> None:
        completed = False
        try:
            self.pump()
            completed = True
        finally:
            if not completed:
                self.finish_in_flight()
            self._hand_back_the_rest()
            self.close()
            self._flush(quietly=not completed)
            self.run.index.journal.close()
            if self.noted:
                self.run.index.journal.forget_order(self.queue, self.run.token)

    def pump(self) -> None:
        """Start and record jobs until none is due or the run must stop."""
        raise NotImplementedError

    def finish_in_flight(self) -> None:
        """The pass failed: what the calls still running do about it."""

    def running(self) -> list[ClaimedJob]:
        """The run is stopping: give up on the calls still running, and return their jobs."""
        return []

    def close(self) -> None:
        """Let go of what the drain started."""

    def claim(self, size: int) -> Batch | None:
        """Claim and take up to `size` due jobs on this thread; None if none is due."""
        if size <= 0:
            return None
        return self.take(
            self.run.claimer.claim(self.queue, [], self.run.clock(), size, self.notes_starts)
        )

    def lease_ahead(self, size: int, before: list[int]) -> None:
        """Claim the next batch on the bookkeeping thread, while the jobs in hand run."""
        self.upcoming = self.run.bookkeeper().submit(
            self.run.claimer.claim, self.queue, before, self.run.clock(), size, self.notes_starts
        )

    def take(self, batch: Batch | None) -> Batch | None:
        """Queue up a claimed batch's jobs to start, less those already in hand."""
        if batch is None:
            return None
        self.run.took(batch)
        self.noted = self.noted or batch.noted
        batch.jobs = without_jobs_in_hand(batch.jobs, self.due_by_id.keys())
        self.waiting.extend(batch.jobs)
        self.due_by_id.update((job.id, batch.due_by_id[job.id]) for job in batch.jobs)
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
        more = bool(self.waiting) or self.busy()
        self.run.count(self.buffer.add_many(outcomes, more_coming=more))
        for outcome in outcomes:
            self.caller.announce(outcome)

    def busy(self) -> bool:
        return False

    def hold_leases(self) -> None:
        """Before starting more jobs: if the heartbeat fell behind, drop the waiting jobs
        another run has taken over meanwhile."""
        if self.waiting and self.run.deadline.may_lapse():
            held = self.run.reassert_leases(list(self.waiting))
            for job in self.waiting:
                if job.id not in held:  # not ours to run, nor to hand back
                    del self.due_by_id[job.id]
            self.waiting = deque(job for job in self.waiting if job.id in held)

    def _hand_back_the_rest(self) -> None:
        """Jobs not started, the batch leased ahead and calls still running go back to
        pending (the late results of those calls are refused)."""
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
        self.run.claimer.hand_back(self.queue, unfinished, self.due_by_id, self.run.clock())
        if running:
            started = (self.run.token, [job.id for job in running])
            self.run.index.journal.forget(self.queue, [], started)

    def _flush(self, quietly: bool) -> None:
        """Record what the buffer holds. If that fails, what is not in the table yet is
        written there alone (`salvage`): Redis, and the journal with it, may be what failed.
        Then the failure is raised, or with `quietly` (already failing) logged."""
        try:
            self.run.count(self.buffer.flush())
            return
        except Exception as exc:
            failure = exc
        try:
            self.run.count(self.buffer.salvage())
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
        while not self.run.should_stop():
            batch = self.take_upcoming() if self.upcoming is not None else None
            if batch is None and not self.run.turn_over():
                batch = self.claim(self.run.room(0))
            if batch is None:
                return
            # A full batch means a backlog: lease the next one on the bookkeeping thread
            # while this one runs, and write its commits there too.
            room = self.run.room(len(self.waiting))
            if len(batch.claimed) == batch.size and room > 0:
                self.buffer.write_on(self.run.bookkeeper())
                self.lease_ahead(room, [job.id for job in self.waiting])
            self._call_waiting()

    def _call_waiting(self) -> None:
        run = self.run
        while self.waiting and not run.should_stop():
            self.hold_leases()
            if not self.waiting:
                return
            job = self.waiting[0]
            run.calls += 1
            run.show_progress(self.caller.limit_of(job))
            outcome = self.caller.execute(job)
            self.waiting.popleft()  # not before: a job whose call the run abandons goes back
            self.record([outcome])
