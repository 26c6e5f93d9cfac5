"""A job's own retry policy and its `retry_policy` column: compact JSON of the retries and
delays the job was added with, and how many times in a row its attempt raised RetryLater.
Only checked and encoded here; what a policy means is worker/retry.py's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...base.durations import YEAR, seconds_of, shown
from ...errors import BadInput

RETRIES_LIMIT = 100  # more retries than this is a loop, not a policy
STEPS_LIMIT = 20
STEP_LIMIT = YEAR
POLICY_MAX = 255  # the width of the retry_policy column


@dataclass(frozen=True)
class RetryPolicy:
    """How often a failed job is retried and after how long; None: the next one decides
    (job, then handler, then the default ladder)."""

    retries: int | None = None
    delays: tuple[float, ...] | None = None

    def over(self, fallback: RetryPolicy) -> RetryPolicy:
        """This policy, each setting it leaves open taken from `fallback`."""
        return RetryPolicy(
            fallback.retries if self.retries is None else self.retries,
            fallback.delays if self.delays is None else self.delays,
        )


def check_policy(retries: Any = None, delays: Any = None) -> RetryPolicy:
    """A RetryPolicy from what a caller gave, or BadInput naming what is wrong."""
    if retries is not None and not _whole(retries, RETRIES_LIMIT):
        raise BadInput(
            f"retries must be a whole number from 0 to {RETRIES_LIMIT}, not {shown(retries)}"
        )
    return RetryPolicy(retries, None if delays is None else _check_steps(delays))


def _whole(value: Any, high: float = float("inf")) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high


def _check_steps(delays: Any) -> tuple[float, ...]:
    if isinstance(delays, str | bytes) or not isinstance(delays, Sequence):
        raise BadInput(f"retry delays must be a list of durations, not {shown(delays)}")
    if not 1 <= len(delays) <= STEPS_LIMIT:
        raise BadInput(f"retry delays must have 1 to {STEPS_LIMIT} steps, not {len(delays)}")
    steps = tuple(seconds_of(step, "a retry delay") for step in delays)
    for step in steps:
        if not 0 <= step <= STEP_LIMIT:
            raise BadInput(f"a retry delay must be between 0 and 365 days, not {step:g}s")
    return steps


@dataclass(frozen=True)
class StoredPolicy:
    """What a row's `retry_policy` column holds."""

    policy: RetryPolicy = RetryPolicy()
    deferrals: int = 0

    def to_text(self) -> str | None:
        """Compact JSON, or None (NULL) when it holds nothing, as rows without one do."""
        fields: dict[str, Any] = {}
        if self.policy.retries is not None:
            fields["retries"] = self.policy.retries
        if self.policy.delays is not None:
            # 60, not 60.0: the column is 255 characters wide
            fields["delays"] = [int(s) if s == int(s) else s for s in self.policy.delays]
        if self.deferrals:
            fields["deferrals"] = self.deferrals
        return json.dumps(fields, separators=(",", ":")) if fields else None

    def deferred(self) -> StoredPolicy:
        return replace(self, deferrals=self.deferrals + 1)


def policy_text(policy: RetryPolicy) -> str | None:
    """A new job's `retry_policy` column, or BadInput if it does not fit."""
    text = StoredPolicy(policy).to_text()
    if text is not None and len(text) > POLICY_MAX:
        raise BadInput(
            f"retry delays take {len(text)} characters stored, the limit is {POLICY_MAX}; "
            "use fewer or rounder steps"
        )
    return text


def read_policy(text: str | None) -> StoredPolicy:
    """A row's stored policy; NULL (PHP producers, older rows) or anything unreadable that
    another writer left there means the default, never a failed commit."""
    if not text:
        return StoredPolicy()
    try:
        fields = json.loads(text)
        policy = check_policy(fields.get("retries"), fields.get("delays"))
        deferrals = fields.get("deferrals", 0)
    except (ValueError, TypeError, AttributeError, BadInput):
        return StoredPolicy()
    return StoredPolicy(policy, deferrals if _whole(deferrals) else 0)


def fresh_policy(text: str | None) -> str | None:
    """A row's `retry_policy` for its next attempt: its RetryLater count started over."""
    if not text or '"deferrals"' not in text:
        return text  # most rows: NULL, or a policy that never deferred
    return replace(read_policy(text), deferrals=0).to_text()
