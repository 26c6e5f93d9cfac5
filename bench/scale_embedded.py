"""The scale workload on delayq's embedded default (`--only scale --embedded`): each table is a
home of its own under the benchmark's directory, given to delayq as DELAYQ_HOME and nothing
else, so delayq makes the SQLite file there and starts the embedded Redis there itself
(delayq/store/embedded.py: the keeper, the append-only file, the Unix socket).

`SQLiteFiles` and `EmbeddedRedis` stand where bench/servers.py's PrivateMariaDB and
PrivateRedis stand, so scale_load, scale_measure and scale_loss run unchanged: the few
statements of the benchmark's own, written for PyMySQL, reach SQLite through `Connection`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import redis

from delayq.store import embedded

from .scale_measure import Site
from .servers import PrivateRedis, running_under, wait_until

# The bench's servers stop when it ends, not when idle: the deep table's server would
# otherwise stop, and start again, while the empty one is measured.
IDLE_LIMIT = 24 * 3600.0
STOP_TIMEOUT = 60.0
# What the embedded default runs with (database.py's SQLITE_PRAGMAS, embedded.py's _start).
SETTINGS = (
    "SQLite journal_mode=wal, synchronous=full; embedded Redis on a Unix socket, "
    "appendonly yes, appendfsync everysec"
)


def site(workdir: Path, database: str, repeat: int) -> Site:
    """The table `database`: a home workdir/database with its SQLite file and its Redis."""
    home = workdir / database
    return Site(SQLiteFiles(workdir), EmbeddedRedis(home), database, 0, workdir, repeat, home)


def _utc_text(epoch: float) -> str:
    """FROM_UNIXTIME for SQLite: a UTC time as delayq's DateTimeFields store it."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


class Cursor:
    """A sqlite3 cursor taking PyMySQL's `%s` placeholders (a list or tuple after one is
    spread over `(?, ?, ...)`, as PyMySQL spreads it) and returning the affected rows."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self.cursor = cursor

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *_: object) -> None:
        self.cursor.close()

    def execute(self, statement: str, params: tuple[Any, ...] = ()) -> int:
        if statement.startswith("SET "):
            return 0  # a MariaDB session setting (the time zone): SQLite's times are UTC
        parts = statement.split("%s")
        text, values = parts[0], []
        for param, part in zip(params, parts[1:], strict=True):
            spread = isinstance(param, (list, tuple))
            text += "(" + ", ".join("?" * len(param)) + ")" if spread else "?"
            values += list(param) if spread else [param]
            text += part
        self.cursor.execute(text, values)
        return self.cursor.rowcount

    def fetchone(self) -> Any:
        return self.cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self.cursor.fetchall()

    def fetchmany(self, size: int) -> list[Any]:
        return self.cursor.fetchmany(size)


class Connection:
    """A sqlite3 connection in autocommit, as PrivateMariaDB's are."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.conn.create_function("FROM_UNIXTIME", 1, _utc_text, deterministic=True)

    def cursor(self) -> Cursor:
        return Cursor(self.conn.cursor())

    def close(self) -> None:
        self.conn.close()


class SQLiteFiles:
    """Each database a home under workdir, holding the SQLite file delayq makes there."""

    pid = None  # no server: the file is opened by whoever uses it

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def url(self, database: str) -> None:
        return None  # DELAYQ_DATABASE_URL unset: the file under DELAYQ_HOME

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def connect(self, database: str, **_options: object) -> Connection:
        return Connection(embedded.database_file(self.workdir / database))

    def create_database(self, name: str, fresh: bool) -> None:
        """Remove the file (and its WAL) if `fresh`: `init` makes the table again."""
        path = embedded.database_path(self.workdir / name)
        for suffix in ("", "-wal", "-shm") if fresh else ():
            Path(f"{path}{suffix}").unlink(missing_ok=True)

    def version(self) -> str:
        return sqlite3.sqlite_version

    def sizes(self, database: str) -> dict[str, int]:
        """Bytes of delay_queue's own b-tree and of its indexes' (the dbstat table)."""
        conn = self.connect(database).conn
        try:
            rows = conn.execute(
                "SELECT s.name = 'delay_queue', SUM(s.pgsize) FROM dbstat AS s "
                "JOIN sqlite_master AS m ON m.name = s.name "
                "WHERE m.tbl_name = 'delay_queue' GROUP BY 1"
            ).fetchall()
        finally:
            conn.close()
        found = {bool(is_table): int(size) for is_table, size in rows}
        return {"data_bytes": found.get(True, 0), "index_bytes": found.get(False, 0)}


class EmbeddedRedis(PrivateRedis):
    """The embedded Redis of one home, started as delayq's embedded default starts it."""

    def __init__(self, home: Path) -> None:
        super().__init__(home)
        self.home = home

    def url(self, db: int) -> None:  # type: ignore[override]
        return None  # DELAYQ_REDIS_URL unset: the embedded server under DELAYQ_HOME

    @property
    def pid(self) -> int | None:
        with contextlib.suppress(FileNotFoundError, ValueError):
            return int((self.home / "redis.pid").read_text())
        return None

    def client(self, db: int = 0) -> redis.Redis:
        return redis.Redis.from_url(embedded.redis_url(self.home, IDLE_LIMIT), db=db)

    def start(self) -> None:
        embedded.redis_url(self.home, IDLE_LIMIT)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """`delayq embedded-stop`'s shutdown, then wait for the server and its keeper."""
        pid = self.pid
        embedded.stop(self.home)
        wait_until(lambda: not self._lives(pid), timeout, f"the embedded Redis in {self.home}")

    def _lives(self, pid: int | None) -> bool:
        if pid is not None and os.path.exists(f"/proc/{pid}"):
            return True
        return bool(running_under(self.home))
