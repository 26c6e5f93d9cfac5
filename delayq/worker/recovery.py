"""Keeping the index honest with the table: rebuild it after Redis lost it, put back jobs
whose run died (their lease lapsed), re-index pending rows it lost (and those a Redis failover
took off the schedule), and `delayq reconcile`, which compares the two both ways. Nothing
here runs a handler.

After a failover. Redis replicates asynchronously. A replica promoted to primary lacks what
the old primary acknowledged in its last moments, and an old primary that has not heard it
was replaced takes writes for seconds more, dropped when it is demoted. Those jobs' rows are
in the table; only their schedule entries are gone, and a job due in a week would wait that
long for the orphan sweep to notice. A promoted replica starts a replication history under a
new id, so a run that finds a queue's keys on a server with another id than the one it noted
checks the rows changed since it last saw the old one, then, for a while, the rows changed
since its previous check, until no old primary can still be taking writes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..flow import locking
from ..store.index import Index, ServerNote, Tally, handler_label
from ..store.table import (
    ClaimedJob,
    Counts,
    DueCursor,
    DueRows,
    Jobs,
    Lapsed,
    Leases,
    Outcome,
    Outcomes,
    Status,
    Table,
)
from .group_commits import tally_of
from .handlers import handler_of
from .retry import LostLease, after_failure, after_lost_lease

logger = logging.getLogger(__name__)

# A pending row due this long ago and absent from the index was lost by Redis (or by a run
# that died between claim and lease); the grace keeps a live run's fresh claims out of reach.
ORPHAN_GRACE = 30.0
SWEEP_LIMIT = 1000
# After a failover, rows changed this long before a check are checked too: a producer commits
# its row before it puts the job on the schedule (seconds before, when that add is retried
# through a failover), and clocks differ.
LOOKBACK = 60.0
# For this long after a run found a queue on a new server, each sweep checks the rows changed
# since the one before: an old primary cut off from the sentinels or the cluster takes writes
# until it is demoted (8 to 17 s after a SENTINEL FAILOVER on Redis 7.0 here).
WATCH = 120.0


# How often one run of them all checks the kept pending counts against the table (at ten
# million pending rows a count of them takes about 1.6 s, on a thread of its own).
COUNTS_CHECK_EVERY = 3600.0


@dataclass
class Recovered:
    tally: Tally  # the same for the metrics: the dead run's own tally never reached Redis
    requeued: int = 0  # lapsed leases put back on the schedule
    journaled: int = 0  # outcomes found in a dead run's journal and written
    poisoned: int = 0  # jobs failed after retry.MAX_LOST_LEASES deaths


def recover_leases(
    table: Table, index: Index, queue: str, now: float, php_classes: Mapping[str, str]
) -> Recovered:
    """Settle the jobs of runs that died: from their journal if the outcome is there,
    otherwise back onto the schedule (or failed, for a job that keeps killing its run).
    `php_classes` names a PHP producer's jobs by their handlers in the metrics."""
    result = Recovered(Tally(queue))
    lapsed = Leases(table).expired_leases(queue, now, SWEEP_LIMIT)
    journal = index.journal.journaled(queue, [item.job.id for item in lapsed])
    outcomes: dict[str | None, list[Outcome]] = {}
    unsettled: dict[str | None, set[int]] = {}
    for item in lapsed:
        if (record := journal.get(item.job.id)) is None:
            unsettled.setdefault(item.token, set()).add(item.job.id)
        else:
            outcome = journaled_outcome(item.job, record, php_classes)
            outcomes.setdefault(item.token, []).append(outcome)
    running = _were_running(index, queue, unsettled)
    for item in lapsed:
        if item.job.id not in journal:
            handler = handler_label(*handler_of(item.job.params, php_classes))
            _put_back(table, index, item, item.job.id in running, now, result, handler)
    for token, unsettled_ids in unsettled.items():
        if token is not None:
            index.journal.forget(queue, [], (token, sorted(unsettled_ids)))  # their start notes
    dead_runs = {item.token for item in lapsed if item.token is not None}
    for token, settled_outcomes in outcomes.items():
        written = Outcomes(table).write_outcomes(settled_outcomes, token)
        ids = [outcome.job.id for outcome in settled_outcomes]
        settled = tally_of(queue, settled_outcomes, set(written.lost), timed=False)
        started = None if token is None else (token, ids)
        index.committed(queue, ids, written.scheduled, started, settled)
        locking.let_go(table, index, [outcome.job for outcome in settled_outcomes], now)
        result.journaled += written.succeeded + written.failed + len(written.deferred)
        logger.warning("recorded %d journaled outcomes of a run that died", len(settled_outcomes))
    for token in dead_runs - Leases(table).tokens_holding(queue, dead_runs):
        index.journal.forget_order(queue, token)  # its batch order and start mark
    index.tallies.add(result.tally)
    return result


