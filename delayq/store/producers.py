"""What a producer writes beside its rows, and which queues exist.

A producer's rows are the jobs; beside them it notes its queues in the registry (so that runs
visit them at once), gives a queue it finds empty its first horizon limit (so that its jobs
due later stay off the schedule from the first), and puts the new jobs on the schedule. All
three are Redis's, so none of them may rest on what the producer remembers having written:
an add that finds its queue without a horizon (Redis lost it) makes the producer note the
queue and ask again, as at its first add. Which queues exist is the table's answer
(`queues_in_use`); the registry only tells a run of a queue between two readings of it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

import redis

from .backend_errors import one_line
from .index.parts import Index
from .index.schedule import Packed
from .table.jobs import Jobs
from .table.model import Table

logger = logging.getLogger(__name__)


def queues_in_use(table: Table, index: Index, note: bool = False) -> list[str]:
    """Every queue a run visits or a look shows: those with pending or running rows, as the
    table's (status, queue, run_at) SQL index says (one lookup a queue), those the registry
    names (noted by producers and `run --queue`), and the default queue. With `note`, the
    table's queues the registry lacks (it lost them with Redis's data, or a producer writing
    rows itself never noted them) are noted there again."""
    pending = Jobs(table).pending_queues()
    known = index.registry.known_queues()
    if note and (missing := sorted(set(pending) - set(known))):
        index.registry.register(missing)
    return sorted({*pending, *known})


class Producer:
    """One client's notes beside the rows it adds: `before` its rows are written, `after`
    they are committed."""

    def __init__(self, table: Table, index: Index, redis_url: str | None) -> None:
        self.table = table
        self.index = index
        self.redis_url = redis_url  # named in a warning, its password hidden
        self._noted: set[str] = set()  # queues this client noted since Redis last lost them

    def before(self, queues: Iterable[str], now: float) -> list[str]:
        """Give each of `queues` this client has not noted yet a horizon, if it has no
        pending row (checked before ours are written, so none can be missing from the
        schedule; a queue with rows and no horizon is one a run walks); those queues."""
        new = sorted(set(queues) - self._noted)
        for queue in new:
            if not Jobs(self.table).has_pending(queue):
                self.index.horizons.start(queue, now + self.index.horizons.ahead)
        return new

    def after(
        self,
        new: Sequence[str],
        texts: Sequence[Mapping[str, Packed]],
        ids: Sequence[int],
        moved: bool = False,
    ) -> None:
        """The rows are committed: note the `new` queues in the registry and put the jobs on
        the schedule (`moved`: rows a replace moved, as `Index.added`). A Redis error loses
        nothing (the rows are the jobs, and runs find them), so it is a warning, and the
        queues are asked about again at their next add."""
        try:
            if new:
                self.index.registry.register(new)
            lost = self.index.added(texts, moved)
        except redis.RedisError as exc:
            logger.warning(
                "jobs %s saved but not indexed (%s); a run re-indexes them once they are due",
                ",".join(map(str, ids[:10])),
                one_line(exc, self.redis_url),
            )
            return
        self._noted.update(new)
        self._noted.difference_update(lost)
