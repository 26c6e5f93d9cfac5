"""The fixed retry ladder: how long the k-th automatic retry waits after a failure.

Only the runner consults it; a retry is always a new row, so the ladder never edits history.
"""

from __future__ import annotations

import math

# Step k (1-based) is the wait before retry k: 15s, 15s, 30s, 3m, 10m, 20m, 30m, 30m, 30m,
# 1h, 3h, 3h, 3h, 6h, 6h.
LADDER: tuple[float, ...] = (
    15,
    15,
    30,
    180,
    600,
    1200,
    1800,
    1800,
    1800,
    3600,
    10800,
    10800,
    10800,
    21600,
    21600,
)
MAX_RETRIES = len(LADDER)


def should_retry(retry_times: int) -> bool:
    """Whether a job that has already been retried `retry_times` times gets another go."""
    return retry_times < MAX_RETRIES


def next_run_at(retry_times: int, now: float) -> float:
    """Due time of the retry that follows a failure of an attempt with `retry_times`."""
    return now + LADDER[min(retry_times, MAX_RETRIES - 1)]


def next_occurrence(due: float, every: float, now: float) -> float:
    """The next due time of a recurring job: the previous due plus whole periods, skipping
    periods already past rather than running them in a burst, so the series never drifts."""
    periods = max(1, math.floor((now - due) / every) + 1)
    return due + periods * every
