"""Writing new jobs to `delay_queue` fast: multi-row INSERTs written by hand, their ids known
without reading them back where the server promises consecutive ids, and, for many jobs,
the next chunk's rows built while the database writes the current one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import closing, contextmanager
from enum import IntEnum
from typing import Any, TypeVar

import pymysql
from peewee import DateTimeField, OperationalError

from ...base.threads import keep_signals_off_this_thread
from .counts import Counts
from .database import run_reconnecting
from .model import Job, Status, Table

PENDING = int(Status.PENDING)

T = TypeVar("T")
W = TypeVar("W")
Row = dict[str, Any]
# A part's rows, their statements (SQL, parameters, row count) and its pending rows by queue.
_Prepared = tuple[list[Row], list[tuple[str, list[Any], int]], Counter[str]]
# One statement's rows: 2 500 keeps MariaDB busy long enough to hide the building of the
# next chunk, and SQLite under its 32 766 bound values at 13 columns.
INSERT_CHUNK = 2500
INSERT_CHUNK_BYTES = 4 << 20

# Column defaults the table itself holds (schema.sql and create_tables agree, as
# tests/store/table/test_schema.py checks, and the model repeats them): a column left out of
# an INSERT gets the same value. (created and modified default to the clock, never left out.)
_TABLE_DEFAULTS = {
    field.name: field.default
    for field in Job._meta.sorted_fields
    if field.null or not (field.default is None or callable(field.default))
}


# Where there is more than one part, the first is small, so that the server starts writing
# soon after the call instead of waiting for a whole part to be built; each later part is
# twice the one before, up to INSERT_CHUNK: a part is built in about half the time the
# server takes to write it, so the next is ready when the server is.
FIRST_PART = 250


class _Inline(Executor):
    """Runs each call at once on the caller's thread: one part has nothing to overlap."""

    def submit(self, fn: Callable[..., W], /, *args: Any, **kwargs: Any) -> Future[W]:
        future: Future[W] = Future()
        future.set_result(fn(*args, **kwargs))  # what it raises reaches the caller now
        return future


class Inserts:
    """New jobs written to the table: one, many (in chunks, built while the database writes the
    one before), or in the caller's own transaction."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def insert_one(self, row: Row) -> int:
        """One row, autocommit: no BEGIN/COMMIT round trips; returns its id. Written again if
        the database rolled it back in a lock conflict: on a Galera node, a certification
        conflict of the pending counts' row its trigger writes, with an add on another node."""
        sql, params = _multi_insert(self.table, [row], returning=False, cursor=None)
        # Not after a lost connection: the row may have been committed before it broke.
        written = run_reconnecting(
            self.table.db, lambda: self.table.db.execute_sql(sql, params), False
        )
        return int(written.lastrowid)

    def insert_many(
        self,
        items: Sequence[T],
        to_rows: Callable[[Sequence[T]], list[Row]],
        written: Callable[[Sequence[Row], list[int]], W],
    ) -> tuple[list[int], list[W]]:
        """Turn `items` into rows with `to_rows` (which may raise BadInput: nothing is then
        written) and insert them in one transaction; their ids, in the order of `items`, and
        `written(rows, ids)` of each part of them, in order.

        Building and escaping rows costs about as much as the database's work, and the server
        writes one statement at a time, so a helper thread builds the next part's statements
        while the server writes this one's, and `written` (what the caller does with ids, such
        as packing the schedule's entries) runs there too, off the path between statements.
        The transaction is run again whole if the database rolled it back in a lock conflict (on
        Galera, a certification conflict), as `insert_one` is."""
        return run_reconnecting(
            self.table.db,
            lambda: _insert_many(self.table, items, to_rows, written),
            reconnect=False,
        )

    def insert_through(self, connection: Any, rows: Sequence[Row]) -> list[int]:
        """Insert `rows` with the statements `insert_many` writes, escaped by and sent on another
        DB-API `connection` to the same database (the caller's, inside its transaction); their
        ids. Commits nothing."""
        with closing(connection.cursor()) as cursor:
            ids: list[int] = []
            for chunk in _chunks(self.table, rows):
                cursor.execute(*_multi_insert(self.table, chunk, _returning(self.table), cursor))
                ids += _new_ids(cursor, len(chunk), _returning(self.table))
            return ids


