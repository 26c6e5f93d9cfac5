"""Pending rows read in due order without claiming them, for an operator's look: what runs
next (`peek`, ops/upcoming.py) and what is overdue (doctor's comparison with the schedule,
ops/sampling.py). Each read is a range of the (status, queue, run_at) SQL index, a page of it
going on where the last one stopped; the caller decides how many and words what it finds."""

from __future__ import annotations

from collections.abc import Sequence

from . import queries
from .model import JobRow, Status, Table, tuples


class PendingRows:
    """The pending rows of one table's queues, by due time."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def first(self, queue: str, count: int) -> list[tuple[int, float]]:
        """(id, due) of the queue's first `count` pending rows, by (due, id)."""
        return queries.first_pending(self.table, queue, count)

    def rows(self, ids: Sequence[int]) -> dict[int, JobRow]:
        """{id: row} of those of `ids` whose row is still there, in any status."""
        Job = self.table.model
        return {row.id: row for row in Job.select().where(Job.id.in_(list(ids)))} if ids else {}

    def overdue(self, queue: str, before: float, limit: int) -> list[tuple[int, float]]:
        """(id, due) of at most `limit` pending rows of `queue` due before `before`, those
        overdue longest first: those written without run_at, then by run_at."""
        return queries.overdue_pending(self.table, queue, before, limit)

    def undated_page(self, queue: str, after_id: int, limit: int) -> list[int]:
        """Ids of the next `limit` pending rows of `queue` written without run_at (due at
        `created`, so due already), in id order after `after_id`."""
        return queries.pending_without_run_at(self.table, queue, limit, after_id)

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
