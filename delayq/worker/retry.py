"""Whether a job runs again, and when: the one home of that decision. After a failed attempt
(`after_failure`, on the job's, its handler's or the default 15-step ladder's policy, unless
the failure is one no retry mends: `may_retry_raised`, `may_retry_refused`), after a RetryLater
(`after_deferral`), and after its run died under it (`after_lost_lease`). Only the runner
decides; a retry is always a new row, so a policy never edits history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from ..base.durations import Duration
from ..errors import BadInput, HandlerNotAllowed, NoRetry
from ..store.table import POLICY_MAX, ClaimedJob, RetryPolicy, check_policy, read_policy

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
# A job whose run died under it this many times is a poison job: it fails instead.
MAX_LOST_LEASES = 3
POLICY_ATTRIBUTE = "__delayq_retry_policy__"
F = TypeVar("F", bound=Callable[..., Any])


def after_failure(job: ClaimedJob, handler: object = None) -> float | None:
    """Seconds until the retry of `job`'s failed attempt, or None: no retry follows. The job's
    own settings beat those its `handler` declared (None: not known, as for an outcome an
    earlier version journaled), which beat the default ladder; past the last step of the
    delays the last repeats, until the retries are used up. Asked only of a failure that
    may be retried at all."""
    return next_retry_in(job.retry_policy, job.retry_times, handler_policy(handler))


def may_retry_raised(error: BaseException) -> bool:
    """Whether a failure raised by the handler (a time limit's JobTimeout included) may be
    retried: all but NoRetry, which the handler raises to say no retry can succeed."""
    return not isinstance(error, NoRetry)


def may_retry_refused(refusal: BadInput) -> bool:
    """Whether a job refused before its handler ran may be retried: a deploy may add a
    missing module and a PHP class may be mapped meanwhile, but nothing mends a handler the
    allowlist refuses or params that cannot be read."""
    return not isinstance(refusal, HandlerNotAllowed) and not str(refusal).startswith("bad params")


@dataclass(frozen=True)
class Deferral:
    """A RetryLater obeyed: the same attempt due again `delay` seconds on, its `deferrals`
    in a row this one included."""

    delay: float
    deferrals: int


def after_deferral(job: ClaimedJob, delay: float) -> Deferral | None:
    """A RetryLater(`delay`) of `job`'s attempt: the same row, the same attempt, due again
    `delay` on, counting no failure; None past MAX_DEFERRALS in a row (or a count the row's
    `retry_policy` column cannot hold): then the attempt fails as any other, and
    `after_failure` decides its retry, so a handler always deferring is seen."""
    stored = read_policy(job.retry_policy).deferred()
    if stored.deferrals > MAX_DEFERRALS or len(stored.to_text() or "") > POLICY_MAX:
        return None
    return Deferral(delay, stored.deferrals)


class LostLease(Enum):
    """What becomes of a job whose run died (its lease lapsed) before its outcome was
    journaled."""

    REQUEUE = "requeue"  # back on the schedule, due now
    POISON = "poison"  # failed for good, not retried: it keeps killing its run


def after_lost_lease(lost_leases: int, was_running: bool) -> LostLease:
    """A job whose run died under it: POISON when its handler was running and this is the
    MAX_LOST_LEASES-th death it was running for (`lost_leases` counts those before); REQUEUE
    otherwise, a job that had not started charged nothing."""
    if was_running and lost_leases + 1 >= MAX_LOST_LEASES:
        return LostLease.POISON
    return LostLease.REQUEUE


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
