"""Per-queue settings, durably: the `delay_queue_settings` table, a row per queue that has
been paused or limited at least once (whether it is paused, since when, when it last resumed;
its rate limit: at most rate_count starts in any rate_period seconds; its concurrency limit:
at most `concurrency` of its jobs running at once). Redis
holds a mirror that the claim reads (flow.py); this table is what the mirror comes back from.

A queue without a row has its defaults: running, never paused. Every change bumps `version`,
so that of two writers racing to mirror their change, the later change wins in Redis too.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..index.flow import RUNNING, QueueFlow
from .model import Status, Table, quoted, stamp_text, table_exists

SETTINGS_TABLE = "delay_queue_settings"
ADDED = f"added table {SETTINGS_TABLE}"


class Unchanged:
    """A limit `limit` leaves as it is (the other one is being set)."""


UNCHANGED = Unchanged()


class QueueSettings:
    """Each queue's pause and limits in the settings table: read, changed, and whether a queue
    holds jobs at all."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def install(self) -> list[str]:
        """Create the settings table unless it is there, or add the columns an older one lacks;
        one line for each change."""
        if _exists(self.table):
            return _add_limit_columns(self.table)
        if self.table.mysql:
            self.table.db.execute_sql(
                f"CREATE TABLE IF NOT EXISTS `{SETTINGS_TABLE}` ("
                "`queue` varchar(64) NOT NULL, `paused_at` double DEFAULT NULL, "
                "`resumed_at` double DEFAULT NULL, `version` bigint NOT NULL DEFAULT 0, "
                "`modified` datetime NOT NULL DEFAULT current_timestamp(), "
                "`rate_count` int DEFAULT NULL, `rate_period` double DEFAULT NULL, "
                "`concurrency` int DEFAULT NULL, "
                "PRIMARY KEY (`queue`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
            )
        else:
            self.table.db.execute_sql(
                f'CREATE TABLE IF NOT EXISTS "{SETTINGS_TABLE}" (queue VARCHAR(64) NOT NULL '
                "PRIMARY KEY, paused_at REAL, resumed_at REAL, version INTEGER NOT NULL DEFAULT 0, "
                "modified DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP, rate_count INTEGER, "
                "rate_period REAL, concurrency INTEGER)"
            )
        return [ADDED]

    def flows(self, queues: Sequence[str] | None = None) -> dict[str, QueueFlow]:
        """{queue: its settings} of the queues with a row (of `queues`, or all); none before
        `delayq init` made the table, which is every queue at its defaults."""
        if not _exists(self.table):
            return {}
        sql = (
            "SELECT queue, paused_at, resumed_at, version, rate_count, rate_period, concurrency "
            f"FROM {_settings(self.table)}"
        )
        params: list[str] = []
        if queues is not None:
            if not queues:
                return {}
            sql += f" WHERE queue IN ({', '.join([self.table.db.param] * len(queues))})"
            params = list(queues)
        rows = self.table.db.execute_sql(sql, params).fetchall()
        return {str(row[0]): _flow(*row[1:]) for row in rows}

    def pause(self, queues: Sequence[str], now: float) -> dict[str, QueueFlow]:
        """Pause `queues` from `now`; one already paused keeps when it was paused. Returns every
        one's settings as they now stand."""
        if self.table.mysql:
            sql = (
                f"INSERT INTO {_settings(self.table)} (queue, paused_at, version, modified) "
                "VALUES (%s, %s, 1, %s) ON DUPLICATE KEY UPDATE "
                "version = version + (paused_at IS NULL), "
                "modified = IF(paused_at IS NULL, VALUES(modified), modified), "
                "paused_at = COALESCE(paused_at, VALUES(paused_at))"
            )
        else:
            sql = (
                f'INSERT INTO "{SETTINGS_TABLE}" (queue, paused_at, version, modified) '
                "VALUES (?, ?, 1, ?) ON CONFLICT (queue) DO UPDATE SET "
                "version = version + (paused_at IS NULL), "
                "modified = CASE WHEN paused_at IS NULL THEN excluded.modified "
                "ELSE modified END, paused_at = COALESCE(paused_at, excluded.paused_at)"
            )
        return _upsert_each(self.table, queues, sql, (now, stamp_text(now)))

    def resume(self, queues: Sequence[str], now: float) -> dict[str, QueueFlow]:
        """Resume those of `queues` that are paused, as of `now`; one that runs is left as it is
        (its overdue window does not move). Returns every one's settings as they now stand."""
        if queues and _exists(self.table):
            marks = ", ".join([self.table.db.param] * len(queues))
            param = self.table.db.param
            self.table.db.execute_sql(
                f"UPDATE {_settings(self.table)} SET paused_at = NULL, "
                f"resumed_at = {param}, version = version + 1, modified = {param} "
                f"WHERE paused_at IS NOT NULL AND queue IN ({marks})",
                [now, stamp_text(now), *queues],
            )
        found = self.flows(queues)
        return {queue: found.get(queue, RUNNING) for queue in queues}

    def limit(
        self,
        queues: Sequence[str],
        now: float,
        rate: tuple[int, float] | None | Unchanged = UNCHANGED,
        concurrency_limit: int | None | Unchanged = UNCHANGED,
    ) -> dict[str, QueueFlow]:
        """Limit `queues` to `rate` (starts, seconds) and to `concurrency_limit` jobs running at
        once; None lifts that limit, UNCHANGED leaves it as it is. Returns every one's settings
        as they now stand."""
        values: dict[str, object] = {}
        if not isinstance(rate, Unchanged):
            values["rate_count"], values["rate_period"] = rate if rate is not None else (None, None)
        if not isinstance(concurrency_limit, Unchanged):
            values["concurrency"] = concurrency_limit
        columns = ", ".join(values)
        marks = ", ".join([self.table.db.param] * len(values))
        if self.table.mysql:
            updates = ", ".join(f"{column} = VALUES({column})" for column in values)
            sql = (
                f"INSERT INTO {_settings(self.table)} (queue, {columns}, version, modified) "
                f"VALUES (%s, {marks}, 1, %s) ON DUPLICATE KEY UPDATE version = version + 1, "
                f"{updates}, modified = VALUES(modified)"
            )
        else:
            updates = ", ".join(f"{column} = excluded.{column}" for column in values)
            sql = (
                f'INSERT INTO "{SETTINGS_TABLE}" (queue, {columns}, version, modified) '
                f"VALUES (?, {marks}, 1, ?) ON CONFLICT (queue) DO UPDATE SET "
                f"version = version + 1, {updates}, modified = excluded.modified"
            )
        return _upsert_each(self.table, queues, sql, (*values.values(), stamp_text(now)))

    def holds_jobs(self, queue: str) -> bool:
        """Whether any row is in `queue`: a range of the (status, queue, run_at) SQL index a
        status."""
        Job = self.table.model
        rows = Job.select(Job.id).where(Job.status.in_(list(Status)), Job.queue == queue)
        return rows.limit(1).exists()


