"""Writing new jobs to `delay_queue` fast: multi-row INSERTs written by hand, their ids known
without reading them back where the server promises consecutive ids, and, for many jobs,
the next chunk's rows built while the database writes the current one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from enum import IntEnum
from typing import Any, TypeVar

from peewee import DateTimeField, OperationalError

from ..threads import keep_signals_off_this_thread
from . import counts
from .table import Job, Status, Table

PENDING = int(Status.PENDING)

T = TypeVar("T")
Row = dict[str, Any]
# One statement's rows: 2 500 keeps MariaDB busy long enough to hide the building of the
# next chunk, and SQLite under its 32 766 bound values at 13 columns.
INSERT_CHUNK = 2500
INSERT_CHUNK_BYTES = 4 << 20

# Column defaults the table itself holds (schema.sql and create_tables agree, as
# tests/store/test_schema.py checks, and the model repeats them): a column left out of an INSERT
# gets the same value. (created and modified default to the clock, never left out.)
_TABLE_DEFAULTS = {
    field.name: field.default
    for field in Job._meta.sorted_fields
    if field.null or not (field.default is None or callable(field.default))
}


def insert_one(table: Table, row: Row) -> int:
    """One row, autocommit: no BEGIN/COMMIT round trips; returns its id."""
    sql, params = _multi_insert(table, [row], returning=False, cursor=None)
    return int(table.db.execute_sql(sql, params).lastrowid)


def insert_many(
    table: Table, items: Sequence[T], to_rows: Callable[[Sequence[T]], list[Row]]
) -> tuple[list[int], list[Row]]:
    """Turn `items` into rows with `to_rows` (which may raise BadInput: nothing is then
    written) and insert them in one transaction; their ids and rows, in the order of `items`.

    Building and escaping rows costs as much as the database's work, so a helper thread
    builds the next chunk's statements while the server writes this one's."""
    db = table.db
    parts = [items[start : start + INSERT_CHUNK] for start in range(0, len(items), INSERT_CHUNK)]
    ids: list[int] = []
    rows = []
    with db.atomic(), counts.counted(table, len(items)) as pending:
        # Created here, on this thread's connection: the helper only escapes with it.
        cursor = db.cursor() if table.mysql else None

        def prepare(part: Sequence[T]) -> tuple[list[Row], list[tuple[str, list[Any], int]]]:
            part_rows = to_rows(part)
            return part_rows, [
                (*_multi_insert(table, chunk, _returning(table), cursor), len(chunk))
                for chunk in _chunks(table, part_rows)
            ]

        for part_rows, statements in _overlapped(parts, prepare):
            for sql, params, count in statements:
                ids += _new_ids(db.execute_sql(sql, params), count, _returning(table))
            rows += part_rows
            if pending is not None:
                pending.update(row["queue"] for row in part_rows if row["status"] == PENDING)
    return ids, rows


def _overlapped(parts: Sequence[T], prepare: Callable[[T], Any]) -> Iterator[Any]:
    """prepare(part) for each part in order, the next on a helper thread meanwhile."""
    if len(parts) == 1:
        yield prepare(parts[0])
        return
    with ThreadPoolExecutor(1, initializer=keep_signals_off_this_thread) as helper:
        upcoming = helper.submit(prepare, parts[0])
        for following in [*parts[1:], None]:
            current = upcoming.result()
            if following is not None:
                upcoming = helper.submit(prepare, following)
            yield current


def insert_through(table: Table, connection: Any, rows: Sequence[Row]) -> list[int]:
    """Insert `rows` with the statements `insert_many` writes, escaped by and sent on another
    DB-API `connection` to the same database (the caller's, inside its transaction); their
    ids. Commits nothing."""
    with closing(connection.cursor()) as cursor:
        ids: list[int] = []
        for chunk in _chunks(table, rows):
            cursor.execute(*_multi_insert(table, chunk, _returning(table), cursor))
            ids += _new_ids(cursor, len(chunk), _returning(table))
        return ids


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
        row_size = 200 + 2 * (len(row["params"].encode()) + len(row["ext_string"].encode()))
        if end > start and (one_each or size + row_size > INSERT_CHUNK_BYTES):
            yield rows[start:end]
            start, size = end, 0
        size += row_size
    if start < len(rows):
        yield rows[start:]


def _multi_insert(
    table: Table, rows: Sequence[Row], returning: bool, cursor: Any
) -> tuple[str, list[Any]]:
    # Written by hand: peewee builds a node tree per value, which cost more than the
    # database itself at 20 000 rows.
    Job = table.model
    db = table.db
    columns = [name for name in rows[0] if not _all_default(rows, name)]
    pairs = [(name, _db_value(Job._meta.columns[name])) for name in columns]
    values = [[to_db(row[name]) for name, to_db in pairs] for row in rows]
    suffix = " RETURNING id" if returning else ""
    quote = "`" if table.mysql else '"'
    names = ", ".join(f"{quote}{name}{quote}" for name in columns)
    head = f"INSERT INTO {quote}{Job._meta.table_name}{quote} ({names}) VALUES "
    if table.mysql:
        return f"{head}{_mysql_literals(cursor or db.cursor(), values)}{suffix}", []
    one = "(" + ", ".join([db.param] * len(columns)) + ")"
    flat = [value for row in values for value in row]
    return f"{head}{', '.join([one] * len(rows))}{suffix}", flat


def _all_default(rows: Sequence[Row], name: str) -> bool:
    """Whether every row holds the table's default for `name`: such a column is left out of
    a multi-row INSERT, which saves MariaDB a quarter of its work on typical rows."""
    if name not in _TABLE_DEFAULTS:
        return False
    default = _TABLE_DEFAULTS[name]
    return all(row[name] == default and type(row[name]) is type(default) for row in rows)


def _mysql_literals(cursor: Any, values: list[list[Any]]) -> str:
    """The VALUES list with every value escaped by the driver itself; a column that holds
    one value in every row (status, timestamps, ...) is escaped once, not per row.
    Returned with % doubled, as the driver formats the statement once more."""
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
