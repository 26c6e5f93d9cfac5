"""Adding jobs inside the caller's own transaction (`Queue.add(..., using=conn)`): the rows go
through the caller's connection, marked `unindexed`, and nothing touches Redis. A run's sweep
(worker/recovery.py `index_committed`) puts them on the schedule once they have committed;
a rollback leaves no row, so nothing to run.

Why not ZADD at once and let the run check the row: a run claiming an id whose row is not
committed yet drops it as no job (SQLite) or waits on the caller's row lock (InnoDB), so the
sweep would be needed anyway; and after a rollback SQLite hands the same id to the next
insert, which would then run at the rolled-back job's time.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from peewee import Database

from ...errors import BadInput
from .inserts import Inserts, Row
from .model import Table

KINDS = (
    "a DB-API connection, a peewee Database, an SQLAlchemy Connection or Session, "
    "or a Django connection"
)


def add_through(table: Table, using: Any, rows: Sequence[Row]) -> list[int]:
    """Insert `rows` on the connection `using` names, in its open transaction; their ids."""
    connection = dbapi_connection(using)
    check_same_database(table, connection)
    return Inserts(table).insert_through(connection, [{**row, "unindexed": 1} for row in rows])


def dbapi_connection(using: Any) -> Any:
    """The DB-API connection beneath what the caller passed, told apart by what each offers
    (no framework is imported for it)."""
    if isinstance(using, Database):  # peewee: this thread's connection, in its atomic()
        return using.connection()
    if hasattr(using, "get_bind"):  # an SQLAlchemy Session: its transaction's Connection
        using = using.connection()
    if hasattr(using, "exec_driver_sql"):  # an SQLAlchemy Connection
        return using.connection.dbapi_connection
    if hasattr(using, "ensure_connection"):  # a Django connection
        using.ensure_connection()
        return using.connection
    if callable(getattr(using, "cursor", None)):
        return using
    raise BadInput(f"using= takes {KINDS}, not {type(using).__name__}")


def check_same_database(table: Table, connection: Any) -> None:
    """Refuse a connection to another database than delayq's: its jobs would never run."""
    theirs = _location(_executor(connection), isinstance(connection, sqlite3.Connection))
    ours = _location(table.db.execute_sql, not table.mysql)
    if theirs != ours:
        raise BadInput(
            f"using= is connected to {_describe(theirs)}, not to delayq's {_describe(ours)}: "
            "add jobs through a connection to the database DELAYQ_DATABASE_URL names"
        )


def _location(execute: Callable[[str], Any], sqlite: bool) -> tuple[str, str]:
    """Where a connection's data lives: the main file of an SQLite connection (none for an
    in-memory one), the server and current database of a MySQL one."""
    if sqlite:
        rows = execute("PRAGMA database_list").fetchall()
        file = next((file for _, name, file in rows if name == "main"), None)
        return ("SQLite database", os.path.realpath(file) if file else "")
    host, port, database = execute("SELECT @@hostname, @@port, DATABASE()").fetchone()
    return ("MySQL database", f"{database or '(none)'} on {host}:{port}")


def _executor(connection: Any) -> Callable[[str], Any]:
    def execute(sql: str) -> Any:
        cursor = connection.cursor()
        cursor.execute(sql)
        return cursor  # its rows are read at once, and it goes with them

    return execute


def _describe(location: tuple[str, str]) -> str:
    kind, where = location
    return f"{kind} {where!r}" if where else f"an in-memory {kind}"
