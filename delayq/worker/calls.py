"""Calling one handler: resolve `class.method` once per runner process, call it with the job's
data under its time limit and the job's context, and turn whatever happened into an Outcome.
The one place that catches what a handler throws: however bad, it is the job's failure, not
the run's. A handler that forks makes a child that is a copy of the runner, with its batch,
its leases and its connections, and must never carry on as one: wherever control comes back
to delayq from a handler, a process whose pid is not the runner's leaves at once.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from typing import Any

from .. import context
from ..base.durations import FURTHEST_AHEAD, format_delta, seconds_of, shown
from ..config import Settings, hide_secrets
from ..errors import BadInput, RetryLater
from ..store.table import TEXT_MAX, ClaimedJob, Outcome, Status, read_call, storable
from . import interrupts
from .eventloop import EventLoopThread, under_limit
from .handlers import Handler, HandlerName, handler_of, resolve
from .hooks import FailureReporter
from .interrupts import RUN_STOPS, JobTimeout
from .report import OutcomeCallback
from .retry import (
    MAX_DEFERRALS,
    after_deferral,
    after_failure,
    may_retry_raised,
    may_retry_refused,
)
from .shutdown import run_shutdown_functions
from .tracebacks import describe, describe_with_traceback

logger = logging.getLogger(__name__)


class Caller:
    """Calls the handlers of a runner process, on the main thread one at a time or in its
    pool. It lives as long as the runner: the handlers it resolved and the event loop of
    async handlers serve every pass, so a client a handler keeps between calls stays usable.
    A pass lends it its clock, its callback and whether SIGALRM may stop a handler
    (`serving`)."""

    def __init__(self, settings: Settings, reporters: tuple[FailureReporter, ...]) -> None:
        self.allowed = settings.handlers
        self.php_classes = dict(settings.php_classes)  # PHP producers' class names
        self.timeout = settings.timeout  # for jobs that set none of their own
        self.secret_urls = (settings.database_url, settings.redis_url)
        self.reporters = reporters  # told of each failed attempt once it is recorded
        self.pid = os.getpid()  # the runner's: a handler's forked child is any other
        self.handlers: dict[HandlerName, Handler] = {}
        # Handlers that could not be resolved, asked again each pass: a deploy may add them.
        self.refused: dict[HandlerName, BadInput] = {}
        self._loop: EventLoopThread | None = None  # started by the first async handler
        self._loop_lock = threading.Lock()
        # The pass being served (`serving`).
        self.clock: Callable[[], float] = time.time
        self.time_limits = False  # whether SIGALRM can stop a handler here
        self.on_outcome: OutcomeCallback | None = None

    @contextmanager
    def serving(
        self, clock: Callable[[], float], time_limits: bool, on_outcome: OutcomeCallback | None
    ) -> Iterator[Caller]:
        """Call handlers for one pass: its clock for the outcomes' times, whether its main
        thread enforces time limits with SIGALRM, and its callback for each outcome."""
        self.clock, self.time_limits, self.on_outcome = clock, time_limits, on_outcome
        self.refused.clear()
        try:
            yield self
        finally:
            self.time_limits, self.on_outcome = False, None

    def limit_of(self, job: ClaimedJob) -> float:
        """The job's time limit in seconds."""
        return job.timeout or self.timeout

    def close(self, shutdown: bool = True) -> None:
        """The runner ends: run the `on_shutdown` functions if `shutdown` (async ones on the
        handlers' event loop), then stop that loop."""
        if shutdown:
            run_shutdown_functions(self._event_loop)
        if self._loop is not None:
            self._loop.close()

    def execute(self, job: ClaimedJob) -> Outcome:
        """Call the job's handler; never raises for what the handler or the job's params do."""
        started = time.monotonic()
        try:
            call, handler, data = self._resolve(job)
        except BadInput as exc:
            # A refused job is named as its row names it: what the operator must fix.
            retry = may_retry_refused(exc)
            return self._failed(job, self._named(job), started, str(exc), retry)
        else:
            return self._call(job, call, handler, data, started)
        finally:  # in a child the handler forked (even at import), nothing more happens
            leave_if_forked(self.pid)

    def coroutine_for(self, job: ClaimedJob) -> Coroutine[Any, Any, Outcome] | None:
        """The job's call as a coroutine for the run's event loop when its handler is an
        `async def`, holding no thread while it awaits; None when `execute` must call it."""
        started = time.monotonic()
        try:
            call, handler, data = self._resolve(job)
        except BadInput:
            return None
        if not inspect.iscoroutinefunction(handler):
            return None
        return self._call_on_loop(job, call, started, partial(handler, data))

    def event_loop(self) -> asyncio.AbstractEventLoop:
        """The runner's event loop, started on first use."""
        return self._event_loop().loop

    async def _call_on_loop(
        self,
        job: ClaimedJob,
        call: HandlerName,
        started: float,
        awaitable: Callable[[], Awaitable[Any]],
    ) -> Outcome:
        """An async handler's call, as a task on the loop: `awaitable()` is cancelled at its
        time limit as arq does, and whatever it raises, BaseException included, fails only
        the job (raised inside a task, KeyboardInterrupt would end the loop)."""
        limit = self.limit_of(job)
        context.running(_context_of(job))  # a task runs in a context of its own
        try:
            message = _short_result(await under_limit(awaitable(), limit))
            return self._outcome(job, call, started, Status.SUCCESS, message)
        except BaseException as exc:  # noqa: BLE001 - a handler's error never stops the run
            return self._raised(job, call, started, exc, limit)
        finally:  # a child the handler forked on the loop's thread would serve the loop
            leave_if_forked(self.pid)

    def _call(
        self, job: ClaimedJob, call: HandlerName, handler: Handler, data: Any, started: float
    ) -> Outcome:
        limit = self.limit_of(job)
        token = context.running(_context_of(job))
        try:
            if self.time_limits:
                interrupts.arm(limit)
            result = handler(data)
            # An async def handler: called on the run's loop (most results are None: no check).
            if result is not None and inspect.isawaitable(result):
                return self._event_loop().run(
                    self._call_on_loop(job, call, started, lambda: result)
                )
            # Under the time limit still: a result's __repr__ may be as hostile as its handler.
            message = _short_result(result)
        except RUN_STOPS:  # the run's own signals: they stop the run, not fail the job
            raise
        except BaseException as exc:  # a handler's error, even SystemExit, never stops the run
            return self._raised(job, call, started, exc, limit)
        finally:
            if self.time_limits:
                interrupts.disarm()
            context.finished(token)
        return self._outcome(job, call, started, Status.SUCCESS, message)

    def _event_loop(self) -> EventLoopThread:
        with self._loop_lock:  # the pool's threads may meet their first async handler at once
            if self._loop is None:
                self._loop = EventLoopThread()
            return self._loop

    def _resolve(self, job: ClaimedJob) -> tuple[HandlerName, Handler, Any]:
        """The job's (class, method), handler and data; BadInput if it cannot be called."""
        class_path, method, data = read_call(job.params, self.php_classes)
        call = (class_path, method)
        found = self.handlers.get(call)
        if found is None:
            if call in self.refused:
                raise self.refused[call]
            try:
                found = self.handlers[call] = resolve(class_path, method, self.allowed)
            except BadInput as exc:
                self.refused[call] = exc
                raise
        return call, found, data

    def _named(self, job: ClaimedJob) -> HandlerName:
        """The (class, method) the job's params name, for a call that did not resolve."""
        return handler_of(job.params, self.php_classes)

    def timed_out(self, job: ClaimedJob, started: float) -> Outcome:
        """The call given up on from outside, when its handler ran past its time limit."""
        message = _timed_out(self.limit_of(job))
        return self._failed(job, self._named(job), started, message, retry=True)

    def crashed(self, job: ClaimedJob, exc: BaseException, started: float) -> Outcome:
        """A call that escaped even `execute` (an error raised into its thread)."""
        call = self._named(job)
        return self._failed(job, call, started, describe(exc), retry=True, error=exc)

    def announce(self, outcome: Outcome) -> None:
        """Log a finished call and hand it to the run's callback (on the run's own thread)."""
        # A failure is a warning: a log file gets it at the default level. On stderr,
        # logs.py keeps job records out unless --log-level info asks for them.
        level = logging.WARNING if outcome.status == Status.FAILED else logging.INFO
        if logger.isEnabledFor(level):  # most runs log no job: skip building its arguments
            logger.log(
                level,
                "job %d %s attempt %d: %s in %.3fs%s",
                outcome.id,
                outcome.call_name,
                outcome.attempt,
                outcome.word,
                outcome.duration,
                "; will retry" if outcome.will_retry else "",
                extra={"job_outcome": outcome},  # logs.JsonLinesFormatter turns it into fields
            )
        if outcome.status == Status.FAILED:
            for reporter in self.reporters:
                reporter(outcome)
        if self.on_outcome is not None:
            self.on_outcome(outcome)

    def _raised(
        self, job: ClaimedJob, call: HandlerName, started: float, exc: BaseException, limit: float
    ) -> Outcome:
        """What a handler's exception makes of its job."""
        if isinstance(exc, RetryLater):  # not a failure: no traceback to keep
            try:
                # Read from the instance: a subclass's property would be handler code.
                delay = _deferral(vars(exc).get("delay"))
            except BadInput as refused:
                message = f"{describe(exc)}: {refused}"
                return self._failed(job, call, started, message, retry=True, error=exc)
            return self._deferred(job, call, started, describe(exc), delay)
        message = describe_with_traceback(exc)
        if isinstance(exc, JobTimeout):  # its traceback says where the handler was when stopped
            message = _timed_out(limit, message)
        return self._failed(job, call, started, message, may_retry_raised(exc), exc)

    def _deferred(
        self, job: ClaimedJob, call: HandlerName, started: float, message: str, delay: float
    ) -> Outcome:
        """The same attempt due again `delay` seconds on, or failed, as `after_deferral`
        decides."""
        deferral = after_deferral(job, delay)
        if deferral is None:
            message = f"{message} (deferred {MAX_DEFERRALS} times in a row: failed instead)"
            return self._failed(job, call, started, message, retry=True)
        message = (
            f"{message} (deferred {format_delta(delay)}, "
            f"{deferral.deferrals} of at most {MAX_DEFERRALS} in a row)"
        )
        return self._outcome(job, call, started, Status.PENDING, storable(message), delay)

    def _failed(
        self,
        job: ClaimedJob,
        call: HandlerName,
        started: float,
        message: str,
        retry: bool,
        error: BaseException | None = None,
    ) -> Outcome:
        """A failure, with the retry its policy gives it if it may `retry` at all."""
        next_in = after_failure(job, self.handlers.get(call)) if retry else None
        # A driver's error in a handler may quote a URL.
        message = hide_secrets(storable(message, TEXT_MAX), *self.secret_urls)
        return self._outcome(job, call, started, Status.FAILED, message, next_in, error)

    def _outcome(
        self,
        job: ClaimedJob,
        call: HandlerName,
        started: float,
        status: Status,
        message: str,
        next_in: float | None = None,
        error: BaseException | None = None,
    ) -> Outcome:
        duration = time.monotonic() - started
        finished_at = self.clock()
        return Outcome(
            job=job,
            status=status,
            message=message,
            finished_at=finished_at,
            next_in=next_in,
            class_path=call[0],
            method=call[1],
            duration=duration,
            lateness=finished_at - duration - (job.run_at or finished_at),
            error=error,
        )


