"""One pass of `delayq run`: settle the jobs of dead runs, re-index orphans, then claim due
jobs in batches, call each handler in-process under its time limit, and hand the outcomes to
the journal and its group commits.

A Run owns the order of those steps and the pass's own state; the table decides who wins a
job (store/leases.py), the index only hands out due ids, claims.py leases, calls.py calls,
outcomes.py records, retry.py says when. Three threads take part, each with what it owns:
the main thread (the Run, its Caller, its report), the heartbeat (heartbeat.py) and, once a
backlog shows up, the bookkeeper (the next batch's claim and the group commits). What the
main thread and the heartbeat share is the LeaseDeadline, behind its lock.
"""

from __future__ import annotations

import logging
import signal
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..config import DEFAULT_QUEUE, Settings
from ..store import leases
from ..store.index import ScheduleIndex
from ..store.table import ClaimedJob, Table
from . import interrupts, recovery
from .bookkeeper import Bookkeeper
from .calls import Caller
from .claims import Batch, Claimer
from .heartbeat import Heartbeat, LeaseDeadline
from .hooks import load_reporters
from .interrupts import Abandoned, GracefulStop
from .liveness import Liveness
from .outcomes import OutcomeBuffer, Settled
from .report import OutcomeCallback, RunReport

logger = logging.getLogger(__name__)


@dataclass
class RunLimits:
    since: float
    limit: int | None
    max_seconds: float
    sweep: bool = True  # recover leases and re-index orphans before claiming
    # Batches a queue may take in its turn while other queues wait (default 1 each).
    weights: Mapping[str, int] = field(default_factory=dict)


def known_queues(index: ScheduleIndex) -> list[str]:
    """Every queue the index has met, and always the default one, which producers that
    write rows themselves use without registering it."""
    return sorted(set(index.queues()) | {DEFAULT_QUEUE})


