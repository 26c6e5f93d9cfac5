"""A runner: what lives as long as the process that runs jobs (a `delayq run`, one-shot or
looping, each `--processes` child, a Queue that runs jobs), and the passes it makes.

The Runner keeps what must outlive a pass: the Caller with the handlers it resolved and the
event loop of async handlers (so a client a handler keeps between calls stays usable), the
failure hooks and their cap, the heartbeat, bookkeeping and pool threads. A pass (passes.py)
is small: a lease token, a deadline, limits and a report; each queue's turn is a drain
(drains.py), which hands back what it did.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from ..base.threads import keep_signals_off_this_thread
from ..config import Settings
from ..errors import BackendUnavailable
from ..flow.settings import restore
from ..store.index import Index
from ..store.producers import queues_in_use
from ..store.table import Table, close_connection, is_read_only, ping
from . import database_failovers, interrupts, recovery
from .bookkeeper import Bookkeeper
from .calls import Caller
from .concurrent import ConcurrentDrain
from .drains import Drain, SequentialDrain, Turn
from .heartbeat import Heartbeat
from .hooks import load_reporters
from .interrupts import Abandoned, GracefulStop, grace_on_alarm
from .liveness import Liveness
from .looping import SWEEP_EVERY, LoopRecord, Outage, sleep_until_due
from .options import RunOptions
from .passes import Pass, outcome_word
from .pool import Pool
from .rebuilds import Rebuild
from .report import OutcomeCallback, RunReport

logger = logging.getLogger(__name__)

# How long a closing runner waits for its check of the kept counts to end.
COUNTS_CHECK_JOIN = 10.0


class Runner:
    """Runs passes over due jobs for as long as it lives; `close` ends it."""

    def __init__(self, settings: Settings, table: Table, index: Index) -> None:
        self.settings = settings
        self.table = table
        self.index = index
        # Before any claim: a bad hook runs no job.
        self.caller = Caller(settings, load_reporters(settings))
        self.heartbeat = Heartbeat(table, index, settings.lease)  # started by the first pass
        self._bookkeeper: Bookkeeper | None = None  # started when a drain first asks
        self._pool: Pool | None = None  # made when a pass first runs jobs concurrently
        self.rebuild = Rebuild(table, index)  # of the schedule, when Redis lost it
        self._counts_check: threading.Thread | None = None  # an hourly one, when its turn came
        self.passes = 0
        self.pid = os.getpid()  # its threads live in this process only

    def run(
        self,
        options: RunOptions,
        *,
        now: float | None = None,
        on_outcome: OutcomeCallback | None = None,
        stop: GracefulStop | None = None,
        liveness: Liveness | None = None,
    ) -> RunReport:
        """One pass over the options' queues (default: every queue the index knows), at
        `now` if given, or with `options.loop` a loop of passes; `liveness`: beats for a
        supervising parent."""
        if options.loop:
            return self._loop(options, on_outcome, stop, liveness)
        # A one-shot run from cron with nothing due writes nothing to the table, so a replica's
        # URL would pass unnoticed, every minute, until a job falls due.
        self._refuse_read_only()
        clock = (lambda: now) if now is not None else self.index.clock.now
        pass_ = self._new_pass(options, clock, stop, liveness)
        return self._execute(pass_, on_outcome, record=True)

    def close(self, shutdown: bool = True) -> None:
        """End the runner: its threads, then, if it ran a pass, the handlers' `on_shutdown`
        functions (unless not `shutdown`: another runner of the process owns them) and their
        event loop."""
        self.rebuild.close()
        if self._counts_check is not None:  # a count cut short is rolled back: no harm
            self._counts_check.join(timeout=COUNTS_CHECK_JOIN)
        if self._pool is not None:
            self._pool.close()
        self._close_bookkeeper()
        self.heartbeat.stop()
        if self.passes:
            self.caller.close(shutdown)

    # The loop.

    def _loop(
        self,
        options: RunOptions,
        on_outcome: OutcomeCallback | None,
        stop: GracefulStop | None,
        liveness: Liveness | None,
    ) -> RunReport:
        """Run passes until the options' duration has passed (None: until stopped), noting the
        loop for `delayq status` as one run: when it started, when it last beat, its jobs."""
        # Ask both servers once: one the loop cannot reach at its start is more likely a wrong
        # URL than a restart, and is said at once (exit 1), as a one-shot run says it. A
        # `--processes` child skips this: its parent asked before starting any, and a child
        # started again while Redis restarts must wait it out, not die.
        if liveness is None:
            self._ask_servers()
        total = RunReport()
        record = LoopRecord(self.index)
        started_at = time.monotonic()
        try:
            deadline = None if options.duration is None else started_at + options.duration
            last_sweep = float("-inf")
            asked = options.applied_to(self.settings)
            outage = Outage(stop, liveness, asked.lease + asked.grace)
            while True:
                remaining = float("inf") if deadline is None else deadline - time.monotonic()
                if remaining <= 0 or (stop is not None and stop.requested):
                    break
                swept = outage.let_go(self.table, self.index.clock.now)
                sweep = swept or time.monotonic() - last_sweep >= SWEEP_EVERY
                budget = replace(options, max_seconds=min(asked.max_seconds, remaining))
                pass_ = self._new_pass(budget, self.index.clock.now, stop, liveness)
                try:
                    report = self._execute(pass_, on_outcome, record=False, sweep=sweep)
                except Exception as exc:
                    outage.wait_out(exc, remaining)  # re-raises what is not an outage
                    outage.held.append(pass_.token)
                    continue
                outage.end()
                if sweep:
                    last_sweep = time.monotonic()
                total.merge(report)
                total.wall = time.monotonic() - started_at
                record.beat(total)
                if report.interrupted is not None or report.stuck:
                    break
                if not report.stopped_early:
                    sleep_until_due(self.index, options.queues, remaining)
        except Exception as exc:
            record.write(f"failed: {type(exc).__name__}", total)
            raise
        if stop is not None and stop.requested:
            total.interrupted = stop.signum
        total.wall = time.monotonic() - started_at
        record.write(outcome_word(total, loop=True), total)
        return total

    def _ask_servers(self) -> None:
        """Raise if Redis or the database does not answer, or the database is read-only: at
        a loop's start that is a replica's URL, while mid-loop it is a switchover that the
        loop waits out."""
        self.index.client.ping()
        ping(self.table)
        self._refuse_read_only()

    def _refuse_read_only(self) -> None:
        if is_read_only(self.table):
            raise BackendUnavailable(
                "the database is read-only (a replica?); point the database URL at the "
                "primary, or at an address that follows it"
            )

    # A pass.

    def _new_pass(
        self,
        options: RunOptions,
        clock: Callable[[], float],
        stop: GracefulStop | None,
        liveness: Liveness | None,
    ) -> Pass:
        return Pass(
            self.settings, self.table, self.index, options, clock, self.bookkeeper, stop, liveness
        )

    def _execute(
        self,
        pass_: Pass,
        on_outcome: OutcomeCallback | None,
        record: bool,
        sweep: bool = True,  # recover leases and re-index orphans before claiming
    ) -> RunReport:
        """Run the pass and return its report; with `record`, note it for `delayq status` (a
        loop notes itself instead, as one run: its last pass's budget is no limit it was
        given)."""
        self.passes += 1
        started_at = pass_.clock()
        pass_.show_progress()
        try:
            self._serve(pass_, on_outcome, sweep)
        except Exception as exc:
            self._close_bookkeeper()  # its connection may be what failed: a fresh one next
            if record:
                self._record(pass_, started_at, f"failed: {type(exc).__name__}")
            raise
        if pass_.stop is not None and pass_.stop.requested:
            pass_.report.interrupted = pass_.stop.signum
        pass_.report.wall = pass_.report.elapsed
        if record:
            self._record(pass_, started_at, outcome_word(pass_.report))
        return pass_.report

    def _serve(self, pass_: Pass, on_outcome: OutcomeCallback | None, sweep: bool) -> None:
        # A reading of Redis's clock falls due once a minute; the heartbeat must not wait on
        # it: a host cut off from Redis only lost its running job when one did (a run at a
        # given `now` keeps that clock).
        index = self.index
        beat_clock = index.clock.known if pass_.clock == index.clock.now else pass_.clock
        self.heartbeat.start()
        try:
            # SIGALRM reaches only the main thread: with many in flight, the pool enforces time
            # limits from outside instead.
            with (
                interrupts.time_limits() as enabled,
                self.heartbeat.watching(
                    pass_.token, beat_clock, pass_.leases.deadline, pass_.held_slots
                ),
            ):
                alarms = enabled and pass_.settings.concurrency == 1
                grace = grace_on_alarm(pass_.stop if alarms else None, pass_.settings.grace)
                with self.caller.serving(pass_.clock, alarms, on_outcome), grace:
                    self._sweep_and_drain(pass_, sweep)
        except Abandoned:  # between two drains: no job was running
            logger.warning("a second stop signal: no job was running; the run stops")
        finally:
            pass_.report.elapsed = time.monotonic() - pass_.started_at

    def _sweep_and_drain(self, pass_: Pass, sweep: bool) -> None:
        """Settle dead runs' jobs, then serve the queues in turn, each its weight in batches a
        turn, so a backlog in one delays another queue's due jobs by about one batch, not by
        the whole backlog."""
        table, index, report = self.table, self.index, pass_.report
        # Which queues exist is the table's answer, read with each sweep; between sweeps the
        # registry's, which producers note a new queue in (or one Redis lost) as they add.
        in_use = queues_in_use(table, index, note=True) if sweep else None
        report.reindexed += self.rebuild.due_first(pass_.clock, pass_.show_progress)
        complete = index.registry.is_complete()
        # On every pass, not only with the sweep: a committed job is due to start within 1 s.
        recovery.index_committed(table, index, pass_.clock())
        names = list(pass_.options.queues) or in_use or index.registry.known_queues()
        php_classes = dict(pass_.settings.php_classes)
        if sweep:  # a failover to a replica behind may have left a queue's older settings
            database_failovers.check_database_server(table, index, pass_.clock())
            restore(table, index.flow, names)
            self._check_counts(on_a_thread=pass_.options.loop)
        for queue in names if sweep else ():  # recover leases, re-index orphans
            now = pass_.clock()
            recovered = recovery.recover_leases(table, index, queue, now, php_classes)
            report.recovered += recovered.requeued + recovered.journaled
            report.failed += recovered.poisoned
            report.reindexed += recovery.reindex_after_failover(table, index, queue, now)
            if complete:  # while a rebuild goes on, the rows it has yet to reach are no orphans
                report.reindexed += recovery.reindex_orphans(table, index, queue, now)
        while names and not pass_.must_stop():  # the queues that may have more
            names = [queue for queue in names if self._take_turn(pass_, queue, len(names))]

    def _take_turn(self, pass_: Pass, queue: str, queues_left: int) -> bool:
        """Drain `queue` for one turn (all of it when no other queue waits); whether it
        stopped because its turn was over, so it may have more."""
        batch_size = pass_.settings.batch_size
        left = None if queues_left == 1 else pass_.options.weights.get(queue, 1) * batch_size
        turn = Turn(queue, batch_size, left, pass_.may_start())
        needs = pass_.needs_of(queue)
        drain: Drain
        if pass_.settings.concurrency > 1:
            drain = ConcurrentDrain(turn, needs, self.caller, self.pool(pass_.settings.concurrency))
        else:
            drain = SequentialDrain(turn, needs, self.caller)
        turn = drain.drain()
        pass_.calls += turn.calls
        stopped_early = pass_.report.stopped_early or turn.report.stopped_early
        pass_.report.merge(turn.report)
        pass_.report.stopped_early = stopped_early
        if turn.abandoned is not None:  # the stop was asked for already: no turn follows
            logger.warning("a second stop signal: %s", _handed_back(turn.abandoned))
        return turn.over()

    def _record(self, pass_: Pass, started_at: float, outcome: str) -> None:
        try:
            elapsed = pass_.report.elapsed
            self.index.registry.record_run(started_at, elapsed, outcome, pass_.report.ran)
        except Exception as exc:  # noqa: BLE001 - a run is not failed by its own bookkeeping
            logger.warning("could not record the run for `delayq status`: %s", exc)

    def _check_counts(self, on_a_thread: bool) -> None:
        """Check the kept pending counts against the table if this run's hourly turn came;
        a loop's on a thread, as at millions of rows the count takes a second or two that
        no pass of a loop should wait (a one-shot run's pass is the whole run)."""
        if self._counts_check is not None and self._counts_check.is_alive():
            return
        if not self.index.registry.take_counts_check(recovery.COUNTS_CHECK_EVERY):
            return
        if not on_a_thread:
            _checking_counts(self.table, close=False)
            return
        self._counts_check = threading.Thread(
            target=_checking_counts, args=(self.table,), name="delayq-counts", daemon=True
        )
        self._counts_check.start()

    # What outlives a pass, started on first use.

    def bookkeeper(self) -> Bookkeeper:
        """The runner's bookkeeping thread, started on first use."""
        if self._bookkeeper is None:
            self._bookkeeper = Bookkeeper(self.table)
        return self._bookkeeper

    def pool(self, size: int) -> Pool:
        """The runner's pool of `size`; a pass asking for another size gets a fresh one."""
        if self._pool is None or self._pool.size != size:
            if self._pool is not None:
                self._pool.close()
            caller = self.caller
            self._pool = Pool(
                size,
                caller.execute,
                caller.crashed,
                caller.limit_of,
                caller.coroutine_for,
                caller.event_loop,
            )
        return self._pool

    def _close_bookkeeper(self) -> None:
        if self._bookkeeper is not None:
            self._bookkeeper.close()
            self._bookkeeper = None


def _checking_counts(table: Table, close: bool = True) -> None:
    """The hourly check of the kept counts; with `close`, on a thread of its own, whose
    connection it closes."""
    if close:
        keep_signals_off_this_thread()
    try:
        recovery.check_counts(table)
    except Exception as exc:  # noqa: BLE001 - the next turn, in an hour, tries again
        logger.warning("could not check the kept pending counts: %s", exc)
    finally:
        if close:
            close_connection(table)


def _handed_back(count: int) -> str:
    if not count:
        return "no job was running; the run stops"
    jobs = "job that had not finished is" if count == 1 else "jobs that had not finished are"
    return f"{count} {jobs} back on the schedule; the run stops"
