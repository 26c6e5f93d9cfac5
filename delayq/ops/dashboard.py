"""What the web page's overview asks of every queue, each as a range of an index so that
it answers in milliseconds at millions of rows: pending (due and later), running, failed
(in all and in the last hour), the oldest due job and the next due time.

`status` (overview.py) also counts the finished rows of every status, which is a walk over
the whole table; the page leaves those to the CLI and the search.
"""

from __future__ import annotations

from collections.abc import Iterable

from peewee import fn

from ..store.index import Index
from ..store.table import Status, Table
from .overview import QueueStats, StatusReport, fill_live, read_last_run

# The statuses whose rows are few (or, for failed, worth counting): the page shows these.
LIVE_STATUSES = (Status.PENDING, Status.RUNNING, Status.FAILED)


def dashboard_report(table: Table, index: Index, now: float) -> StatusReport:
    """A StatusReport whose success, cancelled and missed counts are left at 0."""
    Job = table.model
    counted = (
        Job.select(Job.status, Job.queue, fn.COUNT(Job.id))
        .where(Job.status.in_(list(LIVE_STATUSES)))
        .group_by(Job.status, Job.queue)  # the index's order: no temporary table
    )
    rows: Iterable[tuple[int, str, int]] = counted.tuples()  # type: ignore[assignment]
    counts = list(rows)
    names = {name for _, name, _ in counts} | set(index.registry.queues())
    stats = {name: QueueStats() for name in sorted(names)}
    for status, name, count in counts:
        setattr(stats[name], Status(status).word, count)
    fill_live(table, index, stats, now)
    return StatusReport(now, stats, read_last_run(index.registry))
