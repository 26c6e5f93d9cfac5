"""Queries on the rows a run holds: taking them (pending -> running with a lease), renewing
the lease, recording outcomes, handing them back, and taking back rows whose run died.

Each is a compare-and-set guarded by status and lease token, so a run that lost its lease
never overwrites the run that took the job over.

The statements a run issues for every batch of ids (`held_ids`, `take_pending`,
`finish_held`) are written by hand: peewee renders a tree of nodes per value per call; for
500 ids that cost more than the database took to run the statement. There ids are inlined
as integers (never outside text), every other value is bound, and MySQL is told to use the
primary key (`@BY_ID`), which peewee cannot say.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from peewee import Case, fn

from .database import run_reconnecting
from .model import TEXT_MAX, ClaimedJob, Job, Status, Table, storable, tuples, utc_stamp

# Up to this many different messages in a group commit cost one UPDATE each; more, one
# UPDATE with a CASE over the ids.
DISTINCT_MESSAGES = 4
CLAIMED_SELECT = ", ".join(f"`{name}`" for name in ClaimedJob._fields)


class Lapsed(NamedTuple):
    """A running row whose lease lapsed, with the lease token of the pass that died holding it."""

    job: ClaimedJob
    token: str | None
    lost_leases: int


class Leases:
    """The rows a run holds under its lease: taken (pending -> running), renewed, finished,
    deferred, released, and taken back when their run died. Every statement is guarded by
    status and lease token."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def mark_running(
        self,
        ids: Sequence[int],
        token: str,
        lease_until: float,
        now: float,
        due_by: float | None = None,
    ) -> list[ClaimedJob]:
        """Take the PENDING rows among `ids` (due by `due_by`, if given) for this run; return
        those won, in id order. A row this run already holds may be among `ids` (a rebuild
        after Redis lost its data read it as pending just before the run leased it): it is not
        won twice, or it would run twice."""
        if not ids:
            return []
        # Read before the UPDATE, and apart from it: the UPDATE and its SELECT may be run again
        # after a reconnect, and must then still return the rows this call took.
        held = run_reconnecting(self.table.db, lambda: self.held_ids(ids, token))
        won = run_reconnecting(
            self.table.db,
            lambda: self.take_pending(
                ids, Status.RUNNING, token, now, due_by=due_by, lease_until=lease_until
            ),
        )
        return [job for job in won if job.id not in held]

    def mark_missed(
        self, ids: Sequence[int], token: str, message: str, now: float
    ) -> list[ClaimedJob]:
        """Turn the PENDING rows among `ids` MISSED; return those this call turned, known by
        `token` even when two runs mark the same ids: the caller re-arms a series from them once."""
        return self.take_pending(ids, Status.MISSED, token, now, message=message) if ids else []

    def finish(
        self, job_id: int, token: str | None, status: Status, message: str, now: float
    ) -> bool:
        """Record the outcome of one held job; False if its lease was taken over meanwhile."""
        return self.finish_many([(job_id, message)], token, status, now) == 1

    def finish_many(
        self, outcomes: Sequence[tuple[int, str]], token: str | None, status: Status, now: float
    ) -> int:
        """Record one status for many held jobs, each with its own message; one UPDATE per
        distinct message (most handlers return the same few), or one with a CASE."""
        by_message: dict[str, list[int]] = {}
        for job_id, text in outcomes:
            by_message.setdefault(storable(text, TEXT_MAX), []).append(job_id)
        if len(by_message) > DISTINCT_MESSAGES:
            ids = [job_id for job_id, _ in outcomes]
            return self.finish_held(status, outcomes, ids, token, now)
        return sum(
            self.finish_held(status, message, ids, token, now)
            for message, ids in by_message.items()
        )

    def defer(
        self,
        job_id: int,
        token: str | None,
        run_at: float,
        message: str,
        policy: str | None,
        now: float,
    ) -> bool:
        """Put a held job back to PENDING, due at `run_at`, as the same attempt (its handler
        raised RetryLater); False if its lease was taken over meanwhile."""
        Job = self.table.model
        handed_back = pending_again(
            now, run_at=run_at, message=storable(message), retry_policy=policy
        )
        return bool(
            Job.update(handed_back).where(Job.id == job_id, _running_under(Job, token)).execute()
        )

    def renew_leases(self, token: str, lease_until: float) -> int:
        """Push out the lease of every row this run still holds; again, rather than a beat
        missed, if the database rolled it back in a lock conflict (on Galera, a certification
        conflict with a write of those rows through another node)."""
        held = _running_under(self.table.model, token)
        return int(run_reconnecting(self.table.db, lambda: _renew(self.table, held, lease_until)))

    def still_held(self, ids: Sequence[int], token: str, lease_until: float) -> set[int]:
        """Renew the lease on those of `ids` this run still holds, and return them: a run whose
        heartbeat fell behind checks that no other run took a job over before starting it."""
        if not ids:
            return set()
        held = self.table.model.id.in_(list(ids)) & _running_under(self.table.model, token)

        def renew() -> set[int]:
            _renew(self.table, held, lease_until)
            return self.held_ids(ids, token)

        # Run again if InnoDB picks it as a deadlock victim: it meets other runs' heartbeats
        # and takeovers just when a stall ends. The UPDATE is guarded, so repeating it is safe.
        return run_reconnecting(self.table.db, renew)

    def release(self, ids: Sequence[int], token: str, now: float) -> list[tuple[int, float | None]]:
        """Hand held rows back to PENDING; return (id, run_at) of those released."""
        if not ids:
            return []
        Job = self.table.model
        held = Job.id.in_(list(ids)) & _running_under(Job, token)

        def hand_back() -> list[tuple[int, float | None]]:
            if rows := tuples(Job.select(Job.id, Job.run_at).where(held)):
                Job.update(pending_again(now)).where(held).execute()
            return rows

        # Run again as a deadlock victim; the SELECT rereads what a rolled-back UPDATE left held.
        return run_reconnecting(self.table.db, hand_back)

    def tokens_holding(self, queue: str, tokens: set[str]) -> set[str]:
        """Those of these passes' lease tokens that still hold a RUNNING row of `queue`."""
        if not tokens:
            return set()
        Job = self.table.model
        query = Job.select(Job.lease_token).where(
            Job.status == Status.RUNNING, Job.queue == queue, Job.lease_token.in_(tokens)
        )
        return {token for (token,) in tuples(query.distinct())}

    def lapse(self, tokens: Sequence[str], now: float) -> int:
        """End now the leases of runs that have stopped (passes that failed) on the rows they
        still hold, so the next sweep recovers them instead of waiting the leases out."""
        Job = self.table.model
        query = Job.update(lease_until=now).where(
            Job.status == Status.RUNNING, Job.lease_token.in_(list(tokens)), Job.lease_until > now
        )
        return int(run_reconnecting(self.table.db, query.execute)) if tokens else 0

    def running_leases(self, queue: str) -> list[tuple[int, float]]:
        """(id, when its lease lapses) of the RUNNING rows of `queue` whose lease is set."""
        Job = self.table.model
        query = Job.select(Job.id, Job.lease_until).where(
            Job.status == Status.RUNNING, Job.queue == queue, Job.lease_until.is_null(False)
        )
        return [(int(job_id), float(until)) for job_id, until in tuples(query)]

    def expired_leases(self, queue: str, now: float, limit: int) -> list[Lapsed]:
        """RUNNING rows of `queue` whose lease has lapsed: the run holding them died."""
        Job = self.table.model
        claimed = [getattr(Job, name) for name in ClaimedJob._fields]
        query = (
            Job.select(*claimed, Job.lease_token, Job.lost_leases)
            .where(Job.status == Status.RUNNING, Job.queue == queue, Job.lease_until < now)
            .limit(limit)
        )
        return [Lapsed(ClaimedJob(*row[:-2]), row[-2], row[-1]) for row in tuples(query)]

    def reclaim(self, lapsed: Lapsed, now: float, was_running: bool) -> bool:
        """Put a RUNNING row whose lease lapsed back to PENDING, due now at the latest; a job
        whose handler was running when its run died counts a lost lease, one that never started
        does not."""
        Job = self.table.model
        lost_leases = Job.lost_leases + (1 if was_running else 0)
        # Due now, as the schedule will say: a claim leases only rows due by its time.
        due_now = Case(None, [(Job.run_at > now, now)], Job.run_at)
        query = Job.update(pending_again(now, lost_leases=lost_leases, run_at=due_now)).where(
            Job.id == lapsed.job.id,
            Job.status == Status.RUNNING,
            Job.lease_token == lapsed.token,
            # Still lapsed now: its run may have renewed it since `expired_leases` saw it.
            Job.lease_until < now,
        )
        # Run again as a deadlock victim: when a stall ends, recovering runs meet every held-up
        # run's heartbeats and claims at once. Guarded, a second try after a commit changes nothing.
        return bool(run_reconnecting(self.table.db, query.execute))

    def held_ids(self, ids: Iterable[int], token: str | None, lock: bool = False) -> set[int]:
        """Which of `ids` are RUNNING under `token`; `lock` keeps them locked on MySQL until the
        transaction ends, so no other run takes them meanwhile."""
        held, token_params = _token_match(token)
        suffix = " FOR UPDATE" if lock and self.table.mysql else ""
        cursor = _execute(
            self.table,
            f"SELECT `id` FROM `delay_queue` @BY_ID WHERE `id` IN ({_id_list(ids)}) "
            f"AND `status` = %s AND {held}{suffix}",
            (int(Status.RUNNING), *token_params),
        )
        return {int(job_id) for (job_id,) in cursor.fetchall()}

    def take_pending(
        self,
        ids: Iterable[int],
        status: Status,
        token: str,
        now: float,
        due_by: float | None = None,
        **columns: Any,
    ) -> list[ClaimedJob]:
        """Turn the PENDING rows among `ids` (due by `due_by`, if given) to `status` under
        `token`, with `columns`; return, in id order, those in `status` under `token` (safe to
        repeat: the SELECT reads all)."""
        listed = _id_list(ids)
        assignments = "".join(f", `{name}` = %s" for name in columns)
        # A schedule entry says when a job is due, the row whether and when: a row moved later
        # than a stale entry it left (a walk of the table raced it) is not started early.
        due = "" if due_by is None else " AND (`run_at` IS NULL OR `run_at` <= %s)"
        _execute(
            self.table,
            f"UPDATE `delay_queue` @BY_ID SET `status` = %s, `lease_token` = %s{assignments}, "
            f"`modified` = %s WHERE `id` IN ({listed}) AND `status` = %s{due}",
            (
                int(status),
                token,
                *columns.values(),
                _stamp(now),
                int(Status.PENDING),
                *(() if due_by is None else (due_by,)),
            ),
        )
        cursor = _execute(
            self.table,
            f"SELECT {CLAIMED_SELECT} FROM `delay_queue` @BY_ID "
            f"WHERE `id` IN ({listed}) AND `status` = %s AND `lease_token` = %s ORDER BY `id`",
            (int(status), token),
        )
        return [ClaimedJob._make(row) for row in cursor.fetchall()]

    def finish_held(
        self,
        status: Status,
        messages: Sequence[tuple[int, str]] | str,
        ids: Iterable[int],
        token: str | None,
        now: float,
    ) -> int:
        """Set `status` and a message on the rows among `ids` RUNNING under `token`, ending their
        lease; `messages` is one text for all, or (id, text) pairs for a CASE over the ids."""
        message_params: list[Any] = [messages]
        message_sql = "%s"
        if not isinstance(messages, str):
            message_sql = "CASE `id` " + " ".join(["WHEN %s THEN %s"] * len(messages)) + " END"
            message_params = [
                value
                for job_id, text in messages
                for value in (int(job_id), storable(text, TEXT_MAX))
            ]
        held, token_params = _token_match(token)
        cursor = _execute(
            self.table,
            f"UPDATE `delay_queue` @BY_ID SET `status` = %s, `message` = {message_sql}, "
            f"`modified` = %s, `lease_until` = NULL WHERE `id` IN ({_id_list(ids)}) "
            f"AND `status` = %s AND {held}",
            (int(status), *message_params, _stamp(now), int(Status.RUNNING), *token_params),
        )
        return int(cursor.rowcount)


