"""Rebuilding the schedule after Redis lost it, due jobs first.

Every pending row is in the table, so a Redis that lost its data (a restart without
persistence, a FLUSHALL) costs a rebuild, never a job. A rebuild walks each queue's pending
rows in due order, a range of the (status, queue, run_at) index a batch at a time, and puts
them back, noting after each batch how far it has gone. The first run that finds the index
incomplete takes the rebuild's lock and puts back every queue's due rows before its pass
claims (a few batches: seconds at millions of pending rows), then the rest from a thread of its
own while it runs jobs. A run that finds the lock taken waits only until each queue's mark is
past now, then claims too: it neither waits for the whole rebuild nor repeats it. A run that
stops hands its marks to the next one, and a lock whose run died lapses and is taken over.

Jobs added or cancelled meanwhile: a producer's add puts its entry on the schedule itself,
and the rebuild leaves an entry already there as it is (ZADD NX). An entry the rebuild puts
back for a row cancelled or started after it read it is a stale entry, as after any race with
the schedule: a claim finds its row not pending and drops it; it never runs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from redis.exceptions import LockError

from ..store import queries
from ..store.database import close_connection
from ..store.index import Index
from ..store.queries import DueCursor
from ..store.registry import DONE
from ..store.table import Table

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


class Walk:
    """One queue's walk of its pending rows in due order, from its last mark."""

    def __init__(self, queue: str, mark: str | None) -> None:
        self.queue = queue
        self.done = mark == DONE
        self.cursor = None if mark is None or self.done else DueCursor.from_mark(mark)

    def past(self, now: float) -> bool:
        """Whether every row of the queue due by `now` is back on the schedule."""
        due_at = None if self.cursor is None else self.cursor.run_at
        return self.done or (due_at is not None and due_at >= now)


def marks_past(marks: dict[str, str], queues: list[str], now: float) -> bool:
    """Whether the rebuild's marks say every row due by `now` of `queues` is back."""
    return all(Walk(queue, marks.get(queue)).past(now) for queue in queues)


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

    def due_first(self, now: Callable[[], float], on_batch: Callable[[], None]) -> int:
        """Return once every pending row due by now is on the schedule: at once if the index
        is complete, else after putting the due rows back here, or after the run rebuilding
        has; the entries added here. `on_batch` is called before each batch and each wait: a
        rebuild is progress a supervising parent must not take for a stuck run."""
        added = self.added
        registry = self.index.registry
        while not self._finishing() and not registry.is_complete():
            if self.lock.acquire(blocking=False):
                self._take_over(now, on_batch)
                break
            queues = queries.pending_queues(self.table)
            if marks_past(registry.rebuild_marks(), queues, now()):
                break
            on_batch()
            time.sleep(POLL)
        return self.added - added

    def rebuild_all(self, on_batch: Callable[[], None]) -> int:
        """Rebuild the whole schedule here, waiting for a run that holds the rebuild to drop
        or lose it, then going on from its marks (`delayq init`); the entries added."""
        registry = self.index.registry
        while not registry.is_complete():
            if self.lock.acquire(blocking=False):
                self._started = time.monotonic()
                for walk in self._walks():
                    self._through(walk, on_batch)
                self._finish(log=False)
                break
            on_batch()
            time.sleep(POLL)
        return self.added

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
        self._started = time.monotonic()
        walks = self._walks()
        for walk in walks:  # every queue's due rows, a queue at a time
            while not walk.past(now()):
                on_batch()
                self._step(walk)
        left = [walk for walk in walks if not walk.done]
        foreground_until = time.monotonic() + FOREGROUND
        while left and time.monotonic() < foreground_until:
            on_batch()
            self._step(left[0])
            left = [walk for walk in left if not walk.done]
        if not left:
            self._finish()
            return
        self._thread = threading.Thread(
            target=self._go_on, args=(left,), name="delayq-rebuild", daemon=True
        )
        self._thread.start()

    def _walks(self) -> list[Walk]:
        self._begun = self.index.registry.rebuild_begun(time.time())
        queues = queries.pending_queues(self.table)
        self.index.registry.register(queues)
        marks = self.index.registry.rebuild_marks()
        return [Walk(queue, marks.get(queue)) for queue in queues]

    def _step(self, walk: Walk) -> None:
        self._put_back(walk, self._read(walk.queue, walk.cursor))

    def _through(
        self, walk: Walk, on_batch: Callable[[], None], stop: threading.Event | None = None
    ) -> None:
        """Walk `walk` to its end (or until `stop` is set), reading each batch while the one
        before goes back on the schedule, so that the table and Redis work at once."""
        with ThreadPoolExecutor(1, thread_name_prefix="delayq-rebuild-read") as reader:
            try:
                ahead = reader.submit(self._read, walk.queue, walk.cursor)
                while not walk.done and not (stop is not None and stop.is_set()):
                    on_batch()
                    batch = ahead.result()
                    if batch.count == BATCH and batch.last is not None:
                        ahead = reader.submit(self._read, walk.queue, batch.last)
                    self._put_back(walk, batch)
            finally:
                reader.submit(close_connection, self.table)  # the reading thread's connection

    def _read(self, queue: str, cursor: DueCursor | None) -> queries.DueBatch:
        return queries.pending_by_due(self.table, queue, cursor, BATCH)

    def _put_back(self, walk: Walk, batch: queries.DueBatch) -> None:
        """Put `batch` back on the schedule and note how far the walk has gone; the lock
        renewed first, so a run that lost it (it stalled past the lock's life) stops here."""
        self.lock.reacquire()
        if batch.packed:
            self.index.schedule.add_packed(walk.queue, [batch.packed], keep_existing=True)
        self.added += batch.count
        if batch.count < BATCH or batch.last is None:
            walk.done = True
            self.index.registry.note_rebuilt(walk.queue, DONE)
        else:
            walk.cursor = batch.last
            self.index.registry.note_rebuilt(walk.queue, batch.last.mark())

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
        for queue, job_id in queries.finished_since(self.table, self._begun - LOOKBACK):
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
