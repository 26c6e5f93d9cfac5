"""The bulk writes an operator asks for: purging old finished rows and requeueing failed ones.
Both walk the table in primary-key batches so no statement holds locks for long, and both
respect retry chains (purge never leaves a chain whose surviving rows end in an earlier
attempt; requeue only repeats a chain's latest finished attempt, or moves the pending attempt
that follows it to now), so running either twice is safe."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from peewee import SQL, fn

from ..config import Settings
from ..errors import BadInput
from ..store import chains
from ..store.index import Index
from ..store.params import read_call
from ..store.table import Job, Status, Table, id_batches, utc_stamp
from ..worker.handlers import locate
from .overview import JobFilter

logger = logging.getLogger(__name__)

PURGEABLE = (Status.SUCCESS, Status.FAILED, Status.CANCELLED, Status.MISSED)
_PURGEABLE_WORDS = ", ".join(status.word for status in PURGEABLE)
BATCH = 1000
# A breath between deletes lets the runner's UPDATEs in between: purge is never urgent.
PAUSE = 0.05


def purgeable_ids(
    table: Table, statuses: Sequence[Status], before: float, batch: int = BATCH
) -> Iterator[list[int]]:
    """Ids of finished rows last changed before `before` (epoch), in ascending batches, of which
    no earlier attempt is kept: deleting a later attempt while an earlier failed one stays would
    make that one the chain's last word (and `requeue` would run a job that has succeeded)."""
    if not statuses:
        raise BadInput("purge needs at least one status")
    for status in statuses:
        if status not in PURGEABLE:
            raise BadInput(
                f"purge never deletes {Status(status).word} rows; use {_PURGEABLE_WORDS}"
            )
    Job = table.model
    cutoff = utc_stamp(before)
    earlier = Job.alias()
    kept_earlier = earlier.select(SQL("1")).where(
        (earlier.id == Job.chain_id) | (earlier.chain_id == Job.chain_id),
        earlier.id < Job.id,
        ~(earlier.status.in_(list(statuses)) & (earlier.modified < cutoff)),
    )
    query = Job.select(Job.id).where(
        Job.status.in_(list(statuses)), Job.modified < cutoff, ~fn.EXISTS(kept_earlier)
    )
    for rows in id_batches(query.tuples(), batch):
        yield [job_id for (job_id,) in rows]


def purge(
    table: Table,
    statuses: Sequence[Status],
    before: float,
    batch: int = BATCH,
    pause: float = PAUSE,
) -> int:
    """Delete what `purgeable_ids` yields, one short statement per batch; returns the count."""
    Job = table.model
    deleted = 0
    cutoff = utc_stamp(before)
    for ids in purgeable_ids(table, statuses, before, batch):
        deleted += (
            Job.delete()
            .where(Job.id.in_(ids), Job.status.in_(list(statuses)), Job.modified < cutoff)
            .execute()
        )
        time.sleep(pause)
    return deleted


@dataclass
class RequeueResult:
    """Ids requeued (or, in a dry run, that would be) and the rows left alone, with why."""

    ids: list[int] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)


def requeue(
    table: Table, index: Index, filters: JobFilter, settings: Settings, now: float, dry_run: bool
) -> RequeueResult:
    """Every chain whose latest finished attempt matches `filters` gets a pending attempt due
    now: the one it has, moved to now, or a new one as `Queue.retry` makes it (retry_times + 1,
    linked by chain_id, indexed)."""
    if not filters.statuses or not set(filters.statuses) <= set(PURGEABLE):
        raise BadInput(f"requeue needs --status from {_PURGEABLE_WORDS}")
    Job = table.model
    later = Job.alias()
    # Only a chain's latest finished attempt (perhaps followed by a pending one) is repeated.
    has_later = later.select(SQL("1")).where(
        later.chain_id == fn.COALESCE(Job.chain_id, Job.id),
        later.id > Job.id,
        later.status != Status.PENDING,
    )
    result = RequeueResult()
    php_classes = dict(settings.php_classes)
    for rows in id_batches(filters.query(table, now).where(~fn.EXISTS(has_later)), BATCH):
        matching = [row for row in rows if filters.matches_class(row)]
        runnable = [
            row for row in matching if _is_allowed(row, settings.handlers, php_classes, result)
        ]
        if dry_run:
            result.ids += [row.id for row in runnable]
            continue
        added: list[tuple[str, int, float]] = []
        for row in runnable:
            if new_id := _repeat(table, row, now, result):
                result.ids.append(new_id)
                added.append((row.queue, new_id, now))
        index.schedule.add_by_queue(added)
    return result


def _is_allowed(
    row: Job, allowed: Sequence[str], php_classes: Mapping[str, str], result: RequeueResult
) -> bool:
    try:
        call = read_call(row.params, php_classes)
        locate(call.class_path, call.method, allowed)
    except BadInput as exc:
        result.skipped.append((row.id, str(exc)))
        return False
    return True


def _repeat(table: Table, row: Job, now: float, result: RequeueResult) -> int | None:
    """The chain's pending attempt, due now, unless it runs or a later attempt of it has
    finished meanwhile (another requeue, and a run): then None, and why in `result`."""
    with chains.chain_locked(table, row):
        try:
            return chains.retry_chain(table, row, now, now, repeating=row.id)[0]
        except BadInput as exc:
            logger.info("%s", exc)
            result.skipped.append((row.id, str(exc)))
            return None
