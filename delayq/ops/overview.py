"""The read-only questions an operator asks of the table and the schedule: how each queue
stands (`status`), which rows match a filter (`list`), what runs next (`peek`), and what the
last run recorded. Nothing here writes (maintenance.py does); cli/ops.py renders it all."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from peewee import SQL, ModelSelect, NodeList, Value, fn

from ..config import validate_queue_name, validate_text
from ..durations import Duration, format_delta, format_rate, parse_duration
from ..store.index.keys import LAST_RUN_KEY
from ..store.index.parts import Index
from ..store.index.registry import Registry
from ..store.table import counts, queries, queue_settings
from ..store.table.model import Job, Status, Table, due_column, tuples, utc_stamp
from ..store.table.params import payload_or_empty
from ..store.table.queue_settings import QueueFlow

FAILED_WINDOW = 3600.0  # `failed_last_hour` counts failures this recent
# Ranges of rows that grow with the table (finished rows, a due backlog) are counted up to
# this many, in milliseconds, and estimated beyond.
EXACT_UP_TO = 10_000
KNOWN_STATUSES = frozenset(status.value for status in Status)
# What the web page's overview counts, each a range of an index so that it answers in
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
    # runs together; None: no rate limit. `concurrency`: at most this many of its jobs
    # running at once, for all runs together; None: no such limit.
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
    an index whose size follows the jobs in flight or recent (running, failures of the last
    hour, due times), or a range counted up to EXACT_UP_TO rows and estimated beyond (the
    finished statuses, the due backlog): a look costs the same at ten million rows as at
    none. An estimated figure is named in the queue's `estimated`."""
    Job = table.model
    wanted = set(Status if statuses is None else statuses)
    present = {
        Status(number)
        for number in counts.statuses_present(table)
        if number in KNOWN_STATUSES and Status(number) in wanted  # unknown numbers count nowhere
    }
    by_status = {status: queries.queues_of(table, status) for status in present - {Status.PENDING}}
    pending, estimated = counts.pending_counts(table) if Status.PENDING in wanted else ({}, set())
    names = set(pending) | {name for found in by_status.values() for name in found}
    flows = queue_settings.flows(table)
    names |= set(flows) | set(index.registry.queues())
    stats = {name: QueueStats() for name in sorted(names)}
    _flow_figures(stats, flows)
    for name, count in pending.items():
        stats[name].pending = count
        if name in estimated:  # no triggers keep the counts, and this queue has many
            stats[name].estimated.append("pending")
    if Status.RUNNING in present:
        for name, count in queries.running_by_queue(table).items():
            stats[name].running = count
    for status in present - {Status.PENDING, Status.RUNNING}:
        for name in by_status[status]:
            rows = Job.select(Job.id).where(Job.status == status, Job.queue == name)
            _count_into(table, stats[name], status.word, rows)
    if Status.FAILED in present:
        _failure_figures(table, stats, now)
    for name, entry in stats.items():
        if entry.pending:
            _due_figures(table, name, entry, now)
        entry.scheduled = index.schedule.size(name)
    return StatusReport(now, stats, read_last_run(index.registry))


def _failure_figures(table: Table, stats: dict[str, QueueStats], now: float) -> None:
    """Failures of the last hour, and those retried since."""
    Job = table.model
    recent = (
        Job.select(Job.queue, fn.COUNT(Job.id))
        .where(Job.status == Status.FAILED, Job.modified >= utc_stamp(now - FAILED_WINDOW))
        .group_by(Job.queue)
    )
    for name, count in tuples(recent):
        stats[name].failed_last_hour = count
    _count_retried(table, stats)


def _flow_figures(stats: dict[str, QueueStats], flows: dict[str, QueueFlow]) -> None:
    for name, flow in flows.items():
        stats[name].paused, stats[name].paused_at = flow.paused, flow.paused_at
        stats[name].resumed_at = flow.resumed_at
        stats[name].rate = None if flow.rate is None else format_rate(flow.rate)
        stats[name].concurrency = flow.concurrency


