"""`delayq run --loop`: passes back to back, sleeping between them until the head of the
schedule is due or an adder wakes the loop because it added a job due sooner.

No fixed polling step: the wait is computed from the schedule, so a job starts within
milliseconds of its due time instead of within the seed's loop step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from ..config import Settings
from ..store.index import ScheduleIndex
from ..store.table import Table
from .interrupts import GracefulStop
from .liveness import Liveness
from .passes import run_once
from .report import OutcomeCallback, RunReport
from .run import RunLimits, known_queues

# Lease recovery and the orphan sweep need not run on every wake-up.
SWEEP_EVERY = 5.0
# The longest single wait, so a stop signal or a new queue is noticed within this.
MAX_WAIT = 1.0
# How much sooner than needed a blocking wait ends, to absorb Redis's timeout granularity.
WAKE_SLACK = 0.25


def run_loop(
    settings: Settings,
    table: Table,
    index: ScheduleIndex,
    queues: Sequence[str] | None,
    limits: RunLimits,
    duration: float | None,
    on_outcome: OutcomeCallback | None = None,
    stop: GracefulStop | None = None,
    liveness: Liveness | None = None,
) -> RunReport:
    """Run passes until `duration` seconds have passed (None: until stopped)."""
    total = RunReport()
    deadline = None if duration is None else time.monotonic() + duration
    last_sweep = float("-inf")
    while True:
        remaining = float("inf") if deadline is None else deadline - time.monotonic()
        if remaining <= 0 or (stop is not None and stop.requested):
            break
        sweep = time.monotonic() - last_sweep >= SWEEP_EVERY
        if sweep:
            last_sweep = time.monotonic()
        budget = min(limits.max_seconds, remaining)
        report = run_once(
            settings,
            table,
            index,
            queues,
            replace(limits, max_seconds=budget, sweep=sweep),
            None,
            on_outcome,
            stop,
            liveness,
        )
        total.merge(report)
        if report.interrupted is not None or report.stuck:
            break
        if not report.stopped_early:
            _sleep_until_due(index, queues, remaining)
    if stop is not None and stop.requested:
        total.interrupted = stop.signum
    return total


def _sleep_until_due(index: ScheduleIndex, queues: Sequence[str] | None, remaining: float) -> None:
    names = list(queues) if queues else known_queues(index)
    heads = index.heads(names)
    head = min(heads.values()) if heads else None
    due_in = head - index.now() if head is not None else MAX_WAIT
    wait = min(due_in, remaining, MAX_WAIT)
    if wait <= 0:
        return
    # Redis checks blocked clients' timeouts on its own clock tick (hz 10: every 100 ms), so
    # BLPOP may return up to that late. Block until just before the head is due (an add of a
    # sooner job still wakes us), then sleep the last stretch here, to the millisecond.
    if wait > WAKE_SLACK and index.wait_for_wake(names, wait - WAKE_SLACK):
        return
    if head is not None and due_in <= wait:
        time.sleep(max(0.0, head - index.now()))
