"""A pass with many jobs in flight (`--concurrency N`): the main thread claims batches, starts
each job on a free slot the moment one frees, records what slots finish, and gives up on
calls past their time limit. Handlers run on slot threads (slots.py); outcomes, the journal,
the report and every claim stay on the main thread.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from concurrent.futures import Future

from ..store.table import ClaimedJob
from .calls import Called, Caller
from .claims import Batch, without_jobs_in_hand
from .outcomes import OutcomeBuffer, write_outcomes
from .run import Run
from .slots import EventLoop, Slots

logger = logging.getLogger(__name__)

# The longest the main thread waits for a slot before looking at the schedule again.
COLLECT_WAIT = 0.05
# With calls in flight and nothing due, how often the schedule is asked for newly due jobs.
LOOK_AGAIN = 0.005


class ConcurrentRun(Run):
    """One pass with up to `settings.concurrency` handlers running at once."""

    def _caller(self, time_limits: bool) -> Caller:
        # SIGALRM reaches only the main thread; slots enforce time limits from outside.
        return Caller(self.settings, self.clock, False, self.on_outcome, self.reporters)

    def _drain(self, queue: str, caller: Caller) -> None:
        # Group commits go to the bookkeeping thread, so slots never wait on the database.
        buffer = OutcomeBuffer(
            self.table, self.index, queue, self.token, self._bookkeeper(), notes_starts=True
        )
        event_loop = EventLoop(caller.coroutine_for, caller.event_loop)
        slots = Slots(self.settings.concurrency, caller.execute, self.limit_of, event_loop)
        drain = _Drain(self, queue, slots, buffer, caller)
        completed = False
        try:
            drain.pump()
            completed = True
        finally:
            if not completed:
                drain.finish_in_flight()
            drain.hand_back_the_rest()
            slots.close()
            self._flush(buffer, quietly=not completed)
            self.index.journal.close()
            if self.noted_order:
                self.index.journal.forget_order(queue, self.token)
                self.noted_order = False


class _Drain:
    """One queue's jobs through the slots: those claimed and not yet started wait here."""

    def __init__(
        self, run: ConcurrentRun, queue: str, slots: Slots, buffer: OutcomeBuffer, caller: Caller
    ) -> None:
        self.run = run
        self.queue = queue
        self.slots = slots
        self.buffer = buffer
        self.caller = caller
        self.waiting: deque[ClaimedJob] = deque()
        self.due_by_id: dict[int, float] = {}  # of the jobs waiting or in flight
        self.drained = False  # the last claim found nothing due
        self.look_again_at = 0.0  # monotonic: when a drained schedule is asked again
        self.backlog = False  # the last claim came back full
        self.upcoming: Future[Batch | None] | None = None  # leased on the bookkeeping thread

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
            stopping = stuck or run._should_stop()
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

    def _claim_if_short(self) -> None:
        run = self.run
        if self.upcoming is not None:
            if not self.upcoming.done() and (self.waiting or self.slots.free == 0):
                return  # it lands while the slots are busy
            upcoming, self.upcoming = self.upcoming, None
            self._take(upcoming.result())
        # In a backlog the next batch is leased while a batch's worth still waits, so that
        # slots never wait on the database.
        ahead = run.settings.batch_size if self.backlog else 0
        if run.turn_over() or len(self.waiting) >= max(self.slots.size, ahead):
            return
        if self.drained and (self.slots.free == 0 or time.monotonic() < self.look_again_at):
            return
        size = run.room(len(self.waiting), charged=True)
        if size > 0 and self.backlog:
            claim = run.claimer.claim
            self.upcoming = run._bookkeeper().submit(claim, self.queue, [], run.clock(), size, True)
            return
        batch = None
        if size > 0:
            batch = run.claimer.claim(self.queue, [], run.clock(), size, notes_starts=True)
        self._take(batch)

    def _take(self, batch: Batch | None) -> None:
        """Queue up a claimed batch's jobs for the slots."""
        self.backlog = batch is not None and len(batch.claimed) == batch.size
        if batch is None:
            # Nothing due now; while calls are in flight, look again soon for jobs that fall
            # due meanwhile, so one waits for a free slot, not for the calls to drain.
            self.drained = True
            self.look_again_at = time.monotonic() + LOOK_AGAIN
            return
        self.drained = False
        self.run.took(batch)
        self.run.deadline.leased(batch.leased_at)
        batch.jobs = without_jobs_in_hand(batch.jobs, self.due_by_id.keys())
        self.waiting.extend(batch.jobs)
        self.due_by_id.update((job.id, batch.due_by_id[job.id]) for job in batch.jobs)

    def _start_waiting(self) -> None:
        run = self.run
        if self.waiting and run.deadline.may_lapse():
            held = run._reassert_leases(list(self.waiting))
            self.waiting = deque(job for job in self.waiting if job.id in held)
        starting: list[ClaimedJob] = []
        while self.waiting and self.slots.free > len(starting) and not run._should_stop():
            job = self.waiting.popleft()
            run.calls += 1
            run.report.lateness.observe(run.clock() - self.due_by_id[job.id])
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
        elif self.run.turn_over() or self.slots.free == 0 or self.run._should_stop():
            wait = 1.0  # nothing to claim or start: sleep until a slot frees
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
        return max(wait, 0.0)

    def _collect(self, timeout: float) -> None:
        # Every turn of the main loop passes here, calls in flight or not.
        self.run.beat()
        finished = self._finished(timeout)
        if finished:
            self._record(finished)

    def _finished(self, timeout: float) -> list[Called]:
        """Calls the slots finished (waiting up to `timeout` for the first), and those given
        up on at their time limit."""
        done: list[Called] = []
        for finished in self.slots.collect(timeout):
            result = finished.result
            if isinstance(result, Called):
                done.append(result)
            else:  # an exception raised into the slot outside the handler's call
                assert isinstance(result, BaseException)
                done.append(self.caller.crashed(finished.job, result, time.monotonic()))
        for call in self.slots.expire():
            logger.info("job %d ran past its time limit; giving up on it", call.job.id)
            done.append(self.caller.timed_out(call.job, call.started))
        return done

    def finish_in_flight(self) -> None:
        """The pass failed (a server went away): calls in flight get the grace period to end,
        and their outcomes go straight to the table, since the journal may be what is away.
        Handing them back instead would run each of them a second time."""
        until = time.monotonic() + self.run.settings.grace
        called: list[Called] = []
        try:
            while self.slots.busy and time.monotonic() < until:
                self.run.beat()
                called += self._finished(min(until - time.monotonic(), COLLECT_WAIT * 4))
        except Exception as exc:  # noqa: BLE001 - already failing: their leases settle the rest
            logger.error("could not wait for the calls in flight (%s)", exc)
        if not called:
            return
        outcomes = [one.outcome for one in called]
        try:
            settled = write_outcomes(self.run.table, outcomes, self.run.token)
        except Exception as exc:  # noqa: BLE001 - already failing
            logger.error("could not record %d outcomes (%s); their leases will", len(called), exc)
            return
        for one in called:
            self.due_by_id.pop(one.outcome.job.id, None)
            self.caller.announce(one.report)
        # Their retries and next occurrences are put on the schedule by the orphan sweep.
        self.run._count(settled)

    def _record(self, finished: list[Called]) -> None:
        for called in finished:
            self.due_by_id.pop(called.outcome.job.id, None)
        more = bool(self.waiting) or self.slots.busy > 0
        outcomes = [called.outcome for called in finished]
        self.run._count(self.buffer.add_many(outcomes, more_coming=more))
        for called in finished:  # recorded first, as Run does: a hook sees a journaled outcome
            self.caller.announce(called.report)

    def _wait_out_the_grace(self) -> None:
        """A stop signal: nothing new starts; calls in flight get the grace period."""
        until = time.monotonic() + self.run.settings.grace
        while self.slots.busy and time.monotonic() < until:
            self._collect(min(until - time.monotonic(), COLLECT_WAIT * 4))

    def _take_upcoming_back(self) -> None:
        """A batch still being leased joins the unstarted jobs, to be handed back with them."""
        upcoming, self.upcoming = self.upcoming, None
        if upcoming is None:
            return
        try:
            self._take(upcoming.result())
        except Exception as exc:  # noqa: BLE001 - already stopping; its leases bring it back
            logger.error("could not lease the next batch (%s); its leases will bring it back", exc)

    def hand_back_the_rest(self) -> None:
        """Unstarted jobs, and calls still running when the run stops, go back to pending
        (the late results of those calls are refused). Calls that finished meanwhile are
        recorded first: they ran, and must not run again."""
        try:
            self._collect(0.0)
        except Exception as exc:  # noqa: BLE001 - already stopping; the journal or leases settle them
            logger.error("could not record the last outcomes (%s); the next run settles them", exc)
        self._take_upcoming_back()
        running = [call.job for call in self.slots.abandon_all()]
        if running:
            logger.warning(
                "%d jobs were still running when the run stopped; handed back", len(running)
            )
        unfinished = list(self.waiting) + running
        self.waiting.clear()
        self.run.claimer.hand_back(self.queue, unfinished, self.due_by_id, self.run.clock())
        if running:
            started = (self.run.token, [job.id for job in running])
            self.run.index.settle(self.queue, [], [], started)
