"""Hand-written SQL for the statements a run issues for every batch.

peewee builds a tree of nodes per value and renders it per call; for a batch of 500 ids that
cost more than the database took to run the statement. These are written once, with the ids
inlined as integers (never text from outside) and every other value a bound parameter.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .table import CLAIMED_COLUMNS, Job, Table

TABLE = Job._meta.table_name


def id_list(ids: Iterable[int]) -> str:
    """`1,2,3` for an IN (...) list; int() makes sure nothing but digits gets in."""
    return ",".join([str(int(job_id)) for job_id in ids])


def execute(table: Table, sql: str, params: Sequence[Any] = ()) -> Any:
    """Run `sql`, written with %s placeholders and `name` quoting, on the jobs' database.

    `@BY_ID` after the table name makes MySQL find rows by primary key, as the id lists
    mean it to: left to itself it may scan the status index instead, and lock (or wait for)
    every other run's rows on the way."""
    return table.db.execute_sql(_dialect(sql, table.mysql, table.db.param), params)


def token_match(token: str | None) -> tuple[str, tuple[Any, ...]]:
    """The lease-token condition and its parameters; a NULL token matches only NULL."""
    if token is None:
        return "`lease_token` IS NULL", ()
    return "`lease_token` = %s", (token,)


CLAIMED_SELECT = ", ".join(f"`{name}`" for name in CLAIMED_COLUMNS)


def _dialect(sql: str, mysql: bool, param: str) -> str:
    if mysql:
        text = sql.replace("@BY_ID", "FORCE INDEX (PRIMARY)")
    else:
        text = sql.replace(" @BY_ID", "").replace("`", '"')
    return text if param == "%s" else text.replace("%s", param)
