"""The derived-state soak's checks (tests/soaks/derived_soak.py), from the handlers' own log and the
table alone: nothing lost, nothing run twice or early, no rolled-back or replaced-away job
run, and every due job started within the bound the docs give for its queue's kind.

The bounds, each from the docs (see the soak's docstring for the reasoning):
- every queue: BASE = the orphan sweep's 30 s (ORPHAN_GRACE) + a loop's sweep, 5 s
  (SWEEP_EVERY) + LOAD_SLACK, the longest path back for a lost entry (docs/internals.md, "What
  delayq keeps beside the table": "an entry lost alone starts up to 30 s + a sweep late";
  a rebuild or a queue only the table knows is faster);
- `rated`: BASE + its backlog at the rate (the jobs due no later that had not started when it
  fell due, plus itself, over RATE) + one period (docs/internals.md, "Per-queue settings": a
  job held back "starts as soon as the limits allow");
- `locked`: BASE + the time other jobs of its key ran while it was due + PARKED_FOR, 2
  minutes (docs/internals.md: "a waiting job may start up to 2 minutes late, once").

And flow control through the losses (docs/guarantees.md, "Flow control holds"): two jobs of
one lock key never run at once; the rated queue never starts more than twice its rate in
any second (the grants are not durable: up to twice the rate in the period after a loss).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from delayq.store.index.lock_waits import PARKED_FOR
from delayq.store.table.model import Job, Status
from delayq.worker.looping import SWEEP_EVERY
from delayq.worker.recovery import ORPHAN_GRACE
from tests.soaks.derived_producers import RATE, Ledger

LOAD_SLACK = 10.0  # seconds: a failover's own length and a shared 2-core machine's delays
BASE = ORPHAN_GRACE + SWEEP_EVERY + LOAD_SLACK
EARLY_TOLERANCE = 0.01  # seconds: one host's clock, logged to the millisecond
NOTED_LATE = 10.0  # seconds: lateness counted apart per kind, for the figures (not a check)
KINDS = {
    "plain": "plain",
    "batch": "plain",
    "sparse": "plain",
    "txn": "using",
    "foreign": "foreign",
    "debounce": "replace",
    "locked": "locked",
    "rated": "rated",
}


@dataclass
class Call:
    tag: str
    start: float
    end: float | None = None


@dataclass
class Row:
    id: int
    queue: str
    status: int
    run_at: float
    tag: str
    lock: str | None


@dataclass
class Result:
    checked: int = 0  # rows due within the soak, all of whose checks were made
    beyond: int = 0  # rows due after the soak (far beyond the horizon): must not have run
    lost: list[str] = field(default_factory=list)
    twice: list[str] = field(default_factory=list)
    early: list[str] = field(default_factory=list)
    too_late: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)  # rolled back, replaced away, errors written
    lateness: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    noted_late: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    rate_most: int = 0  # the most starts of the rated queue in any window of one second
    rate_pause: float = 0.0  # the longest the rated queue started nothing while a job waited

    @property
    def ok(self) -> bool:
        return not (self.lost or self.twice or self.early or self.too_late or self.bad)


def read_calls(log: Path) -> dict[int, list[Call]]:
    """{row id: its calls}, from the handlers' "start/end <tag> <pid> <id> <time>" lines."""
    calls: dict[int, list[Call]] = defaultdict(list)
    for line in log.read_text().splitlines() if log.exists() else []:
        word, tag, _pid, job_id, at = line.split()
        if word == "start":
            calls[int(job_id)].append(Call(tag, float(at)))
        else:
            open_calls = [call for call in calls[int(job_id)] if call.end is None]
            if open_calls:
                open_calls[-1].end = float(at)
    return calls


def read_rows() -> dict[int, Row]:
    rows = {}
    for job in Job.select(Job.id, Job.queue, Job.status, Job.run_at, Job.params):
        params = json.loads(job.params)
        tag = params["data"]["tag"]
        rows[job.id] = Row(job.id, job.queue, job.status, job.run_at, tag, params.get("lock"))
    return rows


def check(log: Path, ledger: Ledger, far: set[str], due_by: float) -> Result:
    """Every row against the handlers' log; a row due longer than BASE before `due_by` must
    have run, each call in its bound. `far`: the tags of jobs added beyond the horizon, whose
    lateness is counted apart (kind `far`), under their queue's bound."""
    calls, rows = read_calls(log), read_rows()
    result = Result()
    held = lock_intervals(rows, calls)
    ahead = rated_backlogs(rows, calls, due_by)
    for row in rows.values():
        check_row(row, calls.get(row.id, []), due_by, result)
        if len(calls.get(row.id, [])) == 1:
            start = calls[row.id][0].start
            bound = BASE
            if row.queue == "rated":
                bound += (ahead[row.id] + 1) / RATE + 1.0
            if row.lock is not None:
                bound += PARKED_FOR + held_meanwhile(held[row.lock], row.id, row.run_at, start)
            late = start - row.run_at
            kind = "far" if row.tag in far else KINDS.get(row.queue, row.queue)
            result.lateness[kind].append(late)
            result.noted_late[kind] += late > NOTED_LATE
            if late > bound:
                result.too_late.append(
                    f"{row.queue} id {row.id} {row.tag}: {late:.1f}s > {bound:.1f}s"
                )
    check_ledger(ledger, rows, calls, result)
    result.bad += lock_overlaps(held)
    result.rate_most = most_starts_in_a_second(rows, calls)
    result.rate_pause = longest_pause_with_a_job_waiting(rows, calls)
    if result.rate_most > 2 * RATE:
        result.bad.append(f"rated: {result.rate_most} starts in one second, over twice {RATE}")
    return result


