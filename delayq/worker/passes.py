"""One pass of `delayq run`: what it holds while it settles dead runs' jobs and drains each queue
in turn, and what it gives each queue's drain (TurnNeeds, drains.py). A Pass is small and
short-lived: the runner (runner.py) makes one per pass and keeps whatever must outlive it.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable

from ..config import Settings
from ..flow.gate import Gate, HeldSlots
from ..store.index import Index
from ..store.table import Table
from .bookkeeper import Bookkeeper
from .claims import Claimer
from .drains import TurnNeeds
from .group_commits import OutcomeBuffer
from .heartbeat import HeldLeases
from .interrupts import GracefulStop
from .liveness import Liveness
from .options import RunOptions
from .report import RunReport


class Pass:
    """One pass: its lease token and deadline, the running slots its jobs hold, its limits, and
    its report. `settings` are the runner's with the options' window, budget, concurrency and
    grace applied."""

    def __init__(
        self,
        settings: Settings,
        table: Table,
        index: Index,
        options: RunOptions,
        clock: Callable[[], float],
        bookkeeper: Callable[[], Bookkeeper],
        stop: GracefulStop | None = None,
        liveness: Liveness | None = None,
    ) -> None:
        self.settings = settings = options.applied_to(settings)
        self.table = table
        self.index = index
        self.options = options
        self.clock = clock
        self.bookkeeper = bookkeeper  # the runner's bookkeeping thread, started on first use
        self.stop = stop
        self.liveness = liveness
        self.token = uuid.uuid4().hex
        self.report = RunReport()
        self.started_at = time.monotonic()
        self.calls = 0  # jobs the drains of this pass started, counted against --limit
        self.leases = HeldLeases(table, self.token, clock, settings.lease)
        self.held_slots = HeldSlots()  # of its jobs of concurrency-limited queues
        self.claimer = Claimer(
            table, index, self.token, settings.lease, settings.since, dict(settings.php_classes)
        )

    @property
    def stopping(self) -> bool:
        """A stop signal came: nothing new starts."""
        return self.stop is not None and self.stop.requested

    def may_start(self) -> int | None:
        """How many more jobs the pass may start under --limit; None: no limit."""
        limit = self.options.limit
        return None if limit is None else max(limit - self.calls, 0)

    def out_of_time(self) -> bool:
        return time.monotonic() - self.started_at >= self.settings.max_seconds

    def must_stop(self) -> bool:
        """Whether the pass claims and starts nothing more: a stop signal, --limit reached or
        --max-seconds over (those two noted in the report as a stop before the end)."""
        if self.stopping:
            return True
        if self.may_start() == 0 or self.out_of_time():
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

    def needs_of(self, queue: str) -> TurnNeeds:
        """What the drain of `queue`'s turn is given: the pass's claimer, leases, clock and
        stop, and the turn's own flow gate and outcome buffer."""
        gate = Gate(self.table, self.index, queue, self.token, self.clock, self.held_slots)
        return TurnNeeds(
            claimer=self.claimer,
            gate=gate,
            buffer=OutcomeBuffer(self.table, self.index, queue, self.token),
            journal=self.index.journal,
            leases=self.leases,
            clock=self.clock,
            bookkeeper=self.bookkeeper,
            must_stop=self.must_stop,
            show_progress=self.show_progress,
            stop=self.stop,
            grace=self.settings.grace,
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
