"""Per-minute aggregates for a dashboard: what each queue's jobs did in each of the last minutes
(outcome counts, a lateness histogram, lateness and duration sums), read from the hashes that
runs add to in Redis (store/index/tallies.py) and kept there for a day. Best-effort: the table is
the truth, and a flushed Redis starts them from zero."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..store.index import LATENESS_BOUNDS, Index, bucket_field

__all__ = ["LATENESS_BOUNDS", "Minute", "merge", "per_minute"]
_COUNTS = ("succeeded", "failed", "retried", "missed")  # Minute's fields that count jobs


class QueueLike(Protocol):
    """What per_minute needs of a delayq.Queue (ops/ sits below the Queue it serves)."""

    index: Index


@dataclass(frozen=True)
class Minute:
    """One queue's jobs over one minute (or, merged, over several queues and minutes)."""

    start: float  # epoch seconds, a multiple of 60
    queue: str
    succeeded: int
    failed: int
    retried: int
    missed: int
    lateness_buckets: tuple[int, ...]  # per-bucket counts (not cumulative), as LATENESS_BOUNDS
    lateness_sum: float  # seconds
    duration_sum: float  # seconds

    def lateness_quantile(self, q: float) -> float | None:
        """The q-quantile (0..1) of lateness, interpolated within its bucket as Prometheus's
        histogram_quantile does; None if no job started. A quantile in the last bucket is
        that bucket's lower bound, since +Inf says nothing more."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"a quantile is between 0 and 1, not {q!r}")
        total = sum(self.lateness_buckets)
        if total == 0:
            return None
        rank, below = q * total, 0
        for position, count in enumerate(self.lateness_buckets):
            if count and below + count >= rank:
                lower = LATENESS_BOUNDS[position - 1] if position else 0.0
                upper = LATENESS_BOUNDS[position]
                if math.isinf(upper):
                    return lower
                return lower + (upper - lower) * (rank - below) / count
            below += count
        return None  # unreachable: the counts add up to total


def per_minute(
    queue: QueueLike,
    *,
    minutes: int = 60,
    queues: Sequence[str] | None = None,
    now: float | None = None,
) -> list[Minute]:
    """One Minute per (queue, minute) over the last `minutes` minutes (the current one
    included), oldest first and by queue name within a minute; a minute with no jobs is all
    zeros, for each queue that had any in the window. One Redis round trip."""
    if minutes < 1:
        raise ValueError(f"minutes must be at least 1, not {minutes!r}")
    index = queue.index
    now = index.clock.now() if now is None else now
    last = int(now // 60 * 60)
    starts = [last - 60 * back for back in range(minutes - 1, -1, -1)]
    names = list(queues) if queues is not None else index.registry.known_queues()
    found = index.tallies.minutes(names, starts)
    active = sorted({name for name, _ in found})
    return [
        _minute(start, name, found.get((name, start), {})) for start in starts for name in active
    ]


def merge(minutes: Iterable[Minute]) -> Minute:
    """The sum of `minutes` (across queues, minutes or both), for totals and quantiles over a
    window; its start is the earliest one's, its queue the common name or "" if they differ."""
    items = list(minutes)
    columns = zip((0,) * len(LATENESS_BOUNDS), *(m.lateness_buckets for m in items), strict=True)
    names = {m.queue for m in items}
    return Minute(
        start=min((m.start for m in items), default=0.0),
        queue=names.pop() if len(names) == 1 else "",
        lateness_buckets=tuple(sum(column) for column in columns),
        **{
            name: sum(getattr(m, name) for m in items)
            for name in (*_COUNTS, "lateness_sum", "duration_sum")
        },
    )


def _minute(start: int, name: str, fields: Mapping[str, float]) -> Minute:
    buckets = (fields.get(bucket_field("lateness", i), 0) for i in range(len(LATENESS_BOUNDS)))
    return Minute(
        start=float(start),
        queue=name,
        lateness_buckets=tuple(map(int, buckets)),
        lateness_sum=fields.get("lateness_sum", 0.0),
        duration_sum=fields.get("duration_sum", 0.0),
        **{count: int(fields.get(count, 0)) for count in _COUNTS},
    )
