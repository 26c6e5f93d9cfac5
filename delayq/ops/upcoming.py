"""What runs next (`peek`): the table's next pending rows across queues, soonest first,
read without claiming. The table is the truth: a job due beyond its queue's horizon (in the
table alone), one added inside a caller's transaction that no run has indexed yet, one whose
entry Redis lost, each is shown where it falls due, and an entry whose row is no longer
pending (a run drops it) is not a job to run. Nothing here writes."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from ..config import validate_queue_name
from ..errors import BadInput
from ..store.index import Index
from ..store.producers import queues_in_use
from ..store.table import DueRows, JobRow, Table
from .overview import MAX_PAGE


@dataclass(frozen=True)
class Upcoming:
    """A pending job and when it is due; `indexed` False for one added inside a caller's
    transaction (`add(using=)`) that no run's sweep has put on the schedule yet: it is due
    all the same, and the next run schedules it."""

    queue: str
    id: int
    run_at: float
    row: JobRow | None
    indexed: bool = True


def check_peek(count: int, queues: Sequence[str] | None) -> list[str] | None:
    """The queues to peek into (None: every queue in use), once `count` is a page's size."""
    if not 1 <= count <= MAX_PAGE:
        raise BadInput(f"peek needs a count between 1 and {MAX_PAGE}")
    # None: every queue the registry knows, and always the default one, whose schedule's
    # key is the contract's, so producers ZADD it directly.
    return [validate_queue_name(name) for name in queues] if queues else None


def next_scheduled(
    table: Table, index: Index, queues: Sequence[str] | None, count: int
) -> list[Upcoming]:
    """The first `count` pending jobs across `queues` (None: every queue in use), soonest
    first (by due time, then id): each queue's first `count` rows in due order, a range of
    the (status, queue, run_at) SQL index, merged."""
    names = queues_in_use(table, index) if queues is None else queues
    pending = DueRows(table)
    firsts = (_first(pending, queue, count) for queue in names)
    entries = list(heapq.merge(*firsts, key=lambda entry: (entry[1], entry[0])))[:count]
    rows = pending.rows([job_id for job_id, _, _ in entries])
    return [
        Upcoming(queue, job_id, due, row, indexed=row is None or not row.unindexed)
        for job_id, due, queue in entries
        if (row := rows.get(job_id)) is not None
    ]


def _first(pending: DueRows, queue: str, count: int) -> list[tuple[int, float, str]]:
    return [(job_id, due, queue) for job_id, due in pending.first_pending(queue, count)]
