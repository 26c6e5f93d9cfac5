"""delayq: durable delayed jobs — a MySQL table as the truth, a Redis sorted set as the
schedule, and a cron-driven `delayq run` that calls `class.method(data)` when due."""

from importlib.metadata import PackageNotFoundError, version

from .connection import AsyncQueue, connect, connect_async
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
from .worker.shutdown import on_shutdown

try:
    # pyproject.toml holds the one version number; the installed metadata carries it here.
    __version__ = version("delayq")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "AsyncQueue",
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
    "connect_async",
    "current_job",
    "on_shutdown",
    "retry_policy",
]
