"""Retry chains: a first attempt and the retries linked to it by chain_id, the one rule a
manual retry follows — a chain has at most one pending attempt — and the one relation every
query of chains asks about: an attempt is later in its chain than another (`later_attempt`,
`earlier_attempt`). And the rows that carry a job on: a retry, a recurring series' next
occurrence, and the stop of a series.

Under the chain's mutex, concurrent `retry` and `requeue` calls of one chain, from any
process, queue up and each sees what the previous one wrote. The index is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from peewee import SQL, fn

from ...errors import BadInput
from .model import ClaimedJob, Job, JobRow, Status, Table, status_word, utc_stamp
from .mutexes import run_exclusive
from .policies import fresh_policy
from .recurrence import is_recurring, next_due


class Attempt(NamedTuple):
    """The chain's pending attempt, and where a recurring series it left goes on: (id, due)
    of the series' next occurrence, for the caller to index."""

    id: int
    queue: str
    series: tuple[int, float] | None = None


T = TypeVar("T")
# A condition on the later (or earlier) attempt's alias, as `later_attempt` is given one.
AttemptCondition = Callable[[Any], Any]


class Chains:
    """A job's attempts and occurrences: a retry chain (a first attempt and the retries linked to it
    by chain_id, at most one of them pending) and a recurring series (each occurrence a row of
    its own). Its writes run under the chain's mutex (`under_chain_mutex`)."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def under_chain_mutex(
        self, job: JobRow, work: Callable[[], T], then: Callable[[T], None] | None = None
    ) -> T:
        """`work()` in a transaction, holding the mutex of `job`'s chain, and `then(result)`
        while it is still held (run again whole after a deadlock or a Galera certification
        conflict: `mutexes.run_exclusive`)."""
        return run_exclusive(self.table, f"chain:{job.chain_id or job.id}", work, then)

    def retry_chain(
        self, job: JobRow, run_at: float, now: float, repeating: int | None = None
    ) -> Attempt:
        """The chain's one pending attempt, due at `run_at`; call under `under_chain_mutex`. A
        pending latest attempt moves ("retry now"), a finished one gets a new attempt. BadInput
        while an attempt runs, or when `repeating` (the attempt the caller meant to repeat) is no
        longer the latest: another requeue got there first."""
        Job = self.table.model
        attempts: list[JobRow] = list(self.chain_of(job)) or [job]
        latest = attempts[-1]
        if latest.status == Status.PENDING:
            # Locked until the transaction ends: a run cannot claim it between read and move.
            still_pending = (Job.id == latest.id) & (Job.status == Status.PENDING)
            if (
                row := Job.select().where(still_pending).for_update(self.table.mysql).first()
            ) is not None:
                series = _leave_series(self.table, row, now)
                moved = {"run_at": run_at, "modified": utc_stamp(now)}
                Job.update(**moved, every=None, schedule=None).where(Job.id == row.id).execute()
                return Attempt(row.id, row.queue, series)
        if latest.status in (Status.PENDING, Status.RUNNING):
            # A pending attempt that would not move was claimed meanwhile: it runs now.
            raise BadInput(
                f"job {job.id} is running (attempt {latest.id}); retry it once it has finished"
            )
        if repeating is not None and latest.id != repeating:
            raise BadInput(
                f"job {repeating} already has a later attempt {latest.id} "
                f"({status_word(latest.status)}); not repeated"
            )
        return Attempt(self.insert_retry(latest, run_at, now), latest.queue)

    def insert_next_occurrence(
        self, job: Job | ClaimedJob, run_at: float, now: float
    ) -> int | None:
        """The next occurrence of a recurring job, unless its series was stopped meanwhile. In
        the transaction recording the outcome, its locking read orders it against `stop_series`,
        so a cancel never loses to a re-arm."""
        Job = self.table.model
        query = Job.select(Job.every, Job.schedule).where(Job.id == job.id)
        row = query.for_update(self.table.mysql).first()
        if row is None or (row.every is None and row.schedule is None):
            return None
        return _insert_after(self.table, job, run_at, now, every=row.every, schedule=row.schedule)

    def stop_series(self, ext: str, queue: str | None) -> int:
        """Stop the recurring series with this business key from re-arming."""
        Job = self.table.model
        recurring = Job.every.is_null(False) | Job.schedule.is_null(False)
        query = Job.update(every=None, schedule=None).where(Job.ext_string == ext, recurring)
        if queue is not None:
            query = query.where(Job.queue == queue)
        return query.execute()

    def insert_retry(self, row: JobRow | ClaimedJob, run_at: float, now: float) -> int:
        """A new PENDING row repeating `row` as its next attempt; the old row stays as history."""
        # A retry is a one-off (every and schedule stay NULL); the series re-arms from the
        # occurrence itself.
        return _insert_after(
            self.table,
            row,
            run_at,
            now,
            retry_times=row.retry_times + 1,
            chain_id=row.chain_id or row.id,
        )

    def chain_of(self, job: JobRow) -> list[Job]:
        """Every attempt of the job's chain (first attempt and its retries), oldest first."""
        Job = self.table.model
        root = job.chain_id or job.id
        return list(Job.select().where((Job.id == root) | (Job.chain_id == root)).order_by(Job.id))


