"""Keeping a run's leases alive: a heartbeat thread, one for the runner process, renews the
leases of the pass in progress every third of the lease, and the running slots its jobs of
concurrency-limited queues hold (HeldSlots) with them; a LeaseDeadline, which it shares with
the pass, says when the leases may have lapsed. The lease only has to outlive a dead run,
not a slow job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

from ..store.index.parts import Index
from ..store.table import leases
from ..store.table.database import close_connection
from ..store.table.model import Table
from ..threads import Periodic

logger = logging.getLogger(__name__)


class LeaseDeadline:
    """Monotonic time by which this run's leases may have lapsed: pushed out by the heartbeat
    and by each new batch's lease, read by the main thread before it starts a job."""

    def __init__(self, lease: float) -> None:
        self.lease = lease
        self._lock = threading.Lock()
        self._at = float("inf")  # no lease held yet

    def leased(self, leased_at: float) -> None:
        """A batch was leased at `leased_at`: its rows' leases run at least that long. A
        deadline later than that can only come from a beat that renewed them too."""
        with self._lock:
            fresh = leased_at + self.lease
            self._at = fresh if self._at == float("inf") else max(self._at, fresh)

    def renewed(self, renewed_at: float) -> None:
        """Every held lease was renewed at `renewed_at`. A renewal that came after the
        deadline cannot vouch for the gap: another run may have taken jobs over in it, so
        the deadline stays past and the main thread checks what it still holds."""
        with self._lock:
            if renewed_at < self._at:
                self._at = renewed_at + self.lease

    def reasserted(self, renewed_at: float) -> None:
        """The main thread renewed what it still holds at `renewed_at`."""
        with self._lock:
            self._at = renewed_at + self.lease

    def may_lapse(self) -> bool:
        """Whether the heartbeat, renewing every third of the lease, fell behind (a stalled
        thread, a busy database), so that a recovering run may take our jobs over."""
        with self._lock:
            return time.monotonic() > self._at - self.lease / 3


class HeldSlots:
    """The running slots a pass's jobs of concurrency-limited queues hold, {queue: ids}: the
    drains add a job's as it is claimed and free it as the job ends or goes back, and the
    heartbeat renews those held with the leases, so that a slot lapses with its lease (a
    killed run's) and never while its job runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, set[int]] = {}

    def hold(self, queue: str, job_ids: list[int]) -> None:
        with self._lock:
            self._held.setdefault(queue, set()).update(job_ids)

    def release(self, queue: str, job_ids: list[int]) -> list[int]:
        """Stop holding the slots of those of `job_ids` that held one; returns them."""
        with self._lock:
            held = self._held.get(queue, set())
            released = [job_id for job_id in job_ids if job_id in held]
            held.difference_update(released)
            return released

    def held(self) -> dict[str, list[int]]:
        with self._lock:
            return {queue: sorted(ids) for queue, ids in self._held.items() if ids}


@dataclass(frozen=True)
class Watched:
    """The pass whose leases the heartbeat renews: its token, clock, deadline and slots."""

    token: str
    clock: Callable[[], float]
    deadline: LeaseDeadline
    slots: HeldSlots


class Heartbeat(Periodic):
    """A thread that renews every lease of the pass it is `watching`, from the runner's first
    pass to its close; between passes it beats on nothing and asks nothing of the database."""

    def __init__(self, table: Table, index: Index, lease: float) -> None:
        self.table = table
        self.index = index
        self.lease = lease
        self._lock = threading.Lock()
        self._watched: Watched | None = None
        closing = partial(close_connection, table)  # the thread's own connection, as it ends
        super().__init__("delayq-heartbeat", lease / 3, self._beat, closing)

    @contextmanager
    def watching(
        self, token: str, clock: Callable[[], float], deadline: LeaseDeadline, slots: HeldSlots
    ) -> Iterator[None]:
        """Renew the leases and `slots` of run `token` until the block ends (once `start`ed)."""
        with self._lock:
            self._watched = Watched(token, clock, deadline, slots)
        try:
            yield
        finally:
            with self._lock:
                self._watched = None

    def _beat(self) -> None:
        with self._lock:
            watched = self._watched
        if watched is None:
            return
        try:
            for _ in range(3):
                renewed_at = time.monotonic()
                lease_until = watched.clock() + self.lease
                self._hold_slots(watched.slots, lease_until)
                leases.renew_leases(self.table, watched.token, lease_until)
                watched.deadline.renewed(renewed_at)
                # A beat held up by a stalled database (a locked table) wrote a deadline
                # reckoned before the stall, maybe past already: beat again at once, so
                # that the jobs still running are not left to recovering runs to take.
                if time.monotonic() - renewed_at < self.lease / 3:
                    break
        except Exception as exc:  # noqa: BLE001 - a missed beat only shortens the lease
            logger.warning("lease heartbeat failed: %s", exc)

    def _hold_slots(self, slots: HeldSlots, until: float) -> None:
        """Renew the running slots before the leases: a slot must not lapse while its job,
        whose lease the beat renews, still runs. If Redis does not answer, the leases are
        renewed all the same: a job run twice is worse than a limit exceeded."""
        held = slots.held()
        if not held:
            return
        try:
            self.index.hold_slots(held, until)
        except Exception as exc:  # noqa: BLE001 - the claims that would use them fail too
            logger.warning("could not renew the running slots of %s: %s", ", ".join(held), exc)
