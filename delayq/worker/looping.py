"""What a looping runner (runner.py) does between passes: it sleeps until the head of the
schedule is due or an adder wakes it because it added a job due sooner, notes itself for
`delayq status`, and waits out an outage. No fixed polling step: the wait is computed from the
schedule, so a job starts within milliseconds of its due time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from ..store.backend_errors import is_lock_conflict, is_outage, is_read_only, one_line
from ..store.index import Index
from ..store.table import Leases, QueueFlow, Table
from .interrupts import GracefulStop
from .liveness import Liveness
from .report import RunReport

# Lease recovery and the orphan sweep need not run on every wake-up.
SWEEP_EVERY = 5.0
# How often at most a loop notes in Redis that it is alive, for `delayq status`.
RECORD_EVERY = 1.0
RUNNING = "running"  # a loop's outcome until it ends
# The longest single wait, so a stop signal, a new queue or a job committed in a caller's
# transaction (no one wakes the loop for those: its next pass finds them) is noticed within it.
MAX_WAIT = 0.5
# How much sooner than needed a blocking wait ends, to absorb Redis's timeout granularity.
WAKE_SLACK = 0.25
# While Redis or the database is away the loop retries after this pause, doubled on every
# failed try up to OUTAGE_PAUSE_MAX: quick after a restart, quiet during a long outage.
OUTAGE_PAUSE_FIRST = 0.5
OUTAGE_PAUSE_MAX = 30.0

logger = logging.getLogger(__name__)


class LoopRecord:
    """A loop's entry in `delayq status`: one write when it starts, after a pass at most
    once a RECORD_EVERY (a busy loop's passes follow each other by milliseconds), and one
    when it ends; a loop that died is seen by the age of its last beat."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.started_at = self._now()
        self.beaten_at = float("-inf")  # monotonic time of the last write
        self.write(RUNNING, RunReport())

    def beat(self, total: RunReport) -> None:
        if time.monotonic() - self.beaten_at >= RECORD_EVERY:
            self.write(RUNNING, total)

    def write(self, outcome: str, total: RunReport) -> None:
        self.beaten_at = time.monotonic()
        try:
            duration = max(0.0, self._now() - self.started_at)
            self.index.registry.record_run(self.started_at, duration, outcome, total.ran, True)
        except Exception as exc:  # noqa: BLE001 - a loop is not stopped by its own bookkeeping
            logger.warning("could not record the loop for `delayq status`: %s", exc)

    def _now(self) -> float:
        try:
            return self.index.clock.now()
        except Exception:  # noqa: BLE001 - Redis away: its offset is a refinement
            return time.time()


class Outage:
    """The loop's patience while Redis or the database is away: each failed pass is
    followed by a pause, doubled each time, and one log line; a pass that works ends it.
    What a failed pass held and could not hand back (its servers were away) comes back by
    lease recovery: at the next pass that reaches the table, which ends those leases at once,
    not when they would lapse (a failover breaks passes for seconds; a lease is a minute)."""

    def __init__(self, stop: GracefulStop | None, liveness: Liveness | None, slack: float) -> None:
        self.stop = stop
        self.liveness = liveness  # a supervising parent must not take a pause for a hang
        self.slack = slack
        self.pause = OUTAGE_PAUSE_FIRST
        self.failed = 0
        self.held: list[str] = []  # lease tokens of the failed passes

    def let_go(self, table: Table, clock: Callable[[], float]) -> bool:
        """End the failed passes' leases; whether there were any, so the next pass sweeps
        (its recovery reads their journal first, as for any run that died)."""
        if not self.held:
            return False
        try:
            Leases(table).lapse(self.held, clock())
        except Exception as exc:  # noqa: BLE001 - still away: the next pass tries again
            logger.debug("could not end the failed passes' leases yet: %s", exc)
            return False
        self.held.clear()
        return True

    def wait_out(self, exc: Exception, remaining: float) -> None:
        # A deadlock the statement's own retries did not get past (a crowd of runs let go
        # at once by a locked table) is waited out like an outage.
        if is_lock_conflict(exc):
            what = "the database is busy"
        elif is_read_only(exc):
            what = "the database refuses writes (read-only: a switchover?)"
        elif is_outage(exc):
            what = "a server is away"
        else:
            raise exc
        self.failed += 1
        logger.warning("%s (%s); next try in %gs", what, one_line(exc), self.pause)
        if self.liveness is not None:
            self.liveness.promise(self.pause + self.slack)
        until = time.monotonic() + min(self.pause, remaining)
        while time.monotonic() < until and not (self.stop is not None and self.stop.requested):
            time.sleep(min(0.1, max(0.0, until - time.monotonic())))
        self.pause = min(self.pause * 2, OUTAGE_PAUSE_MAX)

    def end(self) -> None:
        if self.failed:
            logger.warning("servers are back after %d failed tries; running again", self.failed)
        self.pause, self.failed = OUTAGE_PAUSE_FIRST, 0


def _next_start(index: Index, names: list[str]) -> float | None:
    """When the soonest job of `names` may start: its due time, or for a limited queue when
    its limits next let a job start (a grant leaves its full rate window, a lease leaves its
    full running slots; a slot freed sooner wakes the loop); None if none is scheduled. A
    paused queue's due jobs wait for its resume, not for this loop."""
    flows = index.flow.read(names)
    heads = index.schedule.heads([name for name in names if not _paused(flows[name])])
    rates = {name: rate for name in heads if (rate := _rate(flows[name])) is not None}
    concurrency_limits = {
        name: limit for name in heads if (limit := _concurrency_limit(flows[name])) is not None
    }
    if rates or concurrency_limits:
        now = index.clock.now()
        free_at = index.flow.rate_free_at(rates, now) if rates else {}
        if concurrency_limits:
            for name, at in index.flow.slots_free_at(concurrency_limits, now).items():
                free_at[name] = max(at, free_at.get(name, at))
        heads.update((name, max(heads[name], at)) for name, at in free_at.items())
    return min(heads.values()) if heads else None


def _paused(flow: QueueFlow | None) -> bool:
    return flow is not None and flow.paused


def _rate(flow: QueueFlow | None) -> tuple[int, float] | None:
    return None if flow is None else flow.rate


def _concurrency_limit(flow: QueueFlow | None) -> int | None:
    return None if flow is None else flow.concurrency


def sleep_until_due(index: Index, queues: Sequence[str] | None, remaining: float) -> None:
    try:
        names = list(queues) if queues else index.registry.known_queues()
        head = _next_start(index, names)
        due_in = head - index.clock.now() if head is not None else MAX_WAIT
        wait = min(due_in, remaining, MAX_WAIT)
        if wait <= 0:
            return
        # Redis checks blocked clients' timeouts on its own clock tick (hz 10: every 100 ms),
        # so BLPOP may return up to that late. Block until just before the head is due (an add
        # of a sooner job still wakes us), then sleep the last stretch here, to the millisecond.
        # A wait that no due time or end of the loop cuts short is blocked whole: nothing is
        # late if it ends a tick late, and the idle loop makes no more passes than it needs.
        head_due = head is not None and due_in <= wait
        block = wait - WAKE_SLACK if head_due or wait < MAX_WAIT else wait
        if block > 0 and index.schedule.wait_for_wake(names, block):
            return
        if head is not None and head_due:
            time.sleep(max(0.0, head - index.clock.now()))
    except Exception as exc:
        if not is_outage(exc):
            raise  # an outage is met by the next pass
