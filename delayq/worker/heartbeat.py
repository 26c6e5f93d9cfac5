"""Keeping a run's leases alive: a heartbeat thread, one for the runner process, renews the
leases of the pass in progress every third of the lease, and the running slots its jobs of
concurrency-limited queues hold (HeldSlots, delayq/flow/gate.py) with them; a LeaseDeadline,
which it shares with the pass, says when the leases may have lapsed, and the main thread
renews what it still holds when the beats fell behind (HeldLeases). The lease only has to
outlive a dead run, not a slow job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

from ..base.threads import Periodic
from ..flow.gate import HeldSlots
from ..store.index import Index
from ..store.table import ClaimedJob, Leases, Table, close_connection

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


class HeldLeases:
    """The leases a pass holds, as its drains meet them: the token they are held under, the
    deadline by which they may have lapsed (the heartbeat's too), and their renewal by the
    main thread when the heartbeat fell behind."""

    def __init__(self, table: Table, token: str, clock: Callable[[], float], lease: float) -> None:
        self.table = table
        self.token = token
        self.clock = clock
        self.lease = lease
        self.deadline = LeaseDeadline(lease)

    def reassert(self, jobs: Sequence[ClaimedJob]) -> set[int]:
        """Renew the leases of `jobs` that this pass still holds, and return their ids: the
        heartbeat fell behind, so another run may have taken some over."""
        lease = self.lease
        held = {job.id for job in jobs}
        while True:
            renewed_at = time.monotonic()
            held = Leases(self.table).still_held(sorted(held), self.token, self.clock() + lease)
            # The lease it wrote ran from before the statement: one held up by a stalled
            # database (a locked table) may have written a lease that had lapsed already,
            # which another run may take over. Only a quick renewal vouches for the jobs.
            if not held or time.monotonic() - renewed_at < lease / 3:
                break
        self.deadline.reasserted(renewed_at)
        lost = len(jobs) - len(held)
        if lost:
            logger.warning("%d jobs of this run's batch were taken over by another run", lost)
        return held


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
        """Renew the leases and `slots` of the pass with lease token `token` until the block
        ends (once `start`ed)."""
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
                # The slots before the leases: a slot must not lapse while its job, whose
                # lease the beat renews, still runs.
                watched.slots.renew(self.index, lease_until)
                Leases(self.table).renew_leases(watched.token, lease_until)
                watched.deadline.renewed(renewed_at)
                # A beat held up by a stalled database (a locked table) wrote a deadline
                # reckoned before the stall, maybe past already: beat again at once, so
                # that the jobs still running are not left to recovering runs to take.
                if time.monotonic() - renewed_at < self.lease / 3:
                    break
        except Exception as exc:  # noqa: BLE001 - a missed beat only shortens the lease
            logger.warning("lease heartbeat failed: %s", exc)
