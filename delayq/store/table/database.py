"""Opening the database a URL names, with WAL and a busy timeout on SQLite and
reconnect-on-gone-away on MySQL/MariaDB."""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlparse

from peewee import (
    Database,
    DatabaseError,
    InterfaceError,
    MySQLDatabase,
    OperationalError,
    PeeweeException,
    SqliteDatabase,
)

from ...config import redact_url
from ...errors import ConfigError
from ..backend_errors import is_disconnect, is_lock_conflict, is_lock_wait_timeout
from ..urls import check_mysql_arguments, check_netloc, refuse
from .model import Table

SQLITE_PRAGMAS = {
    "journal_mode": "wal",  # readers never block the writer; several runs may overlap
    "synchronous": "full",  # a committed outcome survives power loss
}
SQLITE_SCHEMES = ("sqlite", "sqlite3")
DATABASE_FORMS = "use mysql://user:pw@host:3306/db or sqlite:////absolute/path.db"
LOOPBACK = ("localhost", "127.0.0.1", "::1")
# A transaction rolled back as a deadlock victim, or by a Galera node as the loser of a
# certification conflict, is run again up to this many times, after a pause that doubles
# from 10 ms to at most 0.5 s, drawn at random, so that two writers that keep meeting part.
LOCK_RETRIES = 10
# A lock wait that timed out (1205) already waited innodb_lock_wait_timeout: fewer of those.
LOCK_WAIT_RETRIES = 4
LOCK_PAUSE_FIRST = 0.01
LOCK_PAUSE_MAX = 0.5
# wsrep_sync_wait's bits for reads (SELECT, SHOW, BEGIN) and for UPDATE and DELETE.
GALERA_SYNC_WAIT = 1 | 2
# How long a run's MySQL connection waits for a reply. PyMySQL waits for ever by default, so a
# reply lost across a partition (the request was acknowledged, the answer never came) held a
# runner until the kernel's keepalive gave up, two hours on. Past InnoDB's default lock wait
# (50 s), the longest a run's statement waits by design.
RUN_REPLY_TIMEOUT = 120.0
# What a database that cannot be used raises, for a caller that words the failure itself
# (doctor's lines) rather than surfacing it at the Queue's boundary (backend_errors.py): a
# statement's or the connection's error; and anything peewee raises, a missing driver too.
DATABASE_ERRORS = (DatabaseError, InterfaceError)
ANY_DATABASE_ERROR = PeeweeException
logger = logging.getLogger(__name__)
T = TypeVar("T")


