"""What a database or Redis error means, told by the driver's error number and the exception's
class, never by its text: a dropped connection is reconnected, a lock conflict replayed, a
missing table reported as "run `delayq init`", anything else given up on.

`backend_errors` is the one place where such errors become BackendUnavailable, at the
Queue's methods, with no secrets in the message.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import peewee
import redis
from redis.exceptions import ClusterDownError, ReadOnlyError, RedisClusterException, TryAgainError

from ..config import hide_secrets
from ..errors import BackendUnavailable

if TYPE_CHECKING:
    from .table.model import Table

# MySQL/MariaDB client and server error numbers (pymysql's `args[0]`).
SERVER_GONE_AWAY = 2006
LOST_CONNECTION = 2013
COMMANDS_OUT_OF_SYNC = 2014
IDLE_DISCONNECT = 4031  # the server closed a connection idle past wait_timeout
CANNOT_CONNECT_SOCKET = 2002
CANNOT_CONNECT = 2003
LOCK_WAIT_TIMEOUT = 1205
DEADLOCK = 1213
NO_SUCH_TABLE = 1146
UNKNOWN_COLUMN = 1054
# The server refuses writes (--read-only, or super_read_only): a primary being switched over,
# or a replica. MySQL's and MariaDB's number for an option that prevents a statement; of
# those options only read_only can meet the statements delayq sends.
READ_ONLY = 1290
# What a Galera node answers to every statement while it is not in the cluster's primary
# component or not yet synced with it (a node joining, or cut off from the others): MariaDB's
# "WSREP has not yet prepared node for application use" (ER_UNKNOWN_COM_ERROR). A node
# away, to be waited out as a server is, or left for another node behind a proxy.
NODE_NOT_READY = 1047
# What such a node answers to a write it could not replicate ("Got error ... during COMMIT",
# "Not connected to Primary Component"): rolled back, and the node away like the above.
NOT_COMMITTED = 1180
DISCONNECTS = frozenset({SERVER_GONE_AWAY, LOST_CONNECTION, COMMANDS_OUT_OF_SYNC, IDLE_DISCONNECT})
LOCK_CONFLICTS = frozenset({LOCK_WAIT_TIMEOUT, DEADLOCK})
SERVER_AWAY = frozenset({CANNOT_CONNECT_SOCKET, CANNOT_CONNECT, NODE_NOT_READY, NOT_COMMITTED})

P = ParamSpec("P")
R = TypeVar("R")


def mysql_error_number(exc: BaseException) -> int | None:
    """The MySQL error number behind `exc`, whether peewee wrapped the driver's error or not."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current.args and type(current.args[0]) is int:
            return current.args[0]
        inner = current.args[0] if current.args else None
        current = inner if isinstance(inner, BaseException) else current.__context__
    return None


# A Redis that is failing over: a replica refusing writes, a Cluster with hash slots that no
# master serves yet or in migration, a client (not a RedisError) that finds no node for a
# hash slot.
FAILING_OVER = (ReadOnlyError, ClusterDownError, TryAgainError, RedisClusterException)


def is_disconnect(exc: BaseException) -> bool:
    """Whether the connection, not the statement, failed: the server went away, the link was
    lost or idled out, or PyMySQL found its socket already closed (error 0)."""
    number = mysql_error_number(exc)
    return number in DISCONNECTS or (number == 0 and isinstance(exc, peewee.InterfaceError))


def is_outage(exc: BaseException) -> bool:
    """Whether `exc` says a server is away (down, restarting, unreachable, the link cut, a
    Galera node out of its cluster's primary component) rather than that a statement or
    command was wrong: worth waiting out, not fatal."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, *FAILING_OVER)):
        return True
    if isinstance(exc, redis.ResponseError) and str(exc).startswith("UNBLOCKED"):
        return True  # a blocked BLPOP's server turned replica
    if is_read_only(exc):
        return True  # a switchover: the address moves to the promoted replica
    number = mysql_error_number(exc)
    return is_disconnect(exc) or number in SERVER_AWAY


def is_read_only(exc: BaseException) -> bool:
    """Whether the database refused a write because it is read-only."""
    return mysql_error_number(exc) == READ_ONLY


def is_lock_conflict(exc: BaseException) -> bool:
    """Whether InnoDB rolled the statement back as a deadlock victim or after a lock wait."""
    return mysql_error_number(exc) in LOCK_CONFLICTS


def is_lock_wait_timeout(exc: BaseException) -> bool:
    """Whether InnoDB gave up waiting for a row lock (after innodb_lock_wait_timeout)."""
    return mysql_error_number(exc) == LOCK_WAIT_TIMEOUT


def is_missing_table(exc: BaseException, table: Table) -> bool:
    """Whether `exc` came from a database that has no delay_queue table. MySQL says so with
    its own number; SQLite's "no such table" shares its code with every SQL error, so the
    database is asked instead."""
    if table.mysql:
        return mysql_error_number(exc) == NO_SUCH_TABLE
    if not isinstance(exc, peewee.OperationalError):
        return False
    try:
        return not table.exists()
    except peewee.PeeweeException:
        return False


def is_missing_column(exc: BaseException, table: Table) -> bool:
    """Whether `exc` came from a table an earlier delayq made, without a column this one reads
    (SQLite gives no number, only its message)."""
    if table.mysql:
        return mysql_error_number(exc) == UNKNOWN_COLUMN
    return isinstance(exc, peewee.OperationalError) and "no such column" in str(exc)


def backend_errors(method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """Surface a Queue method's database and Redis failures as BackendUnavailable."""

    @functools.wraps(method)
    def wrapper(queue: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(queue, *args, **kwargs)
        except peewee.DatabaseError as exc:
            if is_missing_table(exc, queue.table):
                raise BackendUnavailable(
                    "the delay_queue table does not exist here; run `delayq init` first"
                ) from exc
            if is_missing_column(exc, queue.table):
                raise BackendUnavailable(
                    "the delay_queue table lacks a column this delayq reads "
                    f"({_told(exc, queue)}); run `delayq init` once to add it"
                ) from exc
            raise BackendUnavailable(f"database error: {_told(exc, queue)}") from exc
        except peewee.InterfaceError as exc:
            raise BackendUnavailable(f"database unreachable: {_told(exc, queue)}") from exc
        except (redis.RedisError, RedisClusterException) as exc:
            raise BackendUnavailable(f"Redis error: {_told(exc, queue)}") from exc

    return wrapper


def _told(exc: BaseException, queue: Any) -> str:
    return one_line(exc, queue.settings.database_url, queue.settings.redis_url)


def one_line(exc: BaseException, *urls: str | None) -> str:
    """An error's text on one line, at most 300 characters, without the secrets of `urls`
    (a driver may repeat what it was given)."""
    text = hide_secrets(" ".join(str(exc).split()), *urls)
    return text[:300] or type(exc).__name__