def _insert_many(
    table: Table,
    items: Sequence[T],
    to_rows: Callable[[Sequence[T]], list[Row]],
    written: Callable[[Sequence[Row], list[int]], W],
) -> tuple[list[int], list[W]]:
    db = table.db
    parts = _parts(items)
    ids: list[int] = []
    done: list[Future[W]] = []
    with db.atomic(), Counts(table).counted(len(items)) as pending, _helper(parts) as helper:
        # Created here, on this thread's connection: the helper only escapes with it.
        cursor = db.cursor() if table.mysql else None

        def prepare(part: Sequence[T]) -> _Prepared:
            part_rows = to_rows(part)
            statements = [
                (*_multi_insert(table, chunk, _returning(table), cursor), len(chunk))
                for chunk in _chunks(table, part_rows)
            ]
            return part_rows, statements, Counter(_pending_queues(part_rows))

        upcoming = helper.submit(prepare, parts[0])
        for following in [*parts[1:], None]:
            part_rows, statements, part_pending = upcoming.result()
            if following is not None:
                upcoming = helper.submit(prepare, following)
            part_ids: list[int] = []
            for sql, params, count in statements:
                part_ids += _new_ids(db.execute_sql(sql, params), count, _returning(table))
            ids += part_ids
            done.append(helper.submit(written, part_rows, part_ids))
            if pending is not None:
                pending.update(part_pending)
        results = [future.result() for future in done]
    return ids, results


def _parts(items: Sequence[T]) -> list[Sequence[T]]:
    if len(items) <= INSERT_CHUNK:
        return [items]  # built and written on the caller's thread, as a thread costs more
    parts, start, size = [], 0, FIRST_PART
    while start < len(items):
        parts.append(items[start : start + size])
        start, size = start + size, min(2 * size, INSERT_CHUNK)
    return parts


def _pending_queues(rows: Sequence[Row]) -> Iterator[str]:
    return (row["queue"] for row in rows if row["status"] == PENDING)


@contextmanager
def _helper(parts: Sequence[Any]) -> Iterator[Executor]:
    """A thread for the parts after the first, or the caller's own thread for one part."""
    if len(parts) == 1:
        yield _Inline()
        return
    with ThreadPoolExecutor(1, initializer=keep_signals_off_this_thread) as helper:
        yield helper


def _returning(table: Table) -> bool:
    """Whether a statement reads its ids back with RETURNING: where they are not consecutive."""
    return not table.consecutive_ids and table.returning


def _new_ids(cursor: Any, count: int, returning: bool) -> list[int]:
    if not returning:
        if cursor.rowcount != count:
            raise OperationalError(f"inserted {cursor.rowcount} of {count} rows")
        return list(range(cursor.lastrowid, cursor.lastrowid + count))
    # One statement assigns increasing ids in row order; RETURNING's own order is not
    # promised, so sort.
    return sorted(int(row[0]) for row in cursor.fetchall())


def _chunks(table: Table, rows: Sequence[Row]) -> Iterator[Sequence[Row]]:
    """Runs of rows for one statement each, at most INSERT_CHUNK_BYTES of SQL even if every
    byte needed escaping: under MySQL's default max_allowed_packet (16 MiB). One row each
    where the ids a multi-row INSERT assigns cannot be known: neither consecutive (read from
    LAST_INSERT_ID()) nor given by RETURNING."""
    one_each = not (table.consecutive_ids or table.returning)
    start, size = 0, 0
    for end, row in enumerate(rows):
        row_size = 200 + 2 * (_utf8_length(row["params"]) + _utf8_length(row["ext_string"]))
        if end > start and (one_each or size + row_size > INSERT_CHUNK_BYTES):
            yield rows[start:end]
            start, size = end, 0
        size += row_size
    if start < len(rows):
        yield rows[start:]


def _utf8_length(text: str) -> int:
    # ASCII text (most rows) is as many bytes as characters, which costs no encoding.
    return len(text) if text.isascii() else len(text.encode())


