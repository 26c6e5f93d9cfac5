"""The read-only questions an operator asks of the table and the schedule: how each queue
stands (`status`), which rows match a filter (`list`), what runs next (`peek`), and what the
last run recorded.

Nothing here writes; maintenance.py holds the bulk writes. Queue calls these with its
table; cli/ops.py renders what they return.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from peewee import SQL, ModelSelect, NodeList, Value, fn

from ..config import validate_queue_name, validate_text
from ..durations import Duration, format_delta, parse_duration
from ..store import queries
from ..store.index import Index
from ..store.keys import LAST_RUN_KEY, job_id_of
from ..store.params import payload_or_empty
from ..store.registry import Registry
from ..store.table import Job, Status, Table, due_column, tuples, utc_stamp

FAILED_WINDOW = 3600.0  # `failed_last_hour` counts failures this recent
KNOWN_STATUSES = frozenset(status.value for status in Status)


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
    failed_retried: int = 0  # failed attempts with a later attempt in their chain
    oldest_due_id: int | None = None
    oldest_due_at: float | None = None
    oldest_due_lag: float | None = None
    next_due_at: float | None = None
    scheduled: int = 0  # entries in the Redis sorted set; below `pending` means a lost index

    @property
    def pending_later(self) -> int:
        return self.pending - self.pending_due

    @property
    def failed_terminal(self) -> int:
        """Failures that ended their chain: retries exhausted, NoRetry, poison, refused."""
        return self.failed - self.failed_retried

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
        if self.started_at is None:
            return None
        return self.started_at + (self.duration or 0.0)


@dataclass(frozen=True)
class StatusReport:
    """Every queue's stats and the last run, as seen at `now`."""

    now: float
    queues: dict[str, QueueStats]
    last_run: LastRun | None

    def as_json(self) -> dict[str, Any]:
        last = None
        if self.last_run is not None:
            finished = self.last_run.finished_at
            age = None if finished is None else max(0.0, self.now - finished)
            last = dict(asdict(self.last_run), age=age, beat_at=finished)
        return {
            "now": self.now,
            "last_run": last,
            "queues": {name: stats.as_json() for name, stats in self.queues.items()},
        }

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
        for name, stats in self.queues.items():
            lag = stats.oldest_due_lag
            if lag is not None and lag > max_lag:
                found.append(
                    f"queue {name}: job {stats.oldest_due_id} is {format_delta(lag)} late"
                    f" (max {format_delta(max_lag)}), {stats.pending_due} due in all"
                )
        return found


def status_report(table: Table, index: Index, now: float) -> StatusReport:
    """Stats of every queue the table or the index knows, and the last run."""
    return StatusReport(now, queue_stats(table, index, now), read_last_run(index.registry))


def queue_stats(table: Table, index: Index, now: float) -> dict[str, QueueStats]:
    """{queue: QueueStats} for every queue with rows or an index entry, sorted by name."""
    counts = queries.counts_by_queue(table)
    stats = {name: QueueStats() for name in sorted(set(counts) | set(index.registry.queues()))}
    for name, by_status in counts.items():
        for status, count in by_status.items():
            if status in KNOWN_STATUSES:  # a number delayq never writes counts nowhere
                setattr(stats[name], Status(status).word, count)
    fill_live(table, index, stats, now)
    return stats


def fill_live(table: Table, index: Index, stats: dict[str, QueueStats], now: float) -> None:
    """Each queue's due count, failures in the last hour, due times and schedule size:
    ranges of the (status, queue, run_at) and (status, modified) indexes."""
    Job = table.model
    failed_since = (Job.status == Status.FAILED) & (Job.modified >= utc_stamp(now - FAILED_WINDOW))
    for field, condition in (
        ("pending_due", _is_due(table, now)),
        ("failed_last_hour", failed_since),
        ("failed_retried", _was_retried(table)),
    ):
        for name, count in grouped_count(table, condition).items():
            setattr(stats[name], field, count)
    for name, entry in stats.items():
        fill_times(table, entry, name, now)
        entry.scheduled = index.schedule.size(name)


def _is_due(table: Table, now: float) -> Any:
    Job = table.model
    return (Job.status == Status.PENDING) & ((Job.run_at <= now) | Job.run_at.is_null())


def _was_retried(table: Table) -> Any:
    """A failed row that has a later attempt in its chain (on the chain_id index)."""
    Job = table.model
    Later = Job.alias("later")
    later = Later.select(SQL("1")).where(
        (Later.chain_id == fn.COALESCE(Job.chain_id, Job.id)) & (Later.id > Job.id)
    )
    return (Job.status == Status.FAILED) & fn.EXISTS(later)


def grouped_count(table: Table, condition: Any) -> dict[str, int]:
    Job = table.model
    query = Job.select(Job.queue, fn.COUNT(Job.id).alias("n")).where(condition).group_by(Job.queue)
    rows: Iterable[tuple[str, int]] = query.tuples()  # type: ignore[assignment]  # not models
    return dict(rows)


