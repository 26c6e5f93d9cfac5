"""Recording what handlers did: each outcome is journaled in Redis the moment the handler
returns (one round trip), and the journal is written to the table in group commits, every few
hundred jobs or milliseconds. The journal keeps the batching from widening the duplicate
window: if the run dies before its outcomes reach the table, the next run's lease recovery
records them from the journal instead of running those jobs again; only the job whose handler
was running can run twice.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import Future
from dataclasses import dataclass

import redis

from ..store.index import Index, Tally
from ..store.table import Outcome, Outcomes, Status, Table, Written
from .bookkeeper import Bookkeeper

FLUSH_MAX = 500
FLUSH_INTERVAL = 0.2


class OutcomeBuffer:
    """Outcomes of one queue's jobs held under one lease token, waiting for a group commit.
    With a bookkeeper the commits are written on its thread while handlers go on running; at
    most one waits behind the one being written, which bounds the outcomes held."""

    def __init__(self, table: Table, index: Index, queue: str, token: str) -> None:
        self.table = table
        self.index = index
        self.queue = queue
        self.token = token
        self.bookkeeper: Bookkeeper | None = None  # None: commits are written on this thread
        self.notes_starts = False  # the run notes each start: forget them with the outcome
        self.waiting: list[Outcome] = []
        self.journaled: list[int] = []
        # The commits in flight, oldest first: `salvage` writes straight to the table the
        # outcomes of one that fails before its table write.
        self.in_flight: dict[Future[Written], GroupCommit] = {}
        self.window_started = time.monotonic()

    def write_on(self, bookkeeper: Bookkeeper, notes_starts: bool = False) -> None:
        """From now on write the group commits on `bookkeeper`'s thread; with `notes_starts`,
        the run notes each start in the journal, to be forgotten with its outcome."""
        self.bookkeeper = bookkeeper
        self.notes_starts = notes_starts

    def add_many(self, outcomes: list[Outcome], more_coming: bool) -> Written | None:
        """Keep the outcomes of calls that finished; returns what commits finished meanwhile
        wrote, if any. Written synchronously, outcomes flushed at once are not journaled: the
        table write itself closes the window. Written on the bookkeeper's thread, all are
        journaled first (in one write), since the run may die before that commit lands."""
        self.waiting += outcomes
        full = len(self.waiting) >= FLUSH_MAX
        stale = time.monotonic() - self.window_started >= FLUSH_INTERVAL
        due = full or stale or not more_coming
        if due and self.bookkeeper is None:
            return self.flush()
        self.index.journal.write_many(
            self.queue, [(one.job.id, one.to_record()) for one in outcomes]
        )
        self.journaled += [one.job.id for one in outcomes]
        if due:
            self._hand_over()
        return self._collect(block=False)

    def flush(self) -> Written:
        """Write every waiting outcome to the table, then index retries and drop the journal;
        returns what this and every commit still in flight wrote."""
        if self.bookkeeper is not None:
            self._hand_over()
            return self._collect(block=True) or Written()
        commit = self._take_waiting()
        try:
            return self._commit(commit)
        finally:
            if not commit.table_written:  # not in the table: `salvage` writes them
                self.waiting = commit.outcomes

    def _take_waiting(self) -> GroupCommit:
        commit = GroupCommit(self.waiting, self.journaled)
        self.waiting, self.journaled = [], []
        self.window_started = time.monotonic()
        return commit

    def _hand_over(self) -> None:
        assert self.bookkeeper is not None
        if not self.waiting:
            self.window_started = time.monotonic()
            return
        if len(self.in_flight) >= 2:
            next(iter(self.in_flight)).result()  # back-pressure: the oldest must land first
        commit = self._take_waiting()
        self.in_flight[self.bookkeeper.submit(self._commit, commit)] = commit

    def _commit(self, commit: GroupCommit) -> Written:
        """The group commit itself: the table, then in one Redis write the schedule of its
        retries, the journal's cleanup and the metrics (on the bookkeeper's thread, if any)."""
        written = Outcomes(self.table).write_outcomes(commit.outcomes, self.token)
        commit.table_written = True  # whatever the Redis half does: `salvage` skips these
        started = None
        if self.notes_starts:
            started = (self.token, [outcome.job.id for outcome in commit.outcomes])
        tally = tally_of(self.queue, commit.outcomes, set(written.lost))
        self.index.committed(self.queue, commit.journaled, written.scheduled, started, tally)
        return written

    def _collect(self, block: bool) -> Written | None:
        """Merge what finished commits wrote; with `block`, wait for every one. A commit that
        failed raises here, in the main thread."""
        merged: Written | None = None
        for future in list(self.in_flight):
            if not (block or future.done()):
                break
            merged = (merged or Written()).merge(future.result())
            del self.in_flight[future]
        return merged

    def write_alone(self, outcomes: list[Outcome]) -> Written:
        """Write `outcomes` to the table, without Redis. If the table is what is away, they
        are journaled, so the recovery of their leases records them instead of running them
        again, and the failure is raised."""
        try:
            return Outcomes(self.table).write_outcomes(outcomes, self.token)
        except Exception:
            with contextlib.suppress(Exception):  # Redis away too: then nothing can keep them
                records = [(outcome.job.id, outcome.to_record()) for outcome in outcomes]
                self.index.journal.write_many(self.queue, records)
            raise

    def salvage(self) -> Written:
        """The run is failing (a server went away): write straight to the table, in one
        transaction and without Redis, the outcomes not known to be there (not handed over, or
        of commits that failed before their table write). Left to lease recovery, with Redis
        and its journal maybe away, they would run again; the orphan sweep schedules retries."""
        pending = list(self.waiting)
        for future, commit in self.in_flight.items():
            if future.exception() is not None and not commit.table_written:
                pending += commit.outcomes
        self.waiting, self.journaled = [], []
        self.in_flight.clear()
        written = self.write_alone(pending)
        # Best-effort, as tallies are: Redis may be what failed, and the table has them now.
        with contextlib.suppress(redis.RedisError):
            self.index.tallies.add(tally_of(self.queue, pending, set(written.lost)))
        return written


@dataclass
class GroupCommit:
    """The outcomes of one group commit, and the ids of those the journal holds."""

    outcomes: list[Outcome]
    journaled: list[int]
    table_written: bool = False  # set on the bookkeeper's thread once the table has them


def tally_of(queue: str, outcomes: list[Outcome], lost: set[int], timed: bool = True) -> Tally:
    """What these outcomes add to the metrics, leaving out those the table refused. Not
    `timed`: read back from a dead run's journal, whose record keeps no wall time or
    lateness, so they are counted without a histogram sample."""
    tally = Tally(queue)
    handlers: dict[tuple[str, str], str] = {}  # each label escaped once, not once a job
    for outcome in outcomes:
        # A RetryLater deferral (PENDING) is neither: the same attempt runs again later.
        if outcome.job.id in lost or outcome.status == Status.PENDING:
            continue
        call = (outcome.class_path, outcome.method)
        handler = handlers.get(call) or handlers.setdefault(call, outcome.handler)
        word = "succeeded" if outcome.status == Status.SUCCESS else "failed"
        at = outcome.finished_at
        if timed:
            tally.observe(handler, word, outcome.lateness, outcome.duration, at)
        else:
            tally.count(handler, word, at)
        if word == "failed" and outcome.next_in is not None:
            tally.count(handler, "retried", at)
    return tally
