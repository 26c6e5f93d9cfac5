"""What a run reports: counters, and each job's outcome as it happens (for `run -v`, logs and
metrics)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from ..store.table import Outcome


@dataclass
class RunReport:
    """What one pass (or one loop of passes) did."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    deferred: int = 0  # handlers that raised RetryLater: due again, no failure counted
    missed: int = 0
    dropped: int = 0  # index entries whose row was not pending (cancelled, done, missing)
    recovered: int = 0  # jobs of dead runs put back on the schedule or settled from the journal
    reindexed: int = 0  # pending rows put back into a lost index
    stopped_early: bool = False  # --limit or --max-seconds reached with jobs still due
    interrupted: int | None = None  # the signal that stopped the run, if one did
    stuck: int = 0  # handler threads stuck past their time limit when the run gave up
    elapsed: float = 0.0  # busy: seconds spent in passes (a loop's sleeps left out)
    wall: float = 0.0  # seconds from the run's start to its end, a loop's sleeps included

    @property
    def ran(self) -> int:
        return self.succeeded + self.failed

    def merge(self, other: RunReport) -> None:
        for name in [counter.name for counter in fields(self)]:  # the counts add up
            if name not in ("stopped_early", "interrupted", "stuck"):
                setattr(self, name, getattr(self, name) + getattr(other, name))
        self.stopped_early = other.stopped_early
        self.stuck = max(self.stuck, other.stuck)
        self.interrupted = other.interrupted or self.interrupted


OutcomeCallback = Callable[[Outcome], None]
