"""The read-only questions an operator asks of the table and the schedule: how each queue
stands (`status`), which rows match a filter (`list`), what runs next (`peek`), and what the
last run recorded. Nothing here writes (maintenance.py does); cli/ops.py renders it all. The
table's figures and rows come from store/table/ (figures.py, listing.py): here, which to ask
for, when a count gives way to an estimate, and the paging of `list`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..base.durations import Duration, format_delta, parse_duration
from ..config import validate_queue_name, validate_text
from ..errors import BadInput
from ..flow.limits import format_rate
from ..jobs.spec import row_view
from ..store.index import LAST_RUN_KEY, MAX_ID, Index, Registry
from ..store.table import (
    Count,
    Counts,
    JobRow,
    Jobs,
    Listing,
    QueueFigures,
    QueueFlow,
    QueueSettings,
    RowFilter,
    Status,
    Table,
    payload_or_empty,
)

MAX_PAGE = 10_000  # rows `list` or `peek` shows at once; more is a page of its own
FAILED_WINDOW = 3600.0  # `failed_last_hour` counts failures this recent
# Ranges of rows that grow with the table (finished rows, a due backlog) are counted up to
# this many, in milliseconds, and estimated beyond.
EXACT_UP_TO = 10_000
KNOWN_STATUSES = frozenset(status.value for status in Status)
# What the web page's overview counts, each a range of an SQL index so that it answers in
# milliseconds at millions of rows: unlike `status`, it leaves the count of finished rows (a
# walk over the whole table) to the CLI and the search; failed rows are worth counting.
LIVE_STATUSES = (Status.PENDING, Status.RUNNING, Status.FAILED)


@dataclass
class QueueStats:
    """How one queue stands at a moment; its fields are the queue's `status --json` object."""

    pending: int = 0
    pending_due: int = 0
    running: int = 0
    success: int = 0
    failed: int = 0
    cancelled: int = 0
    missed: int = 0
    failed_last_hour: int = 0
    failed_retried: int | None = 0  # failed attempts with a later attempt in their chain
    oldest_due_id: int | None = None
    oldest_due_at: float | None = None
    oldest_due_lag: float | None = None
    next_due_at: float | None = None
    scheduled: int = 0  # entries in the Redis sorted set: the jobs due within the horizon
    # `delayq pause`: runs start none of its jobs since `paused_at`; its due jobs wait (in
    # pending_due), never missed. `resumed_at`: its last resume, None if never.
    paused: bool = False
    paused_at: float | None = None
    resumed_at: float | None = None
    # `delayq limit`: at most this many starts in any window of its period ("10/s"), for all
    # runs together; None: no rate limit. `concurrency`: its concurrency limit, at most this
    # many of its jobs running at once, for all runs together; None: no such limit.
    rate: str | None = None
    concurrency: int | None = None
    # The fields above that are the database's estimate, not a count (see status_report).
    estimated: list[str] = field(default_factory=list)

    @property
    def pending_later(self) -> int:
        return self.pending - self.pending_due

    @property
    def estimated_fields(self) -> set[str]:
        """The estimated figures, with those computed from one (later, terminal)."""
        derived = {
            "pending": "pending_later",
            "pending_due": "pending_later",
            "failed": "failed_terminal",
        }
        return set(self.estimated) | {derived[name] for name in self.estimated if name in derived}

    @property
    def failed_terminal(self) -> int | None:
        """Failures that ended their chain: retries exhausted, NoRetry, poison, refused; None
        where the failed rows were too many to look each up."""
        return None if self.failed_retried is None else self.failed - self.failed_retried

    def as_json(self) -> dict[str, Any]:
        return dict(
            asdict(self), pending_later=self.pending_later, failed_terminal=self.failed_terminal
        )


@dataclass(frozen=True)
class LastRun:
    """What the last `delayq run` recorded in Redis about itself: a pass when it ended, a
    `--loop` as it went (its duration runs to its last beat, its jobs are all it ran)."""

    started_at: float | None
    duration: float | None
    outcome: str | None
    jobs: int | None
    loop: bool = False

    @property
    def finished_at(self) -> float | None:
        """When the run last said it was alive: a pass's end, a loop's last beat."""
        return None if self.started_at is None else self.started_at + (self.duration or 0.0)


