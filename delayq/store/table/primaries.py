"""Which MySQL server holds the table, and the statements that check what a failover to
another took: which ids known elsewhere have no row, and keeping AUTO_INCREMENT above them.
It decides nothing; worker/failovers.py does, and the registry keeps the note in Redis."""

from __future__ import annotations

from collections.abc import Iterable

import peewee

from ..backend_errors import is_lock_conflict
from .model import Table, tuples

# A Galera cluster's nodes hold the same commits: a move between them takes nothing.
GALERA = "galera"
IDS_A_STATEMENT = 1000
# How long `ALTER TABLE ... AUTO_INCREMENT` may wait for its metadata lock: it must not queue
# every add of the table behind a long transaction.
ALTER_LOCK_WAIT = 2


class Primaries:
    """The MySQL server that holds the table, and what a failover to another took: ids known
    elsewhere without a row, and AUTO_INCREMENT kept above them."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def server_identity(self) -> str | None:
        """The MySQL server the table's connection reached: `server_id N` (a replica must have
        one of its own), with MySQL's `server_uuid` where there is one; not its host name, which
        a container's restart changes. GALERA on a Galera node; None on SQLite."""
        if not self.table.mysql:
            return None
        cursor = self.table.db.execute_sql(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('server_id', 'server_uuid', 'wsrep_on')"
        )
        found = {str(name).lower(): str(value) for name, value in cursor.fetchall()}
        if found.get("wsrep_on", "OFF").upper() == "ON":
            return GALERA
        uuid = found.get("server_uuid")
        return f"server_id {found.get('server_id', '?')}" + (f" ({uuid})" if uuid else "")

    def ids_without_rows(self, ids: Iterable[int]) -> list[int]:
        """Those of `ids` that no row has, in ascending order."""
        Job = self.table.model
        wanted = sorted(set(ids))
        present: set[int] = set()
        for start in range(0, len(wanted), IDS_A_STATEMENT):
            batch = wanted[start : start + IDS_A_STATEMENT]
            present.update(
                job_id for (job_id,) in tuples(Job.select(Job.id).where(Job.id.in_(batch)))
            )
        return [job_id for job_id in wanted if job_id not in present]

    def keep_ids_above(self, highest: int) -> bool:
        """Make the table's next AUTO_INCREMENT id larger than `highest`, so that a promoted
        replica does not hand out again ids its old primary gave jobs it lost; whether it did
        (False where the metadata lock did not come within ALTER_LOCK_WAIT seconds)."""
        if not self.table.mysql:
            return False
        self.table.db.execute_sql(f"SET SESSION lock_wait_timeout = {ALTER_LOCK_WAIT}")
        try:
            self.table.db.execute_sql(
                f"ALTER TABLE `delay_queue` AUTO_INCREMENT = {int(highest) + 1}"
            )
        except peewee.DatabaseError as exc:
            if not is_lock_conflict(exc):
                raise
            return False
        finally:
            self.table.db.execute_sql("SET SESSION lock_wait_timeout = DEFAULT")
        return True
