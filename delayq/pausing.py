"""Pausing, resuming and limiting queues (their rate and concurrency), the part of Queue that
changes a queue's flow settings: in the table first (queue_settings.py), then in their Redis
mirror (flow.py), where every run's claim reads them. queue.py adds and runs jobs;
reading.py answers questions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .config import validate_queue_name
from .durations import parse_concurrency, parse_rate
from .errors import BadInput
from .reading import QueueReads
from .store.backend_errors import backend_errors
from .store.table import leases, queue_settings
from .store.table.model import Table
from .store.table.queue_settings import UNCHANGED, QueueFlow, Unchanged

# A write of queue_settings (pause, resume): (table, queues, now) -> their settings now.
SettingsChange = Callable[[Table, Sequence[str], float], dict[str, QueueFlow]]


class QueuePausing(QueueReads):
    """Pause, resume, and what is paused."""

    @backend_errors
    def pause(self, *names: str, now: float | None = None) -> dict[str, QueueFlow]:
        """Stop every run, on every host, from starting the jobs of queues `names`: no claim
        takes them once this returns, and a run holding some it has not started hands them
        back within a second. Jobs running finish; adds and cancels go on; a queue paused
        already stays paused since its first pause. Its due jobs are never missed while it
        is paused. Returns each queue's settings."""
        return self._change(queue_settings.pause, names, now)

    @backend_errors
    def resume(self, *names: str, now: float | None = None) -> dict[str, QueueFlow]:
        """Let runs start the jobs of queues `names` again; the overdue window of a job that
        fell due while its queue was paused counts from now. A queue not paused is left as it
        is. Returns each queue's settings."""
        return self._change(queue_settings.resume, names, now)

    def _change(
        self, write: SettingsChange, names: Sequence[str], now: float | None
    ) -> dict[str, QueueFlow]:
        """Write the change to the queues' settings in the table, then mirror it into Redis."""
        queues = _queues(names)
        # Forgotten first: whatever fails from here on, a claim finds no mirror and asks the
        # table, which holds the change as soon as it commits.
        self.index.flow.forget(queues)
        settings = write(self.table, queues, self._now(now))
        self.index.flow.mirror(settings)
        return settings

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
        if isinstance(rate, Unchanged) and isinstance(concurrency, Unchanged):
            raise BadInput("give rate= or concurrency= (None lifts that limit)")
        parsed_rate = rate if rate is None or isinstance(rate, Unchanged) else parse_rate(rate)
        slots = concurrency
        if slots is not None and not isinstance(slots, Unchanged):
            slots = parse_concurrency(slots)

        def write(table: Table, queues: Sequence[str], at: float) -> dict[str, QueueFlow]:
            settings = queue_settings.limit(table, queues, at, parsed_rate, slots)
            if not isinstance(slots, Unchanged):
                # Before the claims can count them: the jobs running already hold slots.
                for queue in queues:
                    running = [] if slots is None else leases.running_leases(table, queue)
                    self.index.flow.reset_slots(queue, running)
            return settings

        return self._change(write, names, now)

    @backend_errors
    def limited(self) -> dict[str, QueueFlow]:
        """{queue: its settings} of every queue with a rate or concurrency limit, as the
        table holds them."""
        return {
            queue: flow for queue, flow in queue_settings.flows(self.table).items() if flow.limited
        }

    @backend_errors
    def paused(self) -> dict[str, QueueFlow]:
        """{queue: its settings} of every paused queue, as the table holds them."""
        return {
            queue: flow for queue, flow in queue_settings.flows(self.table).items() if flow.paused
        }

    @backend_errors
    def unknown(self, names: Sequence[str]) -> list[str]:
        """Those of `names` no job has used and no pause has named: neither registered, nor
        holding a schedule entry or a pending row, nor in the settings table. A typo, most
        likely; or a queue whose first job is yet to come."""
        queues = _queues(names)
        known = set(self.index.registry.known_queues()) | set(queue_settings.flows(self.table))
        return [
            name
            for name in queues
            if name not in known
            and not self.index.schedule.size(name)
            and not queue_settings.holds_jobs(self.table, name)
        ]


def _queues(names: Sequence[str]) -> list[str]:
    if not names:
        raise BadInput("name at least one queue")
    return [validate_queue_name(name) for name in dict.fromkeys(names)]
