"""A run's bookkeeping thread: while the main thread calls handlers, it leases the next batch
and writes group commits, one task at a time in the order handed over, on its own database
connection, so that the servers' work overlaps the handlers'. Handlers never run here: they
stay on the main thread, under its time limit.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ..base.threads import keep_signals_off_this_thread
from ..store.table import Table, close_connection


class Bookkeeper(ThreadPoolExecutor):
    def __init__(self, table: Table) -> None:
        super().__init__(
            max_workers=1,
            thread_name_prefix="delayq-bookkeeper",
            initializer=keep_signals_off_this_thread,
        )
        self.table = table

    def close(self) -> None:
        """Finish what was handed over, then close the thread's database connection."""
        self.submit(close_connection, self.table)
        self.shutdown(wait=True)