def fill_times(table: Table, entry: QueueStats, queue: str, now: float) -> None:
    Job = table.model
    oldest = oldest_due(table, queue, now)
    if oldest is not None:
        entry.oldest_due_id, entry.oldest_due_at = oldest
        entry.oldest_due_lag = max(0.0, now - oldest[1])
    upcoming = (
        Job.select(fn.MIN(Job.run_at))
        .where(Job.status == Status.PENDING, Job.queue == queue, Job.run_at > now)
        .scalar()
    )
    entry.next_due_at = None if upcoming is None else float(upcoming)


def oldest_due(table: Table, queue: str, now: float) -> tuple[int, float] | None:
    """(id, due) of the queue's pending row that has been due longest, if any is due."""
    Job = table.model
    pending = Job.select(Job.id, due_column(table)).where(
        Job.status == Status.PENDING, Job.queue == queue
    )
    candidates = [
        *tuples(pending.where(Job.run_at <= now).order_by(Job.run_at, Job.id).limit(1)),
        # A producer that leaves run_at empty means "due when created": oldest id first.
        *tuples(pending.where(Job.run_at.is_null()).order_by(Job.id).limit(1)),
    ]
    if not candidates:
        return None
    job_id, due = min(candidates, key=lambda candidate: float(candidate[1]))
    return job_id, float(due)


def read_last_run(registry: Registry) -> LastRun | None:
    """What the last run recorded, or None when no run has recorded itself."""
    fields = registry.last_run()
    if not fields:
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

    def query(self, table: Table, now: float) -> ModelSelect[Job]:
        """The rows matching every field but the exact class (see `matches_class`)."""
        Job = table.model
        query = Job.select()
        if self.statuses:
            query = query.where(Job.status.in_(list(self.statuses)))
        if self.queue is not None:
            query = query.where(Job.queue == self.queue)
        if self.ext is not None:
            query = query.where(Job.ext_string == self.ext)
        if self.since is not None:
            since = parse_duration(self.since, "--since")  # seconds, a timedelta or "2h"
            query = query.where(Job.modified >= utc_stamp(now - since))
        if self.changed_from is not None:
            query = query.where(Job.modified >= utc_stamp(self.changed_from))
        if self.changed_to is not None:
            query = query.where(Job.modified < utc_stamp(self.changed_to))
        if self.class_path is not None:
            query = query.where(_params_mention(table, self.class_path))
        return query

    def matches_class(self, row: Job) -> bool:
        """Whether the row names exactly this class; SQL only narrowed it down with LIKE."""
        return (
            self.class_path is None or payload_or_empty(row.params).get("class") == self.class_path
        )


def _params_mention(table: Table, class_path: str) -> Any:
    # params is JSON text (or a PHP producer's serialize() text), and json_extract differs
    # between SQLite and MariaDB (and fails on rows that are not JSON), so SQL narrows with
    # LIKE on how either writes the class, and Python checks the exact class.
    Job = table.model
    as_json = json.dumps(class_path, ensure_ascii=False)
    as_php = f'"{class_path}";'
    return _like(Job.params, as_json) | _like(Job.params, as_php)


def _like(column: Any, text: str) -> NodeList:
    escaped = text.replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return NodeList((column, SQL("LIKE"), Value(f"%{escaped}%"), SQL("ESCAPE '!'")))


def list_jobs(
    table: Table, filters: JobFilter, now: float, limit: int, before_id: int | None = None
) -> list[Job]:
    """Rows matching `filters`, newest first: at most `limit`, all with ids below `before_id`."""
    found: list[Job] = []
    for batch in _newest_first(table, filters.query(table, now), before_id, max(limit, 100)):
        found.extend(row for row in batch if filters.matches_class(row))
        if len(found) >= limit:
            break
    return found[:limit]


def _newest_first(
    table: Table, query: ModelSelect[Job], before_id: int | None, batch: int
) -> Iterator[list[Job]]:
    Job = table.model
    while True:
        page = query if before_id is None else query.where(Job.id < before_id)
        rows = list(page.order_by(Job.id.desc()).limit(batch))
        if rows:
            yield rows
        if len(rows) < batch:
            return
        before_id = rows[-1].id


@dataclass(frozen=True)
class Upcoming:
    """One entry of the schedule and, when it has one, its row."""

    queue: str
    id: int
    run_at: float
    row: Job | None


def next_scheduled(table: Table, index: Index, queues: Sequence[str], count: int) -> list[Upcoming]:
    """The first `count` entries across the queues' schedules, soonest first, with their rows.

    Reads the sorted sets with ZRANGE: nothing is claimed. Members that are not ids are left
    out (a run drops them).
    """
    entries: list[tuple[float, int, str]] = []
    for queue in queues:
        for member, score in index.schedule.earliest(queue, count):
            job_id = job_id_of(member)
            if job_id is not None:
                entries.append((float(score), job_id, queue))
    entries.sort()
    entries = entries[:count]
    rows = rows_by_id(table, [job_id for _, job_id, _ in entries])
    return [Upcoming(queue, job_id, due, rows.get(job_id)) for due, job_id, queue in entries]


def rows_by_id(table: Table, ids: Sequence[int]) -> dict[int, Job]:
    """{id: row} for the ids that have rows, in one query."""
    Job = table.model
    if not ids:
        return {}
    return {row.id: row for row in Job.select().where(Job.id.in_(list(ids)))}


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None
