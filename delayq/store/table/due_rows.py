"""Pending rows by due time, read without claiming them: what the schedule is rebuilt,
reconciled and checked from (worker/recovery.py, rebuilds.py, reconciling.py, claims.py), and
what an operator's look reads (`peek`, ops/upcoming.py; doctor's comparison with the schedule,
ops/sampling.py). Each read is a range of the (status, queue, run_at) SQL index, a page of it
going on where the last one stopped; the caller decides how many and words what it finds."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from peewee import Case

from ..index.schedule import packed
from .model import JobRow, Status, Table, due_column, id_batches, pending_in, tuples, utc_stamp


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


class DueRows:
    """The pending rows of one table's queues by due time, and the rows finished or changed
    since a time: what the schedule is built from."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def first_pending(self, queue: str, count: int) -> list[tuple[int, float]]:
        """(id, due) of `queue`'s first `count` PENDING rows by (due, id): the first by run_at, a
        range of the (status, queue, run_at) SQL index, merged with the first of those written
        without run_at (due at `created`; few, another producer's)."""
        Job = self.table.model
        due = due_column(self.table)
        pending = Job.select(Job.id, due).where(pending_in(Job, queue))
        undated = tuples(pending.where(Job.run_at.is_null()).order_by(due, Job.id).limit(count))
        dated = tuples(
            pending.where(Job.run_at.is_null(False)).order_by(Job.run_at, Job.id).limit(count)
        )
        rows = sorted(((float(due), job_id) for job_id, due in undated + dated))[:count]
        return [(job_id, due) for due, job_id in rows]

    def overdue_pending(self, queue: str, before: float, limit: int) -> list[tuple[int, float]]:
        """(id, due) of PENDING rows of `queue` due before `before`: those without run_at first
        (as NULL sorts), then by run_at. Two ranges of the (status, queue, run_at) SQL index: SQLite
        reads `run_at <= ? OR run_at IS NULL` as every pending row of the queue, a million at
        depth, where MariaDB reads one range with its NULLs."""
        Job = self.table.model
        pending = Job.select(Job.id, due_column(self.table)).where(pending_in(Job, queue))
        rows = tuples(pending.where(Job.run_at.is_null()).order_by(Job.id).limit(limit))
        if len(rows) < limit:
            dated = pending.where(Job.run_at <= before).order_by(Job.run_at)
            rows += tuples(dated.limit(limit - len(rows)))
        return [(job_id, float(due)) for job_id, due in rows]

    def pending_without_run_at(self, queue: str, limit: int, after_id: int = 0) -> list[int]:
        """Ids of PENDING rows of `queue` written without run_at, in id order from `after_id`."""
        Job = self.table.model
        query = Job.select(Job.id).where(
            pending_in(Job, queue), Job.run_at.is_null(), Job.id > after_id
        )
        return [job_id for (job_id,) in tuples(query.order_by(Job.id).limit(limit))]

    def adopt_run_at(self, due_by_id: Mapping[int, float]) -> int:
        """PENDING rows still without run_at take the given due times; how many did."""
        Job = self.table.model
        if not due_by_id:
            return 0
        return (
            Job.update(run_at=Case(Job.id, list(due_by_id.items())))
            .where(Job.id.in_(list(due_by_id)), Job.status == Status.PENDING, Job.run_at.is_null())
            .execute()
        )

    def pending_due_after(self, ids: Sequence[int], after: float) -> list[tuple[int, float]]:
        """(id, due) of those of `ids` whose row is PENDING and due after `after`."""
        Job = self.table.model
        query = Job.select(Job.id, Job.run_at).where(
            Job.id.in_(list(ids)), Job.status == Status.PENDING, Job.run_at > after
        )
        return [(job_id, float(due)) for job_id, due in tuples(query)] if ids else []

    def pending_changed_since(
        self, queue: str, since: float, batch: int
    ) -> Iterator[list[tuple[int, float]]]:
        """(id, due) of `queue`'s PENDING rows added or changed since epoch second `since`, in
        batches by id."""
        Job = self.table.model
        changed = Job.modified >= utc_stamp(since)
        query = Job.select(Job.id, due_column(self.table)).where(pending_in(Job, queue), changed)
        for rows in id_batches(query.tuples(), batch):
            yield [(job_id, float(due)) for job_id, due in rows]

    def unindexed(self, limit: int) -> list[tuple[int, str, float, int]]:
        """(id, queue, due, status) of committed rows added in a caller's transaction and not yet on
        the schedule: a range of their own SQL index, so its cost follows those rows alone."""
        Job = self.table.model
        query = Job.select(Job.id, Job.queue, due_column(self.table), Job.status)
        rows = tuples(query.where(Job.unindexed == 1).limit(limit))
        return [(job_id, queue, float(due), status) for job_id, queue, due, status in rows]

    def mark_indexed(self, ids: Sequence[int], now: float) -> None:
        """Clear the mark of rows now on the schedule. A pending one counts as changed now, so a
        failover's check of the rows changed since it last saw the schedule includes it."""
        Job = self.table.model
        modified = Case(None, [(Job.status == Status.PENDING, utc_stamp(now))], Job.modified)
        Job.update(unindexed=None, modified=modified).where(Job.id.in_(list(ids))).execute()

    def pending_by_due(
        self, queue: str, after: DueCursor | None, limit: int, until: float | None = None
    ) -> DueBatch:
        """The next `limit` PENDING rows of `queue` after `after` (None: from the start) in due
        order, due by `until` (None: any): rows without run_at first (due at `created`), by id,
        then by (run_at, id). Each
        batch is a range of the (status, queue, run_at) SQL index, which also holds the id, so its
        cost follows the batch, not the table; on MySQL the server writes the batch as text, so
        that thousands of rows cost no work per row here."""
        Job = self.table.model
        pending = (Job.status == Status.PENDING) & (Job.queue == queue)
        rows: list[tuple[int, float | None, float]] = []
        if after is None or after.run_at is None:
            undated = Job.select(Job.id, due_column(self.table)).where(
                pending, Job.run_at.is_null()
            )
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
            # A range from run_at (the SQL index's next column); the equal run_at's ids are
            # filtered.
            dated = dated.where(
                Job.run_at >= after.run_at, (Job.run_at > after.run_at) | (Job.id > after.id)
            )
        dated = dated.order_by(Job.run_at, Job.id).limit(limit - len(rows))
        if rows or not self.table.mysql:
            dues = [(job_id, due, due) for job_id, due in tuples(dated)]
            return _packed(rows + dues, len(rows))
        return _packed_by_server(self.table, dated)

    def finished_since(self, since: float) -> list[tuple[str, int]]:
        """(queue, id) of rows that finished (any final status) at or after epoch second
        `since`: ranges of the (status, modified) SQL index, so the cost follows those rows."""
        Job = self.table.model
        final = (Status.SUCCESS, Status.FAILED, Status.CANCELLED, Status.MISSED)
        found: list[tuple[str, int]] = []
        for status in final:
            query = Job.select(Job.queue, Job.id).where(
                Job.status == status, Job.modified >= utc_stamp(since)
            )
            found += [(queue, job_id) for queue, job_id in tuples(query)]
        return found

    def rows(self, ids: Sequence[int]) -> dict[int, JobRow]:
        """{id: row} of those of `ids` whose row is still there, in any status."""
        Job = self.table.model
        return {row.id: row for row in Job.select().where(Job.id.in_(list(ids)))} if ids else {}

    def overdue_page(
        self, queue: str, before: float, after: tuple[float, int] | None, limit: int
    ) -> list[tuple[int, float]]:
        """(id, run_at) of the next `limit` pending rows of `queue` with a run_at before or at
        `before`, by (run_at, id), after the row `after` (its run_at and id; None: from the
        first)."""
        Job = self.table.model
        pending = (Job.status == Status.PENDING) & (Job.queue == queue)
        query = Job.select(Job.id, Job.run_at).where(pending, Job.run_at <= before)
        if after is not None:
            last_at, last_id = after
            query = query.where(
                (Job.run_at > last_at) | ((Job.run_at == last_at) & (Job.id > last_id))
            )
        rows = tuples(query.order_by(Job.run_at, Job.id).limit(limit))
        return [(job_id, float(run_at)) for job_id, run_at in rows]


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