def _put_back(
    table: Table,
    index: Index,
    item: Lapsed,
    was_running: bool,
    now: float,
    result: Recovered,
    handler: str,  # its label in the metrics
) -> None:
    """A dead run's job with no journaled outcome: back on the schedule, or failed as a
    poison job, as `after_lost_lease` decides."""
    if after_lost_lease(item.lost_leases, was_running) == LostLease.POISON:
        if _fail_poison(table, index, item, now):
            locking.let_go(table, index, [item.job], now)
            result.poisoned += 1
            result.tally.count(handler, "failed", now)
            result.tally.count(handler, "poisoned", now)
    elif Leases(table).reclaim(item, now, was_running):
        index.schedule.add(item.job.queue, item.job.id, now)
        result.requeued += 1
        result.tally.count(handler, "recovered", now)
        logger.warning("job %d: its run died (lease lapsed); scheduled again", item.job.id)


def journaled_outcome(job: ClaimedJob, record: str, php_classes: Mapping[str, str]) -> Outcome:
    """The outcome a dead run journaled, named by the handler its params name. A failure
    journaled by an earlier version says only whether to retry: `after_failure` says when,
    its handler's policy unknown."""
    outcome = Outcome.from_record(job, record, after_failure)
    class_path, method = handler_of(job.params, php_classes)
    return replace(outcome, class_path=class_path, method=method)


def _were_running(index: Index, queue: str, ids_by_token: dict[str | None, set[int]]) -> set[int]:
    """Ids of the unsettled jobs whose handler was running when their run died. A run with
    many jobs in flight noted each start: those. A run calling one at a time noted its batch
    order: the first unsettled job in it. With neither, every job counts."""
    orders = index.journal.orders(queue, sorted(token for token in ids_by_token if token))
    running: set[int] = set()
    for token, ids in ids_by_token.items():
        started = index.journal.started(queue, token, sorted(ids)) if token else None
        order = orders.get(token) if token else None
        if started is not None:
            running |= started
        elif order is None:
            running |= ids
        else:
            running.add(next((job_id for job_id in order if job_id in ids), min(ids)))
    return running


def _fail_poison(table: Table, index: Index, item: Lapsed, now: float) -> bool:
    message = (
        f"lost: the run holding it died {item.lost_leases + 1} times while it ran; "
        "not retried (does the handler kill its process?)"
    )
    # A recurring series goes on past a poisoned occurrence, as past a failed one.
    failed, occurrence = Outcomes(table).fail_and_rearm(item.job, item.token, message, now)
    if not failed:
        return False
    if occurrence is not None:
        index.schedule.add(item.job.queue, *occurrence)
    logger.error("job %d failed: %s", item.job.id, message)
    return True


def reindex_orphans(table: Table, index: Index, queue: str, now: float) -> int:
    """Put back pending rows that have been due a while but are neither on the schedule nor
    claimed by a live run: Redis lost them, or a run died between claiming and leasing."""
    # Pending rows another producer wrote without run_at (the seed's PHP producers) take their
    # schedule score as run_at, so status and this sweep see when they are due, not created.
    ids = DueRows(table).pending_without_run_at(queue, SWEEP_LIMIT)
    DueRows(table).adopt_run_at(index.schedule.scores(queue, ids))
    batch = DueRows(table).pending_by_due(queue, None, SWEEP_LIMIT, now - ORPHAN_GRACE)
    overdue = dict(batch.entries())
    if batch.count == SWEEP_LIMIT and batch.last is not None:
        overdue.update(_further_on(table, index, queue, batch.last, now - ORPHAN_GRACE))
    found = put_back_lost(table, index, queue, overdue, now)
    if found:
        logger.warning("queue %s: re-indexed %d pending jobs the index had lost", queue, found)
    return found


