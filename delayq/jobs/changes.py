"""Changes to jobs already added, by id or by business key: finding one, cancelling the
pending ones, and running a chain again (`retry`), each written to the table first and then
to the schedule.
"""

from __future__ import annotations

from ..config import Settings, validate_queue_name
from ..errors import BadInput, JobNotFound
from ..store.index import MAX_ID, Index
from ..store.table import Attempt, Chains, JobRow, Jobs, Status, Table, read_call
from ..worker.handlers import locate
from .spec import check_key


def existing(table: Table, job_id: int) -> JobRow:
    """The job with `job_id`, or JobNotFound."""
    # An id no column can hold names no job; asked as it is, the database would fail.
    job = Jobs(table).get_job(job_id) if 0 < job_id <= MAX_ID else None
    if job is None:
        raise JobNotFound(f"no job with id {job_id}")
    return job


def check_cancel(job_id: int | None, ext: str | None, queue: str | None) -> str | None:
    """The business key to cancel by (None: by id), once the arguments make sense."""
    if (job_id is None) == (ext is None):
        raise BadInput("cancel takes a job id or --ext, not both and not neither")
    key = None if ext is None else check_key(ext)
    if queue is not None:
        validate_queue_name(queue)
    return key


def cancel(
    table: Table, index: Index, job_id: int | None, key: str | None, queue: str | None, now: float
) -> int:
    """Cancel the pending job `job_id`, or every pending job with business key `key` (in
    `queue`, or any); how many were cancelled. A series stops first, so no re-arm slips past."""
    if key is None:
        job = existing(table, job_id or 0)
        targets = [(job.id, job.queue)] if job.status == Status.PENDING else []
    else:
        Chains(table).stop_series(key, queue)
        targets = Jobs(table).pending_by_ext(key, queue)
    count = Jobs(table).cancel([job_id for job_id, _ in targets], now)
    for name in {name for _, name in targets}:
        index.schedule.remove(name, [job_id for job_id, q in targets if q == name])
    return count


def retry(
    settings: Settings, table: Table, index: Index, job_id: int, run_at: float, now: float
) -> int:
    """Run the job's chain again at `run_at`; the id of its pending attempt. Its handler must
    still resolve; concurrent retries of a chain take its mutex in turn."""
    job = existing(table, job_id)
    call = read_call(job.params, dict(settings.php_classes))
    locate(call.class_path, call.method, settings.handlers)

    def schedule(attempt: Attempt) -> None:
        # Under the mutex: retries of a chain reach the index in the order they reach the table.
        index.schedule.add(attempt.queue, attempt.id, run_at)
        if attempt.series is not None:
            index.schedule.add(attempt.queue, *attempt.series)

    def retried() -> Attempt:
        return Chains(table).retry_chain(job, run_at, now)

    return Chains(table).under_chain_mutex(job, retried, schedule).id
