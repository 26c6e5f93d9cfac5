"""The connections an application adds jobs through inside its own transaction, one kind each,
opened on delayq's database URL. Run as a script (`python -m tests.support.callers KIND DATABASE_URL
REDIS_URL LOG ACTION`) it adds three jobs through one of them, prints their ids, then commits,
rolls back, or commits and dies at once (`crash`: `os._exit`, before anything else can run).
Django is configured once per process, so its connection is only opened here."""

from __future__ import annotations

import os
import sqlite3
import sys
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import peewee
import pymysql

import delayq

KINDS = ["dbapi", "peewee", "sqlalchemy", "sqlalchemy_session", "django"]
IN_PROCESS = KINDS[:-1]
H = "tests.sample_handlers.jobs"


@dataclass
class Transaction:
    """An open transaction of the application: what to pass as `using`, and its ends."""

    using: Any
    commit: Any
    rollback: Any
    close: Any


def open_transaction(kind: str, url: str) -> Transaction:
    """A transaction begun on a new connection of `kind` to the database `url` names."""
    opener = {
        "dbapi": _dbapi,
        "peewee": _peewee,
        "sqlalchemy": _sqlalchemy,
        "sqlalchemy_session": _sqlalchemy_session,
        "django": _django,
    }[kind]
    return opener(url)


def _mysql_args(url: str) -> dict[str, Any]:
    parts = urlparse(url)
    return {
        "host": parts.hostname,
        "port": parts.port or 3306,
        "user": parts.username or "root",
        "password": parts.password or "",
        "database": parts.path.lstrip("/"),
    }


def _sqlite_path(url: str) -> str | None:
    return urlparse(url).path[1:] if url.startswith("sqlite") else None


def _dbapi(url: str) -> Transaction:
    path = _sqlite_path(url)
    conn: Any = sqlite3.connect(path, timeout=30) if path else pymysql.connect(**_mysql_args(url))
    if not path:
        conn.begin()
    return Transaction(conn, conn.commit, conn.rollback, conn.close)


def _peewee(url: str) -> Transaction:
    path = _sqlite_path(url)
    if path:
        db: peewee.Database = peewee.SqliteDatabase(path, timeout=30)
    else:
        args = _mysql_args(url)
        db = peewee.MySQLDatabase(args.pop("database"), **args)
    db.connect()
    db.begin()
    return Transaction(db, db.commit, db.rollback, db.close)


def _engine(url: str) -> Any:
    from sqlalchemy import create_engine

    return create_engine(url if _sqlite_path(url) else url.replace("mysql:", "mysql+pymysql:", 1))


def _sqlalchemy(url: str) -> Transaction:
    engine = _engine(url)
    conn = engine.connect()
    transaction = conn.begin()
    return Transaction(conn, transaction.commit, transaction.rollback, _closer(conn, engine))


def _sqlalchemy_session(url: str) -> Transaction:
    from sqlalchemy.orm import Session

    engine = _engine(url)
    session = Session(engine)
    session.begin()
    return Transaction(session, session.commit, session.rollback, _closer(session, engine))


def _closer(handle: Any, engine: Any) -> Any:
    def close() -> None:
        handle.close()
        engine.dispose()

    return close


def _django(url: str) -> Transaction:
    import django
    from django.conf import settings

    path = _sqlite_path(url)
    if path:
        database = {"ENGINE": "django.db.backends.sqlite3", "NAME": path}
    else:
        pymysql.install_as_MySQLdb()  # Django's MySQL backend, on the driver delayq uses
        # Django asks for mysqlclient 1.4.3; PyMySQL before 1.1 (delayq's floor is 1.0.1)
        # names itself 1.4.0 there, 1.1 and later 1.4.6.
        pymysql.version_info = max(pymysql.version_info, (1, 4, 6, "final", 0))
        args = _mysql_args(url)
        database = {
            "ENGINE": "django.db.backends.mysql",
            "NAME": args["database"],
            "HOST": args["host"],
            "PORT": args["port"],
            "USER": args["user"],
            "PASSWORD": args["password"],
        }
    settings.configure(DATABASES={"default": database})
    django.setup()
    from django.db import connection, transaction

    atomic = transaction.atomic()
    atomic.__enter__()

    def rollback() -> None:
        transaction.set_rollback(True)
        atomic.__exit__(None, None, None)

    return Transaction(
        connection, lambda: atomic.__exit__(None, None, None), rollback, connection.close
    )


def add_three(queue: delayq.Queue, using: Any, log: str) -> list[int]:
    """Jobs 1, 2 and 3, due now, added through `using`: one by add, two by add_many."""
    first = queue.add(H, "record", {"log": log, "n": 1}, using=using)
    specs = [delayq.JobSpec(H, "record", {"log": log, "n": n}) for n in (2, 3)]
    return [first, *queue.add_many(specs, using=using)]


def main(kind: str, database_url: str, redis_url: str, log: str, action: str) -> None:
    queue = delayq.connect(
        database_url=database_url, redis_url=redis_url, handlers=["tests.sample_handlers"]
    )
    transaction = open_transaction(kind, database_url)
    print(*add_three(queue, transaction.using, log), flush=True)
    if action == "rollback":
        transaction.rollback()
    else:
        transaction.commit()
    if action == "crash":
        os._exit(0)  # committed, and nothing of delayq's or the driver's gets to run after
    transaction.close()
    queue.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
