"""Walks of the table that put pending rows on the schedule, due jobs first: a rebuild after
Redis lost it, and each raise of a queue's horizon (store/index/horizons.py).

Every pending row is in the table, so a Redis that lost its data (a restart without
persistence, a FLUSHALL) costs a rebuild, never a job. A rebuild walks each queue's pending
rows in due order up to its horizon's limit, a range of the (status, queue, run_at) SQL index a
batch at a time, and puts them back, noting after each batch how far it has gone. The first
run that finds the index incomplete takes the rebuild's lock and puts back every queue's due
rows before its pass claims (a few batches: seconds at millions of pending rows), then the
rest from a thread of its own while it runs jobs. A run that finds the lock taken waits only
until each queue's mark is past now, then claims too: it neither waits for the whole rebuild
nor repeats it. A run that stops hands its marks to the next one, and a lock whose run died
lapses and is taken over.

Jobs added or cancelled meanwhile: a producer's add puts its entry on the schedule itself,
and the rebuild leaves an entry already there as it is (ZADD NX). An entry the rebuild puts
back for a row cancelled or started after it read it is a stale entry, as after any race with
the schedule: a claim finds its row not pending, or not due yet, and drops it; it never runs
early or twice.

Once the schedule is complete, a run raises a limit that is near (under the same lock) and
walks from the old limit to the new one in its pass, before it claims: the rows due in the
next few minutes, a few thousand at ten million jobs due over a month.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from redis.exceptions import LockError

from ..store.index import MAX_ID, Horizon, Index
from ..store.table import DueBatch, DueCursor, DueRows, Jobs, Table, close_connection

logger = logging.getLogger(__name__)

BATCH = 20000
# After the due rows, the run that took the lock goes on in the foreground this long before
# it hands the rest to its thread: a small table is rebuilt whole before the first claim.
FOREGROUND = 1.0
# Rows' `modified` is written by each host's clock, to the second: rows finished this long
# before the rebuild began count as finished during it.
LOOKBACK = 60.0
# How often a run waiting for another's rebuild to pass now looks at the marks.
POLL = 0.1
# How often a run looks whether a horizon needs raising: far more often than a raise is due.
HORIZON_CHECK = 10.0
# The horizon of a queue the rebuild has yet to begin: nothing of it is back.
NOT_BEGUN = Horizon(float("-inf"), "")


class Walk:
    """One queue's walk of its pending rows in due order, from its mark up to its horizon's
    limit (rows due later stay in the table until the limit is raised past them)."""

    def __init__(self, queue: str, horizon: Horizon) -> None:
        self.queue = queue
        self.limit = horizon.limit
        self.done = horizon.walk is None
        self.cursor = DueCursor.from_mark(horizon.walk) if horizon.walk else None

    def past(self, now: float) -> bool:
        """Whether every row of the queue due by `now` is on the schedule."""
        if self.done:
            return self.limit >= now
        due_at = None if self.cursor is None else self.cursor.run_at
        return due_at is not None and due_at >= now

    def cursor_mark(self) -> str:
        return "" if self.cursor is None else self.cursor.mark()

    def raise_to(self, limit: float) -> None:
        """Walk on from the old limit, every row due by which is on the schedule, to `limit`."""
        self.cursor = DueCursor(self.limit, MAX_ID)
        self.limit = limit
        self.done = False


class Rebuild:
    """A process's part in rebuilding the schedule: taking the rebuild over or waiting for the
    run that has it, and finishing it from a thread while passes run jobs."""

    def __init__(self, table: Table, index: Index) -> None:
        self.table = table
        self.index = index
        self.lock = index.registry.rebuild_lock()
        self.added = 0  # entries this process put back
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._started = 0.0
        self._begun = 0.0  # when the rebuild began, perhaps in another run (epoch seconds)
        self._horizons_checked = float("-inf")  # when no horizon needed raising (run's clock)

    def due_first(self, now: Callable[[], float], on_batch: Callable[[], None]) -> int:
        """Return once every pending row due by now is on the schedule: at once if the index
        is complete and no horizon needs raising or a first walk, else after putting the due
        rows back here, or after the run doing it has; the entries added. `on_batch` is
        called before each batch and each wait: a rebuild is progress a supervising parent
        must not take for a stuck run."""
        added = self.added
        while not self._finishing():
            try:
                walks = self._walk_or_wait(now, on_batch)
            except LockError:
                # Redis lost the lock with its data (a FLUSHALL, a restart, a failover) or this
                # run stalled past the lock's life: another run, or this one now, goes on.
                logger.warning("lost the lock of the schedule's rebuild; looking again")
                continue
            if walks is None or all(walk.past(now()) for walk in walks):
                break
            on_batch()
            time.sleep(POLL)
        return self.added - added

    def _walk_or_wait(
        self, now: Callable[[], float], on_batch: Callable[[], None]
    ) -> list[Walk] | None:
        """Walk what needs walking if this run gets the lock (None: done), else the walks the
        run that has it is making."""
        if not self.index.registry.is_complete():
            if self.lock.acquire(blocking=False):
                self._take_over(now, on_batch)
                return None
            return self._rebuild_walks()
        checked_at = now()
        if self._horizons_checked <= checked_at < self._horizons_checked + HORIZON_CHECK:
            return None
        walks = self._horizon_walks(checked_at)
        if not walks:
            self._horizons_checked = checked_at
            return None
        if self.lock.acquire(blocking=False):
            self._walk_to_limits(now, on_batch)
            return None
        return walks

    def rebuild_all(
        self, on_batch: Callable[[], None], now: Callable[[], float] | None = None
    ) -> int:
        """Rebuild the whole schedule here, up to each queue's horizon, waiting for a run that
        holds the rebuild to drop or lose it, then going on from its marks; then walk the
        horizons that need it (`delayq init`), all on the clock `now` (default: Redis's);
        the entries added."""
        now = now or self.index.clock.now
        registry = self.index.registry
        while not registry.is_complete():
            if not self.lock.acquire(blocking=False):
                on_batch()
                time.sleep(POLL)
                continue
            try:
                self._started = time.monotonic()
                for walk in self._walks(now()):
                    self._through(walk, on_batch)
                self._finish(log=False)
            except LockError:  # Redis lost it meanwhile: begin again
                logger.warning("lost the lock of the schedule's rebuild; beginning again")
        self.due_first(now, on_batch)
        return self.added

    def _horizon_walks(self, now: float) -> list[Walk]:
        """The walks the horizons of the known queues need now: those under way (their run
        stopped or died), those whose limit is near, and those of queues without a horizon
        (new, or whose hash Redis lost: their rows are walked from the first)."""
        queues = self.index.registry.known_queues()
        found = self.index.horizons.read(queues)
        return [
            Walk(queue, found.get(queue, NOT_BEGUN))
            for queue in queues
            if queue not in found
            or found[queue].walk is not None
            or found[queue].needs_raising(now, self.index.horizons.ahead)
        ]

    def _walk_to_limits(self, now: Callable[[], float], on_batch: Callable[[], None]) -> None:
        """Under the lock: raise the limits that are near and set those of queues without
        one, each written before its walk reads the table, and walk every queue to its
        limit, in the foreground (the rows due in about a twelfth of the horizon; more only
        after every run stopped for longer than that, or for a queue walked from its first
        row). The horizons are read again under the lock: another run may have walked
        meanwhile."""
        ahead = self.index.horizons.ahead
        try:
            for walk in self._horizon_walks(now()):
                if walk.done:
                    walk.raise_to(now() + ahead)
                    self.index.horizons.begin(walk.queue, walk.limit, walk.cursor_mark())
                elif walk.limit == NOT_BEGUN.limit:
                    walk.limit = now() + ahead
                    self.index.horizons.begin(walk.queue, walk.limit, "")
                self._through(walk, on_batch)
        finally:
            self._release()

    def _finishing(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        """Stop the thread finishing the rebuild, if one runs; it leaves its marks for the
        next run and lets go of the lock."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _take_over(self, now: Callable[[], float], on_batch: Callable[[], None]) -> None:
        try:
            self._started = time.monotonic()
            walks = self._walks(now())
            for walk in walks:  # every queue's due rows, a queue at a time
                while not walk.done and not walk.past(now()):
                    on_batch()
                    self._step(walk)
            left = [walk for walk in walks if not walk.done]
            foreground_until = time.monotonic() + FOREGROUND
            while left and time.monotonic() < foreground_until:
                on_batch()
                self._step(left[0])
                left = [walk for walk in left if not walk.done]
        except BaseException:
            self._release()  # the next run goes on from the marks at once, not in 30 s
            raise
        if not left:
            self._finish()
            return
        self._thread = threading.Thread(
            target=self._go_on, args=(left,), name="delayq-rebuild", daemon=True
        )
        self._thread.start()

    def _walks(self, now: float) -> list[Walk]:
        """The rebuild's walks, up to each queue's limit: set for every queue when the
        rebuild begins, before any row is read; kept when it goes on from a stopped run,
        unless the limit is near (that run stopped long ago)."""
        self._begun, fresh = self.index.registry.rebuild_begun(time.time())
        queues = Jobs(self.table).pending_queues()
        self.index.registry.register(queues)
        found = {} if fresh else self.index.horizons.read(queues)
        walks = []
        ahead = self.index.horizons.ahead
        for queue in queues:
            walk = Walk(queue, found.get(queue, NOT_BEGUN))
            if queue not in found or (walk.done and found[queue].needs_raising(now, ahead)):
                if queue in found:
                    walk.raise_to(now + ahead)
                else:
                    walk.limit = now + ahead
                self.index.horizons.begin(queue, walk.limit, walk.cursor_mark())
            walks.append(walk)
        return walks

    def _rebuild_walks(self) -> list[Walk]:
        """The rebuild's walks as another run's marks show them."""
        queues = Jobs(self.table).pending_queues()
        found = self.index.horizons.read(queues)
        return [Walk(queue, found.get(queue, NOT_BEGUN)) for queue in queues]

    def _step(self, walk: Walk) -> None:
        self._put_back(walk, self._read(walk, walk.cursor))

    def _through(
        self, walk: Walk, on_batch: Callable[[], None], stop: threading.Event | None = None
    ) -> None:
        """Walk `walk` to its end (or until `stop` is set), reading each batch while the one
        before goes back on the schedule, so that the table and Redis work at once."""
        with ThreadPoolExecutor(1, thread_name_prefix="delayq-rebuild-read") as reader:
            try:
                ahead = reader.submit(self._read, walk, walk.cursor)
                while not walk.done and not (stop is not None and stop.is_set()):
                    on_batch()
                    batch = ahead.result()
                    if batch.count == BATCH and batch.last is not None:
                        ahead = reader.submit(self._read, walk, batch.last)
                    self._put_back(walk, batch)
            finally:
                reader.submit(close_connection, self.table)  # the reading thread's connection

    def _read(self, walk: Walk, cursor: DueCursor | None) -> DueBatch:
        return DueRows(self.table).pending_by_due(walk.queue, cursor, BATCH, walk.limit)

    def _put_back(self, walk: Walk, batch: DueBatch) -> None:
        """Put `batch` back on the schedule and note how far the walk has gone; the lock
        renewed first, so a run that lost it (it stalled past the lock's life) stops here."""
        self.lock.reacquire()
        if batch.packed:
            self.index.schedule.add_packed(walk.queue, [batch.packed], keep_existing=True)
        self.added += batch.count
        if batch.count < BATCH or batch.last is None:
            walk.done = True
            self.index.horizons.note(walk.queue, None)
        else:
            walk.cursor = batch.last
            self.index.horizons.note(walk.queue, batch.last.mark())

    def _go_on(self, walks: list[Walk]) -> None:
        try:
            for walk in walks:
                self._through(walk, lambda: None, self._stop)
            if self._stop.is_set():
                logger.warning(
                    "put back %d schedule entries from the table; the next run goes on from there",
                    self.added,
                )
                self._release()
            else:
                self._finish()
        except LockError:
            logger.warning("the schedule's rebuild was taken over by another run")
        except Exception:
            # The next pass's run (this one or another) goes on from the marks.
            logger.exception("the schedule's rebuild failed; the next run goes on with it")
            self._release()
        finally:
            close_connection(self.table)  # this thread's

    def _finish(self, log: bool = True) -> None:
        # A row that finished after a batch read it went back as a stale entry, which a claim
        # would drop; gone now, so peek and the counts never show it.
        stale: dict[str, list[int]] = {}
        for queue, job_id in DueRows(self.table).finished_since(self._begun - LOOKBACK):
            stale.setdefault(queue, []).append(job_id)
        for queue, ids in stale.items():
            self.index.schedule.remove(queue, ids)
        self.index.registry.mark_complete()
        self._release()
        seconds = time.monotonic() - self._started
        if log:  # a run's news; `init` prints what it did
            logger.warning(
                "Redis had no schedule index; rebuilt %d entries from the table in %.1f s",
                self.added,
                seconds,
            )

    def _release(self) -> None:
        with contextlib.suppress(LockError):  # it lapsed meanwhile: another run may hold it
            self.lock.release()
