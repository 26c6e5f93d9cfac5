"""Starting one pass of `delayq run` with the options a caller gave."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..config import MAX_CONCURRENCY, Settings, validate_queue_name
from ..durations import Duration, parse_duration
from ..errors import BadInput
from ..store.index import Index
from ..store.table import Table
from .allowlist import check_allowlist
from .interrupts import GracefulStop
from .liveness import Liveness
from .report import OutcomeCallback, RunReport
from .run import Run, RunLimits

MAX_WEIGHT = 100


@dataclass(frozen=True)
class RunOptions:
    """What a caller asked of a run, before it is checked; None: the settings' default."""

    since: Duration | None = None
    limit: int | None = None
    max_seconds: Duration | None = None
    queues: Sequence[str] | None = None
    weights: Mapping[str, int] | None = None
    concurrency: int | None = None
    grace: Duration | None = None

    def plan(self, settings: Settings) -> tuple[Settings, RunLimits]:
        """The settings and limits of the run, or BadInput / ConfigError naming what is wrong."""
        check_allowlist(settings.handlers)
        if self.limit is not None and (_not_whole(self.limit) or self.limit < 1):
            raise BadInput("--limit must be at least 1")
        for name in [*(self.queues or ()), *(self.weights or {})]:
            validate_queue_name(name)
        for name, weight in (self.weights or {}).items():
            if _not_whole(weight) or not 1 <= weight <= MAX_WEIGHT:
                raise BadInput(f"queue {name}: a weight is a whole number from 1 to {MAX_WEIGHT}")
        limits = RunLimits(
            since=_seconds_or(self.since, settings.since, "--since"),
            limit=self.limit,
            max_seconds=_seconds_or(self.max_seconds, settings.max_seconds, "--max-seconds"),
            weights=dict(self.weights or {}),
        )
        return self._settings(settings), limits

    def _settings(self, settings: Settings) -> Settings:
        concurrency, grace = self.concurrency, self.grace
        if concurrency is not None and (
            _not_whole(concurrency) or not 1 <= concurrency <= MAX_CONCURRENCY
        ):
            raise BadInput(f"--concurrency must be between 1 and {MAX_CONCURRENCY}")
        return replace(
            settings,
            concurrency=settings.concurrency if concurrency is None else concurrency,
            grace=_seconds_or(grace, settings.grace, "--grace"),
        )


def _seconds_or(value: Duration | None, default: float, name: str) -> float:
    return default if value is None else parse_duration(value, name)


def _not_whole(value: object) -> bool:
    return isinstance(value, bool) or not isinstance(value, int)


def run_once(
    settings: Settings,
    table: Table,
    index: Index,
    queues: Sequence[str] | None = None,
    limits: RunLimits | None = None,
    now: float | None = None,
    on_outcome: OutcomeCallback | None = None,
    stop: GracefulStop | None = None,
    liveness: Liveness | None = None,
) -> RunReport:
    """One pass over `queues` (default: every queue the index knows); `liveness`: beats for
    a supervising parent."""
    limits = limits or RunLimits(settings.since, None, settings.max_seconds)
    clock = (lambda: now) if now is not None else index.clock.now
    run = Run(settings, table, index, limits, clock, on_outcome, stop, liveness)
    return run.execute(queues)
