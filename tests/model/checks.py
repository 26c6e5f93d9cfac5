"""The invariant "derived state never outranks the table", as the checks a user relies on:
no job starts early or twice, none starts later than the docs' bound, `status` counts and
`peek` show the table's pending rows. Each kind of violation is an exception class of its
own, and a late job's class says what Redis held about it, so that Hypothesis shrinks and
reports each distinct violation apart (it tells failures apart by their exception's type
and line)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import redis

from delayq.ops.upcoming import Upcoming
from delayq.store.index.lock_waits import PARKED_FOR
from tests.model import truth
from tests.model.truth import Flow, Row, what_redis_holds

# Due times travel as floats through SQL and Redis; this much apart is the same time.
EPSILON = 1e-3
SHOWN = 5  # rows listed in a failure's message
PEEK_FIRST = 3  # the short peek: the schedule alone holds that many, most of the time


class Violation(AssertionError):
    """Derived state outranked the table."""


class EarlyCall(Violation):
    """A handler was called before its row's due time, by the run's own clock."""


class SecondCall(Violation):
    """A job's handler was called twice, though no run was killed."""


class LateJob(Violation):
    """A pending row due longer ago than its bound was not started by a run."""


class LateQueueNotVisited(LateJob):
    """...its entry is on the schedule, but runs do not visit its queue."""


class LateUnknownToRedis(LateJob):
    """...neither its entry nor its queue is known to Redis."""


class LateBeyondHorizon(LateJob):
    """...it has no entry, and is due after its queue's horizon limit."""


class LateWithoutHorizon(LateJob):
    """...it has no entry, and its queue has no horizon."""


class LateOffSchedule(LateJob):
    """...it has no entry, though due within its queue's horizon limit."""


class LateEntryLater(LateJob):
    """...its entry is later than its row's due time."""


class LateDespiteEntry(LateJob):
    """...its entry was due, and still no run started it."""


LATE = {
    truth.UNVISITED: LateQueueNotVisited,
    truth.UNKNOWN: LateUnknownToRedis,
    truth.BEYOND: LateBeyondHorizon,
    truth.NO_HORIZON: LateWithoutHorizon,
    truth.LOST: LateOffSchedule,
    truth.LATER: LateEntryLater,
    truth.DUE: LateDespiteEntry,
}


class StatusQueueMissing(Violation):
    """`status` leaves out a queue with pending or running rows."""


class StatusCountsDiffer(Violation):
    """`status`'s pending (or running) count of a queue is not the table's."""


class PeekMissesRow(Violation):
    """`peek` leaves out a pending row..."""


class PeekMissesRowOfUnvisitedQueue(PeekMissesRow):
    """...of a queue the registry does not name."""


class PeekMissesRowOffSchedule(PeekMissesRow):
    """...that has no entry, within its queue's horizon limit (or with no horizon)."""


class PeekMissesRowBeyondHorizon(PeekMissesRow):
    """...due after its queue's horizon limit, which peek reads from the table."""


class PeekMissesRowWithEntry(PeekMissesRow):
    """...that has its entry on the schedule of a registered queue."""


PEEK_MISSES = {
    truth.UNVISITED: PeekMissesRowOfUnvisitedQueue,
    truth.UNKNOWN: PeekMissesRowOfUnvisitedQueue,
    truth.BEYOND: PeekMissesRowBeyondHorizon,
    truth.NO_HORIZON: PeekMissesRowOffSchedule,
    truth.LOST: PeekMissesRowOffSchedule,
    truth.LATER: PeekMissesRowWithEntry,
    truth.DUE: PeekMissesRowWithEntry,
}


class PeekShowsStale(Violation):
    """`peek` shows an id whose row is not pending."""


class PeekDueDiffers(Violation):
    """`peek` shows a row at another due time or queue than the row's."""


class PeekOrderDiffers(Violation):
    """`peek` lists the table's next rows in another order, or not the first ones."""


def check_none_early(called: Sequence[int], due: Mapping[int, float], now: float) -> None:
    early = [(job_id, due[job_id]) for job_id in called if due.get(job_id, now) > now + EPSILON]
    if early:
        shown = ", ".join(f"job {job_id} due {at!r}" for job_id, at in early[:SHOWN])
        raise EarlyCall(f"called before due by a run at {now!r}: {shown}")


def check_none_twice(calls: Counter[int]) -> None:
    twice = {job_id: count for job_id, count in calls.items() if count > 1}
    if twice:
        raise SecondCall(f"handlers called more than once (job: calls), no run killed: {twice}")


