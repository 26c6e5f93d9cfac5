"""QueueReads: what Queue answers without changing anything (a job, its chain, the counts, a
page of rows, the next jobs due, the metrics), apart from queue.py, which writes and runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .config import Settings, validate_queue_name
from .errors import BadInput, JobNotFound
from .jobs.spec import job_view, row_view
from .store.backend_errors import backend_errors
from .store.index.keys import MAX_ID
from .store.index.parts import Index
from .store.table import queries
from .store.table.database import ping
from .store.table.model import JobRow, Table
from .worker.report import RunReport

if TYPE_CHECKING:  # loaded by the methods that use them, so `delayq run` does without
    from .ops.overview import JobFilter, StatusReport
    from .ops.upcoming import Upcoming

MAX_PAGE = 10_000  # rows `list` or `peek` shows at once; more is a page of its own


class QueueReads:
    """The reading half of Queue; Queue sets these attributes."""

    settings: Settings
    table: Table
    index: Index

    @backend_errors
    def reach(self) -> None:
        """Ask both servers once: BackendUnavailable if either does not answer."""
        self.index.client.ping()
        ping(self.table)

    @backend_errors
    def show(self, job_id: int) -> dict[str, Any]:
        """The contract's view of one job (jobspec.job_view)."""
        return job_view(self._get(job_id))

    @backend_errors
    def schedule_of(self, job_id: int) -> str | None:
        """The cron expression and zone the job recurs by, or None."""
        return self._get(job_id).schedule

    @backend_errors
    def history(self, job_id: int) -> list[dict[str, Any]]:
        """Every attempt in the job's retry chain, oldest first."""
        return [job_view(row) for row in queries.chain_of(self.table, self._get(job_id))]

    @backend_errors
    def status(self, *, now: float | None = None) -> StatusReport:
        """Every queue's counts, backlog and next due time, and what the last run recorded."""
        from .ops import overview

        return overview.status_report(self.table, self.index, self._now(now))

    @backend_errors
    def list_jobs(
        self,
        filters: JobFilter,
        *,
        limit: int = 50,
        before_id: int | None = None,
        now: float | None = None,
    ) -> list[dict[str, Any]]:
        """Rows matching `filters`, newest first, as `list --json` shows them."""
        if not 1 <= limit <= MAX_PAGE:
            raise BadInput(f"--limit must be between 1 and {MAX_PAGE}")
        if before_id is not None and not 1 <= before_id <= MAX_ID:
            raise BadInput(f"--before-id must be between 1 and {MAX_ID}")
        from .ops import overview

        rows = overview.list_jobs(self.table, filters, self._now(now), limit, before_id)
        return [row_view(row) for row in rows]

    @backend_errors
    def peek(self, count: int = 10, *, queues: Sequence[str] | None = None) -> list[Upcoming]:
        """The next `count` jobs due across `queues` (default all), without claiming: those on
        the schedule, those due beyond its horizon (in the table alone), and those added with
        `using=` that a run has not indexed yet."""
        if not 1 <= count <= MAX_PAGE:
            raise BadInput(f"peek needs a count between 1 and {MAX_PAGE}")
        # None: every queue the registry knows, and always the default one, whose schedule's
        # key is the contract's, so producers ZADD it directly.
        names = [validate_queue_name(name) for name in queues] if queues else None
        from .ops import upcoming

        return upcoming.next_scheduled(self.table, self.index, names, count)

    @backend_errors
    def metrics(self, report: RunReport | None = None) -> bytes:
        """The Prometheus exposition (`delayq metrics`); with a run's report, its figures too."""
        from .ops.metrics import exposition  # prometheus_client only when asked for

        return exposition(self.table, self.index, self.index.clock.now(), report)

    @backend_errors
    def due_count(self, queues: Sequence[str] | None = None) -> int:
        """How many jobs are due now on the schedule of `queues` (default: all)."""
        names = list(queues) if queues else self.index.registry.known_queues()
        return self.index.schedule.due_count(names, self.index.clock.now())

    def _now(self, now: float | None) -> float:
        return self.index.clock.now() if now is None else now

    def _get(self, job_id: int) -> JobRow:
        # An id no column can hold names no job; asked as it is, the database would fail.
        job = queries.get_job(self.table, job_id) if 0 < job_id <= MAX_ID else None
        if job is None:
            raise JobNotFound(f"no job with id {job_id}")
        return job
