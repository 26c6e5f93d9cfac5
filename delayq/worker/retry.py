"""Retry policies: the default 15-step ladder, a job's own (its `retry_policy` column) and a
handler's (`@delayq.retry_policy`), and how long the k-th automatic retry waits. Only the
runner consults them; a retry is always a new row, so a policy never edits history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..durations import Duration
from ..store.policies import RetryPolicy, check_policy, read_policy

# Step k (1-based) is the wait before retry k: 15s, 15s, 30s, 3m, 10m, 20m, 30m three times,
# 1h, 3h three times, 6h twice.
LADDER: tuple[float, ...] = (
    (15, 15, 30, 180, 600, 1200) + (1800,) * 3 + (3600,) + (10800,) * 3 + (21600,) * 2
)
MAX_RETRIES = len(LADDER)
DEFAULT_POLICY = RetryPolicy(MAX_RETRIES, LADDER)
# `raise RetryLater(...)` this many times in a row on one attempt, and the attempt fails as
# an ordinary failure: a handler that always defers then shows up in failed counts and
# exhausts its retries, rather than looping unnoticed.
MAX_DEFERRALS = 100
POLICY_ATTRIBUTE = "__delayq_retry_policy__"
F = TypeVar("F", bound=Callable[..., Any])


def retry_policy(
    *, retries: int | None = None, delays: Sequence[Duration] | None = None
) -> Callable[[F], F]:
    """Declare a handler's retry policy: `@delayq.retry_policy(retries=3, delays=["10s", "1m"])`.
    A job's own `retries=` / `retry_delays=` beat it; it beats the default ladder."""
    policy = check_policy(retries, delays)

    def declare(handler: F) -> F:
        setattr(handler, POLICY_ATTRIBUTE, policy)
        return handler

    return declare


def handler_policy(handler: object) -> RetryPolicy:
    """The policy a handler declared (a bound method's is its function's), or none."""
    declared = getattr(handler, POLICY_ATTRIBUTE, None)
    return declared if isinstance(declared, RetryPolicy) else RetryPolicy()


def next_retry_in(
    stored: str | None, retry_times: int, declared: RetryPolicy | None = None
) -> float | None:
    """Seconds before the retry of a failed attempt of a job with this `retry_policy`
    column and `retry_times`, under its handler's `declared` policy; None for none. Each
    setting the job gives beats the handler's, which beats the default ladder; a list of
    delays alone allows one retry per step."""
    chosen = read_policy(stored).policy.over(declared or RetryPolicy())
    if chosen.retries is None and chosen.delays is not None:
        chosen = RetryPolicy(len(chosen.delays), chosen.delays)
    return retry_delay(chosen.over(DEFAULT_POLICY), retry_times)


def retry_delay(policy: RetryPolicy, retry_times: int) -> float | None:
    """Seconds before the retry that follows a failed attempt with `retry_times`, or None
    when `policy` (made whole by next_retry_in) allows no more; past its last step, the
    last step repeats."""
    assert policy.retries is not None and policy.delays is not None
    if retry_times >= policy.retries:
        return None
    return policy.delays[min(retry_times, len(policy.delays) - 1)]
