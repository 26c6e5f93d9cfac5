"""The runners a Queue runs jobs with: its own, made by its first run and kept until it
closes (the handlers' event loop and the clients they keep live as long as it does), and one
for each run another thread starts meanwhile, closed as that run ends.
"""

from __future__ import annotations

import os
import threading

from ..config import Settings
from ..store.index import Index
from ..store.table import Table
from .interrupts import GracefulStop
from .liveness import Liveness
from .options import RunOptions
from .report import OutcomeCallback, RunReport
from .runner import Runner


class Runners:
    """A Queue's runner, and one of their own for the runs that overlap it."""

    def __init__(self, table: Table, index: Index) -> None:
        self.table = table
        self.index = index
        self._own: Runner | None = None
        self._running = threading.Lock()

    def run(
        self,
        settings: Settings,
        options: RunOptions,
        *,
        now: float | None,
        on_outcome: OutcomeCallback | None,
        stop: GracefulStop | None,
        liveness: Liveness | None,
    ) -> RunReport:
        """A pass, or with `options.loop` a loop of passes, on the Queue's runner; `settings`
        are the Queue's as they are now (a runner is made with them, and kept)."""
        if not self._running.acquire(blocking=False):
            # Another thread runs jobs on this Queue now: this call gets a runner of its own,
            # which leaves the `on_shutdown` functions to the Queue's runner.
            runner = Runner(settings, self.table, self.index)
            try:
                return runner.run(
                    options, now=now, on_outcome=on_outcome, stop=stop, liveness=liveness
                )
            finally:
                runner.close(shutdown=False)
        try:
            if self._own is None or self._own.pid != os.getpid():
                # Made anew in a child forked after a run: the parent's threads are not here.
                self._own = Runner(settings, self.table, self.index)
            return self._own.run(
                options, now=now, on_outcome=on_outcome, stop=stop, liveness=liveness
            )
        finally:
            self._running.release()

    def close(self) -> None:
        """End the Queue's runner, if it ran jobs in this process: its threads, the handlers'
        `on_shutdown` functions and their event loop."""
        if self._own is not None and self._own.pid == os.getpid():
            self._own.close()
        self._own = None
