"""A run's bookkeeping thread: while the main thread calls handlers, it leases the next batch
and writes group commits, so that the database's and Redis's work overlaps the handlers'
instead of adding to it.

Tasks run one at a time, in the order they were handed over, on the thread's own database
connection. Handlers never run here: they stay on the main thread, under its time limit.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from . import interrupts
from .models import Job

T = TypeVar("T")


class Bookkeeper:
    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="delayq-bookkeeper",
            initializer=interrupts.keep_signals_off_this_thread,
        )

    def submit(self, task: Callable[..., T], *args: object) -> Future[T]:
        return self._executor.submit(task, *args)

    def close(self) -> None:
        """Finish what was handed over, then close the thread's database connection."""
        self._executor.submit(_close_connection)
        self._executor.shutdown(wait=True)


def _close_connection() -> None:
    """Close this thread's connection, if the jobs' database was ever bound."""
    database = Job._meta.database
    if getattr(database, "obj", database) is not None:
        database.close()
