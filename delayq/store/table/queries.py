"""Queries on `delay_queue` rows, each named for its intent: adding retries and next
occurrences, replacing and cancelling pending jobs, reading chains, due rows and counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from peewee import Case, fn

from ..index.schedule import packed
from .model import ClaimedJob, Job, JobRow, Status, Table, due_column, id_batches, tuples, utc_stamp
from .mutexes import run_exclusive
from .policies import fresh_policy


def insert_next_occurrence(
    table: Table, job: Job | ClaimedJob, run_at: float, now: float
) -> int | None:
    """The next occurrence of a recurring job, unless its series was stopped meanwhile. In
    the transaction recording the outcome, its locking read orders it against `stop_series`,
    so a cancel never loses to a re-arm."""
    Job = table.model
    query = Job.select(Job.every, Job.schedule).where(Job.id == job.id)
    row = query.for_update(table.mysql).first()
    if row is None or (row.every is None and row.schedule is None):
        return None
    return _insert_after(table, job, run_at, now, every=row.every, schedule=row.schedule)


def replace_pending(
    table: Table,
    row: dict[str, Any],
    now: float,
    then: Callable[[tuple[int, list[int]]], None],
) -> tuple[int, list[int]]:
    """Move the oldest PENDING job with the row's ext and queue to the row's time and data
    (or insert the row), cancel any further ones; (its id, ids cancelled), which `then` is
    given while the mutex is still held. Under the mutex of that queue and ext, so concurrent
    replaces from any host leave one pending job, and what `then` writes (its entry on the
    schedule) is written in the order they commit."""
    key = f"{row['queue']}\0{row['ext_string']}"
    return run_exclusive(table, key, lambda: _replace_pending(table, row, now), then)


def _replace_pending(table: Table, row: dict[str, Any], now: float) -> tuple[int, list[int]]:
    Job = table.model
    query = Job.select(Job.id).where(
        Job.ext_string == row["ext_string"], Job.queue == row["queue"], Job.status == Status.PENDING
    )
    pending = [job_id for (job_id,) in tuples(query.order_by(Job.id))]
    moved = {
        key: row[key]
        for key in ("params", "run_at", "timeout", "every", "schedule", "retry_policy", "modified")
    }
    if not pending or not (
        Job.update(**moved).where(Job.id == pending[0], Job.status == Status.PENDING).execute()
    ):
        # None pending, or a run took it meanwhile: this becomes the pending job.
        return Job.insert(**row).execute(), []
    cancel(table, pending[1:], now)
    return pending[0], pending[1:]


def stop_series(table: Table, ext: str, queue: str | None) -> int:
    """Stop the recurring series with this business key from re-arming."""
    Job = table.model
    recurring = Job.every.is_null(False) | Job.schedule.is_null(False)
    query = Job.update(every=None, schedule=None).where(Job.ext_string == ext, recurring)
    if queue is not None:
        query = query.where(Job.queue == queue)
    return query.execute()


def get_job(table: Table, job_id: int) -> Job | None:
    return table.model.get_or_none(table.model.id == job_id)


def insert_retry(table: Table, row: JobRow | ClaimedJob, run_at: float, now: float) -> int:
    """A new PENDING row repeating `row` as its next attempt; the old row stays as history."""
    # A retry is a one-off (every and schedule stay NULL); the series re-arms from the
    # occurrence itself.
    return _insert_after(
        table, row, run_at, now, retry_times=row.retry_times + 1, chain_id=row.chain_id or row.id
    )


def _insert_after(
    table: Table, row: JobRow | ClaimedJob, run_at: float, now: float, **columns: Any
) -> int:
    """A new PENDING row that calls what `row` calls, due at `run_at`, with `columns`."""
    return table.model.insert(
        params=row.params,
        ext_string=row.ext_string,
        queue=row.queue,
        run_at=run_at,
        timeout=row.timeout,
        retry_policy=fresh_policy(row.retry_policy),
        status=Status.PENDING,
        created=utc_stamp(now),
        modified=utc_stamp(now),
        **columns,
    ).execute()


def first_pending(table: Table, queue: str, count: int) -> list[tuple[int, float]]:
    """(id, due) of `queue`'s first `count` PENDING rows by (due, id): the first by run_at, a
    range of the (status, queue, run_at) SQL index, merged with the first of those written
    without run_at (due at `created`; few, another producer's)."""
    Job = table.model
    due = due_column(table)
    pending = Job.select(Job.id, due).where(_pending_in(Job, queue))
    undated = tuples(pending.where(Job.run_at.is_null()).order_by(due, Job.id).limit(count))
    dated = tuples(
        pending.where(Job.run_at.is_null(False)).order_by(Job.run_at, Job.id).limit(count)
    )
    rows = sorted(((float(due), job_id) for job_id, due in undated + dated))[:count]
    return [(job_id, due) for due, job_id in rows]


def overdue_pending(table: Table, queue: str, before: float, limit: int) -> list[tuple[int, float]]:
    """(id, due) of PENDING rows of `queue` due before `before`: those without run_at first
    (as NULL sorts), then by run_at. Two ranges of the (status, queue, run_at) SQL index: SQLite
    reads `run_at <= ? OR run_at IS NULL` as every pending row of the queue, a million at
    depth, where MariaDB reads one range with its NULLs."""
    Job = table.model
    pending = Job.select(Job.id, due_column(table)).where(_pending_in(Job, queue))
    rows = tuples(pending.where(Job.run_at.is_null()).order_by(Job.id).limit(limit))
    if len(rows) < limit:
        dated = pending.where(Job.run_at <= before).order_by(Job.run_at)
        rows += tuples(dated.limit(limit - len(rows)))
    return [(job_id, float(due)) for job_id, due in rows]


def pending_without_run_at(table: Table, queue: str, limit: int, after_id: int = 0) -> list[int]:
    """Ids of PENDING rows of `queue` written without run_at, in id order from `after_id`."""
    Job = table.model
    query = Job.select(Job.id).where(
        _pending_in(Job, queue), Job.run_at.is_null(), Job.id > after_id
    )
    return [job_id for (job_id,) in tuples(query.order_by(Job.id).limit(limit))]


def _pending_in(model: type[Job], queue: str) -> Any:
    return (model.status == Status.PENDING) & (model.queue == queue)


def adopt_run_at(table: Table, due_by_id: Mapping[int, float]) -> int:
    """PENDING rows still without run_at take the given due times; how many did."""
    Job = table.model
    if not due_by_id:
        return 0
    return (
        Job.update(run_at=Case(Job.id, list(due_by_id.items())))
        .where(Job.id.in_(list(due_by_id)), Job.status == Status.PENDING, Job.run_at.is_null())
        .execute()
    )


def still_pending(table: Table, ids: Sequence[int]) -> list[int]:
    """Those of `ids` whose row is PENDING now, in the given order."""
    Job = table.model
    query = Job.select(Job.id).where(Job.id.in_(list(ids)), Job.status == Status.PENDING)
    pending = {job_id for (job_id,) in tuples(query)} if ids else set()
    return [job_id for job_id in ids if job_id in pending]


def pending_due_after(table: Table, ids: Sequence[int], after: float) -> list[tuple[int, float]]:
    """(id, due) of those of `ids` whose row is PENDING and due after `after`."""
    Job = table.model
    query = Job.select(Job.id, Job.run_at).where(
        Job.id.in_(list(ids)), Job.status == Status.PENDING, Job.run_at > after
    )
    return [(job_id, float(due)) for job_id, due in tuples(query)] if ids else []


def pending_in(table: Table, queue: str, ids: Sequence[int]) -> set[int]:
    """Those of `ids` whose row is PENDING in `queue`."""
    Job = table.model
    query = Job.select(Job.id).where(
        Job.id.in_(list(ids)), Job.status == Status.PENDING, Job.queue == queue
    )
    return {job_id for (job_id,) in tuples(query)}


def pending_changed_since(
    table: Table, queue: str, since: float, batch: int
) -> Iterator[list[tuple[int, float]]]:
    """(id, due) of `queue`'s PENDING rows added or changed since epoch second `since`, in
    batches by id."""
    Job = table.model
    changed = Job.modified >= utc_stamp(since)
    query = Job.select(Job.id, due_column(table)).where(_pending_in(Job, queue), changed)
    for rows in id_batches(query.tuples(), batch):
        yield [(job_id, float(due)) for job_id, due in rows]


def unindexed(table: Table, limit: int) -> list[tuple[int, str, float, int]]:
    """(id, queue, due, status) of committed rows added in a caller's transaction and not
    yet on the schedule: a range of their own SQL index, so its cost follows those rows alone."""
    Job = table.model
    query = Job.select(Job.id, Job.queue, due_column(table), Job.status)
    rows = tuples(query.where(Job.unindexed == 1).limit(limit))
    return [(job_id, queue, float(due), status) for job_id, queue, due, status in rows]


def mark_indexed(table: Table, ids: Sequence[int], now: float) -> None:
    """Clear the mark of rows now on the schedule. A pending one counts as changed now, so a
    failover's check of the rows changed since it last saw the schedule includes it."""
    Job = table.model
    modified = Case(None, [(Job.status == Status.PENDING, utc_stamp(now))], Job.modified)
    Job.update(unindexed=None, modified=modified).where(Job.id.in_(list(ids))).execute()


@dataclass(frozen=True)
class DueCursor:
    """Where a walk of one queue's pending rows in due order stands: past the row `id`, due
    at `run_at`; `run_at` None while it is still among the rows written without one (due at
    their `created`, so due already), which it walks first, by id."""

    run_at: float | None
    id: int

    def mark(self) -> str:
        return f"{'' if self.run_at is None else repr(self.run_at)}:{self.id}"

    @classmethod
    def from_mark(cls, mark: str) -> DueCursor | None:
        """The cursor a `mark` wrote, or None for text no cursor wrote."""
        run_at, _, job_id = mark.partition(":")
        try:
            return cls(float(run_at) if run_at else None, int(job_id))
        except ValueError:
            return None


@dataclass(frozen=True)
class DueBatch:
    """A batch of one queue's pending rows in due order: "due id due id ..." as the schedule
    takes it back (`Schedule.add_packed`), how many, and the cursor past the last (None: none)."""

    packed: str
    count: int
    last: DueCursor | None
    undated: int = 0  # how many of the first rows have no run_at: they are not in due order

    def entries(self) -> list[tuple[int, float]]:
        """(id, due) of every row, in the batch's order."""
        fields = self.packed.split()
        pairs = zip(fields[::2], fields[1::2], strict=True)
        return [(int(job_id), float(due)) for due, job_id in pairs]


def pending_by_due(
    table: Table, queue: str, after: DueCursor | None, limit: int, until: float | None = None
) -> DueBatch:
    """The next `limit` PENDING rows of `queue` after `after` (None: from the start) in due
    order, due by `until` (None: any): rows without run_at first (due at `created`), by id,
    then by (run_at, id). Each
    batch is a range of the (status, queue, run_at) SQL index, which also holds the id, so its
    cost follows the batch, not the table; on MySQL the server writes the batch as text, so
    that thousands of rows cost no work per row here."""
    Job = table.model
    pending = (Job.status == Status.PENDING) & (Job.queue == queue)
    rows: list[tuple[int, float | None, float]] = []
    if after is None or after.run_at is None:
        undated = Job.select(Job.id, due_column(table)).where(pending, Job.run_at.is_null())
        if after is not None:
            undated = undated.where(Job.id > after.id)
        undated = undated.order_by(Job.id).limit(limit)
        rows = [(job_id, None, float(due)) for job_id, due in tuples(undated)]
        if len(rows) == limit:
            return _packed(rows, len(rows))
        after = None
    dated = Job.select(Job.id, Job.run_at).where(pending, Job.run_at.is_null(False))
    if until is not None:
        dated = dated.where(Job.run_at <= until)
    if after is not None:
        # A range from run_at (the SQL index's next column); the equal run_at's ids are filtered.
        dated = dated.where(
            Job.run_at >= after.run_at, (Job.run_at > after.run_at) | (Job.id > after.id)
        )
    dated = dated.order_by(Job.run_at, Job.id).limit(limit - len(rows))
    if rows or not table.mysql:
        dues = [(job_id, due, due) for job_id, due in tuples(dated)]
        return _packed(rows + dues, len(rows))
    return _packed_by_server(table, dated)


def _packed(rows: list[tuple[int, float | None, float]], undated: int) -> DueBatch:
    last = DueCursor(rows[-1][1], rows[-1][0]) if rows else None
    return DueBatch(packed([(job_id, due) for job_id, _, due in rows]), len(rows), last, undated)


def _packed_by_server(table: Table, dated: Any) -> DueBatch:
    """`dated`'s (id, run_at) rows as one text the server writes. MariaDB writes a double in
    the fewest digits that read back as the same double, as repr does (tests/worker/
    test_rebuilds.py compares them with the table's values)."""
    sql, params = dated.sql()
    db = table.db
    db.execute_sql("SET SESSION group_concat_max_len = 1073741824")
    written, count = db.execute_sql(
        "SELECT GROUP_CONCAT(run_at, ' ', id ORDER BY run_at, id SEPARATOR ' '), COUNT(*)"
        f" FROM ({sql}) AS batch",
        params,
    ).fetchone()
    if not count:
        return DueBatch("", 0, None)
    text = written.decode() if isinstance(written, bytes) else str(written)
    due, job_id = text.rsplit(" ", 2)[-2:]
    return DueBatch(text, int(count), DueCursor(float(due), int(job_id)))


def finished_since(table: Table, since: float) -> list[tuple[str, int]]:
    """(queue, id) of rows that finished (any final status) at or after epoch second
    `since`: ranges of the (status, modified) SQL index, so the cost follows those rows."""
    Job = table.model
    final = (Status.SUCCESS, Status.FAILED, Status.CANCELLED, Status.MISSED)
    found: list[tuple[str, int]] = []
    for status in final:
        query = Job.select(Job.queue, Job.id).where(
            Job.status == status, Job.modified >= utc_stamp(since)
        )
        found += [(queue, job_id) for queue, job_id in tuples(query)]
    return found


def pending_queues(table: Table) -> list[str]:
    """Names of queues that have PENDING or RUNNING rows: a skip scan of the (status, queue,
    run_at) SQL index, one lookup per queue (a DISTINCT would read every pending row's entry)."""
    return sorted(
        {name for status in (Status.PENDING, Status.RUNNING) for name in queues_of(table, status)}
    )


def has_pending(table: Table, queue: str) -> bool:
    """Whether `queue` has a PENDING row: one lookup of the (status, queue, run_at) SQL index."""
    Job = table.model
    return Job.select(Job.id).where(_pending_in(Job, queue)).limit(1).scalar() is not None


def queues_of(table: Table, status: Status) -> list[str]:
    """Names of queues with rows of `status`, in order, each found by one SQL index lookup."""
    Job = table.model
    names: list[str] = []
    while True:
        query = Job.select(fn.MIN(Job.queue)).where(Job.status == status)
        if names:
            query = query.where(Job.queue > names[-1])
        if (name := query.scalar()) is None:
            return names
        names.append(name)


def pending_by_ext(table: Table, ext: str, queue: str | None) -> list[tuple[int, str]]:
    """(id, queue) of PENDING rows with this business key."""
    Job = table.model
    query = Job.select(Job.id, Job.queue).where(Job.ext_string == ext, Job.status == Status.PENDING)
    if queue is not None:
        query = query.where(Job.queue == queue)
    return [(row.id, row.queue) for row in query]


def cancel(table: Table, ids: Iterable[int], now: float) -> int:
    """PENDING rows among `ids` become CANCELLED; returns how many did."""
    Job = table.model
    ids = list(ids)
    query = Job.update(status=Status.CANCELLED, message="cancelled", modified=utc_stamp(now))
    return query.where(Job.id.in_(ids), Job.status == Status.PENDING).execute() if ids else 0


def chain_of(table: Table, job: JobRow) -> list[Job]:
    """Every attempt of the job's chain (first attempt and its retries), oldest first."""
    Job = table.model
    root = job.chain_id or job.id
    return list(Job.select().where((Job.id == root) | (Job.chain_id == root)).order_by(Job.id))


def running_query(table: Table) -> Any:
    """{queue, count} of running rows: a range of the (status, queue, run_at) SQL index, so its
    cost follows the jobs in flight, not the table's size."""
    Job = table.model
    return (
        Job.select(Job.queue, fn.COUNT(Job.id))
        .where(Job.status == Status.RUNNING)
        .group_by(Job.queue)
    )


def running_by_queue(table: Table) -> dict[str, int]:
    """{queue: running rows} of the queues that have any."""
    return {queue: int(count) for queue, count in tuples(running_query(table))}
