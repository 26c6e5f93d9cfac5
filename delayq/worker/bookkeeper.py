"""A run's bookkeeping thread: while the main thread calls handlers, it leases the next batch
and writes group commits, one task at a time in the order handed over, on its own database
connection, so that the servers' work overlaps the handlers'. Handlers never run here: they
stay on the main thread, under its time limit.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from ..store.table import Table
from ..threads import keep_signals_off_this_thread

T = TypeVar("T")


class Bookkeeper:
    def __init__(self, table: Table) -> None:
        self.table = table
        self._executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="delayq-bookkeeper",
            initializer=keep_signals_off_this_thread,
        )

    def submit(self, task: Callable[..., T], *args: object) -> Future[T]:
        return self._executor.submit(task, *args)

    def close(self) -> None:
        """Finish what was handed over, then close the thread's database connection."""
        self._executor.submit(self.table.db.close)
        self._executor.shutdown(wait=True)
