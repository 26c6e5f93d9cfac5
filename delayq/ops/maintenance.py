"""The bulk writes an operator asks for: purging old finished rows and requeueing failed ones.
Both work in batches so no statement holds row locks for long, and both respect retry chains
(purge never leaves a chain whose surviving rows end in an earlier attempt; requeue only
repeats a chain's latest finished attempt, or moves the pending attempt that follows it to
now), so running either twice is safe. Their statements are store/table/maintenance.py's;
here, how batches are drawn, sized and paced, and what a repeat may run."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial

from ..config import Settings
from ..errors import BadInput
from ..store.index import Index
from ..store.table import Chains, JobRow, Maintenance, Status, Table, read_call, utc_stamp
from ..worker.handlers import locate
from .alongside import alongside
from .overview import JobFilter

logger = logging.getLogger(__name__)

PURGEABLE = (Status.SUCCESS, Status.FAILED, Status.CANCELLED, Status.MISSED)
_PURGEABLE_WORDS = ", ".join(status.word for status in PURGEABLE)
BATCH = 1000
# purge sizes its batches so that each takes about AIM seconds (a DELETE locks only the
# finished rows it removes, so a run's UPDATEs of pending and running rows never wait on it),
# between MIN_BATCH and MAX_BATCH rows, and then leaves the database alone for SHARE of the
# time it took: purge is never urgent. At 1M pending + 1M finished rows, with a runner
# alongside and one DELETE at a time, 0.2 s and a tenth purged 36,000 rows/s with the
# runner's lateness p99 at 21 ms; 0.08 s and a quarter, 29,000 rows/s and 20 ms. At 10M +
# 10M, two at a time (DELETERS): 52,700 rows/s and 32 ms.
AIM = 0.2
# On MySQL two DELETEs at once, on connections of their own, while the main thread reads the
# next batches (ops/alongside.py): row locks keep them out of each other's way and a run's.
DELETERS = 2
MIN_BATCH, MAX_BATCH = 100, 20_000
SHARE = 0.1
# SQLite has one writer at a time, and a writer that finds its write lock taken polls for it, up to
# 100 ms apart (its busy handler): purge leaves a gap longer than that after each DELETE, or
# a run's claim may wait through many batches (p99 5.6 s at 1M beside a purge without it).
SQLITE_PAUSE = 0.15
# purge reads the rows to delete a window of modified times at a time (see _finished_before).
FIRST_WINDOW = timedelta(minutes=10)
ONE_SECOND = timedelta(seconds=1)  # what DATETIME tells apart; no window is narrower
WINDOW_ROWS = 4 * MAX_BATCH

Counted = Callable[[int], None]  # told how many more rows were deleted (or counted)


@dataclass
class Pace:
    """Rows per DELETE, sized so that each takes about `aim` seconds (0: the size stays),
    and the pause after each batch."""

    batch: int = BATCH
    aim: float = AIM
    share: float = SHARE
    least: float = 0.0  # the shortest pause

    @classmethod
    def of(cls, table: Table) -> Pace:
        """The pace for the table's database."""
        return cls() if table.mysql else cls(least=SQLITE_PAUSE)

    def pause_after(self, rows: int, deleting: float, working: float) -> float:
        """Size the next DELETE on what this one, of `rows` rows, took (`deleting` seconds);
        the pause to take after `working` seconds on the batch, reads included."""
        self.resize(rows, deleting)
        return self.pause(working)

    def resize(self, rows: int, deleting: float) -> None:
        """Size the next DELETE on what one of `rows` rows took (`deleting` seconds)."""
        if self.aim and rows:
            wanted = rows * self.aim / max(deleting, 1e-4)
            grown = min(wanted, self.batch * 2.0, MAX_BATCH)
            self.batch = int(max(grown, self.batch / 2.0, MIN_BATCH))

    def pause(self, working: float) -> float:
        """The pause to take after `working` seconds on a batch."""
        return max(self.least, working * self.share)


def purgeable_ids(
    table: Table, statuses: Sequence[Status], before: float, pace: Pace | None = None
) -> Iterator[list[int]]:
    """Ids of finished rows last changed before `before` (epoch), a batch at a time, of which
    no earlier attempt is kept (see `_purgeable`)."""
    _check_purgeable(statuses)
    cutoff = utc_stamp(before)
    for ids in _old_batches(table, statuses, cutoff, pace or Pace()):
        if purgeable := _purgeable(table, ids, statuses, cutoff):
            yield purgeable


