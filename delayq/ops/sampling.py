"""How much of what grows with the table `delayq doctor` reads: by default a bounded sample,
so that it answers in the same time at ten million pending jobs as at ten; with `--full`
everything, telling a tally how far it got, a page at a time of what store/table/due_rows.py
reads. doctor.py words the lines."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

from ..store.index import Index, job_id_of, schedule_key, text
from ..store.table import DueRows, Table

# Schedule members read at each end of a queue's schedule, and overdue pending rows compared
# with it, without --full: a few milliseconds at any size.
SAMPLE = 1000
PAGE = 5000  # rows or members per statement or round trip of a full pass

# Told what a full pass reads, how many more it has read and of how many (None: not known).
Tally = Callable[[str, int, "int | None"], None]


def _quiet(what: str, count: int, total: int | None) -> None:
    pass


@dataclass(frozen=True)
class Scope:
    """Sampled (the default) or, with `full`, every member and every overdue row."""

    full: bool = False
    tally: Tally = _quiet


@dataclass(frozen=True)
class Members:
    """What a queue's schedule held: `strays` (members that are no job id) among those read,
    of `size` members, all of them unless `sampled`."""

    strays: int
    size: int
    sampled: bool


def stray_members(index: Index, queue: str, scope: Scope) -> Members:
    """The schedule members of `queue` that are not job ids: in a sample of the SAMPLE due
    first (what a run meets next) and SAMPLE at random, or with `scope.full` all of them."""
    client = index.schedule.client
    key = schedule_key(queue)
    size = int(client.zcard(key))
    if scope.full:
        return Members(_count_all_strays(index, queue, size, scope.tally), size, False)
    if size <= 2 * SAMPLE:  # the whole schedule costs no more than a sample
        members = {member for member, _ in index.schedule.earliest(queue, 2 * SAMPLE)}
        return Members(_strays(members), size, False)
    members = {member for member, _ in index.schedule.earliest(queue, SAMPLE)}
    members.update(text(member) for member in cast(list, client.zrandmember(key, SAMPLE)))
    return Members(_strays(members), size, True)


def _count_all_strays(index: Index, queue: str, size: int, tally: Tally) -> int:
    strays: set[str] = set()  # a set: ZSCAN may return a member twice
    for chunk in index.schedule.members(queue, PAGE):
        strays.update(member for member, _ in chunk if job_id_of(member) is None)
        tally(f"{queue}: schedule members", len(chunk), size)
    return len(strays)


def _strays(members: set[str]) -> int:
    return sum(job_id_of(member) is None for member in members)


@dataclass(frozen=True)
class Unscheduled:
    """Overdue pending rows of a queue missing from its schedule, `count` of those read; all
    of them unless `capped` (the SAMPLE overdue longest were read, and there may be more)."""

    count: int
    capped: bool


def unscheduled_rows(
    table: Table, index: Index, queue: str, before: float, scope: Scope
) -> Unscheduled:
    """PENDING rows of `queue` due before `before` that its schedule lacks: of the SAMPLE
    overdue longest, or with `scope.full` of all."""
    if not scope.full:
        overdue = [job_id for job_id, _ in DueRows(table).overdue_pending(queue, before, SAMPLE)]
        return Unscheduled(len(index.schedule.missing(queue, overdue)), len(overdue) >= SAMPLE)
    count = 0
    for ids in _overdue_pages(table, queue, before):
        count += len(index.schedule.missing(queue, ids))
        scope.tally(f"{queue}: overdue pending rows", len(ids), None)
    return Unscheduled(count, False)


def _overdue_pages(table: Table, queue: str, before: float) -> Iterator[list[int]]:
    """Ids of every PENDING row of `queue` due before `before` (or written without a due
    time), PAGE at a time, each page one range of the (status, queue, run_at) SQL index that
    goes on where the last one stopped: none rereads what an earlier one read."""
    pending = DueRows(table)
    last_id = 0
    while ids := pending.pending_without_run_at(queue, PAGE, last_id):
        yield ids
        last_id = ids[-1]
    after: tuple[float, int] | None = None
    while rows := pending.overdue_page(queue, before, after, PAGE):
        yield [job_id for job_id, _ in rows]
        last_id, last_at = rows[-1]
        after = (last_at, last_id)
