"""Per-key locks, durably: the `delay_queue_locks` table, a row per lock key while a job holds
it (or it is reserved for the next job waiting on it). Jobs that share a lock never run at
once, on any host: a job takes its lock as its run leases it, and lets go as its handler
returns. A holder whose lease lapsed (its run died) or whose row left RUNNING without
letting go holds nothing: the next job takes the lock over. A job's lock key travels in its
params (`"lock"`), so a claim learns it with the row, at no cost to jobs without one.

The Redis side, which jobs wait on a lock and in what order, is lock_waits.py.
"""

from __future__ import annotations

from .database import run_reconnecting
from .model import Status, Table, quoted, stamp_text, table_exists, tuples

LOCKS_TABLE = "delay_queue_locks"
ADDED = f"added table {LOCKS_TABLE}"
LOCK_MAX = 191  # characters: a utf8mb4 primary key of InnoDB's 767 bytes
# How long a lock handed to the next waiting job stays reserved for it: time for a run to
# claim and lease it. Past that (the job was cancelled meanwhile, or the wake-up was lost
# with Redis) any job may take the lock.
RESERVED_FOR = 30.0


class Locks:
    """Per-key locks in the locks table: taken, let go and handed over as jobs run."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def install(self) -> list[str]:
        """Create the locks table unless it is there; one line if it was made."""
        if _exists(self.table):
            return []
        if self.table.mysql:
            self.table.db.execute_sql(
                f"CREATE TABLE IF NOT EXISTS `{LOCKS_TABLE}` ("
                f"`lock_key` varchar({LOCK_MAX}) NOT NULL, `job_id` bigint NOT NULL, "
                "`reserved_until` double DEFAULT NULL, "
                "`modified` datetime NOT NULL DEFAULT current_timestamp(), "
                "PRIMARY KEY (`lock_key`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            )
        else:
            self.table.db.execute_sql(
                f'CREATE TABLE IF NOT EXISTS "{LOCKS_TABLE}" ('
                f"lock_key VARCHAR({LOCK_MAX}) NOT NULL PRIMARY KEY, "
                "job_id INTEGER NOT NULL, reserved_until REAL, "
                "modified DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP)"
            )
        return [ADDED]

    def take(self, key: str, job_id: int, now: float) -> bool:
        """Take lock `key` for job `job_id`: free, already its own (reserved for it), or held by
        a job that holds nothing any more (taken over). False while another job holds it: one
        running under a live lease, or a waiting job it is reserved for."""
        self.install()

        def attempt() -> bool:
            if _insert_ignoring(self.table, key, job_id, now):
                return True
            holder = _holder(self.table, key)
            if holder is None:  # let go of between the two statements: try once more
                return _insert_ignoring(self.table, key, job_id, now)
            held_by, reserved_until = holder
            if held_by == job_id:
                _set(self.table, key, job_id, job_id, None, now)
                return True
            if _holds(self.table, held_by, reserved_until, now):
                return False
            return _set(self.table, key, held_by, job_id, None, now)  # taken over, if still stale

        return bool(run_reconnecting(self.table.db, attempt))

    def take_many(self, wanted: dict[str, list[int]], now: float) -> dict[str, int]:
        """`take` for many locks at once: for each key of `wanted`, its jobs earliest first, the
        first asks; a job of them the lock is reserved for has it instead. One INSERT and one
        SELECT while the locks are free, more only for those held. Returns {key: the job that
        took it}."""
        self.install()
        asking = {key: jobs[0] for key, jobs in wanted.items()}

        def attempt() -> dict[str, int]:
            _insert_many_ignoring(self.table, asking, now)
            found = _holders(self.table, list(asking))
            taken = {key: holder for key, (holder, _) in found.items() if holder in wanted[key]}
            for key, holder in taken.items():
                if found[key][1] is not None:  # it was reserved for this job: now it holds it
                    _set(self.table, key, holder, holder, None, now)
            held = {key: found[key] for key in found if key not in taken}
            alive = _live_holders(
                self.table, {holder: reserved for holder, reserved in held.values()}, now
            )
            for key, (holder, _) in held.items():
                if holder not in alive and _set(self.table, key, holder, asking[key], None, now):
                    taken[key] = asking[key]  # taken over: its holder held nothing any more
            return taken

        taken = dict(run_reconnecting(self.table.db, attempt))
        # Let go of between the INSERT and the SELECT: asked once more, one at a time.
        for key, job_id in asking.items():
            if key not in taken and self.take(key, job_id, now):
                taken[key] = job_id
        return taken

    def let_go_many(self, held: list[tuple[str, int]]) -> None:
        """Free the locks `held` ((key, job id) each) that those jobs still hold; one DELETE."""
        if not held:
            return
        mark = self.table.db.param
        matches = " OR ".join([f"(lock_key = {mark} AND job_id = {mark})"] * len(held))
        params = [value for pair in held for value in pair]
        sql = f"DELETE FROM {_locks(self.table)} WHERE {matches}"
        run_reconnecting(self.table.db, lambda: self.table.db.execute_sql(sql, params))

    def hand_over(self, key: str, job_id: int, successor: int | None, now: float) -> bool:
        """Job `job_id` lets go of lock `key`: to `successor`, reserved for it for RESERVED_FOR,
        or to no one (None). False if `job_id` did not hold it (another job took it over)."""
        if successor is None:
            mark = self.table.db.param
            sql = f"DELETE FROM {_locks(self.table)} WHERE lock_key = {mark} AND job_id = {mark}"
            return bool(
                run_reconnecting(
                    self.table.db, lambda: self.table.db.execute_sql(sql, (key, job_id)).rowcount
                )
            )
        return bool(
            run_reconnecting(
                self.table.db,
                lambda: _set(self.table, key, job_id, successor, now + RESERVED_FOR, now),
            )
        )

    def held(self) -> list[tuple[str, int, float | None]]:
        """(lock key, job id, reserved until) of every lock row, for the operator's looks."""
        if not _exists(self.table):
            return []
        rows = self.table.db.execute_sql(
            f"SELECT lock_key, job_id, reserved_until FROM {_locks(self.table)} ORDER BY lock_key"
        ).fetchall()
        return [
            (str(key), int(job_id), None if until is None else float(until))
            for key, job_id, until in rows
        ]