class StatusReport(dict[str, Any]):
    """Every queue's stats and the last run, as seen at `now`. It is the dict `delayq status
    --json` prints, `{"now", "last_run", "queues": {name: {...}}}`, so that json.dumps and a
    web framework's JSON response take it as it is, as they take `show`'s and `list_jobs`'
    dicts; the same figures are its attributes: `now`, `queues` (name: QueueStats) and
    `last_run` (a LastRun, or None)."""

    def __init__(self, now: float, queues: dict[str, QueueStats], last_run: LastRun | None):
        super().__init__(now=now, last_run=_last_run_json(now, last_run))
        self["queues"] = {name: stats.as_json() for name, stats in queues.items()}
        self.now = now
        self.queues = queues
        self.last_run = last_run

    def as_json(self) -> dict[str, Any]:
        """The report as a plain dict (what it holds as a dict itself)."""
        return dict(self)

    def problems(self, max_idle: float, max_lag: float) -> list[str]:
        """One line per thing a monitoring probe should page about."""
        found = []
        finished = self.last_run.finished_at if self.last_run else None
        if finished is None:
            found.append(f"no run recorded ({LAST_RUN_KEY} is empty): is cron running delayq run?")
        elif self.now - finished > max_idle:
            found.append(
                f"no run for {format_delta(self.now - finished)} (max {format_delta(max_idle)}):"
                " is cron running delayq run?"
            )
        for name, stats in self.queues.items():  # a paused queue's jobs wait on purpose
            if (lag := stats.oldest_due_lag) is not None and lag > max_lag and not stats.paused:
                found.append(
                    f"queue {name}: job {stats.oldest_due_id} is {format_delta(lag)} late"
                    f" (max {format_delta(max_lag)}), {stats.pending_due} due in all"
                )
        return found


def _last_run_json(now: float, last_run: LastRun | None) -> dict[str, Any] | None:
    """The last run's fields, with how long ago it last said it was alive (`age`) and when
    (`beat_at`)."""
    if last_run is None:
        return None
    finished = last_run.finished_at
    age = None if finished is None else max(0.0, now - finished)
    return dict(asdict(last_run), age=age, beat_at=finished)


def status_report(
    table: Table, index: Index, now: float, statuses: Sequence[Status] | None = None
) -> StatusReport:
    """Stats of every queue the table or the index knows, and the last run; only the rows of
    `statuses` (all when None) are counted. Each figure is a kept count (pending; without
    triggers, counted as the finished statuses are), a range of
    an SQL index whose size follows the jobs in flight or recent (running, failures of the last
    hour, due times), or a range counted up to EXACT_UP_TO rows and estimated beyond (the
    finished statuses, the due backlog): a look costs the same at ten million rows as at
    none. An estimated figure is named in the queue's `estimated`."""
    figures = QueueFigures(table)
    wanted = set(Status if statuses is None else statuses)
    present = {
        Status(number)
        for number in Counts(table).statuses_present()
        if number in KNOWN_STATUSES and Status(number) in wanted  # unknown numbers count nowhere
    }
    by_status = {status: Jobs(table).queues_of(status) for status in present - {Status.PENDING}}
    pending, estimated = Counts(table).pending_counts() if Status.PENDING in wanted else ({}, set())
    names = set(pending) | {name for found in by_status.values() for name in found}
    flows = QueueSettings(table).flows()
    names |= set(flows) | set(index.registry.queues())
    stats = {name: QueueStats() for name in sorted(names)}
    _flow_figures(stats, flows)
    for name, count in pending.items():
        stats[name].pending = count
        if name in estimated:  # no triggers keep the counts, and this queue has many
            stats[name].estimated.append("pending")
    if Status.RUNNING in present:
        for name, count in Jobs(table).running_by_queue().items():
            stats[name].running = count
    for status in present - {Status.PENDING, Status.RUNNING}:
        for name in by_status[status]:
            _count_into(stats[name], status.word, figures.with_status(name, status, EXACT_UP_TO))
    if Status.FAILED in present:
        _failure_figures(figures, stats, now)
    for name, entry in stats.items():
        if entry.pending:
            _due_figures(figures, name, entry, now)
        entry.scheduled = index.schedule.size(name)
    return StatusReport(now, stats, read_last_run(index.registry))


def _failure_figures(figures: QueueFigures, stats: dict[str, QueueStats], now: float) -> None:
    """Failures of the last hour, and those retried since."""
    for name, count in figures.failed_since(now - FAILED_WINDOW).items():
        stats[name].failed_last_hour = count
    _count_retried(figures, stats)


def _flow_figures(stats: dict[str, QueueStats], flows: dict[str, QueueFlow]) -> None:
    for name, flow in flows.items():
        stats[name].paused, stats[name].paused_at = flow.paused, flow.paused_at
        stats[name].resumed_at = flow.resumed_at
        stats[name].rate = None if flow.rate is None else format_rate(flow.rate)
        stats[name].concurrency = flow.concurrency


def _count_into(entry: QueueStats, field: str, *found: Count) -> None:
    """Set `field` to the sum of the counts of disjoint parts, each exact up to EXACT_UP_TO,
    else the server's estimate: then the field is named in `estimated`."""
    setattr(entry, field, sum(count for count, _ in found))
    if not all(exact for _, exact in found):
        entry.estimated.append(field)


