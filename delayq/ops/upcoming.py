"""What runs next (`peek`): the first entries of the queues' schedules with their rows, the
rows due beyond a queue's horizon (in the table alone), and the rows a caller's transaction
added that no run has indexed yet; read without claiming. Nothing here writes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..store import queries
from ..store.index import Index
from ..store.keys import MAX_ID, job_id_of
from ..store.queries import DueCursor
from ..store.table import Job, Status, Table


@dataclass(frozen=True)
class Upcoming:
    """One entry of the schedule and, when it has one, its row; or (`indexed` False) a pending
    row added inside a caller's transaction (`add(using=)`) that no run's sweep has put on the
    schedule yet: it is due all the same, and the next run schedules it."""

    queue: str
    id: int
    run_at: float
    row: Job | None
    indexed: bool = True


def next_scheduled(
    table: Table, index: Index, queues: Sequence[str] | None, count: int
) -> list[Upcoming]:
    """The first `count` jobs due across `queues` (None: every queue), soonest first: entries
    of the schedules (read with ZRANGE: nothing is claimed) with their rows, and the rows
    still waiting for a sweep to index them. Members that are not ids (a run drops them) are
    left out."""
    names = index.registry.known_queues() if queues is None else queues
    entries = sorted(
        (float(score), job_id, queue)
        for queue in names
        for (job_id, score) in _earliest(table, index, queue, count)
    )[:count]
    Job = table.model
    ids = [job_id for _, job_id, _ in entries]
    rows = {row.id: row for row in Job.select().where(Job.id.in_(ids))} if ids else {}
    found = [Upcoming(queue, job_id, due, rows.get(job_id)) for due, job_id, queue in entries]
    scheduled = set(ids)
    found += [
        Upcoming(row.queue, row.id, float(row.run_at or 0.0), row, indexed=False)
        for row in _unindexed(table, queues, count)
        if row.id not in scheduled  # a sweep has scheduled it, and not yet cleared its mark
    ]
    return sorted(found, key=lambda entry: (entry.run_at, entry.id))[:count]


def _earliest(table: Table, index: Index, queue: str, count: int) -> list[tuple[int, float]]:
    """The first `count` (id, due) of `queue`: its schedule's, and where that holds fewer,
    the rows due after its horizon's limit, which wait in the table alone."""
    found = [
        (job_id, score)
        for member, score in index.schedule.earliest(queue, count)
        if (job_id := job_id_of(member)) is not None
    ]
    if len(found) == count or (horizon := index.horizons.read([queue]).get(queue)) is None:
        return found
    seen = {job_id for job_id, _ in found}
    later = queries.pending_by_due(table, queue, DueCursor(horizon.limit, MAX_ID), count)
    return found + [entry for entry in later.entries() if entry[0] not in seen]


def _unindexed(table: Table, queues: Sequence[str] | None, count: int) -> list[Job]:
    """The first `count` pending rows, soonest first, that a caller's transaction added and no
    sweep has scheduled yet: a range of the (unindexed) index, small as those rows are few."""
    Job = table.model
    query = Job.select().where(Job.unindexed == 1, Job.status == Status.PENDING)
    if queues is not None:
        query = query.where(Job.queue.in_(list(queues)))
    return list(query.order_by(Job.run_at, Job.id).limit(count))