def _add_limit_columns(table: Table) -> list[str]:
    """A settings table made before rate or concurrency limits gains their columns, in
    place; one line for each column added."""
    have = {column.name for column in table.db.get_columns(SETTINGS_TABLE)}
    integer, real = ("int", "double") if table.mysql else ("INTEGER", "REAL")
    added = []
    for column, kind in (("rate_count", integer), ("rate_period", real), ("concurrency", integer)):
        if column not in have:
            table.db.execute_sql(
                f"ALTER TABLE {_settings(table)} ADD COLUMN {column} {kind} DEFAULT NULL"
            )
            added.append(column)
    return [f"added columns {', '.join(added)} to {SETTINGS_TABLE}"] if added else []


def _upsert_each(
    table: Table, queues: Sequence[str], sql: str, values: tuple[object, ...]
) -> dict[str, QueueFlow]:
    """Run the insert-or-update `sql` for each queue (its first parameter, then `values`), in
    one transaction; every one's settings as they then stand."""
    QueueSettings(table).install()
    with table.db.atomic():
        for queue in queues:
            table.db.execute_sql(sql, (queue, *values))
    return QueueSettings(table).flows(queues)


def _exists(table: Table) -> bool:
    return table_exists(table, SETTINGS_TABLE)


def _settings(table: Table) -> str:
    return quoted(table, SETTINGS_TABLE)


def _flow(
    paused: object,
    resumed: object,
    version: object,
    count: object,
    period: object,
    concurrency_limit: object,
) -> QueueFlow:
    return QueueFlow(
        None if paused is None else float(str(paused)),
        None if resumed is None else float(str(resumed)),
        int(str(version)),
        None if count is None else int(str(count)),
        None if period is None else float(str(period)),
        None if concurrency_limit is None else int(str(concurrency_limit)),
    )
