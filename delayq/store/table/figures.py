"""The figures `status` shows of a queue, each read as a range of an SQL index so that a look
costs the same at ten million rows as at none: rows of a status, failures since a moment and
those retried, the due backlog, the oldest and the next due. ops/overview.py decides which
figures to ask for and how far to count before an estimate does; the kept pending counts,
the queues of each status and the running rows are counts.py's and jobs.py's."""

from __future__ import annotations

from peewee import fn

from .chains import later_attempt
from .counts import Counts
from .model import Status, Table, due_column, pending_in, tuples, utc_stamp

# A count of rows: how many, and whether exact (False: the server's estimate).
Count = tuple[int, bool]


class QueueFigures:
    """The figures of the queues of one table, each a method named for what it counts."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def with_status(self, queue: str, status: Status, exact_up_to: int) -> Count:
        """The rows of `queue` in `status`: a range of (status, queue, run_at), counted up to
        `exact_up_to` and estimated beyond."""
        Job = self.table.model
        rows = Job.select(Job.id).where(Job.status == status, Job.queue == queue)
        return Counts(self.table).bounded_count(rows, exact_up_to)

    def failed_since(self, since: float) -> dict[str, int]:
        """{queue: rows that failed at or after epoch second `since`}: a range of the
        (status, modified) SQL index, so the cost follows the recent failures alone."""
        Job = self.table.model
        recent = (
            Job.select(Job.queue, fn.COUNT(Job.id))
            .where(Job.status == Status.FAILED, Job.modified >= utc_stamp(since))
            .group_by(Job.queue)
        )
        return {queue: int(count) for queue, count in tuples(recent)}

    def retried_failures(self, queue: str) -> int:
        """Failed attempts of `queue` with a later attempt in their chain: a lookup per failed
        row, so the caller asks only where the failed rows are few."""
        Job = self.table.model
        query = Job.select(fn.COUNT(Job.id)).where(
            Job.status == Status.FAILED, Job.queue == queue, later_attempt(Job)
        )
        return int(query.scalar() or 0)

    def due_backlog(self, queue: str, now: float, exact_up_to: int) -> list[Count]:
        """The pending rows of `queue` due by `now`, in two disjoint parts each counted up to
        `exact_up_to`: those written without run_at (due at `created`) and those with it. Two
        ranges of (status, queue, run_at), since SQLite reads `run_at <= ? OR run_at IS NULL`
        as the whole queue."""
        Job = self.table.model
        pending = pending_in(Job, queue)
        undated = Job.select(Job.id).where(pending, Job.run_at.is_null())
        dated = Job.select(Job.id).where(pending, Job.run_at <= now)
        return [Counts(self.table).bounded_count(rows, exact_up_to) for rows in (undated, dated)]

    def oldest_due(self, queue: str, now: float) -> tuple[int, float] | None:
        """(id, due) of the queue's pending row that has been due longest, if any is due."""
        Job = self.table.model
        pending = Job.select(Job.id, due_column(self.table)).where(pending_in(Job, queue))
        candidates = [
            *tuples(pending.where(Job.run_at <= now).order_by(Job.run_at, Job.id).limit(1)),
            # A producer that leaves run_at empty means "due when created": oldest id first.
            *tuples(pending.where(Job.run_at.is_null()).order_by(Job.id).limit(1)),
        ]
        found = [(job_id, float(due)) for job_id, due in candidates]
        return min(found, key=lambda candidate: candidate[1], default=None)

    def next_due(self, queue: str, now: float) -> float | None:
        """When the queue's next pending row falls due after `now`, if one is to."""
        Job = self.table.model
        query = Job.select(fn.MIN(Job.run_at)).where(pending_in(Job, queue), Job.run_at > now)
        upcoming = query.scalar()
        return None if upcoming is None else float(upcoming)
