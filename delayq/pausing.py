"""Pausing, resuming and limiting queues (their rate and concurrency), the part of Queue that
changes a queue's flow settings: each method hands the change to delayq/flow/settings.py, which
writes it in the table first (queue_settings.py), then in their Redis mirror (flow.py), where
every run's claim reads them. queue.py adds and runs jobs; reading.py answers questions.
"""

from __future__ import annotations

from collections.abc import Sequence

from .flow import settings
from .reading import QueueReads
from .store.backend_errors import backend_errors
from .store.table.queue_settings import UNCHANGED, QueueFlow, Unchanged


class QueuePausing(QueueReads):
    """Pause, resume, and what is paused."""

    @backend_errors
    def pause(self, *names: str, now: float | None = None) -> dict[str, QueueFlow]:
        """Stop every run, on every host, from starting the jobs of queues `names`: no claim
        takes them once this returns, and a run holding some it has not started hands them
        back within a second. Jobs running finish; adds and cancels go on; a queue paused
        already stays paused since its first pause. Its due jobs are never missed while it
        is paused. Returns each queue's settings."""
        return settings.pause(self.table, self.index, names, now)

    @backend_errors
    def resume(self, *names: str, now: float | None = None) -> dict[str, QueueFlow]:
        """Let runs start the jobs of queues `names` again; the overdue window of a job that
        fell due while its queue was paused counts from now. A queue not paused is left as it
        is. Returns each queue's settings."""
        return settings.resume(self.table, self.index, names, now)

    @backend_errors
    def limit(
        self,
        *names: str,
        rate: str | None | Unchanged = UNCHANGED,
        concurrency: int | None | Unchanged = UNCHANGED,
        now: float | None = None,
    ) -> dict[str, QueueFlow]:
        """Limit queues `names` across every run on every host together: to at most `rate`
        job starts in any window of its period ("10/s", "600/m", "36000/h"), and to at most
        `concurrency` of their jobs running at once (4). None lifts that limit; one not given
        stays as it is. A job a limit holds back stays pending in its place and starts as
        soon as the limit allows. Returns each queue's settings."""
        return settings.limit(self.table, self.index, names, rate, concurrency, now)

    @backend_errors
    def limited(self) -> dict[str, QueueFlow]:
        """{queue: its settings} of every queue with a rate or concurrency limit, as the
        table holds them."""
        return settings.limited(self.table)

    @backend_errors
    def paused(self) -> dict[str, QueueFlow]:
        """{queue: its settings} of every paused queue, as the table holds them."""
        return settings.paused(self.table)

    @backend_errors
    def unknown(self, names: Sequence[str]) -> list[str]:
        """Those of `names` no job has used and no pause has named: neither registered, nor
        holding a schedule entry or a pending row, nor in the settings table. A typo, most
        likely; or a queue whose first job is yet to come."""
        return settings.unknown(self.table, self.index, names)
