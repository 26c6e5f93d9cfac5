"""What a run reports: counters, the lateness of the jobs it started, and each job's outcome
as it happens (for `run -v`, logs and metrics)."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from ..store.outcomes import Outcome
from ..store.tallies import LATENESS_BOUNDS  # shared with the tallies in Redis


@dataclass
class Lateness:
    """A fixed-bucket histogram, so memory stays flat however many jobs a run starts."""

    counts: list[int] = field(default_factory=lambda: [0] * len(LATENESS_BOUNDS))
    total: float = 0.0
    count: int = 0
    worst: float = 0.0

    def observe(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.counts[bisect.bisect_left(LATENESS_BOUNDS, seconds)] += 1
        self.total += seconds
        self.count += 1
        self.worst = max(self.worst, seconds)

    def merge(self, other: Lateness) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total
        self.count += other.count
        self.worst = max(self.worst, other.worst)


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
    elapsed: float = 0.0
    lateness: Lateness = field(default_factory=Lateness)

    @property
    def ran(self) -> int:
        return self.succeeded + self.failed

    def merge(self, other: RunReport) -> None:
        for name in [counter.name for counter in fields(self)]:  # the counts add up
            if name not in ("stopped_early", "interrupted", "stuck", "lateness"):
                setattr(self, name, getattr(self, name) + getattr(other, name))
        self.stopped_early = other.stopped_early
        self.stuck = max(self.stuck, other.stuck)
        self.interrupted = other.interrupted or self.interrupted
        self.lateness.merge(other.lateness)


OutcomeCallback = Callable[[Outcome], None]