def _multi_insert(
    table: Table, rows: Sequence[Row], returning: bool, cursor: Any
) -> tuple[str, list[Any]]:
    # Written by hand: peewee builds a node tree per value, which cost more than the
    # database itself at 20 000 rows.
    Job = table.model
    db = table.db
    by_column = {name: [row[name] for row in rows] for name in rows[0]}
    columns = [name for name, column in by_column.items() if not _all_default(name, column)]
    converters = [_db_value(Job._meta.columns[name]) for name in columns]
    suffix = " RETURNING id" if returning else ""
    quote = "`" if table.mysql else '"'
    names = ", ".join(f"{quote}{name}{quote}" for name in columns)
    head = f"INSERT INTO {quote}{Job._meta.table_name}{quote} ({names}) VALUES "
    if table.mysql and cursor is None:
        cursor = db.cursor()
    connection = getattr(cursor, "connection", None)
    if isinstance(connection, pymysql.connections.Connection):
        literals = [
            _column_literals(connection, by_column[name], to_db)
            for name, to_db in zip(columns, converters, strict=True)
        ]
        rendered = ", ".join(f"({', '.join(row)})" for row in zip(*literals, strict=True))
        # % doubled, as the driver formats the statement once more.
        return f"{head}{rendered.replace('%', '%%')}{suffix}", []
    pairs = list(zip(columns, converters, strict=True))
    values = [[to_db(row[name]) for name, to_db in pairs] for row in rows]
    if table.mysql:  # another driver's connection (`using=`): its mogrify, row by row
        return f"{head}{_literals_by_row(cursor, values)}{suffix}", []
    one = "(" + ", ".join([db.param] * len(columns)) + ")"
    flat = [value for row in values for value in row]
    return f"{head}{', '.join([one] * len(rows))}{suffix}", flat


def _all_default(name: str, column: list[Any]) -> bool:
    """Whether every row holds the table's default for `name`: such a column is left out of
    a multi-row INSERT, which saves MariaDB a quarter of its work on typical rows."""
    if name not in _TABLE_DEFAULTS:
        return False
    default = _TABLE_DEFAULTS[name]
    # Counted and typed in C: a Python test per value cost as much as escaping the row.
    return column.count(default) == len(column) and set(map(type, column)) == {type(default)}


def _column_literals(
    connection: pymysql.connections.Connection, column: list[Any], to_db: Callable[[Any], Any]
) -> list[str]:
    """A column's values as SQL literals, escaped by the driver itself: once for a column
    that holds one value in every row (status, timestamps, ...). A column at a time, as the
    driver's mogrify of each row cost twice the escaping, and as the escape of a column of
    text or of floats (params, queue, due times) is then looked up once."""
    first = column[0]
    if column.count(first) == len(column):
        return [connection.escape(to_db(first))] * len(column)
    kind = type(first)
    if to_db is _plain and kind in (str, float) and set(map(type, column)) == {kind}:
        encode = connection.encoders.get(kind)
        if kind is float and encode is not None:
            return [encode(value, connection.encoders) for value in column]
        return list(map(connection.escape, column))
    return [connection.escape(to_db(value)) for value in column]


def _literals_by_row(cursor: Any, values: list[list[Any]]) -> str:
    """The VALUES list through a DB-API cursor's mogrify: a column that holds one value in
    every row is escaped once. Returned with % doubled, as the driver formats the statement
    once more."""
    constant = [all(row[i] == values[0][i] for row in values) for i in range(len(values[0]))]
    literals = [
        cursor.mogrify("%s", (values[0][i],)).replace("%", "%%") if same else "%s"
        for i, same in enumerate(constant)
    ]
    template = "(" + ", ".join(literals) + ")"
    varying = [i for i, same in enumerate(constant) if not same]
    rendered = ", ".join(cursor.mogrify(template, [row[i] for i in varying]) for row in values)
    return rendered.replace("%", "%%")


def _db_value(field: Any) -> Callable[[Any], Any]:
    return field.db_value if isinstance(field, DateTimeField) else _plain


def _plain(value: Any) -> Any:
    return int(value) if isinstance(value, IntEnum) else value
