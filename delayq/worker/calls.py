"""Calling one handler: resolve `class.method` once per run, call it with the job's data under
its time limit and the job's context, and turn whatever happened into an Outcome.

A handler's error, however bad, becomes the job's failure, never the run's: this is the one
place that catches what a handler throws.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import context
from ..config import Settings
from ..errors import BadInput, HandlerNotAllowed, NoRetry
from ..store.params import read_call
from ..store.table import ClaimedJob, Status, storable
from . import forks, interrupts
from .eventloop import EventLoopThread
from .handlers import Handler, resolve
from .interrupts import RUN_STOPS, JobTimeout
from .outcomes import Outcome
from .report import JobOutcome, OutcomeCallback
from .retry import should_retry

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Called:
    """A finished call: the outcome to record, and the report to announce."""

    outcome: Outcome
    report: JobOutcome


class Caller:
    """Calls the handlers of one run: on the main thread one at a time, or on its slots."""

    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], float],
        time_limits: bool,
        on_outcome: OutcomeCallback | None,
    ) -> None:
        self.allowed = settings.handlers
        self.php_classes = dict(settings.php_classes)  # PHP producers' class names
        self.timeout = settings.timeout  # for jobs that set none of their own
        self.clock = clock
        self.time_limits = time_limits  # whether SIGALRM can stop a handler here
        self.on_outcome = on_outcome
        self.pid = os.getpid()  # the runner's: a handler's forked child is any other
        self.handlers: dict[tuple[str, str], Handler | BadInput] = {}
        self._loop: EventLoopThread | None = None  # started by the first async handler
        self._loop_lock = threading.Lock()

    def close(self) -> None:
        """Stop the event loop of async handlers, if one was started."""
        if self._loop is not None:
            self._loop.close()

    def execute(self, job: ClaimedJob) -> Called:
        """Call the job's handler; never raises for what the handler or the job's params do."""
        try:
            return self._execute(job)
        finally:  # in a child the handler forked (even at import), nothing more happens
            forks.leave_if_forked(self.pid)

    def _execute(self, job: ClaimedJob) -> Called:
        started = time.monotonic()
        try:
            class_path, method, data = read_call(job.params, self.php_classes)
            handler = self._handler(class_path, method)
        except HandlerNotAllowed as exc:
            return self._finish(job, ("?", "?"), Status.FAILED, str(exc), False, started)
        except BadInput as exc:
            retry = not str(exc).startswith("bad params")  # a deploy may fix a missing module
            return self._finish(job, ("?", "?"), Status.FAILED, str(exc), retry, started)
        status, message, retry = self._call(job, handler, data)
        return self._finish(job, (class_path, method), status, message, retry, started)

    def _call(self, job: ClaimedJob, handler: Handler, data: Any) -> tuple[Status, str, bool]:
        """Run the handler under its time limit and the job context."""
        limit = job.timeout or self.timeout
        job_context = context.JobContext(
            job.id, job.queue, job.retry_times, job.ext_string, job.run_at, job.chain_id or job.id
        )
        token = context.running(job_context)
        try:
            if self.time_limits:
                interrupts.arm(limit)
            result = handler(data)
            if inspect.isawaitable(result):  # an async def handler: awaited on the run's loop
                result = self._event_loop().run(result, limit, lambda: context.running(job_context))
            # Under the time limit still: a result's __repr__ may be as hostile as its handler.
            message = _short_result(result)
        except NoRetry as exc:
            return Status.FAILED, _describe(exc), False
        except JobTimeout:
            return Status.FAILED, f"JobTimeout: ran longer than its {limit:g}s time limit", True
        except RUN_STOPS:  # the run's own signals: they stop the run, not fail the job
            raise
        except BaseException as exc:  # a handler's error, even SystemExit, never stops the run
            return Status.FAILED, _describe(exc), True
        finally:
            if self.time_limits:
                interrupts.disarm()
            context.finished(token)
        return Status.SUCCESS, message, False

    def _event_loop(self) -> EventLoopThread:
        with self._loop_lock:  # slots may meet their first async handler at once
            if self._loop is None:
                self._loop = EventLoopThread(self.pid)
            return self._loop

    def _handler(self, class_path: str, method: str) -> Handler:
        key = (class_path, method)
        if key not in self.handlers:
            try:
                self.handlers[key] = resolve(class_path, method, self.allowed)
            except BadInput as exc:
                self.handlers[key] = exc
        found = self.handlers[key]
        if isinstance(found, BadInput):
            raise found
        return found

    def timed_out(self, job: ClaimedJob, started: float) -> Called:
        """The call given up on from outside, when its handler ran past its time limit."""
        limit = job.timeout or self.timeout
        message = f"JobTimeout: ran longer than its {limit:g}s time limit"
        call = _call_of(job, self.php_classes)
        return self._finish(job, call, Status.FAILED, message, True, started)

    def crashed(self, job: ClaimedJob, exc: BaseException, started: float) -> Called:
        """A call that escaped even `execute` (an error raised into its thread)."""
        call = _call_of(job, self.php_classes)
        return self._finish(job, call, Status.FAILED, _describe(exc), True, started)

    def announce(self, report: JobOutcome) -> None:
        """Log a finished call and hand it to the run's callback (on the run's own thread)."""
        logger.info(
            "job %d %s.%s attempt %d: %s in %.3fs%s",
            report.id,
            report.class_path,
            report.method,
            report.attempt,
            report.status.word,
            report.duration,
            "; will retry" if report.will_retry else "",
            extra={"job_outcome": report},  # logs.JsonLinesFormatter turns it into fields
        )
        if self.on_outcome is not None:
            self.on_outcome(report)

    def _finish(
        self,
        job: ClaimedJob,
        call: tuple[str, str],
        status: Status,
        message: str,
        retry: bool,
        started: float,
    ) -> Called:
        duration = time.monotonic() - started
        message = storable(message)  # a refused handler's name may hold anything
        outcome = Outcome(job, status, message, retry, self.clock())
        report = JobOutcome(
            job.id,
            job.queue,
            call[0],
            call[1],
            job.retry_times,
            status,
            message,
            duration,
            outcome.finished_at - duration - (job.run_at or outcome.finished_at),
            status == Status.FAILED and retry and should_retry(job.retry_times),
        )
        return Called(outcome, report)


def _call_of(job: ClaimedJob, php_classes: dict[str, str]) -> tuple[str, str]:
    """(class, method) of a job whose params may be anything."""
    try:
        class_path, method, _ = read_call(job.params, php_classes)
    except BadInput:
        return "?", "?"
    return class_path, method


def _describe(exc: BaseException) -> str:
    """`TypeName: text` of a handler's exception, whatever its __str__ does."""
    try:
        text = str.__str__(str(exc))  # a plain str: a subclass may override formatting too
    except RUN_STOPS:
        raise
    except BaseException:  # noqa: BLE001 - a handler's exception may not even print
        text = "<unprintable>"
    return storable(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _short_result(result: Any) -> str:
    """The text recorded for a handler's result. A result that cannot be shown does not
    fail a job whose work is done (a retry would do it again): it is named by its type."""
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
        return f"<a {type(result).__name__} that cannot be shown>"
