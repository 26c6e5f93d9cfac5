"""Job rows as the commands and the producers read and change them, one at a time or by
business key: a row by id, the pending jobs of a key (replaced, cancelled), which queues hold
jobs, what runs. Pending rows by due time are due_rows.py's; a chain's attempts chains.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from peewee import fn

from .model import Job, Status, Table, pending_in, tuples, utc_stamp
from .mutexes import run_exclusive


class Jobs:
    """Job rows by id, business key and queue: the replace and cancel of a key's pending jobs,
    whether a queue holds any, the queues that do, and the rows running by queue."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def replace_pending(
        self,
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
        return run_exclusive(self.table, key, lambda: _replace_pending(self.table, row, now), then)

    def get_job(self, job_id: int) -> Job | None:
        return self.table.model.get_or_none(self.table.model.id == job_id)

    def still_pending(self, ids: Sequence[int]) -> list[int]:
        """Those of `ids` whose row is PENDING now, in the given order."""
        Job = self.table.model
        query = Job.select(Job.id).where(Job.id.in_(list(ids)), Job.status == Status.PENDING)
        pending = {job_id for (job_id,) in tuples(query)} if ids else set()
        return [job_id for job_id in ids if job_id in pending]

    def pending_among(self, queue: str, ids: Sequence[int]) -> set[int]:
        """Those of `ids` whose row is PENDING in `queue`."""
        Job = self.table.model
        query = Job.select(Job.id).where(
            Job.id.in_(list(ids)), Job.status == Status.PENDING, Job.queue == queue
        )
        return {job_id for (job_id,) in tuples(query)}

    def pending_queues(self) -> list[str]:
        """Names of queues that have PENDING or RUNNING rows: a skip scan of the (status, queue,
        run_at) SQL index, one lookup per queue (a DISTINCT would read every pending row's
        entry)."""
        return sorted(
            {name for status in (Status.PENDING, Status.RUNNING) for name in self.queues_of(status)}
        )

    def has_pending(self, queue: str) -> bool:
        """Whether `queue` has a PENDING row: one lookup of the (status, queue, run_at) SQL
        index."""
        Job = self.table.model
        return Job.select(Job.id).where(pending_in(Job, queue)).limit(1).scalar() is not None

    def queues_of(self, status: Status) -> list[str]:
        """Names of queues with rows of `status`, in order, each found by one SQL index lookup."""
        Job = self.table.model
        names: list[str] = []
        while True:
            query = Job.select(fn.MIN(Job.queue)).where(Job.status == status)
            if names:
                query = query.where(Job.queue > names[-1])
            if (name := query.scalar()) is None:
                return names
            names.append(name)

    def pending_by_ext(self, ext: str, queue: str | None) -> list[tuple[int, str]]:
        """(id, queue) of PENDING rows with this business key."""
        Job = self.table.model
        query = Job.select(Job.id, Job.queue).where(
            Job.ext_string == ext, Job.status == Status.PENDING
        )
        if queue is not None:
            query = query.where(Job.queue == queue)
        return [(row.id, row.queue) for row in query]

    def cancel(self, ids: Iterable[int], now: float) -> int:
        """PENDING rows among `ids` become CANCELLED; returns how many did."""
        Job = self.table.model
        ids = list(ids)
        query = Job.update(status=Status.CANCELLED, message="cancelled", modified=utc_stamp(now))
        return query.where(Job.id.in_(ids), Job.status == Status.PENDING).execute() if ids else 0

    def running_query(self) -> Any:
        """{queue, count} of running rows: a range of the (status, queue, run_at) SQL index, so its
        cost follows the jobs in flight, not the table's size."""
        Job = self.table.model
        return (
            Job.select(Job.queue, fn.COUNT(Job.id))
            .where(Job.status == Status.RUNNING)
            .group_by(Job.queue)
        )

    def running_by_queue(self) -> dict[str, int]:
        """{queue: running rows} of the queues that have any."""
        return {queue: int(count) for queue, count in tuples(self.running_query())}


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
    Jobs(table).cancel(pending[1:], now)
    return pending[0], pending[1:]
