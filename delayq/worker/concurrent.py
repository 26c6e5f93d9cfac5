"""A drain with many jobs in flight (`--concurrency N`): handlers run in the runner's pool
(pool.py); the main thread claims batches, starts each job the moment the pool has room,
records what the pool's calls finish (outcomes, journal and report stay on it), and gives up
on calls past their limit.
"""

from __future__ import annotations

import logging
import time

from ..store.table import ClaimedJob, Outcome
from .calls import Caller
from .claims import Batch
from .drains import Drain, Turn, TurnNeeds
from .pool import Pool

logger = logging.getLogger(__name__)

# The longest the main thread waits for room in the pool before looking at the schedule again.
COLLECT_WAIT = 0.05
# With calls in flight and nothing due, how often the schedule is asked for newly due jobs.
LOOK_AGAIN = 0.005
# How long a drain that ends waits for the outcomes of calls that finished as it gave up on
# the rest, on their way from a pool's thread or the event loop.
LANDING = 1.0


class ConcurrentDrain(Drain):
    """Up to `settings.concurrency` handlers running at once, in the runner's pool."""

    notes_starts = True  # no order tells which of many jobs in flight had started

    def __init__(self, turn: Turn, needs: TurnNeeds, caller: Caller, pool: Pool) -> None:
        super().__init__(turn, needs, caller)
        # Group commits go to the bookkeeping thread, so the pool never waits on the database.
        self.buffer.write_on(needs.bookkeeper(), notes_starts=True)
        self.pool = pool  # the runner's, with its threads
        self.drained = False  # the last claim found nothing due
        self.look_again_at = 0.0  # monotonic: when a drained schedule is asked again
        self.backlog = False  # the last claim came back full

    def pump(self) -> None:
        stop = self.needs.stop
        if stop is not None:
            stop.in_flight = self._on_stop
        try:
            self._pump()
        finally:
            if stop is not None:
                stop.in_flight = None

    def _on_stop(self) -> str:
        """What a first stop signal makes of the calls in flight, in words for the log."""
        busy = self.pool.busy
        if not busy:
            return "no job is running; handing the rest back"
        jobs = "job" if busy == 1 else f"{busy} jobs"
        return (
            f"finishing the {jobs} in flight within {self.needs.grace:g}s, handing the "
            "rest back; a second signal hands back at once what has not finished"
        )

    def _pump(self) -> None:
        """Keep the pool full while jobs are due; return once none is due and every call
        has finished, or the run must stop (after a grace period for a stop signal). When
        as many threads are stuck as the pool's size, nothing new starts and the calls still
        running are waited for: the run then ends with `report.stuck` set."""
        report = self.turn.report
        while True:
            stuck = self.pool.stuck
            if stuck >= self.pool.size:
                if not report.stuck:
                    logger.info("%d handler threads are stuck; the run stops", stuck)
                report.stuck = stuck
            stopping = stuck >= self.pool.size or self.must_stop()
            if not stopping:
                self._claim_if_short()
                self._start_waiting()
            if self._stopping():
                self._wait_out_the_grace()
                return
            done_claiming = self.drained or self.turn.over()
            if self.pool.busy == 0 and (stopping or (done_claiming and not self.waiting)):
                return
            self._collect(self._wait_time())

    def busy(self) -> bool:
        return self.pool.busy > 0

    def _stopping(self) -> bool:
        """A stop signal came: nothing new starts."""
        stop = self.needs.stop
        return stop is not None and stop.requested

    def _claim_if_short(self) -> None:
        if self.upcoming is not None:
            if not self.upcoming.done() and (self.waiting or self.pool.free == 0):
                return  # it lands while the pool is full
            self._took(self.take_upcoming())
        # In a backlog the next batch is leased while a batch's worth waits: the pool never waits.
        ahead = self.turn.batch_size if self.backlog else 0
        if self.turn.over() or len(self.waiting) >= max(self.pool.size, ahead):
            return
        if self.drained and (self.pool.free == 0 or time.monotonic() < self.look_again_at):
            return
        size = self.turn.room(len(self.waiting))
        if size > 0 and self.backlog:
            self.lease_ahead(size, [])
            return
        self._took(self.claim(size))

    def startable(self) -> int:
        return max(0, self.pool.free - len(self.waiting))

    def _took(self, batch: Batch | None) -> None:
        # A limited queue's batches are never leased ahead: their grants would lapse, their
        # running slots would be held by jobs waiting.
        self.backlog = (
            batch is not None and not batch.start_at_once and len(batch.claimed) == batch.size
        )
        self.drained = batch is None
        if batch is None:
            # Nothing due now; while calls are in flight, look again soon for jobs that fall
            # due meanwhile, so one waits for room in the pool, not for the calls to drain.
            self.look_again_at = time.monotonic() + LOOK_AGAIN

    def _start_waiting(self) -> None:
        self.hold_leases()
        starting: list[ClaimedJob] = []
        while self.waiting and self.pool.free > len(starting) and not self.must_stop():
            job = self.waiting.popleft()
            self.turn.calls += 1
            starting.append(job)
        if starting:
            # Noted before the calls can begin: recovery charges a lost lease only to a job
            # whose start it finds.
            token = self.needs.leases.token
            self.needs.journal.note_starts(self.queue, token, [job.id for job in starting])
            self.pool.start(starting)

    def _wait_time(self) -> float:
        deadline = self.pool.next_deadline()
        wait = COLLECT_WAIT
        if self.drained and self.pool.free > 0:
            wait = max(self.look_again_at - time.monotonic(), 0.0)
        elif self.turn.over() or self.pool.free == 0 or self.must_stop():
            wait = 1.0  # nothing to claim or start: sleep until the pool has room
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
        return max(wait, 0.0)

    def _collect(self, timeout: float) -> None:
        # Every turn of the main loop passes here, calls in flight or not.
        self.needs.show_progress(None)
        finished = self._finished(timeout)
        if finished:
            self.record(finished)

    def _finished(self, timeout: float) -> list[Outcome]:
        """Calls the pool finished within `timeout`, and those given up on at their limit."""
        done = self.pool.collect(timeout)
        for call in self.pool.expire():
            logger.info("job %d ran past its time limit; giving up on it", call.job.id)
            done.append(self.caller.timed_out(call.job, call.started))
        return done

    def finish_in_flight(self) -> None:
        """The pass failed (a server went away): calls in flight get the grace period to end,
        and their outcomes go straight to the table, since the journal may be what is away.
        Handing them back instead would run each of them a second time."""
        until = time.monotonic() + self.needs.grace
        finished: list[Outcome] = []
        try:
            while self.pool.busy and time.monotonic() < until:
                self.needs.show_progress(None)
                finished += self._finished(min(until - time.monotonic(), COLLECT_WAIT * 4))
        except Exception as exc:  # noqa: BLE001 - already failing: their leases settle the rest
            logger.error("could not wait for the calls in flight (%s)", exc)
        if not finished:
            return
        try:
            written = self.buffer.write_alone(finished)
        except Exception as exc:  # noqa: BLE001 - already failing
            logger.error(
                "could not record %d outcomes (%s); their leases settle them", len(finished), exc
            )
            return
        for outcome in finished:
            self.due_by_id.pop(outcome.job.id, None)
            self.caller.announce(outcome)
        # Their retries and next occurrences are put on the schedule by the orphan sweep.
        self.turn.count(written)

    def _wait_out_the_grace(self) -> None:
        """A stop signal: nothing new starts; calls in flight get the grace period."""
        until = time.monotonic() + self.needs.grace
        while self.pool.busy and time.monotonic() < until:
            self._collect(min(until - time.monotonic(), COLLECT_WAIT * 4))

    def running(self) -> list[ClaimedJob]:
        # Calls that finished meanwhile are recorded first: they ran, and must not run again;
        # so are those that finish as they are given up on (a thread's hand-over, a task's on
        # the loop's next turn: milliseconds).
        try:
            self._collect(0.0)
        except Exception as exc:  # noqa: BLE001 - already stopping; the journal or leases settle them
            logger.error("could not record the last outcomes (%s); the next run settles them", exc)
        abandoned = [call.job for call in self.pool.abandon_all()]
        try:
            until = time.monotonic() + LANDING
            while self.pool.busy and time.monotonic() < until:
                self._collect(COLLECT_WAIT)
        except Exception as exc:  # noqa: BLE001 - as above
            logger.error("could not record the last outcomes (%s); the next run settles them", exc)
        return abandoned

    def close(self) -> None:
        self.pool.release()
