"""Queue: the one façade over table + index that the CLI, the web page and application code
call — the whole public API in one class. Each method checks what it is given before anything
is written, turns database and Redis errors into BackendUnavailable (one clear failure), and
hands the work to the part that owns it:

- adding jobs: jobs/adding.py (`Adder`); changing and finding jobs added: jobs/changes.py;
- reading them: the table face (store/table/) and the operator's reads (ops/);
- pausing and limiting queues: flow/settings.py;
- running jobs: worker/runners.py, with the options worker/options.py declares and checks;
- setting up and tidying: ops/setup.py, ops/maintenance.py, worker/reconciling.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .base.durations import Duration, Instant, parse_duration
from .config import DEFAULT_QUEUE, Settings, redact_url
from .flow import settings as flow_settings
from .jobs import changes
from .jobs.adding import Adder
from .jobs.spec import JobSpec, job_view, run_at_of
from .store.backend_errors import backend_errors
from .store.index import Index
from .store.table import (
    UNCHANGED,
    Chains,
    Database,
    QueueFlow,
    Status,
    Table,
    Unchanged,
    bound_replies,
    close_connection,
    ping,
)
from .worker.allowlist import check_allowlist
from .worker.interrupts import GracefulStop
from .worker.liveness import Liveness
from .worker.options import RunArguments, RunOptions
from .worker.report import OutcomeCallback, RunReport
from .worker.runners import Runners

if TYPE_CHECKING:
    # For the type checker alone: typing.Unpack is new in Python 3.11.
    from typing_extensions import Unpack

    # Loaded by the methods that use them, so `delayq run` does without.
    from .ops.maintenance import RequeueResult
    from .ops.overview import JobFilter, StatusReport
    from .ops.upcoming import Upcoming
    from .worker.reconciling import Reconciled


class Queue:
    """Add, cancel, retry, inspect, pause and run delayed jobs."""

    def __init__(self, settings: Settings, db: Database, index: Index) -> None:
        self.settings = settings
        self.db = db  # for a caller's own SQL on delayq's database; delayq's is the table's
        self.table = Table(db)
        self.index = index
        # Each call hands the parts the settings as they are then: a caller may replace them.
        self._adder = Adder(self.table, index, settings.redis_url)
        self._runners = Runners(self.table, index)

    # Setting up.

    @backend_errors
    def init(self, *, schedule_lost: bool = False, now: float | None = None) -> list[str]:
        """Create the table or bring an existing one (the seed's, an older version's) up to
        date, and index every pending job; one line per change made. `schedule_lost`: upgrade
        the seed's table though Redis holds none of its due times (its waiting jobs become
        missed)."""
        from .ops.setup import initialise

        clock = self.index.clock.now if now is None else lambda: now
        return initialise(self.table, self.index, clock, schedule_lost)

    @backend_errors
    def reach(self) -> None:
        """Ask both servers once: BackendUnavailable if either does not answer."""
        self.index.client.ping()
        ping(self.table)

    def describe(self) -> str:
        """Where this queue keeps its data, with passwords hidden."""
        return (
            f"database {redact_url(self.settings.database_url)}, "
            f"redis {redact_url(self.settings.redis_url)}"
        )

    # Adding and changing jobs.

    @backend_errors
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
        return self._adder.add(
            self.settings, spec, replace=replace, check=check, now=now, using=using
        )

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
        return self._adder.add_many(self.settings, specs, check=check, now=now, using=using)

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
        key = changes.check_cancel(job_id, ext, queue)
        return changes.cancel(self.table, self.index, job_id, key, queue, self._now(now))

    @backend_errors
    def retry(self, job_id: int, *, delay: Duration = 0.0, now: float | None = None) -> int:
        """Run the job's chain again after `delay` seconds; the id of its pending attempt: the
        pending one moved ("retry now"), or a new one for a finished chain. Refused while an
        attempt runs; concurrent retries take the chain's lock in turn, leaving one pending."""
        now = self._now(now)
        run_at = run_at_of(delay, None, now)
        return changes.retry(self.settings, self.table, self.index, job_id, run_at, now)

    # Reading jobs and queues.

    @backend_errors
    def show(self, job_id: int) -> dict[str, Any]:
        """The contract's view of one job (jobs/spec.py's job_view)."""
        return job_view(changes.existing(self.table, job_id))

    @backend_errors
    def schedule_of(self, job_id: int) -> str | None:
        """The cron expression and zone the job recurs by, or None."""
        return changes.existing(self.table, job_id).schedule

    @backend_errors
    def history(self, job_id: int) -> list[dict[str, Any]]:
        """Every attempt in the job's retry chain, oldest first."""
        first = changes.existing(self.table, job_id)
        return [job_view(row) for row in Chains(self.table).chain_of(first)]

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
        from .ops import overview

        overview.check_page(limit, before_id)
        return overview.list_views(self.table, filters, self._now(now), limit, before_id)

    @backend_errors
    def peek(self, count: int = 10, *, queues: Sequence[str] | None = None) -> list[Upcoming]:
        """The next `count` jobs due across `queues` (default all), without claiming: those on
        the schedule, those due beyond its horizon (in the table alone), and those added with
        `using=` that a run has not indexed yet."""
        from .ops import upcoming

        names = upcoming.check_peek(count, queues)
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

    # Pausing and limiting queues.

    @backend_errors
    def pause(self, *names: str, now: float | None = None) -> dict[str, QueueFlow]:
        """Stop every run, on every host, from starting the jobs of queues `names`: no claim
        takes them once this returns, and a run holding some it has not started hands them
        back within a second. Jobs running finish; adds and cancels go on; a queue paused
        already stays paused since its first pause. Its due jobs are never missed while it
        is paused. Returns each queue's settings."""
        return flow_settings.pause(self.table, self.index, names, now)

    @backend_errors
    def resume(self, *names: str, now: float | None = None) -> dict[str, QueueFlow]:
        """Let runs start the jobs of queues `names` again; the overdue window of a job that
        fell due while its queue was paused counts from now. A queue not paused is left as it
        is. Returns each queue's settings."""
        return flow_settings.resume(self.table, self.index, names, now)

    @backend_errors
    def limit(
        self,
        *names: str,
        rate: str | None | Unchanged = UNCHANGED,
        concurrency: int | None | Unchanged = UNCHANGED,
        now: float | None = None,
    ) -> dict[str, QueueFlow]:
        """Limit queues `names` across every run on every host together: to at most `rate`
        job starts in any window of its period ("10/s", "600/m", "36000/h"), and to at most
        `concurrency` of their jobs running at once (4). None lifts that limit; one not given
        stays as it is. A job a limit holds back stays pending in its place and starts as
        soon as the limit allows. Returns each queue's settings."""
        return flow_settings.limit(self.table, self.index, names, rate, concurrency, now)

    @backend_errors
    def limited(self) -> dict[str, QueueFlow]:
        """{queue: its settings} of every queue with a rate or concurrency limit, as the
        table holds them."""
        return flow_settings.limited(self.table)

    @backend_errors
    def paused(self) -> dict[str, QueueFlow]:
        """{queue: its settings} of every paused queue, as the table holds them."""
        return flow_settings.paused(self.table)

    @backend_errors
    def unknown(self, names: Sequence[str]) -> list[str]:
        """Those of `names` no job has used and no pause has named: neither registered, nor
        holding a schedule entry or a pending row, nor in the settings table. A typo, most
        likely; or a queue whose first job is yet to come."""
        return flow_settings.unknown(self.table, self.index, names)

    # Running jobs.

    @backend_errors
    def serve(self, queues: Iterable[str]) -> list[str]:
        """Note `queues` as queues a run serves, so that `status` lists them; return those no
        job has used yet: neither registered nor holding a schedule entry (a producer of its
        own may ZADD without registering). Such a name may be a typo, or a queue whose jobs
        come later, so the caller warns and runs on."""
        return self.index.served(queues)

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
        return self._runners.run(
            self.settings, options, now=now, on_outcome=on_outcome, stop=stop, liveness=liveness
        )

    # Tidying.

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
        bound_replies(self.table)  # its statements are short: none waits for ever
        return maintenance.purge_before(self.table, statuses, before, dry_run, counted)

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
        self._runners.close()
        close_connection(self.table)
        self.index.client.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _now(self, now: float | None) -> float:
        return self.index.clock.now() if now is None else now
