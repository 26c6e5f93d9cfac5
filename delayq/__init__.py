"""delayq: durable delayed jobs — a MySQL table as the truth, a Redis sorted set as the
schedule, and a cron-driven `delayq run` that calls `class.method(data)` when due."""

from .context import JobContext, current_job
from .errors import (
    BackendUnavailable,
    BadInput,
    ConfigError,
    DelayqError,
    HandlerNotAllowed,
    JobNotFound,
    NoRetry,
)
from .queue import JobSpec, Queue, connect
from .store.table import Status

__version__ = "0.1.0"

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
    "Status",
    "__version__",
    "connect",
    "current_job",
]
