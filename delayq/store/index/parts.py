"""Index: delayq's Redis side, its parts on one client — the schedule and its claims
(schedule.py) and how far ahead it holds jobs (horizons.py), the journal (journal.py), the
tallies (tallies.py), the registry of queues, last run and completeness (registry.py), the
clock (clock.py), the queues' flow settings (flow.py, mirrored from the table) and the jobs
waiting on per-key locks (lock_waits.py).

The parts only say *when* and *what was done*; the table says *whether*. Everything here can
be rebuilt from the table (worker/rebuilds.py) or is best-effort, so losing Redis costs a
rebuild, never a job. What touches two parts at once lives here, in one pipeline or write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import redis

from ...config import Settings
from .clock import Clock
from .flow import Flow
from .horizons import Horizons
from .journal import Journal
from .lock_waits import LockWaits
from .registry import Registry
from .schedule import Packed, Schedule
from .tallies import Tallies, Tally


class Index:
    """The parts of delayq's Redis side on one client."""

    def __init__(self, client: redis.Redis, horizon: float = Settings.horizon) -> None:
        self.client = client
        self.registry = Registry(client)
        self.schedule = Schedule(client)
        self.journal = Journal(client)
        self.tallies = Tallies(client)
        self.clock = Clock(client)
        self.horizons = Horizons(client, horizon)
        self.flow = Flow(client)
        self.lock_waits = LockWaits(client)

    def leased(
        self,
        queue: str,
        members: Sequence[str],
        token: str,
        order: Sequence[int],
        notes_starts: bool = False,
        unslotted: Sequence[str] = (),
        ungranted: Sequence[str] = (),
        claimed_at: float = 0.0,
    ) -> None:
        """The claimed members are now leased (or dropped) in the table: forget the claims,
        free the running slots of those `unslotted` and give back the start grants of those
        `ungranted` (not leased: none of them starts), taken by the claim at `claimed_at`,
        and note the order the pass with lease token `token` will call the batch in, or
        that it notes each job it starts; one round trip."""
        pipe = self.client.pipeline(transaction=False)
        self.schedule.drop_claims(pipe, queue, members)
        self.flow.free_slots(pipe, queue, unslotted)
        self.flow.return_grants(pipe, queue, ungranted, claimed_at)
        self.journal.note_order(pipe, queue, token, order, notes_starts)
        pipe.execute()

    def return_grants(self, queue: str, members: Sequence[str], claimed_at: float) -> None:
        """Give back the start grants a claim at `claimed_at` took for `members`, none of
        which starts; one round trip."""
        pipe = self.client.pipeline(transaction=False)
        self.flow.return_grants(pipe, queue, members, claimed_at)
        pipe.execute()

    def free_slots(self, queue: str, job_ids: Sequence[int]) -> None:
        """Free the running slots of a concurrency-limited queue's jobs that ended or went
        back; one round trip."""
        pipe = self.client.pipeline(transaction=False)
        self.flow.free_slots(pipe, queue, [str(job_id) for job_id in job_ids])
        pipe.execute()

    def hold_slots(self, held: dict[str, list[int]], until: float) -> None:
        """Renew the running slots of the jobs `held` ({queue: ids}) to `until`; one round
        trip."""
        pipe = self.client.pipeline(transaction=False)
        for queue, job_ids in held.items():
            self.flow.renew_slots(pipe, queue, [str(job_id) for job_id in job_ids], until)
        pipe.execute()

    def committed(
        self,
        queue: str,
        journaled_ids: Sequence[int],
        retries: Sequence[tuple[int, float]],
        started: tuple[str, Sequence[int]] | None = None,
        tally: Tally | None = None,
    ) -> None:
        """Outcomes reached the table: put their retries on the schedule (one round trip),
        then forget their journal and the start notes (lease token, ids) of their jobs, with
        their tally in that same write on the journal's connection (no round trip)."""
        self.schedule.add_many(queue, retries)
        self.journal.forget(queue, journaled_ids, started, self.tallies.commands(tally))

    def added(self, parts: Iterable[Mapping[str, Packed]], moved: bool = False) -> set[str]:
        """New rows are committed: put their jobs on their queues' schedules, given as
        `packed_by_queue` texts, leaving out each text whose earliest job is due after its
        queue's limit; the queues found without a horizon. add_jobs.lua would keep each of
        its jobs off the schedule; reading the limits first costs one round trip for them
        all, where the script reads every job's entry (jobs due in days: most of a large
        add). The limits are read after the rows were written, as the script reads its
        limit: a walk that raises a limit writes it before it reads the table, so it finds
        the rows of a text left out here. `moved`: the rows were there before (a replace
        moved them), so an entry they had may be: every text goes to the script, which
        takes away the entry of a row moved past the limit; left there, a walk (which
        keeps the entries it finds) would leave the job at its old time."""
        by_queue: dict[str, list[Packed]] = {}
        for part in parts:
            for queue, entries in part.items():
                by_queue.setdefault(queue, []).append(entries)
        horizons = self.horizons.read(list(by_queue))
        without = set()
        for queue, packs in by_queue.items():
            limit = horizons[queue].limit if queue in horizons else None
            texts = [
                pack.text for pack in packs if moved or limit is None or pack.earliest <= limit
            ]
            if not self.schedule.add_packed(queue, texts):
                without.add(queue)
        return without

    def served(self, queues: Iterable[str]) -> list[str]:
        """Note `queues` as queues a run serves, so that `status` lists them; those no job
        has used yet: neither registered nor holding a schedule entry (a producer of its own
        may ZADD without registering)."""
        queues = list(dict.fromkeys(queues))
        known = set(self.registry.known_queues())
        unused = [name for name in queues if name not in known and not self.schedule.size(name)]
        self.registry.register(name for name in queues if name not in known)
        return unused