def _renew(table: Table, held: Any, lease_until: float) -> int:
    """Set the lease of the `held` rows to `lease_until`, or keep a row's own if that runs
    longer: a heartbeat held up by a stalled database lands after the main thread's quicker
    renewal, and must not pull that lease back into the past, where a recovering run would
    take the job over and rerun it."""
    Job = table.model
    greatest = fn.GREATEST if table.mysql else fn.MAX  # SQLite's MAX of two is scalar
    pushed_out = greatest(fn.COALESCE(Job.lease_until, 0), lease_until)
    return Job.update(lease_until=pushed_out).where(held).execute()


def pending_again(now: float, **columns: Any) -> dict[str, Any]:
    """The columns of a held row handed back to PENDING, lease cleared, and `columns`."""
    lease = {"lease_token": None, "lease_until": None}
    return {"status": Status.PENDING, **lease, "modified": utc_stamp(now), **columns}


def _running_under(model: type[Job], token: str | None) -> Any:
    """A row RUNNING under the lease `token`; a NULL token matches only NULL."""
    held = model.lease_token.is_null() if token is None else model.lease_token == token
    return (model.status == Status.RUNNING) & held


def _id_list(ids: Iterable[int]) -> str:
    """`1,2,3` for an IN (...) list; int() makes sure nothing but digits gets in."""
    return ",".join([str(int(job_id)) for job_id in ids])


def _token_match(token: str | None) -> tuple[str, tuple[Any, ...]]:
    """The lease-token condition and its parameters; a NULL token matches only NULL."""
    if token is None:
        return "`lease_token` IS NULL", ()
    return "`lease_token` = %s", (token,)


def _stamp(now: float) -> Any:
    """`modified` as the database driver takes it (what peewee would have passed)."""
    return Job.modified.db_value(utc_stamp(now))


def _execute(table: Table, sql: str, params: Sequence[Any] = ()) -> Any:
    """Run `sql`, written with %s and `name` quoting. `@BY_ID` makes MySQL find rows by
    primary key: left to itself it may scan the status SQL index, and lock (or wait for) every
    other run's rows on the way."""
    if table.mysql:
        sql = sql.replace("@BY_ID", "FORCE INDEX (PRIMARY)")
    else:
        sql = sql.replace(" @BY_ID", "").replace("`", '"')
    param = table.db.param
    return table.db.execute_sql(sql if param == "%s" else sql.replace("%s", param), params)