def _count_retried(figures: QueueFigures, stats: dict[str, QueueStats]) -> None:
    """Failed attempts with a later attempt in their chain, a lookup per failed row, up to
    EXACT_UP_TO of them; unknown (None) beyond (SQLite counts past it: 100,000 took 0.3 s)."""
    for name, entry in stats.items():
        if "failed" in entry.estimated or entry.failed > EXACT_UP_TO:
            entry.failed_retried = None
            entry.estimated.append("failed_retried")
        elif entry.failed:
            entry.failed_retried = figures.retried_failures(name)


def _due_figures(figures: QueueFigures, name: str, entry: QueueStats, now: float) -> None:
    """The due backlog (counted up to EXACT_UP_TO), the oldest due and the next due."""
    _count_into(entry, "pending_due", *figures.due_backlog(name, now, EXACT_UP_TO))
    if oldest := figures.oldest_due(name, now):
        entry.oldest_due_id, entry.oldest_due_at = oldest
        entry.oldest_due_lag = max(0.0, now - oldest[1])
    entry.next_due_at = figures.next_due(name, now)


def read_last_run(registry: Registry) -> LastRun | None:
    """What the last run recorded, or None when no run has recorded itself."""
    if not (fields := registry.last_run()):
        return None
    jobs = _number(fields.get("jobs"))
    return LastRun(
        started_at=_number(fields.get("started_at")),
        duration=_number(fields.get("duration")),
        outcome=fields.get("outcome"),
        jobs=None if jobs is None else int(jobs),
        loop=fields.get("loop") == "1",
    )


@dataclass(frozen=True)
class JobFilter:
    """Which rows `list` and `requeue` look at; every field left empty matches everything."""

    statuses: tuple[Status, ...] = ()
    queue: str | None = None
    ext: str | None = None
    class_path: str | None = None
    since: Duration | None = None  # rows whose last change is at most this old
    changed_from: float | None = None  # epoch seconds: last change at or after
    changed_to: float | None = None  # epoch seconds: last change before

    def __post_init__(self) -> None:
        # An empty value is most often an unset shell variable; refused rather than read as
        # "rows without one", so a filter never quietly widens or empties a bulk command.
        if self.queue is not None:
            validate_queue_name(self.queue)
        for name, value in (("--ext", self.ext), ("--class", self.class_path)):
            if value is not None:
                validate_text(value, name)
        if self.since is not None:
            parse_duration(self.since, "--since")

    def selection(self, now: float) -> RowFilter:
        """The rows matching every field but the exact class (see `matches_class`), as the
        table selects them at `now`: `since` becomes the earliest last change it allows."""
        earliest = [self.changed_from] if self.changed_from is not None else []
        if self.since is not None:
            # `since`: seconds, a timedelta or "2h", as --since takes it.
            earliest.append(now - parse_duration(self.since, "--since"))
        return RowFilter(
            statuses=tuple(self.statuses),
            queue=self.queue,
            ext=self.ext,
            class_path=self.class_path,
            changed_from=max(earliest, default=None),
            changed_to=self.changed_to,
        )

    def matches_class(self, row: JobRow) -> bool:
        """Whether the row names exactly this class; SQL only narrowed it down with LIKE."""
        return (
            self.class_path is None or payload_or_empty(row.params).get("class") == self.class_path
        )


def check_page(limit: int, before_id: int | None) -> None:
    """BadInput unless `list` may show `limit` rows below `before_id`."""
    if not 1 <= limit <= MAX_PAGE:
        raise BadInput(f"--limit must be between 1 and {MAX_PAGE}")
    if before_id is not None and not 1 <= before_id <= MAX_ID:
        raise BadInput(f"--before-id must be between 1 and {MAX_ID}")


def list_views(
    table: Table, filters: JobFilter, now: float, limit: int, before_id: int | None
) -> list[dict[str, Any]]:
    """`list_jobs`'s rows as `list --json` shows them."""
    return [row_view(row) for row in list_jobs(table, filters, now, limit, before_id)]


def list_jobs(
    table: Table, filters: JobFilter, now: float, limit: int, before_id: int | None = None
) -> list[JobRow]:
    """Rows matching `filters`, newest first: at most `limit`, all with ids below `before_id`."""
    selection, listing = filters.selection(now), Listing(table)
    batch = max(limit, 100)
    found: list[JobRow] = []
    while len(found) < limit:
        rows = listing.newest(selection, before_id, batch)
        found.extend(row for row in rows if filters.matches_class(row))
        if len(rows) < batch:
            break
        before_id = rows[-1].id
    return found[:limit]


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None