class Run:
    """One pass: its lease token, its limits, what it has run and what it reports."""

    def __init__(
        self,
        settings: Settings,
        table: Table,
        index: ScheduleIndex,
        limits: RunLimits,
        clock: Callable[[], float],
        on_outcome: OutcomeCallback | None = None,
        stop: GracefulStop | None = None,
        liveness: Liveness | None = None,
    ) -> None:
        self.settings = settings
        self.table = table
        self.index = index
        self.limits = limits
        self.clock = clock
        self.on_outcome = on_outcome
        self.reporters = load_reporters(settings)  # before any claim: a bad hook runs no job
        self.stop = stop
        self.liveness = liveness
        self.token = uuid.uuid4().hex
        self.report = RunReport()
        self.started_at = time.monotonic()
        self.calls = 0
        self.noted_order = False
        self.deadline = LeaseDeadline(settings.lease)
        self.claimer = Claimer(table, index, self.token, settings.lease, limits.since)
        self.bookkeeper: Bookkeeper | None = None  # started once a backlog shows up
        self.turn_left: int | None = None  # jobs the queue being drained may still take

    def execute(self, queues: Sequence[str] | None) -> RunReport:
        """Run the pass, note it for `delayq status`, and return its report."""
        started_at = self.clock()
        self.beat()
        try:
            self._run_queues(queues)
        except Exception as exc:
            self._record(started_at, f"failed: {type(exc).__name__}")
            raise
        if self.stop is not None and self.stop.requested:
            self.report.interrupted = self.stop.signum
        self._record(started_at, _outcome_word(self.report))
        return self.report

    def _run_queues(self, queues: Sequence[str] | None) -> None:
        heartbeat = Heartbeat(self.table, self.token, self.clock, self.deadline)
        try:
            with interrupts.time_limits() as enabled, heartbeat:
                caller = self._caller(enabled)
                try:
                    self._run_each_queue(queues, caller)
                finally:
                    caller.close()
        except Abandoned:
            logger.warning("run abandoned its current job; it is back on the schedule")
        finally:
            if self.bookkeeper is not None:
                self.bookkeeper.close()
                self.bookkeeper = None

    def _run_each_queue(self, queues: Sequence[str] | None, caller: Caller) -> None:
        """Serve the queues in turn, each its weight in batches a turn, so a backlog in one
        delays another queue's due jobs by about one batch, not by the whole backlog."""
        self.report.reindexed += recovery.ensure_index(self.table, self.index, self.beat)
        names = list(queues) if queues else known_queues(self.index)
        if self.limits.sweep:
            for queue in names:
                self._sweep(queue)
        active = names
        while active and not self._should_stop():
            active = [queue for queue in active if self._take_turn(queue, caller, len(active))]

    def _take_turn(self, queue: str, caller: Caller, queues_left: int) -> bool:
        """Drain `queue` for one turn (all of it when no other queue waits); whether it
        stopped because its turn was over, so it may have more."""
        weight = self.limits.weights.get(queue, 1)
        self.turn_left = None if queues_left == 1 else weight * self.settings.batch_size
        self._drain(queue, caller)
        return self.turn_over()

    def turn_over(self) -> bool:
        return self.turn_left is not None and self.turn_left <= 0

    def took(self, batch: Batch) -> None:
        """Count a claimed batch against the queue's turn and add it to the report."""
        if self.turn_left is not None:
            self.turn_left -= len(batch.jobs)
        self._add_counts(batch)

    def _caller(self, time_limits: bool) -> Caller:
        """Handlers run on this (the main) thread, under SIGALRM where it can reach them."""
        return Caller(self.settings, self.clock, time_limits, self.on_outcome, self.reporters)

    def _record(self, started_at: float, outcome: str) -> None:
        self.report.elapsed = time.monotonic() - self.started_at
        try:
            self.index.record_run(started_at, self.report.elapsed, outcome, self.report.ran)
        except Exception as exc:  # noqa: BLE001 - a run is not failed by its own bookkeeping
            logger.warning("could not record the run for `delayq status`: %s", exc)

    def _sweep(self, queue: str) -> None:
        now = self.clock()
        recovered = recovery.recover_leases(self.table, self.index, queue, now)
        self.report.recovered += recovered.requeued + recovered.journaled
        self.report.failed += recovered.poisoned
        self.report.reindexed += recovery.reindex_orphans(self.table, self.index, queue, now)

    def _drain(self, queue: str, caller: Caller) -> None:
        buffer = OutcomeBuffer(self.table, self.index, queue, self.token)
        upcoming: Future[Batch | None] | None = None
        completed = False
        try:
            batch = self._claim(queue)
            while batch is not None:
                # A full batch means a backlog: lease the next one on the bookkeeping thread
                # while this one runs, and write its commits there too.
                room = self._room_after(batch)
                if len(batch.claimed) == batch.size and room > 0:
                    buffer.bookkeeper = self._bookkeeper()
                    upcoming = buffer.bookkeeper.submit(
                        self.claimer.claim, queue, batch.order, self.clock(), room
                    )
                self._process_batch(queue, batch, buffer, caller)
                if self._should_stop():
                    break
                if upcoming is not None:
                    batch, upcoming = upcoming.result(), None
                    if batch is not None:
                        continue
                batch = self._claim(queue)
            completed = True
        finally:
            if upcoming is not None:
                self._hand_back_upcoming(queue, upcoming)
            self._flush(buffer, quietly=not completed)
            self.index.journal.close()
            if self.noted_order:
                self.index.journal.forget_order(queue, self.token)
                self.noted_order = False

    def _claim(self, queue: str) -> Batch | None:
        """The next batch on the main thread, unless the run should stop."""
        if self._should_stop() or self.turn_over():
            return None
        return self.claimer.claim(queue, [], self.clock(), self.room(0))

    def _room_after(self, batch: Batch) -> int:
        """How many jobs the next batch may take while this one runs."""
        return self.room(len(batch.jobs))

    def room(self, pending: int, charged: bool = False) -> int:
        """How many jobs the next claim may take with `pending` claimed but not started: a
        batch at most, and within --limit and the queue's turn. `charged`: the turn was
        charged for the pending jobs when they were claimed (a concurrent drain), not yet
        (a batch leased ahead while the one before it runs)."""
        size = self.settings.batch_size
        if self.limits.limit is not None:
            size = min(size, self.limits.limit - self.calls - pending)
        if self.turn_left is not None:
            size = min(size, self.turn_left - (0 if charged else pending))
        return size

    def _bookkeeper(self) -> Bookkeeper:
        if self.bookkeeper is None:
            self.bookkeeper = Bookkeeper(self.table)
        return self.bookkeeper

    def _hand_back_upcoming(self, queue: str, upcoming: Future[Batch | None]) -> None:
        """The run stopped with the next batch already leased: it goes back unstarted."""
        try:
            batch = upcoming.result()
        except Exception as exc:  # noqa: BLE001 - already stopping; its leases bring it back
            logger.error("could not lease the next batch (%s); its leases will bring it back", exc)
            return
        if batch is not None:
            self._add_counts(batch)
            self.claimer.hand_back(queue, batch.jobs, batch.due_by_id, self.clock())

    def _add_counts(self, batch: Batch) -> None:
        self.report.claimed += len(batch.claimed)
        self.report.missed += batch.missed
        self.report.dropped += batch.dropped
        self.noted_order = self.noted_order or batch.noted

    def _flush(self, buffer: OutcomeBuffer, quietly: bool) -> None:
        """Record what the buffer holds. If that fails, what is not in the table yet is
        written there alone (`salvage`): Redis, and the journal with it, may be what failed.
        Then the failure is raised, or with `quietly` (already failing) logged."""
        try:
            self._count(buffer.flush())
            return
        except Exception as exc:
            failure = exc
        try:
            self._count(buffer.salvage())
            fallback = "wrote them to the table alone"
        except Exception as exc:  # noqa: BLE001 - already failing
            # What was journaled is settled by the next run's recovery; the rest by leases.
            fallback = f"nor to the table alone ({exc}); the next run settles them"
        if not quietly:
            raise failure
        logger.error("could not record outcomes (%s); %s", failure, fallback)

    def _should_stop(self) -> bool:
        if self.stop is not None and self.stop.requested:
            return True
        over_limit = self.limits.limit is not None and self.calls >= self.limits.limit
        over_time = time.monotonic() - self.started_at >= self.limits.max_seconds
        if over_limit or over_time:
            self.report.stopped_early = True
        return over_limit or over_time

    def _process_batch(
        self, queue: str, batch: Batch, buffer: OutcomeBuffer, caller: Caller
    ) -> None:
        self.took(batch)
        self.deadline.leased(batch.leased_at)
        jobs = batch.jobs
        unstarted = 0
        held: set[int] | None = None  # None: every job of the batch, as leased
        try:
            for position, job in enumerate(jobs):
                if self._should_stop():
                    break
                if self.deadline.may_lapse():
                    held = self._reassert_leases(jobs[position:])
                if held is not None and job.id not in held:
                    unstarted = position + 1  # another run took it over: not ours to run
                    continue
                self.calls += 1
                self.report.lateness.observe(self.clock() - batch.due_by_id[job.id])
                self.beat(self.limit_of(job))
                called = caller.execute(job)
                unstarted = position + 1
                # Announced once journaled or written: an on_failure hook sees a recorded outcome.
                self._count(buffer.add(called.outcome, more_coming=unstarted < len(jobs)))
                caller.announce(called.report)
        finally:
            self.claimer.hand_back(queue, jobs[unstarted:], batch.due_by_id, self.clock())

    def limit_of(self, job: ClaimedJob) -> float:
        """The job's time limit in seconds."""
        return job.timeout or self.settings.timeout

    def beat(self, limit: float | None = None) -> None:
        """Tell a supervising parent that the main thread makes progress: it may now stay
        silent for `limit` (a job's time limit; between jobs, the lease, past which a frozen
        process has lost its jobs anyway) plus the grace."""
        if self.liveness is not None:
            silence = self.settings.lease if limit is None else limit
            self.liveness.beat(silence + self.settings.grace)

    def _reassert_leases(self, jobs: list[ClaimedJob]) -> set[int]:
        lease = self.settings.lease
        held = {job.id for job in jobs}
        while True:
            renewed_at = time.monotonic()
            held = leases.still_held(self.table, sorted(held), self.token, self.clock() + lease)
            # The lease it wrote ran from before the statement: one held up by a stalled
            # database (a locked table) may have written a lease that had lapsed already,
            # which another run may take over. Only a quick renewal vouches for the jobs.
            if not held or time.monotonic() - renewed_at < lease / 3:
                break
        self.deadline.reasserted(renewed_at)
        lost = len(jobs) - len(held)
        if lost:
            logger.warning("%d jobs of this run's batch were taken over by another run", lost)
        return held

    def _count(self, settled: Settled | None) -> None:
        if settled is None:
            return
        self.report.succeeded += settled.succeeded
        self.report.failed += settled.failed
        self.report.retried += len(settled.retries)
        self.report.deferred += len(settled.deferred)
        for job_id in settled.lost:
            logger.error(
                "job %d finished but its lease had been taken over; this outcome is refused",
                job_id,
            )


def _outcome_word(report: RunReport) -> str:
    if report.interrupted is not None:
        return f"interrupted by {signal.Signals(report.interrupted).name}"
    return "stopped early (--limit or --max-seconds)" if report.stopped_early else "ok"
