"""Reporting failed attempts to Sentry (DELAYQ_SENTRY_DSN, the `sentry` extra): each as its
exception, tagged with the job's id, class, method, queue and ext, never with its data (frames
go without their local variables, which would hold it). A process that set up sentry_sdk
itself keeps its own client and choices; delayq only initialises one where none is active.
"""

from __future__ import annotations

import logging
from typing import Any

from ..config import Settings
from ..errors import ConfigError
from ..store.outcomes import Outcome
from .interrupts import RUN_STOPS
from .tracebacks import describe

logger = logging.getLogger(__name__)
MISSING = (
    "DELAYQ_SENTRY_DSN is set but sentry-sdk is not installed; "
    "pip install 'delayq[sentry]' or unset it"
)


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
        raise ConfigError(MISSING) from None
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
