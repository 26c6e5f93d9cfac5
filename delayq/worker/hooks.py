"""The on_failure hook (DELAYQ_ON_FAILURE, `on_failure` in delayq.toml, `run --on-failure`):
a function called after every failed attempt with the job's facts and the exception. It is
code the run imports, so it passes the handlers' allowlist as a handler does. It runs on its
own thread, bounded by HOOK_SECONDS: one that raises or hangs (left behind) is logged, and
neither stops the queue nor changes the attempt's recorded outcome. With MAX_HANGING hooks
hanging, failures are logged without calling the hook.

Sentry's reporter (DELAYQ_SENTRY_DSN, the `sentry` extra) reports each failed attempt as its
exception, tagged with the job's id, class, method, queue and ext, never with its data (frames
go without their local variables, which would hold it). A process that set up sentry_sdk
itself keeps its own client and choices; delayq only initialises one where none is active.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..base.threads import keep_signals_off_this_thread
from ..config import Settings
from ..errors import BadInput, ConfigError
from ..store.table import Outcome
from .handlers import locate
from .interrupts import RUN_STOPS
from .tracebacks import describe

HOOK_SECONDS = 10.0
MAX_HANGING = 4
logger = logging.getLogger(__name__)
MISSING_SENTRY = (
    "DELAYQ_SENTRY_DSN is set but sentry-sdk is not installed; "
    "pip install 'delayq[sentry]' or unset it"
)

Hook = Callable[[dict[str, Any], BaseException | None], object]
# What a run tells of each failed attempt: the hook, Sentry.
FailureReporter = Callable[[Outcome], None]


def load_reporters(settings: Settings) -> tuple[FailureReporter, ...]:
    """The configured hook and Sentry reporter, checked before a run claims anything."""
    found = (load_hook(settings), load_sentry(settings))
    return tuple(reporter.call for reporter in found if reporter is not None)


class FailureHook:
    """The resolved hook of one run, and the threads of its calls that have not returned."""

    def __init__(self, path: str, function: Hook) -> None:
        self.path = path
        self.function = function
        self.free = threading.BoundedSemaphore(MAX_HANGING)

    def call(self, report: Outcome) -> None:
        """Call the hook for a failed attempt; returns within HOOK_SECONDS whatever it does."""
        if not self.free.acquire(blocking=False):
            logger.error(
                "on_failure hook %s skipped for job %d: too many hang", self.path, report.id
            )
            return
        thread = threading.Thread(
            target=self._run, args=(report,), name="delayq-on-failure", daemon=True
        )
        thread.start()
        thread.join(HOOK_SECONDS)
        if thread.is_alive():
            logger.error(
                "on_failure hook %s still running for job %d after %gs; left behind",
                *(self.path, report.id, HOOK_SECONDS),
            )

    def _run(self, report: Outcome) -> None:
        # A hook left behind, hung, must not take the next job's SIGALRM from the main thread.
        keep_signals_off_this_thread()
        try:
            self.function(failure_info(report), report.error)
        except BaseException as exc:  # noqa: BLE001 - a hook's error is logged, never the run's
            logger.error(
                "on_failure hook %s raised for job %d: %s", self.path, report.id, describe(exc)
            )
        finally:
            self.free.release()


def failure_info(report: Outcome) -> dict[str, Any]:
    """What the hook is told of a failed attempt; `terminal`: no retry will follow."""
    error, traceback = report.failure
    return {
        "id": report.id,
        "queue": report.queue,
        "class": report.class_path,
        "method": report.method,
        "ext": report.ext,
        "attempt": report.attempt,
        "error": error,
        "traceback": traceback,
        "will_retry": report.will_retry,
        "terminal": not report.will_retry,
    }


def load_hook(settings: Settings) -> FailureHook | None:
    """The configured hook, resolved under the allowlist, or ConfigError saying why not."""
    path = settings.on_failure
    if path is None:
        return None
    module, _, name = path.rpartition(".")
    try:
        _, function = locate(module, name, settings.handlers)
    except BadInput as exc:
        raise ConfigError(f"DELAYQ_ON_FAILURE {path!r}: {exc}") from None
    if not callable(function):
        raise ConfigError(f"DELAYQ_ON_FAILURE {path!r} is not callable")
    return FailureHook(path, function)


class SentryReporter:
    def __init__(self, sdk: Any) -> None:
        self.sdk = sdk

    def call(self, report: Outcome) -> None:
        try:
            with self.sdk.new_scope() as scope:
                scope.set_tag("delayq.job_id", report.id)
                scope.set_tag("delayq.class", report.class_path)
                scope.set_tag("delayq.method", report.method)
                scope.set_tag("delayq.queue", report.queue)
                scope.set_tag("delayq.ext", report.ext or "")
                scope.set_tag("delayq.terminal", not report.will_retry)
                if report.error is not None:
                    self.sdk.capture_exception(report.error)
                else:  # a time limit enforced from outside, a refused handler
                    self.sdk.capture_message(report.summary, level="error")
        except RUN_STOPS:
            raise
        except BaseException as exc:  # noqa: BLE001 - an exception may not even print
            logger.error("could not report job %d to Sentry: %s", report.id, describe(exc))


def load_sentry(settings: Settings) -> SentryReporter | None:
    """A reporter when a DSN is configured, or ConfigError when sentry-sdk is missing."""
    if settings.sentry_dsn is None:
        return None
    try:
        import sentry_sdk
    except ImportError:
        raise ConfigError(MISSING_SENTRY) from None
    if not sentry_sdk.get_client().is_active():
        try:
            sentry_sdk.init(
                dsn=settings.sentry_dsn,
                include_local_variables=False,  # a handler's locals hold the job's data
                max_request_body_size="never",
            )
        except Exception as exc:  # noqa: BLE001 - BadDsn and the like
            raise ConfigError(
                f"DELAYQ_SENTRY_DSN is not a valid Sentry DSN: {describe(exc)}"
            ) from None
    return SentryReporter(sentry_sdk)
