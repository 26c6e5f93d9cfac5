"""The on_failure hook (DELAYQ_ON_FAILURE, `on_failure` in delayq.toml, `run --on-failure`):
a function called after every failed attempt with the job's facts and the exception. It is
code the run imports, so it passes the handlers' allowlist as a handler does. It runs on its
own thread, bounded by HOOK_SECONDS: one that raises or hangs (left behind) is logged, and
neither stops the queue nor changes the attempt's recorded outcome. With MAX_HANGING hooks
hanging, failures are logged without calling the hook.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..config import Settings
from ..errors import BadInput, ConfigError
from ..store.outcomes import Outcome
from ..threads import keep_signals_off_this_thread
from .handlers import locate
from .sentry import load_sentry
from .tracebacks import describe

HOOK_SECONDS = 10.0
MAX_HANGING = 4
logger = logging.getLogger(__name__)

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
