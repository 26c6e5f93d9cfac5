"""After a failover of the database. A replica promoted in place of a primary that replicated
asynchronously lacks what that primary committed last: adds, leases and outcomes alike. The
schedule and the journal in Redis still name the jobs whose rows went. The first run to meet
the new server says so in one line: the ids the schedule and the journal know that the table
lacks, and the due times they fall between. It raises the table's AUTO_INCREMENT above every
id Redis knows, so that no new job is given a lost job's id from then on, and keeps what it
found for `delayq doctor`.

Nothing is run or marked on account of it, because nothing needs to be: a stale entry whose
row is gone is dropped by the claim's guarded UPDATE (one whose id a new job took before
the check is put back at that job's own due time: the UPDATE also checks `run_at`); a
journaled outcome lands only on a row still RUNNING under the lease token of the pass that
journaled it; and the sweep puts back pending rows whose claims were rolled back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..base.durations import format_instant
from ..store.index import Index, job_id_of
from ..store.table import Primaries, Table

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Taken:
    """What a failover of the database took, as far as Redis can tell."""

    previous: str
    server: str
    ids: list[int]  # ids the schedule or the journal knows that have no row
    due_from: float | None  # the earliest and latest due time of those on the schedule
    due_to: float | None

    def fields(self, at: float) -> dict[str, str]:
        """The finding as the registry keeps it for `delayq doctor`."""
        return {
            "at": repr(at),
            "previous": self.previous,
            "server": self.server,
            "missing": str(len(self.ids)),
            "ids": preview(self.ids),
            "due_from": "" if self.due_from is None else repr(self.due_from),
            "due_to": "" if self.due_to is None else repr(self.due_to),
            "said": describe(self),
        }


def check_database_server(table: Table, index: Index, now: float) -> Taken | None:
    """If the table is on another server than the one noted before, find and say what the
    move took (see the module's text); None when it is the same server, or the first seen."""
    server = Primaries(table).server_identity()
    if server is None:
        return None
    previous = index.registry.swap_database_server(server)
    if previous is None or previous == server:
        return None
    scheduled: dict[int, float] = {}
    known: set[int] = set()
    for queue in index.registry.known_queues():
        for batch in index.schedule.members(queue):
            scheduled.update(
                (job_id, score) for member, score in batch if (job_id := job_id_of(member))
            )
        known.update(job_id for name in index.journal.fields(queue) if (job_id := job_id_of(name)))
    known.update(scheduled)
    missing = Primaries(table).ids_without_rows(known)
    if missing and not Primaries(table).keep_ids_above(max(known)):
        logger.warning("could not raise the table's next id above %d yet (a lock)", max(known))
    due = [scheduled[job_id] for job_id in missing if job_id in scheduled]
    taken = Taken(previous, server, missing, min(due, default=None), max(due, default=None))
    index.registry.note_database_failover(taken.fields(now))
    logger.warning("%s", describe(taken))
    return taken


def describe(taken: Taken) -> str:
    """The one line that says what a failover took."""
    moved = (
        f"the database is not the server the table was last seen on ({taken.server}, "
        f"was {taken.previous}: a failover?)"
    )
    if not taken.ids:
        return f"{moved}; every job the schedule and the journal know has its row there"
    window = ""
    if taken.due_from is not None:
        window = f", due {format_instant(taken.due_from)} to {format_instant(taken.due_to)}"
    jobs = (
        "1 job the schedule or the journal knows has"
        if len(taken.ids) == 1
        else f"{len(taken.ids)} jobs the schedule or the journal knows have"
    )
    return (
        f"{moved}; {jobs} no row there (ids {preview(taken.ids)}{window}): the old primary "
        "took them with it, and jobs whose outcomes it took run again; new jobs get ids above "
        "them"
    )


def preview(ids: list[int]) -> str:
    if len(ids) <= 10:
        return ", ".join(map(str, ids))
    return f"{', '.join(map(str, ids[:5]))}, ... {', '.join(map(str, ids[-3:]))}"
