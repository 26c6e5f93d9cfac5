"""Recording what handlers did: each outcome is journaled in Redis the moment the handler
returns (one round trip), and the journal is written to the table in group commits — every
few hundred jobs or few hundred milliseconds, whichever comes first.

Why a journal: batching the table writes must not widen the duplicate window. If the run
dies with outcomes not yet in the table, the next run's lease recovery finds them in the
journal and records them instead of running those jobs again; only the job whose handler was
running can run twice.
"""

from __future__ import annotations

import json
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..store import leases, queries
from ..store.database import run_reconnecting
from ..store.index import ScheduleIndex
from ..store.table import ClaimedJob, Status, Table, tuples
from .bookkeeper import Bookkeeper
from .retry import next_occurrence, next_run_at, should_retry

FLUSH_MAX = 500
FLUSH_INTERVAL = 0.2


@dataclass(frozen=True)
class Outcome:
    job: ClaimedJob
    status: Status
    message: str
    retry: bool  # whether a failure may be retried (NoRetry and refused handlers may not)
    finished_at: float

    def to_record(self) -> str:
        if not self.message:  # most jobs: written without the JSON encoder, same text
            retry = "true" if self.retry else "false"
            return f'[{int(self.status)}, "", {retry}, {self.finished_at!r}]'
        return json.dumps([int(self.status), self.message, self.retry, self.finished_at])

    @classmethod
    def from_record(cls, job: ClaimedJob, record: str) -> Outcome:
        status, message, retry, finished_at = json.loads(record)
        return cls(job, Status(status), message, bool(retry), float(finished_at))


@dataclass
class Settled:
    """What a flush wrote: counts for the report, and the rows it scheduled."""

    succeeded: int = 0
    failed: int = 0
    retries: list[tuple[int, float]] = field(default_factory=list)
    occurrences: list[tuple[int, float]] = field(default_factory=list)  # recurring re-arms
    lost: list[int] = field(default_factory=list)  # outcomes whose lease had been taken over

    def merge(self, other: Settled) -> Settled:
        self.succeeded += other.succeeded
        self.failed += other.failed
        self.retries += other.retries
        self.occurrences += other.occurrences
        self.lost += other.lost
        return self

    @property
    def scheduled(self) -> list[tuple[int, float]]:
        """(id, due) of every row to put on the schedule: retries and next occurrences."""
        return self.retries + self.occurrences


class OutcomeBuffer:
    """Outcomes of one queue's jobs held under one lease token, waiting for a group commit.

    With a bookkeeper the commits are written on its thread while handlers go on running;
    at most one waits behind the one being written, which bounds the outcomes held.
    """

    def __init__(
        self,
        table: Table,
        index: ScheduleIndex,
        queue: str,
        token: str | None,
        bookkeeper: Bookkeeper | None = None,
        notes_starts: bool = False,
    ) -> None:
        self.table = table
        self.index = index
        self.queue = queue
        self.token = token
        self.bookkeeper = bookkeeper
        self.notes_starts = notes_starts  # the run notes each start: forget them with the outcome
        self.waiting: list[Outcome] = []
        self.journaled: list[int] = []
        self.in_flight: deque[Future[Settled]] = deque()
        self.window_started = time.monotonic()

    def add(self, outcome: Outcome, more_coming: bool) -> Settled | None:
        """Keep an outcome; returns what commits finished meanwhile wrote, if any.

        Written synchronously, an outcome that will be flushed right away is not journaled:
        the table write itself closes the window. Written on the bookkeeper's thread, every
        outcome is journaled first, since the run may die before that commit lands.
        """
        self.waiting.append(outcome)
        full = len(self.waiting) >= FLUSH_MAX
        stale = time.monotonic() - self.window_started >= FLUSH_INTERVAL
        due = full or stale or not more_coming
        if due and self.bookkeeper is None:
            return self.flush()
        self.index.journal.write(self.queue, outcome.job.id, outcome.to_record())
        self.journaled.append(outcome.job.id)
        if due:
            self._hand_over()
        return self._collect(block=False)

    def flush(self) -> Settled:
        """Write every waiting outcome to the table, then index retries and drop the journal;
        returns what this and every commit still in flight wrote."""
        if self.bookkeeper is not None:
            self._hand_over()
            return self._collect(block=True) or Settled()
        settled = _commit(self.table, self.index, self._settling(self.waiting), self.journaled)
        self.waiting, self.journaled = [], []
        self.window_started = time.monotonic()
        return settled

    def _hand_over(self) -> None:
        assert self.bookkeeper is not None
        if self.waiting:
            if len(self.in_flight) >= 2:
                self.in_flight[0].result()  # back-pressure: the oldest must land first
            self.in_flight.append(
                self.bookkeeper.submit(
                    _commit, self.table, self.index, self._settling(self.waiting), self.journaled
                )
            )
        self.waiting, self.journaled = [], []
        self.window_started = time.monotonic()

    def _settling(self, outcomes: list[Outcome]) -> _Settling:
        return _Settling(self.queue, self.token, outcomes, self.notes_starts)

    def _collect(self, block: bool) -> Settled | None:
        """Merge what finished commits wrote; with `block`, wait for every one. A commit that
        failed raises here, in the main thread."""
        merged: Settled | None = None
        while self.in_flight and (block or self.in_flight[0].done()):
            merged = (merged or Settled()).merge(self.in_flight.popleft().result())
        return merged