def _count_into(table: Table, entry: QueueStats, field: str, *parts: ModelSelect[Job]) -> None:
    """Set `field` to the number of rows of `parts` (disjoint): each exact up to EXACT_UP_TO,
    else the server's estimate, named in `estimated`."""
    found = [counts.bounded_count(table, rows, EXACT_UP_TO) for rows in parts]
    setattr(entry, field, sum(count for count, _ in found))
    if not all(exact for _, exact in found):
        entry.estimated.append(field)


def _count_retried(table: Table, stats: dict[str, QueueStats]) -> None:
    """Failed attempts with a later attempt in their chain, a lookup per failed row, up to
    EXACT_UP_TO of them; unknown (None) beyond (SQLite counts past it: 100,000 took 0.3 s)."""
    Job = table.model
    Later = Job.alias("later")
    later = Later.select(SQL("1")).where(
        (Later.chain_id == fn.COALESCE(Job.chain_id, Job.id)) & (Later.id > Job.id)
    )
    for name, entry in stats.items():
        if "failed" in entry.estimated or entry.failed > EXACT_UP_TO:
            entry.failed_retried = None
            entry.estimated.append("failed_retried")
        elif entry.failed:
            entry.failed_retried = (
                Job.select(fn.COUNT(Job.id))
                .where(Job.status == Status.FAILED, Job.queue == name, fn.EXISTS(later))
                .scalar()
            )


def _due_figures(table: Table, name: str, entry: QueueStats, now: float) -> None:
    """Ranges of (status, queue, run_at): the due backlog (counted up to EXACT_UP_TO, in two as
    SQLite reads `run_at <= ? OR run_at IS NULL` as the whole queue), oldest and next due."""
    Job = table.model
    pending = (Job.status == Status.PENDING) & (Job.queue == name)
    undated = Job.select(Job.id).where(pending, Job.run_at.is_null())
    dated = Job.select(Job.id).where(pending, Job.run_at <= now)
    _count_into(table, entry, "pending_due", undated, dated)
    if oldest := _oldest_due(table, name, now):
        entry.oldest_due_id, entry.oldest_due_at = oldest
        entry.oldest_due_lag = max(0.0, now - oldest[1])
    upcoming = Job.select(fn.MIN(Job.run_at)).where(pending, Job.run_at > now).scalar()
    entry.next_due_at = None if upcoming is None else float(upcoming)


def _oldest_due(table: Table, queue: str, now: float) -> tuple[int, float] | None:
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
    found = [(job_id, float(due)) for job_id, due in candidates]
    return min(found, key=lambda candidate: candidate[1], default=None)


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
        windowed = (self.since, self.changed_from, self.changed_to) != (None, None, None)
        if windowed and not self.statuses:
            # A time window over every status as ranges of the (status, modified) index, one
            # per status present (a loose index scan finds them, unknown numbers included):
            # without a status, MySQL would walk the primary key past every row outside it.
            present = [status for (status,) in tuples(Job.select(Job.status).distinct())]
            query = query.where(Job.status.in_(present))
        if self.class_path is not None:
            # params is JSON (or a PHP producer's serialize() text), and json_extract differs by
            # database and fails on other text: LIKE narrows, `matches_class` checks exactly.
            as_json = json.dumps(self.class_path, ensure_ascii=False)
            query = query.where(
                _like(Job.params, as_json) | _like(Job.params, f'"{self.class_path}";')
            )
        return query

    def matches_class(self, row: Job) -> bool:
        """Whether the row names exactly this class; SQL only narrowed it down with LIKE."""
        return (
            self.class_path is None or payload_or_empty(row.params).get("class") == self.class_path
        )


def _like(column: Any, text: str) -> NodeList:
    escaped = text.replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return NodeList((column, SQL("LIKE"), Value(f"%{escaped}%"), SQL("ESCAPE '!'")))


def list_jobs(
    table: Table, filters: JobFilter, now: float, limit: int, before_id: int | None = None
) -> list[Job]:
    """Rows matching `filters`, newest first: at most `limit`, all with ids below `before_id`."""
    query = filters.query(table, now)
    batch = max(limit, 100)
    found: list[Job] = []
    while len(found) < limit:
        page = query if before_id is None else query.where(table.model.id < before_id)
        rows = list(page.order_by(table.model.id.desc()).limit(batch))
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