def later_attempt(model: type[Job], where: AttemptCondition | None = None) -> Any:
    """A condition on `model`'s rows: the row's chain has an attempt after it (meeting
    `where`, if given). A failed attempt with one was retried; a finished attempt with a
    finished one is not its chain's last word. One lookup of the chain_id SQL index a row."""
    later = model.alias("later")
    found = later.select(SQL("1")).where(
        later.chain_id == fn.COALESCE(model.chain_id, model.id), later.id > model.id
    )
    return fn.EXISTS(found.where(where(later)) if where is not None else found)


def earlier_attempt(model: type[Job], where: AttemptCondition | None = None) -> Any:
    """A condition on `model`'s rows: the row is a later attempt of a chain that has an
    attempt before it (meeting `where`, if given) — `later_attempt`'s relation seen from
    the later row. Only a retry (a row with a chain_id) has one; the earlier attempt is the
    first (its id is the chain_id) or another retry (the same chain_id), each a lookup of
    an SQL index, where the COALESCE `later_attempt` compares with would read every row."""
    earlier = model.alias("earlier")
    found = earlier.select(SQL("1")).where(
        (earlier.id == model.chain_id) | (earlier.chain_id == model.chain_id),
        earlier.id < model.id,
    )
    exists = fn.EXISTS(found.where(where(earlier)) if where is not None else found)
    return model.chain_id.is_null(False) & exists


def _leave_series(table: Table, row: Job, now: float) -> tuple[int, float] | None:
    """A pending occurrence moved by a retry runs as a one-off; its series goes on from a new
    occurrence due when it was (or, if that is past, at the next time after now), so the
    retry shifts neither a period's phase nor a cron time. None for a one-off job."""
    if not is_recurring(row):
        return None
    due = row.run_at if row.run_at is not None and row.run_at > now else next_due(row, now)
    occurrence = Chains(table).insert_next_occurrence(row, due, now)
    return None if occurrence is None else (occurrence, due)


def _insert_after(
    table: Table, row: JobRow | ClaimedJob, run_at: float, now: float, **columns: Any
) -> int:
    """A new PENDING row that calls what `row` calls, due at `run_at`, with `columns`."""
    return table.model.insert(
        params=row.params,
        ext_string=row.ext_string,
        queue=row.queue,
        run_at=run_at,
        timeout=row.timeout,
        retry_policy=fresh_policy(row.retry_policy),
        status=Status.PENDING,
        created=utc_stamp(now),
        modified=utc_stamp(now),
        **columns,
    ).execute()
