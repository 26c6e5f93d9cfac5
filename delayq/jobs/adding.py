"""Adding jobs, the path every add takes: each new job checked into its row before anything
is written (spec.py), a new queue noted and given its first horizon limit (the store's
`Producer.before`), the rows inserted, then their schedule entries written (`Producer.after`).
A replace moves the pending job with the same key under that key's mutex; an add inside the
caller's transaction leaves the schedule to a run's sweep, once it commits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..config import Settings, validate_queue_name
from ..errors import BadInput
from ..store.index import Index, packed_by_queue
from ..store.producers import Producer
from ..store.table import Inserts, Jobs, Table, add_through, utc_stamp
from .spec import JobSpec, to_row


class Adder:
    """Adds jobs to one table and its index, on the clock the index keeps, each job checked
    against the settings it is given (the Queue's, as they are at that call)."""

    def __init__(self, table: Table, index: Index, redis_url: str | None) -> None:
        self.table = table
        self.index = index
        self.producer = Producer(table, index, redis_url)
        self.clock: Callable[[], float] = index.clock.now

    def add(
        self,
        settings: Settings,
        spec: JobSpec,
        *,
        replace: bool,
        check: bool,
        now: float | None,
        using: Any,
    ) -> int:
        """One job's id: added, or with `replace` the pending job with its key moved."""
        if replace:
            if using is not None:
                raise BadInput("replace=True cannot be used with using=: it takes delayq's lock")
            return self.replace(settings, spec, check=check, now=now)
        return self.add_many(settings, [spec], check=check, now=now, using=using)[0]

    def replace(self, settings: Settings, spec: JobSpec, *, check: bool, now: float | None) -> int:
        """Move the pending job with `spec`'s key to `spec`, or add it if none is pending."""
        if not spec.ext:
            raise BadInput("--replace needs --ext: the key of the job to replace")
        now = self.clock() if now is None else now
        row = to_row(spec, now, settings, set(), check=check)
        new = self.producer.before([spec.queue], now)

        def schedule(replaced: tuple[int, list[int]]) -> None:
            # Under the key's mutex: of two replaces, the later one's entry is the one left.
            texts = [packed_by_queue([row], [replaced[0]])]
            self.producer.after(new, texts, [replaced[0]], moved=True)

        job_id, dropped = Jobs(self.table).replace_pending(row, now, schedule)
        self.index.schedule.remove(spec.queue, dropped)  # cancelled for good: no lock needed
        return job_id

    def add_many(
        self,
        settings: Settings,
        specs: Iterable[JobSpec],
        *,
        check: bool,
        now: float | None,
        using: Any,
    ) -> list[int]:
        """The new jobs' ids: one transaction, one Redis round trip per queue, or with `using`
        rows on the caller's connection that a run indexes once they commit."""
        now = self.clock() if now is None else now
        located: set[tuple[str, str]] = set()
        stamp = utc_stamp(now)

        def to_rows(part: Sequence[JobSpec]) -> list[dict[str, Any]]:
            return [to_row(spec, now, settings, located, stamp, check) for spec in part]

        specs = list(specs)
        if using is not None:  # a run's sweep indexes them once they commit
            return add_through(self.table, using, to_rows(specs))
        if len(specs) <= 1:
            rows = to_rows(specs)  # checked before the database is touched
            if not rows:
                return []
            new = self.producer.before([rows[0]["queue"]], now)
            ids = [Inserts(self.table).insert_one(rows[0])]
            texts = [packed_by_queue(rows, ids)]
        else:
            queues = [validate_queue_name(spec.queue) for spec in specs]
            new = self.producer.before(queues, now)
            # The schedule's entries are packed part by part while the next part is written.
            ids, texts = Inserts(self.table).insert_many(specs, to_rows, packed_by_queue)
        self.producer.after(new, texts, ids)
        return ids