def _old_batches(
    table: Table, statuses: Sequence[Status], cutoff: datetime, pace: Pace
) -> Iterator[list[int]]:
    """Ids of rows of `statuses` changed before `cutoff`, `pace.batch` at a time."""
    walk = _finished_before if table.mysql else _finished_by_id
    return walk(table, statuses, cutoff, pace)


def _purgeable(
    table: Table, ids: list[int], statuses: Sequence[Status], cutoff: datetime
) -> list[int]:
    """Those of `ids` no earlier attempt of whose chain is kept: deleting a later attempt while
    an earlier failed one stays would make that one the chain's last word (and `requeue`
    would run a job that has succeeded)."""
    kept = Maintenance(table).kept_for_their_chain(ids, statuses, cutoff)
    return [job_id for job_id in ids if job_id not in kept]


def _check_purgeable(statuses: Sequence[Status]) -> None:
    if not statuses:
        raise BadInput("purge needs at least one status")
    for status in statuses:
        if status not in PURGEABLE:
            raise BadInput(
                f"purge never deletes {Status(status).word} rows; use {_PURGEABLE_WORDS}"
            )


def _finished_before(
    table: Table, statuses: Sequence[Status], cutoff: datetime, pace: Pace
) -> Iterator[list[int]]:
    """Ids of rows of `statuses` changed before `cutoff`, oldest first,
    `pace.batch` at a time in id order. They are read a window of modified times at a time,
    one range of the (status, modified) SQL index per status, the window sized to hold about a
    batch: rows finished at about the same time sit close together in the table, so each
    batch's DELETE finds its pages together whatever their statuses, and neither rows of
    other statuses nor younger ones are read."""
    rows = Maintenance(table)
    width = FIRST_WINDOW
    start = rows.oldest_changed(statuses, None, cutoff)
    while start is not None:
        end = min(start + width, cutoff)
        ids = rows.changed_between(
            statuses, start, end, WINDOW_ROWS if width > ONE_SECOND else None
        )
        if ids is None:  # far more than a batch: a narrower window
            width /= 4
            continue
        ids.sort()
        for offset in range(0, len(ids), pace.batch):
            yield ids[offset : offset + pace.batch]
        width *= min(max(pace.batch / max(len(ids), 1), 0.5), 2.0)
        start = rows.oldest_changed(statuses, end, cutoff)  # past a gap in one step


def _finished_by_id(
    table: Table, statuses: Sequence[Status], cutoff: datetime, pace: Pace
) -> Iterator[list[int]]:
    """SQLite's walk: ids of rows of `statuses` changed before `cutoff`, `pace.batch`
    at a time in id order, each read on from where the last one ended, so that the walk
    reads the table once. SQLite writes each page a DELETE changes to its WAL whole, and
    again at the checkpoint: the rows of a window of `modified` times lie all over a table
    whose jobs finish in another order than they were added, a page or more each, where
    neighbours by id share the table's pages and those of the SQL indexes ordered by id."""
    rows = Maintenance(table)
    after = 0
    while ids := rows.finished_after(statuses, cutoff, after, pace.batch):
        yield ids
        after = ids[-1]


def purge(
    table: Table,
    statuses: Sequence[Status],
    before: float,
    pace: Pace | None = None,
    counted: Counted | None = None,
) -> int:
    """Delete what `purgeable_ids` yields, one short statement per batch, pausing after each
    for a share of the time it took; returns the count, telling `counted` as it goes. On
    MySQL, DELETERS connections check and delete batches while this thread reads the next
    batches' ids from the (status, modified) SQL index."""
    _check_purgeable(statuses)
    pace = pace or Pace.of(table)
    cutoff = utc_stamp(before)
    if not table.mysql:
        batches = purgeable_ids(table, statuses, before, pace)
        return _delete_one_by_one(table, batches, statuses, cutoff, pace, counted)
    deleted = 0
    for done in alongside(
        table,
        _old_batches(table, statuses, cutoff, pace),
        partial(_purge_batch, table, statuses, cutoff),
        DELETERS,
        pace.pause,
        "delayq-purge",
    ):
        pace.resize(len(done.item), done.took)
        deleted += done.result
        if counted:
            counted(done.result)
    return deleted


