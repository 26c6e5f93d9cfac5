"""Queue: the one façade over table + index that the CLI and application code both call. It
checks input before anything is written and turns database and Redis errors into
BackendUnavailable, so callers see one clear failure."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .base.durations import Duration, Instant, parse_duration
from .config import DEFAULT_QUEUE, Settings, redact_url, validate_queue_name
from .errors import BadInput
from .jobs.spec import JobSpec, check_key, run_at_of, to_row
from .pausing import QueuePausing
from .store.backend_errors import backend_errors
from .store.index.parts import Index
from .store.index.schedule import packed_by_queue
from .store.producers import Producer
from .store.table import chains, counts, inserts, locks, queries, queue_settings, transactions
from .store.table.database import Database, bound_replies, close_connection
from .store.table.model import TABLE_NAME, Status, Table, create_tables, utc_stamp
from .store.table.params import read_call
from .store.table.upgrade import upgrade_table
from .worker.allowlist import check_allowlist
from .worker.handlers import locate
from .worker.interrupts import GracefulStop
from .worker.liveness import Liveness
from .worker.options import RunArguments, RunOptions
from .worker.rebuilds import Rebuild
from .worker.report import OutcomeCallback, RunReport
from .worker.runner import Runner

if TYPE_CHECKING:
    # For the type checker alone: typing.Unpack is new in Python 3.11.
    from typing_extensions import Unpack

    # Loaded by the methods that use them, so `delayq run` does without.
    from .ops.maintenance import RequeueResult
    from .ops.overview import JobFilter
    from .worker.reconciling import Reconciled

logger = logging.getLogger(__name__)


class Queue(QueuePausing):
    """Add, cancel, retry, inspect, pause and run delayed jobs."""

    def __init__(self, settings: Settings, db: Database, index: Index) -> None:
        self.settings = settings
        self.db = db
        self.table = Table(db)
        self.index = index
        self.producer = Producer(self.table, index, settings.redis_url)
        # The runner of the jobs this Queue runs, made by the first run and kept until `close`:
        # the handlers' event loop and clients live as long as it does.
        self._runner: Runner | None = None
        self._running = threading.Lock()

    @backend_errors
    def serve(self, queues: Iterable[str]) -> list[str]:
        """Note `queues` as queues a run serves, so that `status` lists them; return those no
        job has used yet: neither registered nor holding a schedule entry (a producer of its
        own may ZADD without registering). Such a name may be a typo, or a queue whose jobs
        come later, so the caller warns and runs on."""
        known = set(self.index.registry.known_queues())
        unused = [
            name
            for name in dict.fromkeys(queues)
            if name not in known and not self.index.schedule.size(name)
        ]
        self.index.registry.register(name for name in queues if name not in known)
        return unused

    @backend_errors
    def init(self, *, schedule_lost: bool = False, now: float | None = None) -> list[str]:
        """Create the table or bring an existing one (the seed's, an older version's) up to
        date, and index every pending job; one line per change made. `schedule_lost`: upgrade
        the seed's table though Redis holds none of its due times (its waiting jobs become
        missed)."""
        clock = self.index.clock.now if now is None else lambda: now
        changes = [f"created table {TABLE_NAME}"]
        if not create_tables(self.table):
            changes = upgrade_table(self.table, self.index, clock(), schedule_lost)
            changes += counts.install(self.table) + queue_settings.install(self.table)
            changes += locks.install(self.table)
        else:  # the counts come with the table; only a failure to keep them is news
            changes += [line for line in counts.install(self.table) if not counts.added(line)]
            queue_settings.install(self.table)
            locks.install(self.table)
        complete = self.index.registry.is_complete()
        # Also raises the horizons that are near, and gives one to a queue that has none.
        count = Rebuild(self.table, self.index).rebuild_all(lambda: None, clock)
        if not complete:
            changes.append(f"built the schedule index from {count} pending job(s)")
        return changes

    def add(
        self,
        class_path: str,
        method: str,
        data: Any = None,
        *,
        delay: Duration | None = None,
        at: Instant | None = None,
        ext: str = "",
        queue: str = DEFAULT_QUEUE,
        timeout: Duration | None = None,
        every: Duration | None = None,
        cron: str | None = None,
        tz: str | None = None,
        retries: int | None = None,
        retry_delays: Sequence[Duration] | None = None,
        replace: bool = False,
        lock: str | None = None,
        check: bool = True,
        now: float | None = None,
        using: Any = None,
    ) -> int:
        """Schedule `class_path.method(data)` after `delay` (seconds, a timedelta or "90s") or
        at `at` (epoch seconds, an aware datetime or ISO 8601 text). `every`: re-arm that long
        after each due time; `cron`: due at each match, read in zone `tz` (default UTC);
        `retries`, `retry_delays`: its retry policy; `replace`: move the pending job with this
        `ext` instead of adding a second one; `lock`: a key ("order:42") that jobs which must
        never run at once share, on any host (they run in due order); `using`: insert on this
        connection, inside its open transaction (see `add_many`). The handler is imported
        now, so a mistyped name fails here; `check=False` skips that, for a producer without
        the handlers' code."""
        spec = JobSpec(
            class_path, method, data, delay, at, ext, queue, timeout, every, cron, tz, retries,
            retry_delays, lock,
        )  # fmt: skip
        if replace:
            if using is not None:
                raise BadInput("replace=True cannot be used with using=: it takes delayq's lock")
            return self._replace(spec, now, check)
        return self.add_many([spec], check=check, now=now, using=using)[0]

    @backend_errors
    def _replace(self, spec: JobSpec, now: float | None, check: bool) -> int:
        if not spec.ext:
            raise BadInput("--replace needs --ext: the key of the job to replace")
        now = self._now(now)
        row = to_row(spec, now, self.settings, set(), check=check)
        new = self.producer.before([spec.queue], now)

        def schedule(replaced: tuple[int, list[int]]) -> None:
            # In the lock: of two replaces, the later one's entry is the one left.
            texts = [packed_by_queue([row], [replaced[0]])]
            self.producer.after(new, texts, [replaced[0]], moved=True)

        job_id, dropped = queries.replace_pending(self.table, row, now, schedule)
        self.index.schedule.remove(spec.queue, dropped)  # cancelled for good: no lock needed
        return job_id

    @backend_errors
    def add_many(
        self,
        specs: Iterable[JobSpec],
        *,
        check: bool = True,
        now: float | None = None,
        using: Any = None,
    ) -> list[int]:
        """Schedule several jobs: one transaction, one Redis round trip per queue; `check` as
        for `add`. `using`: a connection to delayq's database (DB-API, peewee, SQLAlchemy or
        Django) whose open transaction the rows join: they run once it commits, never if it
        rolls back."""
        now = self._now(now)
        located: set[tuple[str, str]] = set()
        stamp = utc_stamp(now)

        def to_rows(part: Sequence[JobSpec]) -> list[dict[str, Any]]:
            return [to_row(spec, now, self.settings, located, stamp, check) for spec in part]

        specs = list(specs)
        if using is not None:  # a run's sweep indexes them once they commit
            return transactions.add_through(self.table, using, to_rows(specs))
        if len(specs) <= 1:
            rows = to_rows(specs)  # checked before the database is touched
            if not rows:
                return []
            new = self.producer.before([rows[0]["queue"]], now)
            ids = [inserts.insert_one(self.table, rows[0])]
            texts = [packed_by_queue(rows, ids)]
        else:
            queues = [validate_queue_name(spec.queue) for spec in specs]
            new = self.producer.before(queues, now)
            # The schedule's entries are packed part by part while the next part is written.
            ids, texts = inserts.insert_many(self.table, specs, to_rows, packed_by_queue)
        self.producer.after(new, texts, ids)
        return ids

    @backend_errors
    def cancel(
        self,
        job_id: int | None = None,
        *,
        ext: str | None = None,
        queue: str | None = None,
        now: float | None = None,
    ) -> int:
        """Cancel one pending job by id, or every pending job with business key `ext`."""
        if (job_id is None) == (ext is None):
            raise BadInput("cancel takes a job id or --ext, not both and not neither")
        key = None if ext is None else check_key(ext)
        if queue is not None:
            validate_queue_name(queue)
        now = self._now(now)
        if key is None:
            job = self._get(job_id or 0)
            targets = [(job.id, job.queue)] if job.status == Status.PENDING else []
        else:
            queries.stop_series(self.table, key, queue)  # first, so no re-arm slips past
            targets = queries.pending_by_ext(self.table, key, queue)
        count = queries.cancel(self.table, [job_id for job_id, _ in targets], now)
        for name in {name for _, name in targets}:
            self.index.schedule.remove(name, [job_id for job_id, q in targets if q == name])
        return count

    @backend_errors
    def retry(self, job_id: int, *, delay: Duration = 0.0, now: float | None = None) -> int:
        """Run the job's chain again after `delay` seconds; the id of its pending attempt: the
        pending one moved ("retry now"), or a new one for a finished chain. Refused while an
        attempt runs; concurrent retries take the chain's lock in turn, leaving one pending."""
        now = self._now(now)
        run_at = run_at_of(delay, None, now)
        job = self._get(job_id)
        call = read_call(job.params, dict(self.settings.php_classes))
        locate(call.class_path, call.method, self.settings.handlers)

        def schedule(attempt: chains.Attempt) -> None:
            # In the lock: retries of a chain reach the index in the order they reach the table.
            self.index.schedule.add(attempt.queue, attempt.id, run_at)
            if attempt.series is not None:
                self.index.schedule.add(attempt.queue, *attempt.series)

        def retried() -> chains.Attempt:
            return chains.retry_chain(self.table, job, run_at, now)

        return chains.under_chain_lock(self.table, job, retried, schedule).id

    def run(
        self,
        *,
        now: float | None = None,
        on_outcome: OutcomeCallback | None = None,
        stop: GracefulStop | None = None,
        liveness: Liveness | None = None,
        **options: Unpack[RunArguments],
    ) -> RunReport:
        """One pass over the due jobs, as `delayq run`, asked what `RunArguments` declares:
        `queues`, `weights` (the batches each queue takes in its turn, default 1), `limit`,
        `since`, `max_seconds`, `concurrency` jobs in flight at once (default
        DELAYQ_CONCURRENCY), `grace` seconds for them to finish on a stop signal; `liveness`:
        the beats a `--processes` parent watches."""
        checked = RunOptions.build(**options)
        return self.run_with(checked, now=now, on_outcome=on_outcome, stop=stop, liveness=liveness)

    def run_loop(
        self,
        *,
        duration: Duration | None = None,
        on_outcome: OutcomeCallback | None = None,
        stop: GracefulStop | None = None,
        liveness: Liveness | None = None,
        **options: Unpack[RunArguments],
    ) -> RunReport:
        """Passes back to back for `duration` seconds (None: until stopped), sleeping until
        the next job is due, as `delayq run --loop`; each pass asked what `run` is."""
        checked = RunOptions.build(loop=True, duration=duration, **options)
        return self.run_with(checked, on_outcome=on_outcome, stop=stop, liveness=liveness)

    @backend_errors
    def run_with(
        self,
        options: RunOptions,
        *,
        now: float | None = None,
        on_outcome: OutcomeCallback | None = None,
        stop: GracefulStop | None = None,
        liveness: Liveness | None = None,
    ) -> RunReport:
        """A pass, or with `options.loop` a loop of passes, as the options ask."""
        check_allowlist(self.settings.handlers)
        bound_replies(self.table)
        if not self._running.acquire(blocking=False):
            # Another thread runs jobs on this Queue now: this call gets a runner of its own,
            # which leaves the `on_shutdown` functions to the Queue's runner.
            runner = Runner(self.settings, self.table, self.index)
            try:
                return runner.run(
                    options, now=now, on_outcome=on_outcome, stop=stop, liveness=liveness
                )
            finally:
                runner.close(shutdown=False)
        try:
            if self._runner is None or self._runner.pid != os.getpid():
                # Made anew in a child forked after a run: the parent's threads are not here.
                self._runner = Runner(self.settings, self.table, self.index)
            return self._runner.run(
                options, now=now, on_outcome=on_outcome, stop=stop, liveness=liveness
            )
        finally:
            self._running.release()

    @backend_errors
    def reconcile(self, on_rows: Callable[[int], None] | None = None) -> Reconciled:
        """Compare index and table both ways: re-index lost pending jobs, drop stale entries.
        `on_rows` is told how many pending rows have been compared, after each batch."""
        from .worker.reconciling import reconcile

        bound_replies(self.table)  # its statements are short: none waits for ever
        return reconcile(self.table, self.index, on_rows or (lambda rows: None))

    @backend_errors
    def purge(
        self,
        older_than: Duration,
        statuses: Sequence[Status] | None = None,
        *,
        dry_run: bool = False,
        now: float | None = None,
        counted: Callable[[int], None] | None = None,
    ) -> int:
        """Delete finished rows last changed more than `older_than` seconds ago; the count,
        told to `counted` batch by batch as it grows."""
        from .ops import maintenance

        before = self._now(now) - parse_duration(older_than, "--older-than")
        statuses = maintenance.PURGEABLE if statuses is None else statuses
        bound_replies(self.table)  # its statements are short: none waits for ever
        if dry_run:
            return maintenance.count_purgeable(self.table, statuses, before, counted)
        return maintenance.purge(self.table, statuses, before, counted=counted)

    @backend_errors
    def requeue(
        self, filters: JobFilter, *, dry_run: bool = False, now: float | None = None
    ) -> RequeueResult:
        """`retry` every chain whose latest attempt matches `filters`, due now."""
        from .ops import maintenance

        now = self._now(now)
        return maintenance.requeue(self.table, self.index, filters, self.settings, now, dry_run)

    def close(self) -> None:
        """End the runner, if this Queue ran jobs (its threads, the handlers' `on_shutdown`
        functions and their event loop), and close the database connection and the Redis
        pool."""
        if self._runner is not None and self._runner.pid == os.getpid():
            self._runner.close()
        self._runner = None
        close_connection(self.table)
        self.index.client.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self) -> str:
        """Where this queue keeps its data, with passwords hidden."""
        return (
            f"database {redact_url(self.settings.database_url)}, "
            f"redis {redact_url(self.settings.redis_url)}"
        )
