"""Doctor's look at how table and index agree: pending rows the schedule lost (an index write
that failed after its INSERT, a Redis that lost data) and journal fields no run will read
again. Runs repair both; doctor only counts them, reading, never writing."""

from __future__ import annotations

import peewee
import redis

from ..store.backend_errors import one_line
from ..store.index import Index
from ..store.queries import overdue_pending
from ..store.table import Status, Table, tuples
from ..worker.recovery import ORPHAN_GRACE, SWEEP_LIMIT
from .doctor import FAIL, Check, verdict


def consistency_checks(table: Table, index: Index) -> list[Check]:
    """An ok or warn line for rows missing from the schedule and for stale journal fields."""
    try:
        now = index.clock.now()
        unscheduled = stale = 0
        for queue in index.registry.known_queues():
            overdue = overdue_pending(table, queue, now - ORPHAN_GRACE, SWEEP_LIMIT)
            unscheduled += len(index.schedule.missing(queue, [job_id for job_id, _ in overdue]))
            stale += _stale_journal_fields(table, index, queue)
    except (peewee.PeeweeException, redis.RedisError) as exc:
        detail = f"could not compare table and schedule: {one_line(exc)}"
        return [Check(FAIL, "consistency", detail)]
    more = "+" if unscheduled >= SWEEP_LIMIT else ""
    return [
        verdict(
            not unscheduled,
            "orphans",
            "every overdue pending row is on the schedule",
            f"{unscheduled}{more} pending rows overdue by {ORPHAN_GRACE:g}s are not on the "
            "schedule; the next run's sweep puts them back",
        ),
        verdict(
            not stale,
            "journal",
            "no journal fields left by runs that are gone",
            f"{stale} journal fields belong to no running job; recovery of the runs that left "
            "them clears them, or they expire with the journal",
        ),
    ]


def _stale_journal_fields(table: Table, index: Index, queue: str) -> int:
    """Fields of the queue's journal whose job or run holds no RUNNING row: an outcome
    already in the table, or the batch order and start notes of a run that is gone."""
    fields = index.journal.fields(queue)
    Job = table.model
    running = Job.status == Status.RUNNING
    held = tuples(Job.select(Job.id, Job.lease_token).where(running, Job.queue == queue))
    ids = {str(job_id) for job_id, _ in held}
    tokens = {token for _, token in held if token}
    return sum(1 for field in fields if not _is_live(field, ids, tokens))


def _is_live(field: str, running_ids: set[str], running_tokens: set[str]) -> bool:
    if field.isdigit():
        return field in running_ids
    kind, _, rest = field.partition(":")
    if kind in ("order", "starts"):
        return rest in running_tokens
    if kind == "start":
        return rest.rpartition(":")[0] in running_tokens
    return True  # not ours to judge
