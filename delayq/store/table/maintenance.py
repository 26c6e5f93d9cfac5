"""The statements of an operator's bulk clean-ups: which finished rows purge may delete and
their DELETE, and which finished attempts requeue repeats. ops/maintenance.py walks them in
batches and paces them; every statement here is short, so none holds locks for long, and a
retry chain is never left ending in an earlier attempt (chains.py says what "later" is)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from peewee import SQL

from .chains import earlier_attempt, later_attempt
from .database import run_reconnecting
from .listing import RowFilter, filtered
from .model import Job, Status, Table, id_batches, tuples


class Maintenance:
    """The rows of one table that purge and requeue read, and purge's DELETE."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def oldest_changed(
        self, statuses: Sequence[Status], since: datetime | None, cutoff: datetime
    ) -> datetime | None:
        """The oldest `modified` from `since` on (None: any) and before `cutoff` of a row of
        `statuses`: the first row of a range of the (status, modified) SQL index per status."""
        Job = self.table.model
        oldest = None
        for status in statuses:
            after = Job.modified >= since if since is not None else Job.modified.is_null(False)
            query = Job.select(Job.modified).where(
                Job.status == status, after, Job.modified < cutoff
            )
            if found := tuples(query.order_by(Job.modified).limit(1)):
                oldest = found[0][0] if oldest is None else min(oldest, found[0][0])
        return oldest

    def changed_between(
        self, statuses: Sequence[Status], start: datetime, end: datetime, cap: int | None
    ) -> list[int] | None:
        """Ids of rows of `statuses` changed from `start` to before `end`; None if one status
        alone has more than `cap` of them (None: no cap). The (status, modified) SQL index holds
        the ids: the rows' own pages are left to the batch's DELETE, on another thread."""
        Job = self.table.model
        ids: list[int] = []
        for status in statuses:
            changed = (Job.status == status) & (Job.modified >= start) & (Job.modified < end)
            query = Job.select(Job.id).where(changed)
            found = tuples(query.limit(cap + 1) if cap is not None else query)
            if cap is not None and len(found) > cap:
                return None
            ids += [job_id for (job_id,) in found]
        return ids

    def finished_after(
        self, statuses: Sequence[Status], cutoff: datetime, after_id: int, limit: int
    ) -> list[int]:
        """Ids of the next `limit` rows of `statuses` changed before `cutoff`, in id order
        after `after_id`: the table read on from the last id, neighbours by id sharing its
        pages."""
        Job = self.table.model
        # `status + 0`: SQLite would read the (status, modified) SQL index, every old row of each
        # status for each batch, rather than the table on from the last id.
        old = (Job.status + 0).in_(list(statuses)) & (Job.modified < cutoff)
        query = Job.select(Job.id).where(Job.id > after_id, old).order_by(Job.id).limit(limit)
        return [job_id for (job_id,) in tuples(query)]

    def kept_for_their_chain(
        self, ids: list[int], statuses: Sequence[Status], cutoff: datetime
    ) -> set[int]:
        """Those of `ids` an earlier attempt of whose chain is not purged with them (not of
        `statuses`, or changed since `cutoff`): only a retry (a row with a chain_id) has
        earlier attempts to look for."""
        if not ids:
            return set()
        Job = self.table.model

        def kept(earlier: Any) -> Any:
            return ~(earlier.status.in_(list(statuses)) & (earlier.modified < cutoff))

        query = Job.select(Job.id).where(Job.id.in_(_written(ids)), earlier_attempt(Job, kept))
        return {job_id for (job_id,) in tuples(query)}

    def delete(self, ids: list[int], statuses: Sequence[Status], cutoff: datetime) -> int:
        """Delete those of `ids` still finished with one of `statuses` and changed before
        `cutoff` (a requeue may have moved one on since it was read). A DELETE that lost a
        deadlock, or a certification conflict on a Galera node, was rolled back whole and
        runs again; a lost connection ends the purge (the next one finishes it)."""
        Job = self.table.model
        # SQLite would read a thousand ids' rows through the (status, modified) SQL index, every
        # old row of the statuses for each DELETE; `+ 0` leaves it the primary key.
        status = Job.status if self.table.mysql else Job.status + 0
        statement = Job.delete().where(
            Job.id.in_(_written(ids)), status.in_(statuses), Job.modified < cutoff
        )
        return int(run_reconnecting(self.table.db, statement.execute, reconnect=False))

    def latest_finished(self, rows: RowFilter, batch: int) -> Iterator[list[Job]]:
        """The rows `rows` matches that are their chain's latest finished attempt (perhaps
        followed by a pending one), `batch` at a time by id: what requeue repeats."""
        Job = self.table.model
        finished_later = later_attempt(Job, lambda later: later.status != Status.PENDING)
        return id_batches(filtered(self.table, rows).where(~finished_later), batch)


def _written(ids: list[int]) -> SQL:
    """`ids` written into the statement, for `IN`: ints read from the table, so nothing to
    escape, and a parameter each would cost four times what the row's DELETE does."""
    return SQL(f"({', '.join(str(int(job_id)) for job_id in ids)})")
