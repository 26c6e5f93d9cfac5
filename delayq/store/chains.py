"""Retry chains: a first attempt and the retries linked to it by chain_id, and the one rule a
manual retry follows — a chain has at most one pending attempt.

Under the chain's lock, concurrent `retry` and `requeue` calls of one chain, from any
process, queue up and each sees what the previous one wrote. The index is the caller's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import BadInput
from .queries import exclusive, insert_retry
from .table import Job, Status, Table, status_word, utc_stamp


@contextmanager
def chain_locked(table: Table, job: Job) -> Iterator[None]:
    """Hold the lock of `job`'s chain and a transaction for what is written under it."""
    with exclusive(table, f"chain:{job.chain_id or job.id}"):
        yield


def retry_chain(
    table: Table, job: Job, run_at: float, now: float, repeating: int | None = None
) -> tuple[int, str]:
    """(id, queue) of the chain's one pending attempt, due at `run_at`; call under
    `chain_locked`. A pending latest attempt moves ("retry now"), a finished one gets a new
    attempt. BadInput while an attempt runs, or when `repeating` (the attempt the caller
    meant to repeat) is no longer the latest: another requeue got there first."""
    Job = table.model
    root = job.chain_id or job.id
    chain = Job.select().where((Job.id == root) | (Job.chain_id == root))
    latest = chain.order_by(Job.id.desc()).first() or job
    if latest.status == Status.PENDING:
        still_pending = (Job.id == latest.id) & (Job.status == Status.PENDING)
        moved = Job.update(run_at=run_at, modified=utc_stamp(now)).where(still_pending).execute()
        # MySQL counts changed rows, not matched ones: a retry repeating the previous one's
        # values changes nothing, and the row is still ours to report.
        if moved or Job.select(Job.id).where(still_pending).exists():
            return latest.id, latest.queue
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
    return insert_retry(table, latest, run_at, now), latest.queue
