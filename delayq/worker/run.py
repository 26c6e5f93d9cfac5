"""One pass of `delayq run`: settle the jobs of dead runs, re-index orphans, then serve each
queue in turn, draining its due jobs (drains.py) until none is due or the run must stop.

A Run owns the order of those steps and the pass's state (lease token, limits, jobs started,
report) and answers the drains' questions about them (`room`, `should_stop`).
"""

from __future__ import annotations

import logging
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import closing

from ..config import Settings
from ..store import leases
from ..store.index import Index
from ..store.outcomes import Written
from ..store.table import ClaimedJob, Table
from . import interrupts, recovery
from .bookkeeper import Bookkeeper
from .calls import Caller
from .claims import Batch, Claimer
from .concurrent import ConcurrentDrain
from .drains import SequentialDrain
from .failovers import reindex_after_failover
from .heartbeat import Heartbeat, LeaseDeadline
from .hooks import load_reporters
from .interrupts import Abandoned, GracefulStop, grace_on_alarm
from .liveness import Liveness
from .options import RunOptions
from .report import OutcomeCallback, RunReport

logger = logging.getLogger(__name__)


class Run:
    """One pass: its lease token, its limits, what it has started and what it reports."""

    def __init__(
        self,
        settings: Settings,
        table: Table,
        index: Index,
        options: RunOptions,
        clock: Callable[[], float],
        on_outcome: OutcomeCallback | None = None,
        stop: GracefulStop | None = None,
        liveness: Liveness | None = None,
        sweep: bool = True,  # recover leases and re-index orphans before claiming
    ) -> None:
        self.settings = settings = options.applied_to(settings)
        self.table = table
        self.index = index
        self.options = options
        self.sweep = sweep
        self.clock = clock
        self.on_outcome = on_outcome
        self.reporters = load_reporters(settings)  # before any claim: a bad hook runs no job
        self.stop = stop
        self.liveness = liveness
        self.token = uuid.uuid4().hex
        self.report = RunReport()
        self.started_at = time.monotonic()
        self.calls = 0  # jobs started, counted against --limit
        self.deadline = LeaseDeadline(settings.lease)
        self.claimer = Claimer(table, index, self.token, settings.lease, settings.since)
        self.turn_left: int | None = None  # jobs the queue being drained may still take
        self._bookkeeper: Bookkeeper | None = None  # started once a drain asks for it

    def execute(self) -> RunReport:
        """Run the pass, note it for `delayq status` (a loop notes itself instead, as one
        run: its last pass's budget is no limit it was given), and return its report."""
        started_at = self.clock()
        self.show_progress()
        try:
            self._run_queues()
        except Exception as exc:
            self._record(started_at, f"failed: {type(exc).__name__}")
            raise
        if self.stop is not None and self.stop.requested:
            self.report.interrupted = self.stop.signum
        self._record(started_at, outcome_word(self.report))
        return self.report

    def _run_queues(self) -> None:
        # A reading of Redis's clock falls due once a minute; the heartbeat must not wait on
        # it: a host cut off from Redis only lost its running job when one did (a run at a
        # given `now` keeps that clock).
        beat_clock = self.index.clock.known if self.clock == self.index.clock.now else self.clock
        heartbeat = Heartbeat(self.table, self.token, beat_clock, self.deadline)
        try:
            # SIGALRM reaches only the main thread: with many in flight, slots enforce time
            # limits from outside instead.
            with interrupts.time_limits() as enabled, heartbeat:
                alarms = enabled and self.settings.concurrency == 1
                caller = Caller(self.settings, self.clock, alarms, self.on_outcome, self.reporters)
                grace = grace_on_alarm(self.stop if alarms else None, self.settings.grace)
                with closing(caller), grace:
                    self._run_each_queue(caller)
        except Abandoned:
            logger.warning("run abandoned its current job; it is back on the schedule")
        finally:
            if self._bookkeeper is not None:
                self._bookkeeper.close()
                self._bookkeeper = None

    def _run_each_queue(self, caller: Caller) -> None:
        """Serve the queues in turn, each its weight in batches a turn, so a backlog in one
        delays another queue's due jobs by about one batch, not by the whole backlog."""
        self.report.reindexed += recovery.ensure_index(self.table, self.index, self.show_progress)
        # On every pass, not only with the sweep: a committed job is due to start within 1 s.
        recovery.index_committed(self.table, self.index, self.clock())
        names = list(self.options.queues) or self.index.registry.known_queues()
        for queue in names if self.sweep else ():  # recover leases, re-index orphans
            now = self.clock()
            recovered = recovery.recover_leases(self.table, self.index, queue, now)
            self.report.recovered += recovered.requeued + recovered.journaled
            self.report.failed += recovered.poisoned
            self.report.reindexed += reindex_after_failover(self.table, self.index, queue, now)
            self.report.reindexed += recovery.reindex_orphans(self.table, self.index, queue, now)
        while names and not self.should_stop():  # the queues that may have more
            names = [queue for queue in names if self._take_turn(queue, caller, len(names))]

    def _take_turn(self, queue: str, caller: Caller, queues_left: int) -> bool:
        """Drain `queue` for one turn (all of it when no other queue waits); whether it
        stopped because its turn was over, so it may have more."""
        weight = self.options.weights.get(queue, 1)
        self.turn_left = None if queues_left == 1 else weight * self.settings.batch_size
        kind = ConcurrentDrain if self.settings.concurrency > 1 else SequentialDrain
        kind(self, queue, caller).drain()
        return self.turn_over()

    def _record(self, started_at: float, outcome: str) -> None:
        self.report.elapsed = time.monotonic() - self.started_at
        if self.options.loop:
            return
        try:
            self.index.registry.record_run(
                started_at, self.report.elapsed, outcome, self.report.ran
            )
        except Exception as exc:  # noqa: BLE001 - a run is not failed by its own bookkeeping
            logger.warning("could not record the run for `delayq status`: %s", exc)

    # What the drains ask of the pass.

    def bookkeeper(self) -> Bookkeeper:
        """The run's bookkeeping thread, started on first use."""
        if self._bookkeeper is None:
            self._bookkeeper = Bookkeeper(self.table)
        return self._bookkeeper

    def turn_over(self) -> bool:
        return self.turn_left is not None and self.turn_left <= 0

    def room(self, pending: int) -> int:
        """How many jobs the next claim may take with `pending` claimed but not started: a
        batch at most, and within --limit and the queue's turn (already charged for them)."""
        size = self.settings.batch_size
        if self.options.limit is not None:
            size = min(size, self.options.limit - self.calls - pending)
        if self.turn_left is not None:
            size = min(size, self.turn_left)
        return size

    def took(self, batch: Batch) -> None:
        """Count a claimed batch against the queue's turn and add it to the report."""
        if self.turn_left is not None:
            self.turn_left -= len(batch.jobs)
        self.report.claimed += len(batch.claimed)
        self.report.missed += batch.missed
        self.report.dropped += batch.dropped
        self.deadline.leased(batch.leased_at)

    def should_stop(self) -> bool:
        if self.stop is not None and self.stop.requested:
            return True
        over_limit = self.options.limit is not None and self.calls >= self.options.limit
        if over_limit or time.monotonic() - self.started_at >= self.settings.max_seconds:
            self.report.stopped_early = True
            return True
        return False

    def show_progress(self, limit: float | None = None) -> None:
        """Tell a supervising parent that the main thread makes progress: it may now stay
        silent for `limit` (a job's time limit; between jobs, the lease, past which a frozen
        process has lost its jobs anyway) plus the grace."""
        if self.liveness is not None:
            silence = self.settings.lease if limit is None else limit
            self.liveness.promise(silence + self.settings.grace)

    def reassert_leases(self, jobs: Sequence[ClaimedJob]) -> set[int]:
        """Renew the leases of `jobs` that this run still holds, and return their ids: the
        heartbeat fell behind, so another run may have taken some over."""
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


def outcome_word(report: RunReport, loop: bool = False) -> str:
    """How a run ended, as `delayq status` says it. A loop's passes stop at the end of its
    time, which is no limit of a pass it was asked for."""
    if report.interrupted is not None:
        return f"interrupted by {signal.Signals(report.interrupted).name}"
    if report.stuck:
        return f"stopped: {report.stuck} handler threads stuck past their time limit"
    if report.stopped_early and not loop:
        return "stopped early (--limit or --max-seconds)"
    return "ok"
