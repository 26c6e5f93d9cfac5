"""The job a handler is running, for handlers that want to make themselves idempotent:
`delayq.current_job()` returns its JobContext, and the handler keeps its one argument."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class JobContext:
    """What a handler may want to know about the call it is in."""

    id: int
    queue: str
    attempt: int  # 0 on the first run, k on the k-th retry
    ext: str
    run_at: float | None
    chain_id: int  # the first attempt's id: stable across retries, a natural idempotency key


_current: ContextVar[JobContext | None] = ContextVar("delayq_current_job", default=None)


def current_job() -> JobContext | None:
    """The job being run in this context, or None outside a handler."""
    return _current.get()


def running(context: JobContext) -> object:
    """Make `context` current; pass the returned token to `finished`."""
    return _current.set(context)


def finished(token: object) -> None:
    _current.reset(token)  # type: ignore[arg-type]
