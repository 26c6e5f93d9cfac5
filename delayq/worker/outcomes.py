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
import logging
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..errors import BadInput
from ..store import leases, queries
from ..store.database import run_reconnecting
from ..store.index import ScheduleIndex
from ..store.policies import RetryPolicy, read_policy
from ..store.table import ClaimedJob, Status, Table, tuples
from ..store.tallies import Tally
from .bookkeeper import Bookkeeper
from .retry import effective_policy, is_recurring, next_due, retry_delay

logger = logging.getLogger(__name__)

FLUSH_MAX = 500
FLUSH_INTERVAL = 0.2


@dataclass(frozen=True)
class Outcome:
    """What one call of a handler came to. `status` PENDING: the handler raised RetryLater,
    and the same attempt is due again `next_in` seconds on."""

    job: ClaimedJob
    status: Status
    message: str
    # Seconds until the job's next attempt: the retry its policy gives a failure, or the
    # deferral's; None: there is none (success, NoRetry, a refused handler, retries used up).
    next_in: float | None
    finished_at: float
    # For the tallies only; an outcome read back from the journal has none of them.
    handler: str = "?"  # "class.method"
    duration: float = 0.0
    lateness: float = 0.0

    def to_record(self) -> str:
        if not self.message:  # most jobs: written without the JSON encoder, same text
            next_in = "null" if self.next_in is None else repr(self.next_in)
            return f'[{int(self.status)}, "", {next_in}, {self.finished_at!r}]'
        return json.dumps([int(self.status), self.message, self.next_in, self.finished_at])

    @classmethod
    def from_record(cls, job: ClaimedJob, record: str) -> Outcome:
        status, message, next_in, finished_at = json.loads(record)
        if isinstance(next_in, bool):  # journaled by an earlier version: whether to retry
            policy = effective_policy(job.retry_policy, RetryPolicy())
            next_in = retry_delay(policy, job.retry_times) if next_in else None
        return cls(job, Status(status), message, next_in, float(finished_at))


@dataclass
class Settled:
    """What a flush wrote: counts for the report, and the rows it scheduled."""

    succeeded: int = 0
    failed: int = 0
    retries: list[tuple[int, float]] = field(default_factory=list)
    occurrences: list[tuple[int, float]] = field(default_factory=list)  # recurring re-arms
    deferred: list[tuple[int, float]] = field(default_factory=list)  # RetryLater, same rows
    lost: list[int] = field(default_factory=list)  # outcomes whose lease had been taken over

    def merge(self, other: Settled) -> Settled:
        self.succeeded += other.succeeded
        self.failed += other.failed
        self.retries += other.retries
        self.occurrences += other.occurrences
        self.deferred += other.deferred
        self.lost += other.lost
        return self

    @property
    def scheduled(self) -> list[tuple[int, float]]:
        """(id, due) of every row to put on the schedule: retries, next occurrences and
        deferred jobs."""
        return self.retries + self.occurrences + self.deferred


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
        # The outcomes of each commit in flight: written straight to the table by `salvage`
        # if that commit fails before its table write.
        self.outcomes_of: dict[Future[Settled], _Settling] = {}
        self.window_started = time.monotonic()

    def add(self, outcome: Outcome, more_coming: bool) -> Settled | None:
        """Keep an outcome; returns what commits finished meanwhile wrote, if any.

        Written synchronously, an outcome that will be flushed right away is not journaled:
        the table write itself closes the window. Written on the bookkeeper's thread, every
        outcome is journaled first, since the run may die before that commit lands.
        """
        return self.add_many([outcome], more_coming)

    def add_many(self, outcomes: list[Outcome], more_coming: bool) -> Settled | None:
        """`add` for calls that finished together: their outcomes are journaled in one write."""
        self.waiting += outcomes
        full = len(self.waiting) >= FLUSH_MAX
        stale = time.monotonic() - self.window_started >= FLUSH_INTERVAL
        due = full or stale or not more_coming
        if due and self.bookkeeper is None:
            return self.flush()
        self.index.journal.write_many(
            self.queue, [(one.job.id, one.to_record()) for one in outcomes]
        )
        self.journaled += [one.job.id for one in outcomes]
        if due:
            self._hand_over()
        return self._collect(block=False)

    def flush(self) -> Settled:
        """Write every waiting outcome to the table, then index retries and drop the journal;
        returns what this and every commit still in flight wrote."""
        if self.bookkeeper is not None:
            self._hand_over()
            return self._collect(block=True) or Settled()
        batch = self._settling(self.waiting)
        try:
            settled = _commit(self.table, self.index, batch, self.journaled)
        finally:
            if batch.table_written:  # in the table: nothing left to salvage
                self.waiting, self.journaled = [], []
        self.waiting, self.journaled = [], []
        self.window_started = time.monotonic()
        return settled

    def _hand_over(self) -> None:
        assert self.bookkeeper is not None
        if self.waiting:
            if len(self.in_flight) >= 2:
                self.in_flight[0].result()  # back-pressure: the oldest must land first
            batch = self._settling(self.waiting)
            commit = self.bookkeeper.submit(_commit, self.table, self.index, batch, self.journaled)
            self.in_flight.append(commit)
            self.outcomes_of[commit] = batch
        self.waiting, self.journaled = [], []
        self.window_started = time.monotonic()

    def _settling(self, outcomes: list[Outcome]) -> _Settling:
        return _Settling(self.queue, self.token, outcomes, self.notes_starts)

    def _collect(self, block: bool) -> Settled | None:
        """Merge what finished commits wrote; with `block`, wait for every one. A commit that
        failed raises here, in the main thread."""
        merged: Settled | None = None
        while self.in_flight and (block or self.in_flight[0].done()):
            settled = self.in_flight[0].result()
            self.outcomes_of.pop(self.in_flight.popleft())
            merged = (merged or Settled()).merge(settled)
        return merged

    def salvage(self) -> Settled:
        """The run is failing (a server went away): write straight to the table, in one
        transaction and without Redis, every outcome not known to be there — those not yet
        handed over, and those of commits that failed before their table write. Redis may be
        what is away, and its journal with it: left to lease recovery, these jobs would run
        a second time. Their retries are put on the schedule by the orphan sweep."""
        pending = list(self.waiting)
        for commit in self.in_flight:
            batch = self.outcomes_of[commit]
            if commit.exception() is not None and not batch.table_written:
                pending += batch.outcomes
        self.waiting, self.journaled = [], []
        self.in_flight.clear()
        self.outcomes_of.clear()
        return write_outcomes(self.table, pending, self.token)


