"""Tallies: what runs did, summed in Redis so that many runs and processes add up — counters
and histograms per queue and handler for Prometheus, and per-minute aggregates per queue, kept
for a day, for a dashboard.

This module owns the bucket bounds, the hash fields and the packing of the increments. The
table stays the truth: tallies are best-effort, and a flushed Redis starts them from zero.
"""

from __future__ import annotations

import bisect
import math
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TypeVar

import redis

from .keys import METRICS_HANDLERS_KEY, minute_key, queue_key, text

# How a row's class or method is shown where its params name none (not JSON, not an object,
# no such key): one word for list, show, peek and a run's lines, never `None` or `?`.
UNREADABLE = "(unreadable)"
# Upper bounds, in seconds, of the lateness histogram (due -> start); the last is +Inf.
LATENESS_BOUNDS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, math.inf
)  # fmt: skip
# The handler's wall time spans the same milliseconds-to-minutes range, so the same bounds.
DURATION_BOUNDS = LATENESS_BOUNDS
OUTCOMES = ("succeeded", "failed", "retried", "missed", "recovered", "poisoned")
# A minute's aggregates outlive the day a dashboard draws by an hour, whatever the clocks do.
MINUTE_TTL = 25 * 3600
# Handlers with a label of their own across every run; the rest share OTHER_HANDLERS, so a
# stream of distinct class names cannot grow the exposition (or the hash) without bound.
MAX_HANDLERS = 200
OTHER_HANDLERS = "(other)"
LABEL_MAX = 200
# What a class or method that a row's params do not name is called: the word `list`, `show`,
# `peek`, `run -v` and the web page use; a row naming neither has it for its whole label.
UNNAMED = UNREADABLE
# A field of the counters hash: "<name>|<handler>"; names never hold "|".
SEPARATOR = "|"


def bucket_field(histogram: str, position: int) -> str:
    """The field counting a histogram's bucket at `position` ("lateness" or "duration")."""
    return f"{histogram}_bucket:{position}"


Number = TypeVar("Number", int, float)


# Called for every finished job: the few names a run meets are escaped once each.
@lru_cache(maxsize=1024)
def label(name: str) -> str:
    """`name` fit for a label value and a hash field: lone surrogates and control characters
    written as backslash escapes (they are not text Redis or Prometheus can carry), and cut to
    LABEL_MAX characters."""
    escaped = "".join(
        char.encode("unicode_escape").decode("ascii")
        if unicodedata.category(char) in ("Cc", "Cs")
        else char
        for char in name[:LABEL_MAX]
    )
    return escaped[:LABEL_MAX]


def handler_label(class_path: str, method: str) -> str:
    """The label a handler's counts go under: "class.method", escaped, or UNNAMED alone for a
    row that names neither."""
    if class_path == UNNAMED and method == UNNAMED:
        return UNNAMED
    return label(f"{class_path}.{method}")


# The field names of each bucket, built once: observe() runs for every finished job.
LATENESS_FIELDS = tuple(bucket_field("lateness", i) for i in range(len(LATENESS_BOUNDS)))
DURATION_FIELDS = tuple(bucket_field("duration", i) for i in range(len(DURATION_BOUNDS)))
Series = tuple[str, str]  # (metric, handler): a field of the counters hash


@dataclass
class Tally:
    """Increments for one queue, summed in memory, sent in one go."""

    queue: str
    counts: Counter[Series] = field(default_factory=Counter)
    sums: defaultdict[Series, float] = field(default_factory=lambda: defaultdict(float))
    minute_counts: defaultdict[int, Counter[str]] = field(
        default_factory=lambda: defaultdict(Counter)
    )
    minute_sums: defaultdict[int, defaultdict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )

    def observe(
        self, handler: str, outcome: str, lateness: float, duration: float, at: float
    ) -> None:
        """A finished call: its outcome ("succeeded"/"failed"), lateness and wall time."""
        lateness, duration = max(lateness, 0.0), max(duration, 0.0)
        late_field = LATENESS_FIELDS[bisect.bisect_left(LATENESS_BOUNDS, lateness)]
        duration_field = DURATION_FIELDS[bisect.bisect_left(DURATION_BOUNDS, duration)]
        # Plain increments: Counter.update's Mapping check costs more than the counting.
        counts, sums = self.counts, self.sums
        counts[outcome, handler] += 1
        counts[late_field, handler] += 1
        counts[duration_field, handler] += 1
        sums["lateness_sum", handler] += lateness
        sums["duration_sum", handler] += duration
        minute = minute_of(at)
        minute_counts, minute_sums = self.minute_counts[minute], self.minute_sums[minute]
        minute_counts[outcome] += 1
        minute_counts[late_field] += 1
        minute_sums["lateness_sum"] += lateness
        minute_sums["duration_sum"] += duration

    def count(self, handler: str, outcome: str, at: float) -> None:
        """One job of `handler` to count under `outcome`, with no histogram sample."""
        self.counts[outcome, handler] += 1
        self.minute_counts[minute_of(at)][outcome] += 1

    def commands(self) -> list[tuple[str, ...]]:
        """The Redis commands that add this tally: HINCRBY and HINCRBYFLOAT, and an EXPIRE
        on each minute's hash."""
        commands: list[tuple[str, ...]] = []
        counts = {series_field(*series): n for series, n in self.counts.items()}
        sums = {series_field(*series): total for series, total in self.sums.items()}
        _increments(commands, queue_key(self.queue, "metrics"), counts, sums)
        for minute, minute_counts in self.minute_counts.items():
            key = minute_key(self.queue, minute)
            _increments(commands, key, minute_counts, self.minute_sums[minute])
            commands.append(("EXPIRE", key, str(MINUTE_TTL)))
        return commands

    def __bool__(self) -> bool:
        return bool(self.counts)


