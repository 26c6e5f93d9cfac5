"""The hand-written SQL of leases.py: the statements a run issues for every batch of ids.

peewee renders a tree of nodes per value per call; for 500 ids that cost more than the
database took to run the statement. Here ids are inlined as integers (never outside text),
every other value is bound, and MySQL is told to use the primary key (`@BY_ID`), which
peewee cannot say.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .table import TEXT_MAX, ClaimedJob, Job, Status, Table, storable, utc_stamp

CLAIMED_SELECT = ", ".join(f"`{name}`" for name in ClaimedJob._fields)


def held_ids(table: Table, ids: Iterable[int], token: str | None, lock: bool = False) -> set[int]:
    """Which of `ids` are RUNNING under `token`; `lock` keeps them locked on MySQL until the
    transaction ends, so no other run takes them meanwhile."""
    held, token_params = _token_match(token)
    suffix = " FOR UPDATE" if lock and table.mysql else ""
    cursor = _execute(
        table,
        f"SELECT `id` FROM `delay_queue` @BY_ID WHERE `id` IN ({_id_list(ids)}) "
        f"AND `status` = %s AND {held}{suffix}",
        (int(Status.RUNNING), *token_params),
    )
    return {int(job_id) for (job_id,) in cursor.fetchall()}


def take_pending(
    table: Table, ids: Iterable[int], status: Status, token: str, now: float, **columns: Any
) -> list[ClaimedJob]:
    """Turn the PENDING rows among `ids` to `status` under `token`, with `columns`; return,
    in id order, those in `status` under `token` (safe to repeat: the SELECT reads all)."""
    listed = _id_list(ids)
    assignments = "".join(f", `{name}` = %s" for name in columns)
    _execute(
        table,
        f"UPDATE `delay_queue` @BY_ID SET `status` = %s, `lease_token` = %s{assignments}, "
        f"`modified` = %s WHERE `id` IN ({listed}) AND `status` = %s",
        (int(status), token, *columns.values(), _stamp(now), int(Status.PENDING)),
    )
    cursor = _execute(
        table,
        f"SELECT {CLAIMED_SELECT} FROM `delay_queue` @BY_ID "
        f"WHERE `id` IN ({listed}) AND `status` = %s AND `lease_token` = %s ORDER BY `id`",
        (int(status), token),
    )
    return [ClaimedJob._make(row) for row in cursor.fetchall()]


def finish_held(
    table: Table,
    status: Status,
    messages: Sequence[tuple[int, str]] | str,
    ids: Iterable[int],
    token: str | None,
    now: float,
) -> int:
    """Set `status` and a message on the rows among `ids` RUNNING under `token`, ending their
    lease; `messages` is one text for all, or (id, text) pairs for a CASE over the ids."""
    message_params: list[Any] = [messages]
    message_sql = "%s"
    if not isinstance(messages, str):
        message_sql = "CASE `id` " + " ".join(["WHEN %s THEN %s"] * len(messages)) + " END"
        message_params = [
            value for job_id, text in messages for value in (int(job_id), storable(text, TEXT_MAX))
        ]
    held, token_params = _token_match(token)
    cursor = _execute(
        table,
        f"UPDATE `delay_queue` @BY_ID SET `status` = %s, `message` = {message_sql}, "
        f"`modified` = %s, `lease_until` = NULL WHERE `id` IN ({_id_list(ids)}) "
        f"AND `status` = %s AND {held}",
        (int(status), *message_params, _stamp(now), int(Status.RUNNING), *token_params),
    )
    return int(cursor.rowcount)


def _id_list(ids: Iterable[int]) -> str:
    """`1,2,3` for an IN (...) list; int() makes sure nothing but digits gets in."""
    return ",".join([str(int(job_id)) for job_id in ids])


def _token_match(token: str | None) -> tuple[str, tuple[Any, ...]]:
    """The lease-token condition and its parameters; a NULL token matches only NULL."""
    if token is None:
        return "`lease_token` IS NULL", ()
    return "`lease_token` = %s", (token,)


def _stamp(now: float) -> Any:
    """`modified` as the database driver takes it (what peewee would have passed)."""
    return Job.modified.db_value(utc_stamp(now))


def _execute(table: Table, sql: str, params: Sequence[Any] = ()) -> Any:
    """Run `sql`, written with %s and `name` quoting. `@BY_ID` makes MySQL find rows by
    primary key: left to itself it may scan the status index, and lock (or wait for) every
    other run's rows on the way."""
    if table.mysql:
        sql = sql.replace("@BY_ID", "FORCE INDEX (PRIMARY)")
    else:
        sql = sql.replace(" @BY_ID", "").replace("`", '"')
    param = table.db.param
    return table.db.execute_sql(sql if param == "%s" else sql.replace("%s", param), params)
