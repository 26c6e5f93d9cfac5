"""Draining one queue for one turn of a pass: claim due jobs in batches, start each, record
what each came to, and at the end hand back what did not start. Two ways to start a job:

- SequentialDrain (the default): each handler on the main thread, one at a time, under
  SIGALRM's time limit. Once a claim comes back full (a backlog), the next batch is leased
  on the bookkeeping thread while this one runs, and the group commits are written there.
- ConcurrentDrain (`--concurrency N`): each job on a free slot (slots.py) the moment one
  frees; the main thread claims, starts, records, and gives up on calls past their limit.

What both share — the jobs claimed and not started, the batch leased ahead, the outcome
buffer and the clean-up at the end — is the Drain's.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from concurrent.futures import Future
from typing import TYPE_CHECKING

from ..store.outcomes import Outcome, write_outcomes
from ..store.table import ClaimedJob
from .calls import Caller
from .claims import Batch, without_jobs_in_hand
from .outcomes import OutcomeBuffer
from .slots import EventLoop, Slots

if TYPE_CHECKING:
    from .run import Run

logger = logging.getLogger(__name__)

# The longest the main thread waits for a slot before looking at the schedule again.
COLLECT_WAIT = 0.05
# With calls in flight and nothing due, how often the schedule is asked for newly due jobs.
LOOK_AGAIN = 0.005


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

    def claim(self, size: int, before: list[int] | None = None) -> Batch | None:
        """Up to `size` due jobs, claimed on this thread; None if none is due."""
        if size <= 0:
            return None
        return self.run.claimer.claim(
            self.queue, before or [], self.run.clock(), size, self.notes_starts
        )

    def lease_ahead(self, size: int, before: list[int]) -> None:
        """Claim the next batch on the bookkeeping thread, while the jobs in hand run."""
        claim = self.run.claimer.claim
        bookkeeper = self.run.bookkeeper()
        self.upcoming = bookkeeper.submit(
            claim, self.queue, before, self.run.clock(), size, self.notes_starts
        )

    def take(self, batch: Batch) -> None:
        """Queue up a claimed batch's jobs to start, less those already in hand."""
        self.run.took(batch)
        self.noted = self.noted or batch.noted
        batch.jobs = without_jobs_in_hand(batch.jobs, self.due_by_id.keys())
        self.waiting.extend(batch.jobs)
        self.due_by_id.update((job.id, batch.due_by_id[job.id]) for job in batch.jobs)

    def take_upcoming(self) -> Batch | None:
        """The batch leased ahead, once it is leased, taken in; None if none was due."""
        upcoming, self.upcoming = self.upcoming, None
        assert upcoming is not None
        batch = upcoming.result()
        if batch is not None:
            self.take(batch)
        return batch

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
        """Unstarted jobs, the batch leased ahead and calls still running when the run stops
        go back to pending (the late results of those calls are refused)."""
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
            # What was journaled is settled by the next run's recovery; the rest by leases.
            fallback = f"nor to the table alone ({exc}); the next run settles them"
        if not quietly:
            raise failure
        logger.error("could not record outcomes (%s); %s", failure, fallback)


class SequentialDrain(Drain):
    """Each job's handler on the main thread, one at a time, under its time limit."""

    def pump(self) -> None:
        batch = self._claim()
        while batch is not None:
            # A full batch means a backlog: lease the next one on the bookkeeping thread
            # while this one runs, and write its commits there too.
            room = self.run.room(len(self.waiting))
            if len(batch.claimed) == batch.size and room > 0:
                self.buffer.write_on(self.run.bookkeeper())
                self.lease_ahead(room, [job.id for job in self.waiting])
            self._call_waiting()
            if self.run.should_stop():
                return
            batch = self.take_upcoming() if self.upcoming is not None else None
            if batch is None:
                batch = self._claim()

    def _claim(self) -> Batch | None:
        if self.run.should_stop() or self.run.turn_over():
            return None
        batch = self.claim(self.run.room(0))
        if batch is not None:
            self.take(batch)
        return batch

    def _call_waiting(self) -> None:
        run = self.run
        while self.waiting and not run.should_stop():
            self.hold_leases()
            if not self.waiting:
                return
            job = self.waiting[0]
            run.starting(job, self.due_by_id[job.id])
            run.beat(run.limit_of(job))
            outcome = self.caller.execute(job)
            self.waiting.popleft()  # not before: a job whose call the run abandons goes back
            self.record([outcome])


