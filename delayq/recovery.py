"""Keeping the index honest with the table: rebuild it after Redis lost it, put back jobs
whose run died (their lease lapsed), re-index pending rows the index lost, and the full
`delayq reconcile` pass that compares the two both ways.

Nothing here runs a handler; it only decides what goes back on the schedule.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

from . import leases, models
from .index import ScheduleIndex
from .models import Job, Status
from .outcomes import Outcome, write_outcomes

logger = logging.getLogger(__name__)

# A pending row due this long ago and absent from the index was lost by Redis (or by a run
# that died between claim and lease); the grace keeps a live run's fresh claims out of reach.
ORPHAN_GRACE = 30.0
# A job whose run died under it this many times is a poison job: it fails instead.
MAX_LOST_LEASES = 3
SWEEP_LIMIT = 1000


@dataclass
class Recovered:
    requeued: int = 0  # lapsed leases put back on the schedule
    journaled: int = 0  # outcomes found in a dead run's journal and written
    poisoned: int = 0  # jobs failed after MAX_LOST_LEASES deaths
    reindexed: int = 0  # pending rows put back into the index


def ensure_index(index: ScheduleIndex) -> int:
    """Rebuild the index from the table if Redis lost it; returns the entries added."""
    if index.is_complete():
        return 0
    index.register(models.pending_queues())
    count = index.rebuild_from(models.iter_pending())
    logger.warning("Redis had no schedule index; rebuilt %d entries from the table", count)
    return count


def recover_leases(index: ScheduleIndex, queue: str, now: float) -> Recovered:
    """Settle the jobs of runs that died: from their journal if the outcome is there,
    otherwise back onto the schedule (or failed, for a job that keeps killing its run)."""
    result = Recovered()
    lapsed = leases.expired_leases(queue, now, SWEEP_LIMIT)
    journal = index.journaled(queue, [item.job.id for item in lapsed])
    outcomes: dict[str | None, list[Outcome]] = {}
    unsettled: list[leases.Lapsed] = []
    for item in lapsed:
        record = journal.get(item.job.id)
        if record is None:
            unsettled.append(item)
        else:
            outcomes.setdefault(item.token, []).append(Outcome.from_record(item.job, record))
    running = _were_running(index, queue, unsettled)
    for item in unsettled:
        was_running = item.job.id in running
        if was_running and item.lost_leases + 1 >= MAX_LOST_LEASES:
            result.poisoned += _fail_poison(item, now)
        elif leases.reclaim(item, now, was_running):
            index.add(queue, item.job.id, now)
            result.requeued += 1
            logger.warning("job %d: its run died (lease lapsed); scheduled again", item.job.id)
    for token, settled_outcomes in outcomes.items():
        settled = write_outcomes(settled_outcomes, token)
        index.settle(queue, [o.job.id for o in settled_outcomes], settled.scheduled)
        result.journaled += settled.succeeded + settled.failed
        logger.warning("recorded %d journaled outcomes of a run that died", len(settled_outcomes))
    return result


def _were_running(index: ScheduleIndex, queue: str, unsettled: list[leases.Lapsed]) -> set[int]:
    """Ids of the jobs whose handler was running when their run died: per dead run, the
    first unsettled job in its noted batch order. Without a noted order, every job counts."""
    tokens = sorted({item.token for item in unsettled if item.token})
    orders = index.orders(queue, tokens)
    ids_by_token: dict[str | None, set[int]] = {}
    for item in unsettled:
        ids_by_token.setdefault(item.token, set()).add(item.job.id)
    running: set[int] = set()
    for token, ids in ids_by_token.items():
        order = orders.get(token) if token else None
        if order is None:
            running |= ids
            continue
        running |= {next((job_id for job_id in order if job_id in ids), min(ids))}
    return running


def _fail_poison(item: leases.Lapsed, now: float) -> int:
    message = (
        f"lost: the run holding it died {item.lost_leases + 1} times while it ran; "
        "not retried (does the handler kill its process?)"
    )
    if not leases.finish(item.job.id, item.token, Status.FAILED, message, now):
        return 0
    logger.error("job %d failed: %s", item.job.id, message)
    return 1


def reindex_orphans(index: ScheduleIndex, queue: str, now: float) -> int:
    """Put back pending rows that have been due a while but are neither on the schedule nor
    claimed by a live run: Redis lost them, or a run died between claiming and leasing."""
    overdue = dict(models.overdue_pending(queue, now - ORPHAN_GRACE, SWEEP_LIMIT))
    missing = index.lost(queue, list(overdue), claimed_before=now - ORPHAN_GRACE)
    # A run may have claimed and leased a job between our read of the table and our look at
    # Redis; only a job still pending after Redis said it is nowhere is really lost.
    missing = models.still_pending(missing)
    if missing:
        index.add_many(queue, [(job_id, overdue[job_id]) for job_id in missing])
        logger.warning(
            "queue %s: re-indexed %d pending jobs the index had lost", queue, len(missing)
        )
    return len(missing)


@dataclass
class Reconciled:
    reindexed: Counter[str]  # pending rows added to their queue's index
    removed: Counter[str]  # index entries whose row is not pending (or does not exist)


def reconcile(index: ScheduleIndex) -> Reconciled:
    """Compare the whole index with the table both ways and fix both kinds of difference."""
    result = Reconciled(Counter(), Counter())
    for batch in models.iter_pending():
        by_queue: dict[str, list[tuple[int, float]]] = {}
        for queue, job_id, due in batch:
            by_queue.setdefault(queue, []).append((job_id, due))
        for queue, entries in by_queue.items():
            due_by_id = dict(entries)
            missing = index.missing(queue, list(due_by_id))
            index.add_many(queue, [(job_id, due_by_id[job_id]) for job_id in missing])
            result.reindexed[queue] += len(missing)
    for queue in sorted(set(index.queues()) | set(models.pending_queues())):
        result.removed[queue] += _remove_stale(index, queue)
    index.register(models.pending_queues())
    index.mark_complete()
    return result


def _remove_stale(index: ScheduleIndex, queue: str) -> int:
    removed = 0
    for chunk in index.members(queue):
        ids = [int(member) for member, _ in chunk if member.isdigit()]
        query = Job.select(Job.id).where(
            Job.id.in_(ids), Job.status == Status.PENDING, Job.queue == queue
        )
        pending = {str(job_id) for (job_id,) in models.tuples(query)}
        removed += index.remove_members(queue, [m for m, _ in chunk if m not in pending])
    return removed
