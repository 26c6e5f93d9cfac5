"""The error tree delayq raises, and NoRetry and RetryLater for handler authors. Every
DelayqError carries a one-line message that says what was wrong and how to fix it;
cli/app.py maps the classes to exit codes."""

from __future__ import annotations


class DelayqError(Exception):
    """Base of every error delayq raises on purpose."""


class ConfigError(DelayqError):
    """A setting is missing or malformed."""


class BadInput(DelayqError):
    """A caller passed something delayq refuses; nothing was written."""


class HandlerNotAllowed(BadInput):
    """The handler is outside DELAYQ_HANDLERS, or its path tries to escape it."""


class JobNotFound(DelayqError):
    """No job has that id."""


class BackendUnavailable(DelayqError):
    """The database or Redis could not be reached or answered with an error."""


class NoRetry(Exception):  # noqa: N818 - the name handler authors raise, like huey's CancelExecution
    """Raised by a handler: the job fails and is not retried."""


class RetryLater(Exception):  # noqa: N818 - the name handler authors raise, as NoRetry
    """Raised by a handler: run this same attempt again `delay` later (seconds, a timedelta
    or "90s") without counting a failure, as a rate-limited API's Retry-After asks."""

    def __init__(self, delay: object, reason: str = "") -> None:
        super().__init__(reason)
        self.delay = delay
