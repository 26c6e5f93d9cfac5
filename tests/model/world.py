"""The servers a run of the model uses, emptied before each example, and the hands a model
step has on them besides delayq's API: the raw Redis client (FLUSHALL, a key deleted, a
foreign producer's ZADD), a plain database connection (a foreign producer's INSERT, the
counts lost), and a Redis restart. Nothing here decides what a step means; machine.py does.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

import delayq
from delayq.config import MIN_HORIZON, Settings
from delayq.store.index import keys
from delayq.store.index.lock_waits import wait_key
from delayq.store.table.database import sqlite_url
from tests.conftest import mysql_connect
from tests.support.servers import Proxy

HANDLERS = ("tests.model.handlers",)
HANDLER = "tests.model.handlers"  # the module; its function `record` is the method
# The shortest horizon delayq takes (10 minutes): a run raises a queue's limit about every
# 50 s of the model's clock, so walks of the table happen within a few steps.
HORIZON = MIN_HORIZON
# The tables a reset empties: the jobs, and what lives beside them.
TABLES = ("delay_queue", "delay_queue_counts", "delay_queue_settings", "delay_queue_locks")


@dataclass
class Servers:
    """A database and a Redis of the model's own; `restart` restarts that Redis."""

    kind: str  # "mariadb" or "embedded"
    database_url: str  # for "embedded", a directory: each example gets a new file there
    redis_url: str
    restart: Callable[[], None]


class World:
    """The servers, reset for each example; the Queues a step opens, closed after it."""

    def __init__(self, servers: Servers, tmp: Path) -> None:
        self.servers = servers
        self.tmp = tmp
        self.examples = 0
        self.redis = redis.Redis.from_url(servers.redis_url)
        self.database_url = ""
        self.log = ""
        self._plain: Any = None  # an autocommit connection for `execute`, per example
        # On MariaDB's side a producer may reach Redis through a link the model can hold: its
        # commands wait there, unanswered, until the link is let go.
        self.proxy: Proxy | None = None
        if self.mysql:
            address = self.redis.connection_pool.connection_kwargs
            self.proxy = Proxy((address["host"], int(address["port"])))

    @property
    def mysql(self) -> bool:
        return self.servers.kind == "mariadb"

    def reset(self) -> None:
        """Empty Redis and the tables (on SQLite, a new file) for the next example."""
        self.examples += 1
        self._close_plain()
        self.redis.flushall()
        self.log = str(self.tmp / f"calls-{self.examples}.log")
        if self.mysql:
            self.database_url = self.servers.database_url
            _empty_tables(self.database_url)
        else:
            path = Path(self.servers.database_url) / f"model-{self.examples}.db"
            self.database_url = sqlite_url(path)

    def settings(self, held: bool = False) -> Settings:
        redis_url = self.servers.redis_url
        if held and self.proxy is not None:
            redis_url = f"redis://127.0.0.1:{self.proxy.port}/0"
        return Settings(
            database_url=self.database_url,
            redis_url=redis_url,
            handlers=HANDLERS,
            home=self.tmp / "home",
            horizon=HORIZON,
        )

    def open_queue(self, held: bool = False) -> delayq.Queue:
        """A Queue; `held`: one whose link to Redis goes through the proxy."""
        return delayq.connect(self.settings(held))

    def connect(self) -> Any:
        """A plain DB-API connection to the database, not in autocommit mode: another
        producer's, or an operator's."""
        if self.mysql:
            conn = mysql_connect(self.database_url)
            conn.autocommit(False)
            return conn
        return sqlite3.connect(self.database_url.removeprefix("sqlite:///"), timeout=30)

    def execute(self, sql: str, args: tuple[Any, ...] = (), fetch: bool = False) -> Any:
        """Run one statement, committed at once, on a plain connection kept for the example;
        the last row id, or with `fetch` the first column of the first row."""
        if self._plain is None:
            self._plain = self.connect()
            if self.mysql:
                self._plain.autocommit(True)
            else:
                self._plain.isolation_level = None  # autocommit
        cursor = self._plain.cursor()
        cursor.execute(sql if self.mysql else sql.replace("%s", "?"), args)
        return cursor.fetchone()[0] if fetch else cursor.lastrowid

    def _close_plain(self) -> None:
        if self._plain is not None:
            self._plain.close()
            self._plain = None

    def has_table(self, name: str) -> bool:
        """Whether the table `name` is there (delayq makes no counts table for a user that
        may not create its triggers)."""
        if self.mysql:
            found = self.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE "
                                 "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s", (name,),
                                 fetch=True)  # fmt: skip
        else:
            found = self.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' "
                                 "AND name = %s", (name,), fetch=True)  # fmt: skip
        return bool(found)

    def restart_redis(self) -> None:
        self.servers.restart()
        self.redis.close()  # its pooled connection died with the server
        self.redis = redis.Redis.from_url(self.servers.redis_url)

    def close(self) -> None:
        self._close_plain()
        self.redis.close()
        if self.proxy is not None:
            self.proxy.close()


def _empty_tables(url: str) -> None:
    conn = mysql_connect(url)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SHOW TABLES")
            present = {name for (name,) in cursor.fetchall()}
            for name in TABLES:
                if name in present:
                    cursor.execute(f"TRUNCATE TABLE `{name}`")
    finally:
        conn.close()


# A queue's keys a step may lose: those that live between runs (a run's claims and journal
# are gone by the time it returns).
QUEUE_KEY_KINDS = ("schedule", "horizon", "flow", "starts", "slots", "wake", "server")


def queue_keys(queue: str) -> dict[str, str]:
    """{kind: key} of `queue`'s keys (store/index/keys.py)."""
    found = {kind: keys.queue_key(queue, kind) for kind in QUEUE_KEY_KINDS}
    found["schedule"] = keys.schedule_key(queue)
    return found


def world_keys(locks: tuple[str, ...]) -> list[str]:
    """delayq's keys that are not a queue's, that live between runs: the registry of
    queues, the complete schedule's mark, the last run, the database server it saw, and the
    lock keys' wait lists (store/index/keys.py, store/index/lock_waits.py)."""
    names = [keys.QUEUES_KEY, keys.INDEXED_KEY, keys.LAST_RUN_KEY, keys.DATABASE_SERVER_KEY]
    return names + [wait_key(lock) for lock in locks]
