"""connect(): a Queue on the configured database and Redis, or on the embedded default (a
SQLite file and a private redis-server under DELAYQ_HOME) for whichever is not configured;
connect_async(): the same Queue's calls as coroutines (AsyncQueue). Each runs the sync
Queue's own code on a small pool of threads, so the SQL, the checks and the errors are
Queue's; the event loop only waits on a future."""

from __future__ import annotations

import asyncio
import functools
import queue as fifo
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, Concatenate, ParamSpec, TypeVar

import redis

from .base.threads import keep_signals_off_this_thread
from .config import Settings, load_settings
from .errors import BackendUnavailable, DelayqError
from .queue import Queue
from .store import embedded
from .store.backend_errors import one_line
from .store.index import Index
from .store.table import close_connection, open_database, sqlite_url
from .store.urls import open_redis


def connect(settings: Settings | None = None, **overrides: Any) -> Queue:
    """A Queue from `settings` (default: the environment and config file) plus overrides,
    e.g. connect(database_url=..., redis_url=..., handlers=[...])."""
    settings = (settings or load_settings()).with_overrides(**overrides)
    database_url = settings.database_url or sqlite_url(embedded.database_file(settings.home))
    db = open_database(database_url)
    if settings.redis_url:
        try:
            client = open_redis(settings.redis_url)
        except redis.RedisError as exc:  # a Cluster's client asks its nodes for the hash slots now
            raise BackendUnavailable(f"Redis error: {one_line(exc, settings.redis_url)}") from exc
    else:
        client = embedded.open_client(settings.home, settings.embedded_idle)
    return Queue(settings, db, Index(client, settings.horizon))


def connect_async(settings: Settings | None = None, **overrides: Any) -> AsyncQueue:
    """An AsyncQueue on what connect() with these arguments opens; the settings are checked
    now, the servers reached by its first call, off the event loop."""
    return AsyncQueue((settings or load_settings()).with_overrides(**overrides))


THREADS = 8  # calls in flight at once: each thread holds one database connection
P = ParamSpec("P")
T = TypeVar("T")
Work = tuple[Future[Any], Callable[[Queue], Any]]


def _in_thread(
    method: Callable[Concatenate[Queue, P], T],
) -> Callable[Concatenate[AsyncQueue, P], Coroutine[Any, Any, T]]:
    """A coroutine method that runs `method` on the pool with the same arguments."""

    @functools.wraps(method)
    async def call(self: AsyncQueue, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._call(lambda queue: method(queue, *args, **kwargs))

    return call


class AsyncQueue:
    """Add, cancel, retry and inspect jobs from a coroutine: `await aq.add(...)`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._queue: Queue | None = None
        self._opening = threading.Lock()
        self._work: fifo.SimpleQueue[Work | None] = fifo.SimpleQueue()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._serve, name="delayq-producer", daemon=True)
            for _ in range(THREADS)
        ]
        for thread in self._threads:
            thread.start()

    init = _in_thread(Queue.init)
    add = _in_thread(Queue.add)
    add_many = _in_thread(Queue.add_many)
    cancel = _in_thread(Queue.cancel)
    retry = _in_thread(Queue.retry)
    reach = _in_thread(Queue.reach)
    show = _in_thread(Queue.show)
    schedule_of = _in_thread(Queue.schedule_of)
    history = _in_thread(Queue.history)
    status = _in_thread(Queue.status)
    list_jobs = _in_thread(Queue.list_jobs)
    peek = _in_thread(Queue.peek)
    metrics = _in_thread(Queue.metrics)
    due_count = _in_thread(Queue.due_count)

    async def _call(self, work: Callable[[Queue], T]) -> T:
        if self._closed:
            raise DelayqError("this AsyncQueue is closed; open another with connect_async()")
        future: Future[T] = Future()
        self._work.put((future, work))
        return await asyncio.wrap_future(future)

    def _serve(self) -> None:
        keep_signals_off_this_thread()
        try:
            while (item := self._work.get()) is not None:
                future, work = item
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(work(self._opened()))
                    except Exception as exc:  # handed to the awaiting coroutine, raised there
                        future.set_exception(exc)
        finally:
            if self._queue is not None:
                # This thread's connection: peewee keeps one per thread.
                close_connection(self._queue.table)

    def _opened(self) -> Queue:
        # Opened by the first call, on a pool thread: connecting may start the embedded
        # server or ask a Cluster for its hash slots, which the event loop must not wait for.
        with self._opening:
            if self._queue is None:
                self._queue = connect(self.settings)
            return self._queue

    async def aclose(self) -> None:
        """Finish the calls already made, then close every connection; calls after it fail."""
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._work.put(None)
        await asyncio.get_running_loop().run_in_executor(None, self._join)

    def _join(self) -> None:
        for thread in self._threads:
            thread.join()
        if self._queue is not None:
            self._queue.index.client.close()

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
