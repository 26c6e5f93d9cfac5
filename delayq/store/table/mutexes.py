"""Mutexes, named locks across processes and hosts held for one transaction: what keeps
`--replace` to one pending job per key and a chain to one pending attempt. `run_exclusive`
runs the work in a transaction under the mutex, and runs it again whole when the database
rolled it back as a deadlock or a lost certification.

On one MySQL or MariaDB server the mutex is GET_LOCK's. A Galera node keeps GET_LOCK (and
SELECT ... FOR UPDATE) to itself, so there the mutex is a row of `delay_queue_mutexes`,
written first inside the transaction: on one node the second writer waits on the row, and
two nodes that write it at once conflict at certification, where one transaction is
rolled back and done again. SQLite's immediate transaction already excludes every writer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TypeVar
from weakref import WeakKeyDictionary

from peewee import OperationalError

from .database import run_reconnecting
from .model import Table, table_exists

MUTEXES_TABLE = "delay_queue_mutexes"
# Mutex names hash onto this many rows (the row's number is its `slot` column), so the
# table never grows; two names on one row only wait for each other, which only the rare
# pair held at the same moment does.
MUTEX_ROWS = 4096
GET_LOCK_WAIT = 30  # seconds
T = TypeVar("T")

_GALERA: WeakKeyDictionary[Table, bool] = WeakKeyDictionary()


def run_exclusive(
    table: Table, name: str, work: Callable[[], T], then: Callable[[T], None] | None = None
) -> T:
    """`work()`'s result, run in a transaction while holding the mutex named `name` against
    every other process on any host; `then(result)` runs while the mutex is still held:
    after the commit where the mutex outlives the transaction (GET_LOCK), just before it
    where the transaction is the mutex (SQLite, a Galera node). So what `then` writes elsewhere (an
    entry in Redis) is written in the order the transactions commit. `work` and `then` may
    run more than once (a deadlock, a Galera certification conflict): whatever `work` did in
    the database was rolled back before."""
    db = table.db
    if not table.mysql:
        with db.atomic("IMMEDIATE"):
            return _and_then(work, then)
    if is_galera(table):
        _install(table)
        return run_reconnecting(
            db, lambda: _under_row(table, name, lambda: _and_then(work, then)), reconnect=False
        )
    mutex = "delayq:" + _digest(name)
    if db.execute_sql("SELECT GET_LOCK(%s, %s)", (mutex, GET_LOCK_WAIT)).fetchone()[0] != 1:
        raise OperationalError(f"could not take mutex {mutex} within {GET_LOCK_WAIT} s")
    try:
        result = run_reconnecting(db, lambda: _in_transaction(table, work), reconnect=False)
        if then is not None:
            then(result)
        return result
    finally:
        db.execute_sql("SELECT RELEASE_LOCK(%s)", (mutex,))


def _and_then(work: Callable[[], T], then: Callable[[T], None] | None) -> T:
    result = work()
    if then is not None:
        then(result)
    return result


def _under_row(table: Table, name: str, work: Callable[[], T]) -> T:
    with table.db.atomic():
        # The row's write is the mutex: its key goes into the transaction's write set.
        table.db.execute_sql(
            f"INSERT INTO `{MUTEXES_TABLE}` (slot, taken) VALUES (%s, 1) "
            "ON DUPLICATE KEY UPDATE taken = taken + 1",
            (int(_digest(name)[:8], 16) % MUTEX_ROWS,),
        )
        return work()


def _in_transaction(table: Table, work: Callable[[], T]) -> T:
    with table.db.atomic():
        return work()


def _digest(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()


def is_galera(table: Table) -> bool:
    """Whether the table's server is a Galera node (`wsrep_on`), asked once per Table."""
    if not table.mysql:
        return False
    if table not in _GALERA:
        rows = table.db.execute_sql("SHOW VARIABLES LIKE 'wsrep_on'").fetchall()
        _GALERA[table] = any(str(value).upper() == "ON" for _, value in rows)
    return _GALERA[table]


def _install(table: Table) -> None:
    """Create the table of the mutexes' rows unless it is there. Known to be there, it costs no
    query again: on Galera a DDL statement stalls the whole cluster while it runs."""
    if table_exists(table, MUTEXES_TABLE):
        return
    table.db.execute_sql(
        f"CREATE TABLE IF NOT EXISTS `{MUTEXES_TABLE}` (`slot` smallint NOT NULL, "
        "`taken` bigint NOT NULL DEFAULT 0, PRIMARY KEY (`slot`)) ENGINE=InnoDB"
    )