def _insert_ignoring(table: Table, key: str, job_id: int, now: float) -> bool:
    verb = "INSERT IGNORE" if table.mysql else "INSERT OR IGNORE"
    marks = ", ".join([table.db.param] * 3)
    cursor = table.db.execute_sql(
        f"{verb} INTO {_locks(table)} (lock_key, job_id, modified) VALUES ({marks})",
        (key, job_id, stamp_text(now)),
    )
    return bool(cursor.rowcount)


def _insert_many_ignoring(table: Table, wanted: dict[str, int], now: float) -> None:
    verb = "INSERT IGNORE" if table.mysql else "INSERT OR IGNORE"
    mark = table.db.param
    rows = ", ".join([f"({mark}, {mark}, {mark})"] * len(wanted))
    params = [value for key, job_id in wanted.items() for value in (key, job_id, stamp_text(now))]
    table.db.execute_sql(
        f"{verb} INTO {_locks(table)} (lock_key, job_id, modified) VALUES {rows}", params
    )


def _holders(table: Table, keys: list[str]) -> dict[str, tuple[int, float | None]]:
    marks = ", ".join([table.db.param] * len(keys))
    rows = table.db.execute_sql(
        f"SELECT lock_key, job_id, reserved_until FROM {_locks(table)} WHERE lock_key IN ({marks})",
        keys,
    ).fetchall()
    return {
        str(key): (int(job_id), None if until is None else float(until))
        for key, job_id, until in rows
    }


def _live_holders(table: Table, holders: dict[int, float | None], now: float) -> set[int]:
    """Those of the jobs `holders` ({id: reserved until}) that still hold their locks."""
    if not holders:
        return set()
    Job = table.model
    rows = Job.select(Job.id, Job.status, Job.lease_until).where(Job.id.in_(list(holders)))
    return {
        int(job_id)
        for job_id, status, lease_until in tuples(rows)
        if _held_by(int(status), lease_until, holders[int(job_id)], now)
    }


def _held_by(
    status: int, lease_until: float | None, reserved_until: float | None, now: float
) -> bool:
    """Whether a job in `status` still holds a lock: running under a live lease, or pending
    with the lock reserved for it."""
    if status == Status.RUNNING:
        return lease_until is not None and float(lease_until) >= now
    return status == Status.PENDING and reserved_until is not None and reserved_until >= now


def _holder(table: Table, key: str) -> tuple[int, float | None] | None:
    row = table.db.execute_sql(
        f"SELECT job_id, reserved_until FROM {_locks(table)} WHERE lock_key = {table.db.param}",
        (key,),
    ).fetchone()
    return None if row is None else (int(row[0]), None if row[1] is None else float(row[1]))


def _holds(table: Table, job_id: int, reserved_until: float | None, now: float) -> bool:
    """Whether the job a lock row names still holds it."""
    return job_id in _live_holders(table, {job_id: reserved_until}, now)


def _set(
    table: Table, key: str, holder: int, job_id: int, reserved_until: float | None, now: float
) -> bool:
    """Give lock `key` to `job_id` if `holder` still holds it (a compare-and-set)."""
    mark = table.db.param
    cursor = table.db.execute_sql(
        f"UPDATE {_locks(table)} SET job_id = {mark}, reserved_until = {mark}, modified = {mark} "
        f"WHERE lock_key = {mark} AND job_id = {mark}",
        (job_id, reserved_until, stamp_text(now), key, holder),
    )
    return bool(cursor.rowcount)


def _exists(table: Table) -> bool:
    return table_exists(table, LOCKS_TABLE)


def _locks(table: Table) -> str:
    return quoted(table, LOCKS_TABLE)
