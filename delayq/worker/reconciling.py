"""`delayq reconcile`: the schedule compared with the table both ways, up to each queue's
horizon (store/index/horizons.py), at the speed the two can be read in order.

Each queue's pending rows are walked in due order, a range of the (status, queue, run_at)
SQL index a batch at a time, beside the schedule's members due in the same span (ZRANGEBYSCORE),
so both sides are read once, in order, and only the differences are looked up: a row missing
from the span may be on the schedule at another score or claimed by a run (`put_back_lost`
checks), a member missing from the table's span may be a row moved meanwhile (checked
against the table before it is removed). Every statement is one short read or a write of the
differences: runs go on claiming and starting jobs while it works. Last, the kept pending
counts are corrected if they are off (store/table/counts.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ..store.index import Index, job_id_of
from ..store.table import Counts, DueCursor, DueRows, Jobs, Table
from .recovery import put_back_lost

BATCH = 20000


@dataclass
class Reconciled:
    reindexed: Counter[str]  # pending rows added to their queue's index
    removed: Counter[str]  # index entries whose row is not pending (or does not exist)
    rows: int = 0  # pending rows compared
    # How far each queue's kept pending count was off (a TRUNCATE, rows from before the
    # triggers), now corrected.
    counts_corrected: dict[str, int] = field(default_factory=dict)


def reconcile(
    table: Table, index: Index, on_rows: Callable[[int], None] = lambda rows: None
) -> Reconciled:
    """Compare the whole index with the table both ways and fix both kinds of difference;
    `on_rows` is told the pending rows compared so far, after each batch."""
    result = Reconciled(Counter(), Counter())
    pending = Jobs(table).pending_queues()
    index.registry.register(pending)
    queues = sorted({*pending, *index.registry.queues()})
    limits = {queue: horizon.limit for queue, horizon in index.horizons.read(queues).items()}
    for queue in queues:
        _reconcile_queue(table, index, queue, limits.get(queue), result, on_rows)
    index.registry.mark_complete()
    if Counts(table).installed():
        result.counts_corrected = Counts(table).correct()
    return result


def _reconcile_queue(
    table: Table,
    index: Index,
    queue: str,
    limit: float | None,
    result: Reconciled,
    on_rows: Callable[[int], None],
) -> None:
    """Compare `queue`'s rows and schedule up to its horizon's `limit` (None: the whole
    schedule): beyond it rows are in the table alone, and the members a producer put there
    are left for the claim, which drops those whose row is not pending."""
    result.reindexed[queue] += 0  # every queue compared is in the report
    result.removed[queue] += 0
    cursor: DueCursor | None = None
    low: float | None = None  # the schedule's span compared so far ends here (None: -inf)
    while True:
        batch = DueRows(table).pending_by_due(queue, cursor, BATCH, limit)
        entries = batch.entries()
        # Rows without run_at are due at `created`, which the schedule may not say (the
        # seed's due times are its scores): looked up by id, not by span.
        undated, dated = entries[: batch.undated], entries[batch.undated :]
        if undated:
            _put_back(table, index, queue, dict(undated), result)
        done = batch.count < BATCH or batch.last is None
        if done:
            high = limit
        elif dated:
            high = dated[-1][1]
        else:  # a batch of undated rows only: no span of the schedule to compare yet
            high = low
        if done or dated:
            _compare(table, index, queue, dict(dated), low, high, result)
        result.rows += batch.count
        on_rows(result.rows)
        if done:
            return
        low, cursor = high, batch.last


def _compare(
    table: Table,
    index: Index,
    queue: str,
    due_by_id: dict[int, float],
    low: float | None,
    high: float | None,
    result: Reconciled,
) -> None:
    """Compare the table's pending rows due in (low, high] with the schedule's members due
    there, and fix what differs."""
    members: set[str] = set()
    for page in index.schedule.between(queue, low, high):
        members.update(page)
    absent = {job_id: due for job_id, due in due_by_id.items() if str(job_id) not in members}
    if absent:
        _put_back(table, index, queue, absent, result)
    extra = members.difference(map(str, due_by_id))
    if not extra:
        return
    ids = [job_id for member in extra if (job_id := job_id_of(member)) is not None]
    # A row added or moved since the table was read is pending: its member stays.
    still = {str(job_id) for job_id in Jobs(table).pending_among(queue, ids)} if ids else set()
    result.removed[queue] += index.schedule.remove_members(queue, sorted(extra - still))


def _put_back(
    table: Table, index: Index, queue: str, due_by_id: dict[int, float], result: Reconciled
) -> None:
    result.reindexed[queue] += put_back_lost(table, index, queue, due_by_id, index.clock.now())
