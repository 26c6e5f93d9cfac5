"""What a call of a handler came to — the one record a finished call travels in, through the
journal to the table — and the transaction that writes outcomes there, each a guarded UPDATE
(RUNNING under this run's lease token): never written over the run that took a job over.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from operator import iadd

from ...errors import BadInput
from ..index.tallies import UNNAMED, handler_label
from .chains import Chains
from .database import run_reconnecting
from .leases import Leases
from .model import ClaimedJob, Status, Table, failure_parts
from .policies import read_policy
from .recurrence import is_recurring, next_due

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """One finished call: succeeded, failed, or deferred by RetryLater (status PENDING)."""

    job: ClaimedJob
    status: Status
    message: str
    finished_at: float
    # Seconds until the retry, or until a deferred attempt is due again; None: there is none
    # (success, NoRetry, a refused handler, retries used up).
    next_in: float | None = None
    # For the report and the metrics only: an outcome read back from the journal has none.
    class_path: str = UNNAMED
    method: str = UNNAMED
    duration: float = 0.0
    lateness: float = 0.0
    error: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def attempt(self) -> int:
        return self.job.retry_times

    @property
    def ext(self) -> str | None:
        return self.job.ext_string

    @property
    def call_name(self) -> str:
        """ "class.method" as the row names them, for output; UNNAMED alone for a row naming
        neither."""
        if self.class_path == UNNAMED and self.method == UNNAMED:
            return UNNAMED
        return f"{self.class_path}.{self.method}"

    @property
    def handler(self) -> str:
        """The metrics' label: "class.method", escaped; UNNAMED for a row naming neither."""
        return handler_label(self.class_path, self.method)

    @property
    def will_retry(self) -> bool:
        return self.status == Status.FAILED and self.next_in is not None

    @property
    def word(self) -> str:
        """The outcome's word in output: a status, or `deferred` for a RetryLater."""
        return "deferred" if self.status == Status.PENDING else self.status.word

    @property
    def summary(self) -> str:
        """The message on one line: a failure's head line without its traceback."""
        return self.failure[0] or ""

    @property
    def failure(self) -> tuple[str | None, str | None]:
        """(head line, traceback) of a failure; (message, None) for any other outcome."""
        return failure_parts(self.message) if self.status == Status.FAILED else (self.message, None)

    def to_record(self) -> str:
        """The outcome as the journal holds it until the table has it."""
        if not self.message:  # most jobs: written without the JSON encoder, same text
            next_in = "null" if self.next_in is None else repr(self.next_in)
            return f'[{int(self.status)}, "", {next_in}, {self.finished_at!r}]'
        return json.dumps([int(self.status), self.message, self.next_in, self.finished_at])

    @classmethod
    def from_record(
        cls, job: ClaimedJob, record: str, retry_in: Callable[[ClaimedJob], float | None]
    ) -> Outcome:
        """An outcome read back from the journal; `retry_in` gives the retry's delay of a
        failure an earlier version journaled with only whether to retry."""
        status, message, next_in, finished_at = json.loads(record)
        if isinstance(next_in, bool):
            next_in = retry_in(job) if next_in else None
        return cls(
            job=job,
            status=Status(status),
            message=message,
            next_in=next_in,
            finished_at=float(finished_at),
        )


@dataclass
class Written:
    """What one write of outcomes did: counts for the report, and the rows to schedule."""

    succeeded: int = 0
    failed: int = 0
    retries: list[tuple[int, float]] = field(default_factory=list)
    occurrences: list[tuple[int, float]] = field(default_factory=list)  # recurring re-arms
    deferred: list[tuple[int, float]] = field(default_factory=list)  # RetryLater, same rows
    lost: list[int] = field(default_factory=list)  # outcomes whose lease had been taken over

    def merge(self, other: Written) -> Written:
        for name in (f.name for f in fields(self)):
            setattr(self, name, iadd(getattr(self, name), getattr(other, name)))
        return self

    @property
    def scheduled(self) -> list[tuple[int, float]]:
        """(id, due) of every row to put on the schedule."""
        return self.retries + self.occurrences + self.deferred