def check_row(row: Row, calls: list[Call], due_by: float, result: Result) -> None:
    name = f"{row.queue} id {row.id} {row.tag} due {row.run_at:.3f}"
    if len(calls) > 1:
        result.twice.append(f"{name}: started at " + ", ".join(f"{c.start:.3f}" for c in calls))
    if any(call.start < row.run_at - EARLY_TOLERANCE for call in calls):
        result.early.append(f"{name}: started at {min(c.start for c in calls):.3f}")
    if any(call.tag != row.tag for call in calls):
        result.bad.append(f"{name}: ran {[c.tag for c in calls]}, replaced by {row.tag}")
    if row.status == Status.CANCELLED:
        if calls:
            result.bad.append(f"{name}: cancelled, yet ran")
        return
    if row.status == Status.PENDING and not calls and row.run_at > due_by - BASE:
        result.beyond += 1  # not yet due, or due too recently to be late
        return
    result.checked += 1
    if row.status != Status.SUCCESS or not calls:
        result.lost.append(f"{name}: status {row.status}, {len(calls)} call(s)")


def check_ledger(
    ledger: Ledger, rows: dict[int, Row], calls: dict[int, list[Call]], result: Result
) -> None:
    """What the producers were told against the table and the log."""
    tags = {row.tag: row.id for row in rows.values()}
    ran = {call.tag for each in calls.values() for call in each}
    for tag, job_id in list(ledger.ids.items()):
        if job_id not in rows:
            result.lost.append(f"{tag}: id {job_id} an add returned has no row")
    for tag in sorted(ledger.rolled_back):
        if tag in ran or tag in tags:
            result.bad.append(f"{tag}: rolled back, yet has a row or ran")
    for tag in sorted(ledger.failed):
        if tag in tags:
            result.bad.append(f"{tag}: its add raised, yet it has row {tags[tag]}")
    known = set(rows)
    for job_id in sorted(set(calls) - known):
        result.bad.append(f"id {job_id}: ran, but no such row")


def lock_intervals(
    rows: dict[int, Row], calls: dict[int, list[Call]]
) -> dict[str, list[tuple[float, float, int]]]:
    """{lock key: (start, end, id) of each call of its jobs}."""
    held: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for row in rows.values():
        for call in calls.get(row.id, []) if row.lock else []:
            held[row.lock or ""].append((call.start, call.end or call.start, row.id))
    return held


def held_meanwhile(
    intervals: list[tuple[float, float, int]], job_id: int, since: float, until: float
) -> float:
    """Seconds within [since, until] during which another job held the lock (ran)."""
    spans = sorted(
        (max(start, since), min(end, until))
        for start, end, other in intervals
        if other != job_id and end > since and start < until
    )
    total, reached = 0.0, since
    for start, end in spans:
        if end > reached:
            total += end - max(start, reached)
            reached = end
    return total


def rated_backlogs(
    rows: dict[int, Row], calls: dict[int, list[Call]], due_by: float
) -> dict[int, int]:
    """{id: jobs of the rated queue due no later that had not started when it fell due}."""
    rated = [
        (row.run_at, calls[row.id][0].start if calls.get(row.id) else math.inf, row.id)
        for row in rows.values()
        if row.queue == "rated" and row.run_at <= due_by
    ]
    return {
        job_id: sum(
            1
            for due, start, other in rated
            if due <= run_at and start >= run_at and other != job_id
        )
        for run_at, _, job_id in rated
    }


def lock_overlaps(held: dict[str, list[tuple[float, float, int]]]) -> list[str]:
    """Calls of two jobs sharing a lock key that ran at once (docs/guarantees.md: never, on
    any host, through any Redis loss)."""
    overlaps = []
    for key, intervals in held.items():
        running_until, holder = float("-inf"), 0
        for start, end, job_id in sorted(intervals):
            if start < running_until:
                overlaps.append(f"{key}: id {job_id} started at {start:.3f} while id {holder} ran")
            if end > running_until:
                running_until, holder = end, job_id
    return overlaps


def most_starts_in_a_second(rows: dict[int, Row], calls: dict[int, list[Call]]) -> int:
    """The most starts of the rated queue in any window of one second."""
    rated = [row.id for row in rows.values() if row.queue == "rated"]
    starts = sorted(call.start for job_id in rated for call in calls.get(job_id, []))
    most, first = 0, 0
    for last, at in enumerate(starts):
        while at - starts[first] >= 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most


def longest_pause_with_a_job_waiting(rows: dict[int, Row], calls: dict[int, list[Call]]) -> float:
    """The longest gap between two starts of the rated queue during which a job of it, due by
    the first, waited: how long lost or stale start grants held a backlog back (a figure,
    not a check: the backlog bound above is the check)."""
    rated = sorted(
        (calls[row.id][0].start, row.run_at)
        for row in rows.values()
        if row.queue == "rated" and calls.get(row.id)
    )
    # earliest[i]: the earliest due time among the jobs that started at the i-th start or later
    earliest = [math.inf] * (len(rated) + 1)
    for i in range(len(rated) - 1, -1, -1):
        earliest[i] = min(rated[i][1], earliest[i + 1])
    longest = 0.0
    for i in range(len(rated) - 1):
        (before, _), (after, _) = rated[i], rated[i + 1]
        if earliest[i + 1] <= before:
            longest = max(longest, after - before)
    return longest


def percentiles(values: list[float]) -> tuple[float, float, float]:
    """p50, p99 (nearest rank) and max of `values`; zeros for none."""
    if not values:
        return 0.0, 0.0, 0.0
    ordered = sorted(values)
    p50, p99 = (max(0, math.ceil(share * len(ordered)) - 1) for share in (0.5, 0.99))
    return ordered[p50], ordered[p99], ordered[-1]