def check_none_late(
    pending: Sequence[Row],
    now: float,
    flows: Mapping[str, Flow],
    grace: Mapping[int, float],
    client: redis.Redis,
) -> None:
    """Every pending row due by `now` less its bound was started by the run at `now`,
    unless its queue is paused or rate-limited (a limit may hold it, docs/jobs.md)."""
    late = []
    for row in pending:
        flow = flows.get(row.queue, Flow(False, False))
        if flow.paused or flow.rate_limited:
            continue
        bound = grace.get(row.id, 0.0) + (PARKED_FOR if row.lock else 0.0)
        if row.run_at < now - bound - EPSILON:
            late.append(row)
    if late:
        shown = "; ".join(
            f"job {row.id} ({row.queue}) due {row.run_at!r}, {now - row.run_at:.1f}s late: "
            f"{what_redis_holds(client, row)}"
            for row in late[:SHOWN]
        )
        raise LATE[truth.cause_of(client, late[0])](f"not started by the run at {now!r}: {shown}")


def check_status(
    queues: Mapping[str, object],
    pending: Counter[str],
    running: Counter[str],
    counts_trusted: bool,
) -> None:
    """`queues` is `status().queues` ({name: QueueStats}). While a loss of the kept pending
    counts awaits the correction the docs prescribe ("A TRUNCATE fires no trigger: `init` or
    `reconcile` after one"), neither they nor the queues known only by them are compared."""
    if counts_trusted and (missing := sorted(name for name in pending if name not in queues)):
        raise StatusQueueMissing(f"status lists no {missing}; the table has {dict(pending)}")
    if missing := sorted(name for name in running if name not in queues):
        raise StatusQueueMissing(f"status lists no {missing}; the table runs {dict(running)}")
    for name, stats in queues.items():
        shown = (getattr(stats, "pending", 0), getattr(stats, "running", 0))
        table = (pending.get(name, 0), running.get(name, 0))
        if shown[1] != table[1] or (counts_trusted and shown[0] != table[0]):
            raise StatusCountsDiffer(
                f"queue {name}: status says pending {shown[0]}, running {shown[1]}; "
                f"the table has pending {table[0]}, running {table[1]}"
            )


def check_peek(
    full: Sequence[Upcoming],
    first: Sequence[Upcoming],
    pending: Sequence[Row],
    client: redis.Redis,
) -> None:
    """`full` is peek of every pending row (and more), `first` of the first few: each must
    be the table's pending rows in due order. A row with a lock may stand later, parked on
    the schedule while it waits for its lock (docs/jobs.md, Flow control)."""
    rows = {row.id: row for row in pending}
    shown = [entry.id for entry in full]
    seen = set(shown)
    if missing := [row for row in pending if row.id not in seen]:
        cause = truth.cause_of(client, missing[0])
        raise PEEK_MISSES[cause](
            f"peek leaves out pending rows: {_rows(missing)}; the first: {cause}"
        )
    if stale := [entry for entry in full if entry.id not in rows]:
        raise PeekShowsStale(f"peek shows rows that are not pending: {_entries(stale)}")
    if len(seen) != len(shown):
        raise PeekShowsStale(f"peek shows a row twice: {_entries(full)}")
    moved = [entry for entry in full if _differs(entry, rows[entry.id])]
    if moved:
        raise PeekDueDiffers(f"peek shows {_entries(moved)}; the table has {_rows(pending)}")
    unlocked = [entry.id for entry in full if rows[entry.id].lock is None]
    if unlocked != [row.id for row in pending if row.lock is None]:
        raise PeekOrderDiffers(f"peek's order {shown}; the table's {_rows(pending)}")
    if not any(row.lock for row in pending):
        expected = [row.id for row in pending[:PEEK_FIRST]]
        if [entry.id for entry in first] != expected:
            raise PeekOrderDiffers(
                f"peek {PEEK_FIRST}: {_entries(first)}; the table: {_rows(pending)}"
            )


def _differs(entry: Upcoming, row: Row) -> bool:
    if entry.queue != row.queue:
        return True
    return row.lock is None and abs(entry.run_at - row.run_at) > EPSILON


def _rows(rows: Sequence[Row]) -> str:
    shown = ", ".join(f"{row.id}:{row.queue}@{row.run_at!r}" for row in rows[:SHOWN])
    return shown + (f", ... ({len(rows)} in all)" if len(rows) > SHOWN else "")


def _entries(entries: Sequence[Upcoming]) -> str:
    shown = ", ".join(f"{entry.id}:{entry.queue}@{entry.run_at!r}" for entry in entries[:SHOWN])
    return shown + (f", ... ({len(entries)} in all)" if len(entries) > SHOWN else "")