class Outcomes:
    """Outcomes written to the table: each a guarded UPDATE of a row this run holds, with the
    retry or the next occurrence it brings, in one transaction per batch."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def write_outcomes(self, outcomes: Sequence[Outcome], token: str | None) -> Written:
        """One transaction: successes in one UPDATE, each failure with its retry row, each
        recurring job's next occurrence; run again on a fresh connection if MySQL dropped it."""
        if not outcomes:
            return Written()
        return run_reconnecting(self.table.db, lambda: _write_outcomes(self.table, outcomes, token))

    def mark_missed_and_rearm(
        self, ids: Sequence[int], token: str, message: str, now: float
    ) -> tuple[list[ClaimedJob], list[tuple[int, float]]]:
        """One transaction: the PENDING rows among `ids` turned MISSED with `message`, and the
        next occurrence of each recurring one inserted; (the jobs it turned, (id, due) of each
        occurrence)."""

        def mark() -> tuple[list[ClaimedJob], list[tuple[int, float]]]:
            with self.table.db.atomic():
                missed = Leases(self.table).mark_missed(ids, token, message, now)
                # A series goes on past a missed occurrence, from the next period after now.
                occurrences = [self.rearm(job, now) for job in missed if is_recurring(job)]
                return missed, [occurrence for occurrence in occurrences if occurrence]

        # Run again as a deadlock victim, which was rolled back whole; not after a lost
        # connection: had that try committed, the second would re-arm the series again.
        return run_reconnecting(self.table.db, mark, reconnect=False)

    def fail_and_rearm(
        self, job: ClaimedJob, token: str | None, message: str, now: float
    ) -> tuple[bool, tuple[int, float] | None]:
        """One transaction: `job`, held under `token`, FAILED with `message`, and if it recurs its
        next occurrence inserted; (whether the lease was still held, (id, due) of the occurrence).
        Nothing is written when another run took the job over."""

        def fail() -> tuple[bool, tuple[int, float] | None]:
            with self.table.db.atomic():
                if not Leases(self.table).finish(job.id, token, Status.FAILED, message, now):
                    return False, None
                # A recurring series goes on past this occurrence, as past a failed one.
                return True, self.rearm(job, now) if is_recurring(job) else None

        # The transaction is guarded by token, so a deadlock victim's second try is safe.
        return run_reconnecting(self.table.db, fail)

    def rearm(self, job: ClaimedJob, now: float) -> tuple[int, float] | None:
        """Insert the next occurrence of recurring `job`: (id, due), or None if its series was
        stopped. Call it in the transaction recording `job`'s outcome: that write's guard makes
        a replayed commit or a second recovery re-arm nothing."""
        try:
            run_at = next_due(job, now)
        except BadInput as exc:  # a schedule another writer left: the series cannot go on
            logger.error("job %d not re-armed: %s", job.id, exc)
            return None
        next_id = Chains(self.table).insert_next_occurrence(job, run_at, now)
        return None if next_id is None else (next_id, run_at)


def _write_outcomes(table: Table, outcomes: Sequence[Outcome], token: str | None) -> Written:
    written = Written()
    now = max(outcome.finished_at for outcome in outcomes)
    successes = [(o.job.id, o.message) for o in outcomes if o.status == Status.SUCCESS]
    with table.db.atomic():
        # Only series this transaction records an occurrence of re-arm: a replay after a
        # commit whose reply was lost holds none. A deferred occurrence re-arms when it runs.
        recurring = [
            o.job.id for o in outcomes if is_recurring(o.job) and o.status != Status.PENDING
        ]
        held = Leases(table).held_ids(recurring, token, lock=True) if recurring else set()
        written.succeeded = Leases(table).finish_many(successes, token, Status.SUCCESS, now)
        if written.succeeded < len(successes):
            written.lost += _not_succeeded(table, [job_id for job_id, _ in successes], token)
        for outcome in outcomes:
            if outcome.status == Status.FAILED:
                _write_failure(table, outcome, token, written)
            elif outcome.status == Status.PENDING:
                _write_deferral(table, outcome, token, written)
        lost = set(written.lost)
        for outcome in outcomes:
            if outcome.job.id in held and outcome.job.id not in lost:
                # After success and failure alike: a timer that stopped at its first failure
                # would die silently. A failed occurrence still gets its retries as one-offs.
                occurrence = Outcomes(table).rearm(outcome.job, outcome.finished_at)
                if occurrence is not None:
                    written.occurrences.append(occurrence)
    return written


def _write_failure(table: Table, outcome: Outcome, token: str | None, written: Written) -> None:
    job = outcome.job
    if not Leases(table).finish(job.id, token, Status.FAILED, outcome.message, outcome.finished_at):
        written.lost.append(job.id)
        return
    written.failed += 1
    if outcome.next_in is not None:
        run_at = outcome.finished_at + outcome.next_in
        retry_id = Chains(table).insert_retry(job, run_at, outcome.finished_at)
        written.retries.append((retry_id, run_at))


def _write_deferral(table: Table, outcome: Outcome, token: str | None, written: Written) -> None:
    """The same row, the same attempt, due again later: RetryLater counts no failure, only
    the deferral itself, so that endless deferring is bounded."""
    job = outcome.job
    assert outcome.next_in is not None
    run_at = outcome.finished_at + outcome.next_in
    policy = read_policy(job.retry_policy).deferred().to_text()
    if Leases(table).defer(job.id, token, run_at, outcome.message, policy, outcome.finished_at):
        written.deferred.append((job.id, run_at))
    else:
        written.lost.append(job.id)


def _not_succeeded(table: Table, ids: list[int], token: str | None) -> list[int]:
    """Those of `ids` this run did not mark succeeded, told by the token a finished row
    keeps: a run that took a job over records the same status, and its outcome taken for
    ours would re-arm a recurring job a second time."""
    Job = table.model
    held = Job.lease_token.is_null() if token is None else Job.lease_token == token
    query = Job.select(Job.id).where(Job.id.in_(ids), Job.status == Status.SUCCESS, held)
    done = set(query.tuples())
    return [job_id for job_id in ids if (job_id,) not in done]
