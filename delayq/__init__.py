"""delayq: durable delayed jobs — a MySQL table as the truth, a Redis sorted set as the
schedule, and a cron-driven `delayq run` that calls `class.method(data)` when due."""

from .connection import connect
from .context import JobContext, current_job
from .errors import (
    BackendUnavailable,
    BadInput,
    ConfigError,
    DelayqError,
    HandlerNotAllowed,
    JobNotFound,
    NoRetry,
    RetryLater,
)
from .queue import JobSpec, Queue
from .store.table import Status
from .worker.retry import retry_policy


def __getattr__(name: str) -> str:
    """`__version__`, read when asked: importlib.metadata costs a run's start tens of ms."""
    if name != "__version__":
        raise AttributeError(f"module 'delayq' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        # pyproject.toml holds the one version number; the installed metadata carries it here.
        return version("delayq")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"


__all__ = [
    "BackendUnavailable",
    "BadInput",
    "ConfigError",
    "DelayqError",
    "HandlerNotAllowed",
    "JobContext",
    "JobNotFound",
    "JobSpec",
    "NoRetry",
    "Queue",
    "RetryLater",
    "Status",
    "__version__",
    "connect",
    "current_job",
    "retry_policy",
]