def leave_if_forked(runner_pid: int) -> None:
    """End at once a process that is not the runner: a child a handler forked."""
    # os._exit, not sys.exit: no atexit hooks, no buffers flushed, no finally blocks, so the
    # child writes nothing the runner owns (no commit, no Redis command, no half a log line).
    if os.getpid() != runner_pid:
        os._exit(0)


def _context_of(job: ClaimedJob) -> context.JobContext:
    """What `delayq.current_job()` returns inside the job's handler."""
    return context.JobContext(
        job.id, job.queue, job.retry_times, job.ext_string, job.run_at, job.chain_id or job.id
    )


def _deferral(delay: object) -> float:
    """Seconds of a RetryLater's delay. Only exact numbers, text and timedeltas are read:
    a subclass's conversions would be a handler's code running outside its call."""
    if type(delay) not in (int, float, str, timedelta):
        raise BadInput(f"RetryLater takes seconds, a timedelta or a duration, not {shown(delay)}")
    seconds = seconds_of(delay, "RetryLater's delay")
    if not 0 <= seconds <= FURTHEST_AHEAD:
        raise BadInput(f"RetryLater's delay must be between 0 and 10 years, not {seconds:g}s")
    return seconds


def _timed_out(limit: float, described: str = "") -> str:
    """A timed-out job's message, with where it was (the traceback of `described`) if known."""
    _, _, where = described.partition("\n")
    reason = f"JobTimeout: ran longer than its {limit:g}s time limit"
    return f"{reason}\n{where}" if where else reason


def _short_result(result: Any) -> str:
    """The text recorded for a handler's result, storable. A result that cannot be shown does
    not fail a job whose work is done (a retry would do it again): it is named by its type."""
    if result is None:
        return ""
    if type(result) is str:  # a str subclass may override slicing
        return storable(result)
    try:
        return storable(json.dumps(result, default=repr))
    except Exception:  # noqa: BLE001 - not JSON, or its repr raises
        pass
    try:
        return storable(str.__str__(repr(result)))
    except Exception:  # noqa: BLE001 - RecursionError, a digit limit, a hostile __repr__
        return storable(f"<a {type(result).__name__} that cannot be shown>")
