"""What the database lets delayq's user do beyond reading and writing rows, and the one
setting or grant that would let it do more: told from the server's own refusal (its error
number) or, for doctor, which never tries, from the server's settings. The features that
need more than SELECT, INSERT, UPDATE and DELETE (counts.py's triggers) ask here how to say
what is missing; docs/deploying.md#privileges lists them all.
"""

from __future__ import annotations

from peewee import DatabaseError

from ..backend_errors import mysql_error_number
from .model import Table
from .mutexes import is_galera

# With binary logging on (or on a Galera node), CREATE or DROP TRIGGER by a user without
# SUPER while log_bin_trust_function_creators is off: ER_BINLOG_CREATE_ROUTINE_NEED_SUPER.
NEEDS_SUPER = 1419
# Access denied to the database (1044) or to the table for that command (1142: TRIGGER
# command denied).
ACCESS_DENIED = frozenset({1044, 1142})
TRUST_FUNCTION_CREATORS = "log_bin_trust_function_creators=1"


def allowing_triggers(table: Table, exc: DatabaseError) -> str | None:
    """What would let this user create triggers, in words, if `exc` is the server refusing
    them to it; None for any other failure (SQLite refuses nothing to anyone)."""
    number = mysql_error_number(exc) if table.mysql else None
    if number == NEEDS_SUPER:
        return (
            "with binary logging on, creating triggers takes SUPER or the server's "
            f"log_bin_trust_function_creators; set {TRUST_FUNCTION_CREATORS} on the server "
            "(a DB parameter group or database flag on a managed service)"
        )
    if number in ACCESS_DENIED:
        return f"this user lacks the TRIGGER privilege; {grant(table, 'TRIGGER')}"
    return None


def trigger_needs(table: Table) -> str:
    """What `init` needs to create triggers on this server, read from its settings: TRIGGER,
    and with binary logging on and log_bin_trust_function_creators off, that setting (or
    SUPER) too."""
    if not table.mysql:
        return "`delayq init` makes them"
    binlog, trusted = table.db.execute_sql(
        "SELECT @@log_bin, @@log_bin_trust_function_creators"
    ).fetchone()
    if (int(binlog) or is_galera(table)) and not int(trusted):
        return (
            f"set {TRUST_FUNCTION_CREATORS} on the server (binary logging is on here; or grant "
            "this user SUPER) and run `delayq init`, which also needs TRIGGER"
        )
    return f"`delayq init` makes them, given TRIGGER ({grant(table, 'TRIGGER')})"


def grant(table: Table, privilege: str) -> str:
    """The GRANT statement that gives the connected user `privilege` on its database."""
    database, user = table.db.execute_sql("SELECT DATABASE(), CURRENT_USER()").fetchone()
    name, _, host = str(user).rpartition("@")
    return f"GRANT {privilege} ON `{database}`.* TO '{name}'@'{host}'"
