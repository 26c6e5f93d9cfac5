"""Database errors are told apart by the driver's error number and the exception's class, on
real errors from real servers, never by the words in their message."""

from __future__ import annotations

import peewee
import pytest

import delayq
from delayq.errors import BackendUnavailable
from delayq.store.backend_errors import (
    DEADLOCK,
    LOCK_WAIT_TIMEOUT,
    NO_SUCH_TABLE,
    is_disconnect,
    is_lock_conflict,
    is_missing_table,
    mysql_error_number,
)
from delayq.store.table.database import open_database, run_reconnecting
from delayq.store.table.model import Table, create_tables
from tests.conftest import mysql_connect


def raised_by(work) -> BaseException:
    with pytest.raises(peewee.PeeweeException) as caught:
        work()
    return caught.value


def kill_connection_of(db: peewee.Database, url: str) -> None:
    connection_id = db.execute_sql("SELECT CONNECTION_ID()").fetchone()[0]
    admin = mysql_connect(url)
    with admin.cursor() as cursor:
        cursor.execute(f"KILL CONNECTION {int(connection_id)}")
    admin.close()


def test_a_connection_killed_inside_a_transaction_is_a_disconnect_and_not_replayed(mariadb_url):
    db = open_database(mariadb_url)
    errors = []
    # Inside a transaction nothing reconnects behind our back: the statement fails.
    with pytest.raises(peewee.PeeweeException), db.atomic():
        kill_connection_of(db, mariadb_url)
        try:
            db.execute_sql("SELECT 1")
        except peewee.PeeweeException as exc:
            errors.append(exc)
            raise

    [exc] = errors
    assert mysql_error_number(exc) in (2006, 2013)
    assert is_disconnect(exc)
    assert not is_lock_conflict(exc)
    db.close()


def test_a_connection_killed_while_idle_is_reconnected_by_the_next_statement(mariadb_url):
    db = open_database(mariadb_url)
    first = db.execute_sql("SELECT CONNECTION_ID()").fetchone()[0]
    kill_connection_of(db, mariadb_url)

    second = db.execute_sql("SELECT CONNECTION_ID()").fetchone()[0]

    assert second != first
    db.close()


def test_a_lock_wait_timeout_is_a_lock_conflict_and_not_a_disconnect(mariadb_url):
    db = open_database(mariadb_url)
    db.execute_sql("CREATE TABLE IF NOT EXISTS failures_lock (id INT PRIMARY KEY)")
    db.execute_sql("INSERT IGNORE INTO failures_lock VALUES (1)")
    holder = mysql_connect(mariadb_url)
    holder.autocommit(False)
    try:
        with holder.cursor() as cursor:
            cursor.execute("SELECT id FROM failures_lock WHERE id = 1 FOR UPDATE")
        db.execute_sql("SET SESSION innodb_lock_wait_timeout = 1")
        with db.atomic():
            exc = raised_by(lambda: db.execute_sql("UPDATE failures_lock SET id = 1 WHERE id = 1"))
    finally:
        holder.rollback()
        holder.close()
        db.execute_sql("DROP TABLE failures_lock")
        db.close()

    assert mysql_error_number(exc) == LOCK_WAIT_TIMEOUT
    assert is_lock_conflict(exc)
    assert not is_disconnect(exc)


def test_a_lock_conflict_is_run_again_and_other_errors_are_not(mariadb_url):
    db = open_database(mariadb_url)
    tries = []

    def deadlocked_once() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise peewee.OperationalError(DEADLOCK, "Deadlock found when trying to get lock")
        return "done"

    assert run_reconnecting(db, deadlocked_once) == "done"
    assert len(tries) == 2

    def failing() -> None:
        tries.append(1)
        db.execute_sql("SELECT * FROM failures_no_such_table")

    tries.clear()
    with pytest.raises(peewee.ProgrammingError):
        run_reconnecting(db, failing)
    assert len(tries) == 1
    db.close()


def test_a_message_naming_an_error_number_does_not_make_it_that_error():
    exc = peewee.OperationalError("value 2006 is out of range (errno 1213)")

    assert mysql_error_number(exc) is None
    assert not is_disconnect(exc)
    assert not is_lock_conflict(exc)


def test_a_missing_table_is_told_on_both_backends(backend):
    db = open_database(backend["database_url"])
    table = Table(db)

    exc = raised_by(lambda: db.execute_sql("SELECT * FROM delay_queue"))

    assert is_missing_table(exc, table)
    if table.mysql:
        assert mysql_error_number(exc) == NO_SUCH_TABLE
    create_tables(table)
    other = raised_by(lambda: db.execute_sql("SELECT no_such_column FROM delay_queue"))
    assert not is_missing_table(other, table)
    db.close()


def test_a_queue_on_a_database_without_the_table_says_to_run_init(backend, tmp_path):
    queue = delayq.connect(
        database_url=backend["database_url"],
        redis_url=backend["redis_url"],
        handlers=("tests.sample_handlers",),
        home=tmp_path / "home",
    )
    with pytest.raises(BackendUnavailable, match="run `delayq init` first"):
        queue.show(1)
    queue.close()


def test_a_lock_wait_timeout_is_replayed_until_it_succeeds(mariadb_url):
    """The rival holds the row until our first try has timed out, then lets go."""
    db = open_database(mariadb_url)
    db.execute_sql("CREATE TABLE IF NOT EXISTS failures_replay (id INT PRIMARY KEY, n INT)")
    db.execute_sql("REPLACE INTO failures_replay VALUES (1, 0)")
    db.execute_sql("SET SESSION innodb_lock_wait_timeout = 1")
    holder = mysql_connect(mariadb_url)
    holder.autocommit(False)
    with holder.cursor() as cursor:
        cursor.execute("SELECT id FROM failures_replay WHERE id = 1 FOR UPDATE")
    tries: list[int] = []

    def bump() -> None:
        tries.append(1)
        if len(tries) == 2:
            holder.rollback()  # after one timeout, the rival lets go
        with db.atomic():
            db.execute_sql("UPDATE failures_replay SET n = n + 1 WHERE id = 1")

    try:
        run_reconnecting(db, bump)
        count = db.execute_sql("SELECT n FROM failures_replay WHERE id = 1").fetchone()[0]
    finally:
        holder.rollback()
        holder.close()
        db.execute_sql("DROP TABLE failures_replay")
        db.close()

    assert len(tries) == 2
    assert count == 1