class ConcurrentDrain(Drain):
    """Up to `settings.concurrency` handlers running at once, on slots."""

    notes_starts = True  # no order tells which of many jobs in flight had started

    def __init__(self, run: Run, queue: str, caller: Caller) -> None:
        super().__init__(run, queue, caller)
        # Group commits go to the bookkeeping thread, so slots never wait on the database.
        self.buffer.write_on(run.bookkeeper(), notes_starts=True)
        event_loop = EventLoop(caller.coroutine_for, caller.event_loop)
        self.slots = Slots(
            run.settings.concurrency, caller.execute, caller.crashed, run.limit_of, event_loop
        )
        self.drained = False  # the last claim found nothing due
        self.look_again_at = 0.0  # monotonic: when a drained schedule is asked again
        self.backlog = False  # the last claim came back full

    def pump(self) -> None:
        """Keep every slot busy while jobs are due; return once none is due and every call
        has finished, or the run must stop (after a grace period for a stop signal). When
        as many threads as slots are stuck, nothing new starts and the calls still running
        are waited for: the run then ends with `report.stuck` set."""
        run = self.run
        while True:
            stuck = self.slots.stuck >= self.slots.size
            if stuck and not run.report.stuck:
                logger.info("%d handler threads are stuck; the run stops", self.slots.stuck)
            if stuck:
                run.report.stuck = self.slots.stuck
            stopping = stuck or run.should_stop()
            if not stopping:
                self._claim_if_short()
                self._start_waiting()
            if run.stop is not None and run.stop.requested:
                self._wait_out_the_grace()
                return
            done_claiming = self.drained or run.turn_over()
            if self.slots.busy == 0 and (stopping or (done_claiming and not self.waiting)):
                return
            self._collect(self._wait_time())

    def busy(self) -> bool:
        return self.slots.busy > 0

    def _claim_if_short(self) -> None:
        run = self.run
        if self.upcoming is not None:
            if not self.upcoming.done() and (self.waiting or self.slots.free == 0):
                return  # it lands while the slots are busy
            self._took(self.take_upcoming())
        # In a backlog the next batch is leased while a batch's worth still waits, so that
        # slots never wait on the database.
        ahead = run.settings.batch_size if self.backlog else 0
        if run.turn_over() or len(self.waiting) >= max(self.slots.size, ahead):
            return
        if self.drained and (self.slots.free == 0 or time.monotonic() < self.look_again_at):
            return
        size = run.room(len(self.waiting))
        if size > 0 and self.backlog:
            self.lease_ahead(size, [])
            return
        batch = self.claim(size)
        if batch is not None:
            self.take(batch)
        self._took(batch)

    def _took(self, batch: Batch | None) -> None:
        self.backlog = batch is not None and len(batch.claimed) == batch.size
        self.drained = batch is None
        if batch is None:
            # Nothing due now; while calls are in flight, look again soon for jobs that fall
            # due meanwhile, so one waits for a free slot, not for the calls to drain.
            self.look_again_at = time.monotonic() + LOOK_AGAIN

    def _start_waiting(self) -> None:
        run = self.run
        self.hold_leases()
        starting: list[ClaimedJob] = []
        while self.waiting and self.slots.free > len(starting) and not run.should_stop():
            job = self.waiting.popleft()
            run.starting(job, self.due_by_id[job.id])
            starting.append(job)
        if starting:
            # Noted before the calls can begin: recovery charges a lost lease only to a job
            # whose start it finds.
            run.index.journal.note_starts(self.queue, run.token, [job.id for job in starting])
            self.slots.start(starting)

    def _wait_time(self) -> float:
        deadline = self.slots.next_deadline()
        wait = COLLECT_WAIT
        if self.drained and self.slots.free > 0:
            wait = max(self.look_again_at - time.monotonic(), 0.0)
        elif self.run.turn_over() or self.slots.free == 0 or self.run.should_stop():
            wait = 1.0  # nothing to claim or start: sleep until a slot frees
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
        return max(wait, 0.0)

    def _collect(self, timeout: float) -> None:
        # Every turn of the main loop passes here, calls in flight or not.
        self.run.beat()
        finished = self._finished(timeout)
        if finished:
            self.record(finished)

    def _finished(self, timeout: float) -> list[Outcome]:
        """Calls the slots finished (waiting up to `timeout` for the first), and those given
        up on at their time limit."""
        done = self.slots.collect(timeout)
        for call in self.slots.expire():
            logger.info("job %d ran past its time limit; giving up on it", call.job.id)
            done.append(self.caller.timed_out(call.job, call.started))
        return done

    def finish_in_flight(self) -> None:
        """The pass failed (a server went away): calls in flight get the grace period to end,
        and their outcomes go straight to the table, since the journal may be what is away.
        Handing them back instead would run each of them a second time."""
        until = time.monotonic() + self.run.settings.grace
        finished: list[Outcome] = []
        try:
            while self.slots.busy and time.monotonic() < until:
                self.run.beat()
                finished += self._finished(min(until - time.monotonic(), COLLECT_WAIT * 4))
        except Exception as exc:  # noqa: BLE001 - already failing: their leases settle the rest
            logger.error("could not wait for the calls in flight (%s)", exc)
        if not finished:
            return
        try:
            written = write_outcomes(self.run.table, finished, self.run.token)
        except Exception as exc:  # noqa: BLE001 - already failing
            logger.error("could not record %d outcomes (%s); their leases will", len(finished), exc)
            return
        for outcome in finished:
            self.due_by_id.pop(outcome.job.id, None)
            self.caller.announce(outcome)
        # Their retries and next occurrences are put on the schedule by the orphan sweep.
        self.run.count(written)

    def _wait_out_the_grace(self) -> None:
        """A stop signal: nothing new starts; calls in flight get the grace period."""
        until = time.monotonic() + self.run.settings.grace
        while self.slots.busy and time.monotonic() < until:
            self._collect(min(until - time.monotonic(), COLLECT_WAIT * 4))

    def running(self) -> list[ClaimedJob]:
        # Calls that finished meanwhile are recorded first: they ran, and must not run again.
        try:
            self._collect(0.0)
        except Exception as exc:  # noqa: BLE001 - already stopping; the journal or leases settle them
            logger.error("could not record the last outcomes (%s); the next run settles them", exc)
        return [call.job for call in self.slots.abandon_all()]

    def close(self) -> None:
        self.slots.close()