def _further_on(
    table: Table, index: Index, queue: str, first: DueCursor, before: float
) -> dict[int, float]:
    """A backlog (paused, limited, or just long) holds more overdue rows than the sweep reads
    from its oldest (up to `first`), and a lost entry among them would wait until those
    before it ran: each sweep also reads the next SWEEP_LIMIT rows after where the last one
    stopped (or after `first`), so a lost entry anywhere in a backlog of N rows is found
    within N / SWEEP_LIMIT sweeps. Where it stopped is noted in Redis, for the next run."""
    after = DueCursor.from_mark(index.registry.sweep_mark(queue)) or first
    batch = DueRows(table).pending_by_due(queue, after, SWEEP_LIMIT, before)
    last = batch.last if batch.count == SWEEP_LIMIT else None
    index.registry.note_sweep(queue, None if last is None else last.mark())
    return dict(batch.entries())


def check_counts(table: Table) -> dict[str, int]:
    """Bring the pending counts triggers keep back to the table's (one run an hour does,
    `COUNTS_CHECK_EVERY`): they drift only where no trigger fired (a TRUNCATE, a count
    edited by hand), and come right without an operator. What was corrected."""
    if not Counts(table).installed():
        return {}
    drift = Counts(table).correct()
    if drift:
        words = ", ".join(f"{queue} {error:+d}" for queue, error in sorted(drift.items()))
        logger.warning("corrected the kept pending counts (%s): a TRUNCATE, or an edit?", words)
    return drift


def reindex_after_failover(table: Table, index: Index, queue: str, now: float) -> int:
    """Put back the pending jobs of `queue` a failover dropped from the schedule, if the
    queue's keys are on a new server or were found on one lately; how many."""
    replication_id = index.registry.replication_id(queue)
    if replication_id is None:
        return 0
    note = index.registry.server_note(queue)
    moved = note.moved if note is not None else None
    since = None
    if note is not None and note.replication_id != replication_id:
        logger.warning(
            "queue %s: Redis is not the server the schedule was last seen on (a failover?);"
            " putting back the jobs added since, which it may not have",
            queue,
        )
        moved, since = now, note.seen
    elif note is not None and moved is not None and now - moved < WATCH:
        since = note.seen
    found = 0
    if since is not None:
        batches = DueRows(table).pending_changed_since(queue, since - LOOKBACK, SWEEP_LIMIT)
        found = sum(put_back_lost(table, index, queue, dict(batch), now) for batch in batches)
    if found:
        logger.warning("queue %s: put back %d jobs a failover took off the schedule", queue, found)
    index.registry.note_server(queue, ServerNote(replication_id, now, moved))
    return found


def index_committed(table: Table, index: Index, now: float) -> int:
    """Put on the schedule the jobs added inside a caller's transaction that has committed
    since (`add(using=...)` leaves that to the runs); how many."""
    found = 0
    while rows := DueRows(table).unindexed(SWEEP_LIMIT):
        pending: dict[str, dict[int, float]] = {}
        for job_id, queue, due, status in rows:
            if status == Status.PENDING:
                pending.setdefault(queue, {})[job_id] = due
        for queue, due_by_id in pending.items():
            found += put_back_lost(table, index, queue, due_by_id, now)
        DueRows(table).mark_indexed([row[0] for row in rows], now)
        if len(rows) < SWEEP_LIMIT:
            break
    return found


def put_back_lost(
    table: Table, index: Index, queue: str, due_by_id: dict[int, float], now: float
) -> int:
    """Schedule those pending rows of `queue` (id: due) that are neither on the schedule nor
    claimed by a live run, leaving out those due beyond its horizon (a walk brings them when
    the limit nears them, as add_jobs.lua would keep them off); how many."""
    horizon = index.horizons.read([queue]).get(queue)
    if horizon is not None:
        due_by_id = {job_id: due for job_id, due in due_by_id.items() if due <= horizon.limit}
    missing = index.schedule.lost(queue, list(due_by_id), claimed_before=now - ORPHAN_GRACE)
    # A run may have claimed and leased one between our read of the table and our look at
    # Redis; only a job still pending after Redis said it is nowhere is really lost.
    missing = Jobs(table).still_pending(missing)
    index.schedule.add_many(queue, [(job_id, due_by_id[job_id]) for job_id in missing])
    return len(missing)