@dataclass(frozen=True)
class _Settling:
    """The outcomes of one group commit, and where they belong."""

    queue: str
    token: str | None
    outcomes: list[Outcome]
    notes_starts: bool


def _commit(table: Table, index: ScheduleIndex, batch: _Settling, journaled: list[int]) -> Settled:
    settled = write_outcomes(table, batch.outcomes, batch.token)
    started = None
    if batch.notes_starts and batch.token is not None:
        started = (batch.token, [outcome.job.id for outcome in batch.outcomes])
    index.settle(batch.queue, journaled, settled.scheduled, started)
    return settled


def write_outcomes(table: Table, outcomes: list[Outcome], token: str | None) -> Settled:
    """One transaction: successes in one UPDATE, each failure with its retry row, each
    recurring job's next occurrence. Retried once on a fresh connection if MySQL dropped it."""
    if not outcomes:
        return Settled()
    return run_reconnecting(table.db, lambda: _write_outcomes(table, outcomes, token))


def _write_outcomes(table: Table, outcomes: list[Outcome], token: str | None) -> Settled:
    settled = Settled()
    now = max(outcome.finished_at for outcome in outcomes)
    successes = [(o.job.id, o.message) for o in outcomes if o.status == Status.SUCCESS]
    with table.db.atomic():
        # Only a series whose occurrence this transaction settles re-arms: replayed after
        # a dropped connection whose first try had committed, it must not re-arm again.
        recurring = [outcome.job.id for outcome in outcomes if outcome.job.every]
        held = leases.held_by(table, recurring, token)
        settled.succeeded = leases.finish_many(table, successes, token, Status.SUCCESS, now)
        if settled.succeeded < len(successes):
            settled.lost += _not_finished(
                table, [job_id for job_id, _ in successes], Status.SUCCESS, token
            )
        for outcome in outcomes:
            if outcome.status == Status.FAILED:
                _write_failure(table, outcome, token, settled)
        lost = set(settled.lost)
        for outcome in outcomes:
            if outcome.job.id in held and outcome.job.id not in lost:
                _rearm(table, outcome, settled)
    return settled


def _rearm(table: Table, outcome: Outcome, settled: Settled) -> None:
    # After success and failure alike: a timer that stopped at its first failure would die
    # silently. A failed occurrence still gets its ladder retries as one-off rows.
    occurrence = rearm(table, outcome.job, outcome.finished_at)
    if occurrence is not None:
        settled.occurrences.append(occurrence)


def rearm(table: Table, job: ClaimedJob, now: float) -> tuple[int, float] | None:
    """Insert the next occurrence of recurring `job` (id, due), or None if its series was
    stopped. Call it in the transaction that settles `job`: that write's guard (status and
    lease token) is what makes a replayed commit or a second recovery re-arm nothing."""
    assert job.every is not None
    run_at = next_occurrence(job.run_at or now, job.every, now)
    next_id = queries.insert_next_occurrence(table, job, run_at, now)
    return None if next_id is None else (next_id, run_at)


def _write_failure(table: Table, outcome: Outcome, token: str | None, settled: Settled) -> None:
    job = outcome.job
    if not leases.finish(table, job.id, token, Status.FAILED, outcome.message, outcome.finished_at):
        settled.lost.append(job.id)
        return
    settled.failed += 1
    if outcome.retry and should_retry(job.retry_times):
        run_at = next_run_at(job.retry_times, outcome.finished_at)
        settled.retries.append(
            (queries.insert_retry(table, job, run_at, outcome.finished_at), run_at)
        )


def _not_finished(table: Table, ids: list[int], status: Status, token: str | None) -> list[int]:
    """Those of `ids` this run did not finish with `status`. The row's status alone cannot
    say: a run that took a job over after our lease lapsed records the same status, and a
    late outcome taken for ours would re-arm a recurring job a second time. A row keeps the
    token of the run that finished it."""
    Job = table.model
    held = Job.lease_token.is_null() if token is None else Job.lease_token == token
    query = Job.select(Job.id).where(Job.id.in_(ids), Job.status == status, held)
    done = {job_id for (job_id,) in tuples(query)}
    return [job_id for job_id in ids if job_id not in done]