class ReconnectingMySQLDatabase(MySQLDatabase):
    """MySQLDatabase that reconnects once when the server dropped an idle connection, outside
    a transaction only: a statement inside one is never replayed silently."""

    def execute_sql(self, *args: Any, **kwargs: Any) -> Any:
        return self._reconnecting(super().execute_sql, *args, **kwargs)

    def _initialize_connection(self, conn: Any) -> None:
        # A Galera node applies the other nodes' commits after they returned: a moment later
        # on a quiet cluster, seconds later behind a slow transaction. Without waiting for
        # them, a runner's lease through one node missed a job just added through another
        # (the job then waited for the orphan sweep), and a cancel by key cancelled nothing.
        # Reads, transactions, UPDATEs and DELETEs wait; an admin's wider setting stays.
        with conn.cursor() as cursor:
            cursor.execute("SHOW VARIABLES LIKE 'wsrep_on'")
            if any(str(value).upper() == "ON" for _, value in cursor.fetchall()):
                cursor.execute(
                    f"SET SESSION wsrep_sync_wait = @@GLOBAL.wsrep_sync_wait | {GALERA_SYNC_WAIT}"
                )

    def begin(self, *args: Any, **kwargs: Any) -> Any:
        return self._reconnecting(super().begin, *args, **kwargs)

    def _reconnecting(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return call(*args, **kwargs)
        except (OperationalError, InterfaceError) as exc:
            if self.in_transaction() or not is_disconnect(exc):
                raise
            logger.info("database connection dropped (%s); reconnecting", exc)
            self.close()  # a no-op on a closed connection
            self.connect()
            return call(*args, **kwargs)


def run_reconnecting(db: Database, work: Callable[[], T], reconnect: bool = True) -> T:
    """Run `work` (a transaction, or one statement); run it once more on a new connection if
    the MySQL one died under it, and a few times more if it lost a deadlock, a lock wait or
    (on a Galera node) a certification conflict, each of which rolled it back whole.

    Safe because every write delayq makes is guarded by status and lease: a second try after
    a commit whose reply was lost finds nothing to change, and a deadlocked transaction was
    rolled back whole. `reconnect` False: for work whose second try would not know that."""
    for attempt in range(1, LOCK_RETRIES + 1):
        try:
            return work()
        except (OperationalError, InterfaceError) as exc:
            if is_lock_conflict(exc) and attempt < _tries_for(exc):
                logger.info("database lock conflict (%s); running it again", exc)
                time.sleep(lock_pause(attempt))
                continue
            if not (reconnect and is_disconnect(exc)):
                raise
            logger.warning("database connection lost (%s); reconnecting", exc)
            db.close()
            db.connect()
            return work()
    raise AssertionError("unreachable")


def _tries_for(exc: BaseException) -> int:
    return LOCK_WAIT_RETRIES if is_lock_wait_timeout(exc) else LOCK_RETRIES


def lock_pause(attempt: int) -> float:
    """Seconds to wait before running again work that lost a lock conflict `attempt` times."""
    return random.uniform(0.5, 1.5) * min(LOCK_PAUSE_FIRST * 2 ** (attempt - 1), LOCK_PAUSE_MAX)


def ping(table: Table) -> None:
    """Ask the table's database for nothing (`SELECT 1`): raises if it cannot be reached."""
    table.db.execute_sql("SELECT 1")


def is_read_only(table: Table) -> bool:
    """Whether the table's MySQL server refuses writes (`read_only`): a replica, or a primary
    being switched over. SQLite never is."""
    if not table.mysql:
        return False
    (value,) = table.db.execute_sql("SELECT @@global.read_only").fetchone()
    return bool(int(value))


def close_connection(table: Table) -> None:
    """Close this thread's connection to the table's database (a helper thread's, as it ends:
    peewee keeps one a thread)."""
    table.db.close()


def bound_replies(table: Table) -> None:
    """Make the MySQL connections to the table's database give up on a reply (or a send) after
    RUN_REPLY_TIMEOUT, unless its URL sets `read_timeout` / `write_timeout`: for runs, purge
    and reconcile, whose statements are short, and not for `init`, which may rebuild a large
    table for longer. Closes this thread's connection, so the next one has them."""
    db = table.db
    if not isinstance(db, MySQLDatabase):
        return
    for key in ("read_timeout", "write_timeout"):
        db.connect_params.setdefault(key, RUN_REPLY_TIMEOUT)
    if not db.in_transaction():
        db.close()


def open_database(url: str) -> Database:
    """A peewee Database for `url`; connects lazily on first use. Its arguments are read as
    playhouse.db_url reads them, but not by it: its import loads every backend extension
    peewee ships (13 ms on each cron run)."""
    scheme, name, kwargs = _read_url(url)
    if scheme in SQLITE_SCHEMES:
        return _open_sqlite(url, name, kwargs)
    if scheme == "mysql":
        return _open_mysql(url, name, kwargs)
    raise refuse("DELAYQ_DATABASE_URL", url, DATABASE_FORMS)


def sqlite_file(url: str) -> Path | None:
    """The file a sqlite:// URL names, a relative one taken from the working directory as
    open_database takes it; None for a URL of another database or one naming no file."""
    scheme, name, _ = _read_url(url)
    if scheme not in SQLITE_SCHEMES or not name or name == ":memory:":
        return None
    return Path(os.path.abspath(name))


def _read_url(url: str) -> tuple[str, str, dict[str, Any]]:
    """(scheme, database name or file, connection arguments) of a database URL."""
    check_netloc("DELAYQ_DATABASE_URL", url)
    try:
        parts = urlparse(url)
        given = {
            "user": parts.username and unquote(parts.username),
            "password": parts.password and unquote(parts.password),
            "host": parts.hostname,
            "port": parts.port,
        }
    except ValueError:
        raise refuse("DELAYQ_DATABASE_URL", url, "not a URL delayq can read") from None
    kwargs: dict[str, Any] = {key: value for key, value in given.items() if value}
    kwargs.update((k, _query_value(v)) for k, v in parse_qsl(parts.query, keep_blank_values=True))
    return parts.scheme, kwargs.pop("database", parts.path[1:]), kwargs


def _query_value(value: str) -> Any:
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none"):
        return None
    for kind in (int, float):
        with suppress(ValueError):
            return kind(value)
    return value


def sqlite_url(path: Path) -> str:
    """The sqlite:// URL of a file."""
    return f"sqlite:///{path.resolve()}"


def _open_sqlite(url: str, name: str, kwargs: dict) -> Database:
    if not name or name == ":memory:":
        raise ConfigError(
            f"DELAYQ_DATABASE_URL {redact_url(url)!r} names no file; "
            "use sqlite:////absolute/path.db "
            "(three slashes before a relative path, four before an absolute one)"
        )
    path = Path(os.path.abspath(name))
    if not Path(name).is_absolute():
        # Taken from the working directory now, once: peewee opens a connection per thread,
        # and a handler that changes directory would otherwise reach another file. Not
        # refused, since a setup that always starts in one directory works; but cron and a
        # shell rarely start in the same one, so the warning names the URL to write.
        logger.warning(
            "DELAYQ_DATABASE_URL %r names a relative path, read from the working directory "
            "as %s; write sqlite:///%s to use that file from anywhere",
            redact_url(url),
            path,
            path,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    # timeout: wait up to 30 s for the write lock (SQLite's busy timeout) instead of failing.
    return SqliteDatabase(str(path), pragmas=SQLITE_PRAGMAS, timeout=30, **kwargs)


def _open_mysql(url: str, name: str, kwargs: dict) -> Database:
    if not name:
        raise ConfigError(
            f"DELAYQ_DATABASE_URL {redact_url(url)!r} names no database; "
            "use mysql://user:pw@host:3306/dbname"
        )
    kwargs.setdefault("connect_timeout", 5)
    kwargs.setdefault("charset", "utf8mb4")
    # Every write delayq makes is a compare-and-set on rows it names; under REPEATABLE READ
    # an UPDATE also keeps locks on every row it merely scanned, so overlapping runs
    # deadlocked on each other's rows. READ COMMITTED releases those at once.
    kwargs.setdefault("init_command", "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    if kwargs.get("host", "localhost") in LOOPBACK and not any(k.startswith("ssl") for k in kwargs):
        # PyMySQL tries TLS whenever it can, and building its context alone costs ~60 ms
        # per connection; on the loopback interface TLS protects nothing. A URL that names
        # any ssl option keeps full control (e.g. ?ssl_disabled=false).
        kwargs["ssl_disabled"] = True
    check_mysql_arguments(url, {"database": name, **kwargs})
    return ReconnectingMySQLDatabase(name, **kwargs)