def minute_of(at: float) -> int:
    return int(at // 60 * 60)


def series_field(metric: str, handler: str) -> str:
    return f"{metric}{SEPARATOR}{handler}"


def _fold_others(table: MutableMapping[Series, Number], admitted: set[str]) -> None:
    for metric, handler in list(table):
        if handler not in admitted:
            other = (metric, OTHER_HANDLERS)
            table[other] = table.pop((metric, handler)) + table.get(other, 0)


def _increments(
    commands: list[tuple[str, ...]], key: str, counts: Mapping[str, int], sums: Mapping[str, float]
) -> None:
    commands += [("HINCRBY", key, name, str(n)) for name, n in counts.items() if n]
    commands += [("HINCRBYFLOAT", key, name, repr(float(s))) for name, s in sums.items() if s]


class Tallies:
    """The tallies of every queue on one Redis client, and which handlers have a label of
    their own: a set in Redis shared by every run, asked once per handler per process (a
    round trip only the first time a handler finishes)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.admitted: set[str] = set()
        self.refused: set[str] = set()

    def commands(self, tally: Tally | None) -> list[tuple[str, ...]]:
        """The Redis commands that add `tally`, its handlers labelled; none for no tally."""
        if not tally:
            return []
        for handler in {handler for _, handler in tally.counts} - self.admitted - self.refused:
            self._ask(handler)
        _fold_others(tally.counts, self.admitted)  # the handlers refused a label of their own
        _fold_others(tally.sums, self.admitted)
        return tally.commands()

    def add(self, tally: Tally) -> None:
        """Add a tally on its own (missed jobs, found while claiming): one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for command in self.commands(tally):
            pipe.execute_command(*command)
        pipe.execute()  # no round trip for no commands

    def _ask(self, handler: str) -> None:
        # Concurrent first sightings may admit a few past MAX_HANDLERS: the bound holds
        # within the number of runs at once, which is all it is for.
        pipe = self.client.pipeline(transaction=False)
        pipe.sismember(METRICS_HANDLERS_KEY, handler)
        pipe.scard(METRICS_HANDLERS_KEY)
        known, count = pipe.execute()
        if known or count < MAX_HANDLERS:
            if not known:
                self.client.sadd(METRICS_HANDLERS_KEY, handler)
            self.admitted.add(handler)
        else:
            self.refused.add(handler)

    def counters(self, queues: Sequence[str]) -> dict[str, dict[str, float]]:
        """{queue: {counters-hash field: value}} of those of `queues` that have any."""
        found = self._hashes([queue_key(queue, "metrics") for queue in queues])
        return {queue: fields for queue, fields in zip(queues, found, strict=True) if fields}

    def minutes(
        self, queues: Sequence[str], minutes: Iterable[int]
    ) -> dict[tuple[str, int], dict[str, float]]:
        """{(queue, minute): {field: value}} of the minute hashes that exist."""
        wanted = [(queue, minute) for queue in queues for minute in minutes]
        found = self._hashes([minute_key(queue, minute) for queue, minute in wanted])
        return {where: fields for where, fields in zip(wanted, found, strict=True) if fields}

    def _hashes(self, keys: list[str]) -> list[dict[str, float]]:
        """The fields of each hash ({} for one that does not exist), in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        replies = pipe.execute()
        return [{text(name): float(value) for name, value in fields.items()} for fields in replies]