def purge_before(
    table: Table,
    statuses: Sequence[Status] | None,
    before: float,
    dry_run: bool,
    counted: Counted | None = None,
) -> int:
    """`purge` of the finished rows of `statuses` (None: every finished status) last changed
    before `before`, or with `dry_run` what it would delete, counted the same way."""
    statuses = PURGEABLE if statuses is None else statuses
    if dry_run:
        return count_purgeable(table, statuses, before, counted)
    return purge(table, statuses, before, counted=counted)


def count_purgeable(
    table: Table, statuses: Sequence[Status], before: float, counted: Counted | None = None
) -> int:
    """What `purge` would delete, counted as it would delete it (a dry run)."""
    total = 0
    for ids in purgeable_ids(table, statuses, before):
        total += len(ids)
        if counted:
            counted(len(ids))
    return total


def _purge_batch(table: Table, statuses: Sequence[Status], cutoff: datetime, ids: list[int]) -> int:
    """A DELETERS thread's batch: the chains' check, then the DELETE of what it leaves."""
    purgeable = _purgeable(table, ids, statuses, cutoff)
    return Maintenance(table).delete(purgeable, statuses, cutoff) if purgeable else 0


def _delete_one_by_one(
    table: Table,
    batches: Iterator[list[int]],
    statuses: Sequence[Status],
    cutoff: datetime,
    pace: Pace,
    counted: Counted | None,
) -> int:
    """SQLite's purge: one writer at a time, so each DELETE in turn, then a pause long
    enough for a run waiting on SQLite's write lock to take it."""
    deleted = 0
    began = time.monotonic()
    for ids in batches:
        deleting = time.monotonic()
        count = Maintenance(table).delete(ids, statuses, cutoff)
        deleted += count
        if counted:
            counted(count)
        done = time.monotonic()
        time.sleep(pace.pause_after(len(ids), done - deleting, done - began))
        began = time.monotonic()
    return deleted


@dataclass
class RequeueResult:
    """Ids requeued (or, in a dry run, that would be) and the rows left alone, with why."""

    ids: list[int] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)


def requeue(
    table: Table, index: Index, filters: JobFilter, settings: Settings, now: float, dry_run: bool
) -> RequeueResult:
    """Every chain whose latest finished attempt matches `filters` gets a pending attempt due
    now: the one it has, moved to now, or a new one as `Queue.retry` makes it (retry_times + 1,
    linked by chain_id, indexed)."""
    if not filters.statuses or not set(filters.statuses) <= set(PURGEABLE):
        raise BadInput(f"requeue needs --status from {_PURGEABLE_WORDS}")
    result = RequeueResult()
    php_classes = dict(settings.php_classes)
    # Only a chain's latest finished attempt (perhaps followed by a pending one) is repeated.
    for rows in Maintenance(table).latest_finished(filters.selection(now), BATCH):
        matching = [row for row in rows if filters.matches_class(row)]
        runnable = [
            row for row in matching if _is_allowed(row, settings.handlers, php_classes, result)
        ]
        if dry_run:
            result.ids += [row.id for row in runnable]
            continue
        added: list[tuple[str, int, float]] = []
        for row in runnable:
            if new_id := _repeat(table, row, now, result):
                result.ids.append(new_id)
                added.append((row.queue, new_id, now))
        index.schedule.add_by_queue(added)
    return result


def _is_allowed(
    row: JobRow, allowed: Sequence[str], php_classes: Mapping[str, str], result: RequeueResult
) -> bool:
    try:
        call = read_call(row.params, php_classes)
        locate(call.class_path, call.method, allowed)
    except BadInput as exc:
        result.skipped.append((row.id, str(exc)))
        return False
    return True


def _repeat(table: Table, row: JobRow, now: float, result: RequeueResult) -> int | None:
    """The chain's pending attempt, due now, unless it runs or a later attempt of it has
    finished meanwhile (another requeue, and a run): then None, and why in `result`."""
    try:
        attempt = Chains(table).under_chain_mutex(
            row, lambda: Chains(table).retry_chain(row, now, now, repeating=row.id)
        )
    except BadInput as exc:
        logger.info("%s", exc)
        result.skipped.append((row.id, str(exc)))
        return None
    return attempt.id