@dataclass
class _Settling:
    """The outcomes of one group commit, and where they belong."""

    queue: str
    token: str | None
    outcomes: list[Outcome]
    notes_starts: bool
    table_written: bool = False  # set on the bookkeeper's thread once the table has them


def _commit(table: Table, index: ScheduleIndex, batch: _Settling, journaled: list[int]) -> Settled:
    settled = write_outcomes(table, batch.outcomes, batch.token)
    started = None
    if batch.notes_starts and batch.token is not None:
        started = (batch.token, [outcome.job.id for outcome in batch.outcomes])
    batch.table_written = True  # whatever the Redis half does: `salvage` skips these
    tally = tally_of(batch.queue, batch.outcomes, set(settled.lost))
    index.settle(batch.queue, journaled, settled.scheduled, started, tally)
    return settled


def tally_of(queue: str, outcomes: list[Outcome], lost: set[int]) -> Tally:
    """What these outcomes add to the metrics, leaving out those the table refused."""
    tally = Tally(queue)
    for outcome in outcomes:
        # A RetryLater deferral (PENDING) is neither: the same attempt runs again later.
        if outcome.job.id in lost or outcome.status == Status.PENDING:
            continue
        word = "succeeded" if outcome.status == Status.SUCCESS else "failed"
        at = outcome.finished_at
        tally.observe(outcome.handler, word, outcome.lateness, outcome.duration, at)
        if word == "failed" and outcome.next_in is not None:
            tally.observe_retried(outcome.handler, at)
    return tally


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
        # a dropped connection whose first try had committed, it must not re-arm again. A
        # deferred occurrence has not happened yet: it re-arms when it runs.
        recurring = [
            o.job.id for o in outcomes if is_recurring(o.job) and o.status != Status.PENDING
        ]
        held = leases.held_by(table, recurring, token)
        settled.succeeded = leases.finish_many(table, successes, token, Status.SUCCESS, now)
        if settled.succeeded < len(successes):
            settled.lost += _not_finished(
                table, [job_id for job_id, _ in successes], Status.SUCCESS, token
            )
        for outcome in outcomes:
            if outcome.status == Status.FAILED:
                _write_failure(table, outcome, token, settled)
            elif outcome.status == Status.PENDING:
                _write_deferral(table, outcome, token, settled)
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
    try:
        run_at = next_due(job, now)
    except BadInput as exc:  # a schedule another writer left: the series cannot go on
        logger.error("job %d not re-armed: %s", job.id, exc)
        return None
    next_id = queries.insert_next_occurrence(table, job, run_at, now)
    return None if next_id is None else (next_id, run_at)


def _write_failure(table: Table, outcome: Outcome, token: str | None, settled: Settled) -> None:
    job = outcome.job
    if not leases.finish(table, job.id, token, Status.FAILED, outcome.message, outcome.finished_at):
        settled.lost.append(job.id)
        return
    settled.failed += 1
    if outcome.next_in is not None:
        run_at = outcome.finished_at + outcome.next_in
        settled.retries.append(
            (queries.insert_retry(table, job, run_at, outcome.finished_at), run_at)
        )


def _write_deferral(table: Table, outcome: Outcome, token: str | None, settled: Settled) -> None:
    """The same row, the same attempt, due again later: RetryLater counts no failure, only
    the deferral itself, so that endless deferring is bounded (calls.py)."""
    job = outcome.job
    assert outcome.next_in is not None
    run_at = outcome.finished_at + outcome.next_in
    policy = read_policy(job.retry_policy).deferred().to_text()
    if leases.defer(table, job.id, token, run_at, outcome.message, policy, outcome.finished_at):
        settled.deferred.append((job.id, run_at))
    else:
        settled.lost.append(job.id)


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
