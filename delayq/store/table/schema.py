"""Bringing an existing `delay_queue` up to the model in place: the seed's eight columns (or an
older delayq's) gain what they lack, with the defaults other producers rely on and text wide
enough for delayq, and the seed's jobs keep the due times its Redis schedule holds. Every
step is safe to repeat: `delayq init` after a crash (or twice) finishes, then changes nothing.
"""

from __future__ import annotations

from typing import Any

from peewee import Field

from ...config import DEFAULT_QUEUE
from ...errors import ConfigError
from ..index.keys import schedule_key
from ..index.parts import Index
from .due_rows import DueRows
from .jobs import Jobs
from .leases import pending_again
from .model import RETIRED_INDEXES, TABLE_NAME, Status, Table, id_batches, utc_stamp

BATCH = 1000
# A job the seed's cron would never have run: its row says waiting, but its id is not on
# the schedule (a ZADD that failed, a cancel or a success cut short between ZREM and UPDATE).
UNSCHEDULED = (
    "missed: not on delay_queue_job when delayq took over the table, so it never ran; "
    "`delayq retry ID` runs it"
)
# Producers may write NULL into these (the seed's do), so they keep their NULLs.
NULLABLE_AS_FOUND = ("created", "modified")
# What delayq writes there must fit: up to 65 535 bytes of params, 2 000 characters of message.
TEXT_COLUMNS = ("params", "message")
TEXT_TYPES = ("text", "mediumtext", "longtext")


class Schema:
    """The table's columns and SQL indexes against the model: what is missing or too narrow,
    and the table brought up to the model in place."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def upgrade(self, index: Index, now: float, schedule_lost: bool = False) -> list[str]:
        """Add what the table lacks and settle rows no delayq run could settle; one line per
        change. A table without `run_at` holds the seed's jobs, whose due times live only in its
        Redis schedule: pending rows absent from it become missed."""
        changes: list[str] = []
        if "run_at" not in _columns(self.table):
            if not index.schedule.size(DEFAULT_QUEUE) and not schedule_lost:
                _refuse_without_schedule(self.table)
            changes += _miss_unscheduled(self.table, index, now)
        changes += _alter_columns(self.table)
        changes += _add_indexes(self.table)
        changes += _adopt_due_times(self.table, index)
        return changes + _recover_stranded(self.table, index, now)

    def column_problems(self) -> list[str]:
        """What makes delayq's writes fail on the existing columns, one phrase each: what
        `upgrade` would fix."""
        columns = _columns(self.table)
        problems = []
        for field in self.table.model._meta.sorted_fields if self.table.mysql else []:
            column = columns.get(field.column_name)
            if column is not None and (problem := _problem(field, column)):
                problems.append(f"{field.column_name} {problem}")
        if collation := _narrow_collation(self.table):
            problems.append(f"the table is {collation}, which refuses 4-byte UTF-8 such as emoji")
        return problems


def _columns(table: Table) -> dict[str, Any]:
    return {column.name: column for column in table.db.get_columns(TABLE_NAME)}


def _refuse_without_schedule(table: Table) -> None:
    Job = table.model
    waiting = Job.select(Job.id).where(Job.status.in_([Status.PENDING, Status.RUNNING])).count()
    if waiting:
        raise ConfigError(
            f"delay_queue holds {waiting} waiting jobs but this Redis has no "
            f"{schedule_key(DEFAULT_QUEUE)}, where their due times are: point DELAYQ_REDIS_URL "
            "at the seed's Redis, or run `delayq init --schedule-lost` to mark them missed"
        )


def _miss_unscheduled(table: Table, index: Index, now: float) -> list[str]:
    """Waiting rows not on the seed's schedule (the default queue's) become missed; asked a
    batch at a time, as the seed never prunes that set."""
    Job = table.model
    missed = 0
    for rows in id_batches(Job.select(Job.id).where(Job.status == Status.PENDING).tuples(), BATCH):
        if absent := index.schedule.missing(DEFAULT_QUEUE, [job_id for (job_id,) in rows]):
            missed += (
                Job.update(status=Status.MISSED, message=UNSCHEDULED, modified=utc_stamp(now))
                .where(Job.id.in_(absent), Job.status == Status.PENDING)
                .execute()
            )
    return [f"marked {missed} waiting jobs missed: not on the schedule"] if missed else []


def _alter_columns(table: Table) -> list[str]:
    """Add the missing columns and fix those delayq's writes would fail on, each as the model
    defines it: NOT NULL columns with their DEFAULT, so an INSERT that leaves them out works."""
    columns = _columns(table)
    changes = _convert_charset(table)
    clauses: list[str] = []
    for field in table.model._meta.sorted_fields:
        column = columns.get(field.column_name)
        if column is None:
            clauses.append(f"ADD COLUMN {_ddl(table, field)}")
            changes.append(f"added column {field.column_name}")
        elif table.mysql and _problem(field, column) is not None:
            _fill_nulls(table, field)
            clauses.append(f"MODIFY COLUMN {_ddl(table, field)}")
            changes.append(f"changed column {field.column_name} to {_ddl(table, field)}")
    if table.mysql and clauses:
        table.db.execute_sql(f"ALTER TABLE `{TABLE_NAME}` {', '.join(clauses)}")
    else:
        for clause in clauses:  # SQLite alters one column per statement
            table.db.execute_sql(f'ALTER TABLE "{TABLE_NAME}" {clause}')
    return changes


def _narrow_collation(table: Table) -> str | None:
    """The table's collation on MySQL unless utf8mb4: the seed's 3-byte utf8 refuses text
    delayq accepts (emoji)."""
    if not table.mysql:
        return None
    (collation,) = table.db.execute_sql(
        "SELECT TABLE_COLLATION FROM information_schema.TABLES "
        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
        (TABLE_NAME,),
    ).fetchone()
    return None if str(collation).startswith("utf8mb4") else str(collation)


def _convert_charset(table: Table) -> list[str]:
    if not (collation := _narrow_collation(table)):
        return []
    table.db.execute_sql(f"ALTER TABLE `{TABLE_NAME}` CONVERT TO CHARACTER SET utf8mb4")
    return [f"converted the table from {collation} to utf8mb4"]


def _problem(field: Field, column: Any) -> str | None:
    """Why delayq's writes would fail on this existing column, or None."""
    if field.column_name in NULLABLE_AS_FOUND or field.primary_key:
        return None
    if field.column_name in TEXT_COLUMNS and column.data_type.lower() not in TEXT_TYPES:
        return f"is {column.data_type}, too short for what delayq writes"
    if field.null:
        return None
    if column.default is None and _default_of(field) is not None:
        return "has no DEFAULT, so an INSERT that leaves it out fails"
    return "allows NULL, which delayq cannot read" if column.null else None


def _default_of(field: Field) -> Any:
    """The value the model's DEFAULT clause gives (what a NULL is replaced with)."""
    return field.default() if callable(field.default) else field.default


def _fill_nulls(table: Table, field: Field) -> None:
    if not field.null:
        value = _default_of(field)
        table.model.update({field: "" if value is None else value}).where(field.is_null()).execute()


def _ddl(table: Table, field: Field) -> str:
    context = table.db.get_sql_context()
    context.sql(field.ddl(context))
    sql, params = context.query()
    assert not params, "column definitions carry no parameters"
    return str(sql)


def _add_indexes(table: Table) -> list[str]:
    from playhouse.migrate import SchemaMigrator, migrate  # only when upgrading a table

    migrator = SchemaMigrator.from_database(table.db)
    indexed = {tuple(index.columns) for index in table.db.get_indexes(TABLE_NAME)}
    changes = []
    for fields, unique in table.model._meta.indexes:
        if tuple(fields) not in indexed:
            migrate(migrator.add_index(TABLE_NAME, fields, unique))
            changes.append(f"added index ({', '.join(fields)})")
    for index in table.db.get_indexes(TABLE_NAME):
        if tuple(index.columns) in RETIRED_INDEXES:
            migrate(migrator.drop_index(TABLE_NAME, index.name))
            changes.append(f"dropped index ({', '.join(index.columns)})")
    return changes


def _adopt_due_times(table: Table, index: Index) -> list[str]:
    """Pending rows written without run_at but on a schedule take its score as run_at: the
    seed's rows, and those of producers that only ZADD the due time."""
    adopted = 0
    for queue in Jobs(table).pending_queues():
        after_id = 0
        while ids := DueRows(table).pending_without_run_at(queue, BATCH, after_id):
            adopted += DueRows(table).adopt_run_at(index.schedule.scores(queue, ids))
            after_id = ids[-1]
    return [f"took the due times of {adopted} jobs from the schedule"] if adopted else []


def _recover_stranded(table: Table, index: Index, now: float) -> list[str]:
    """Running rows without a lease (left by a runner that did not lease; no lapse frees
    them) go back on the schedule, due now, with a lost lease counted, as if their run died."""
    Job = table.model
    stranded = (Job.status == Status.RUNNING) & Job.lease_until.is_null()
    recovered = 0
    for rows in id_batches(Job.select(Job.id, Job.queue).where(stranded).tuples(), BATCH):
        handed_back = pending_again(now, run_at=now, lost_leases=Job.lost_leases + 1)
        ids = [job_id for job_id, _ in rows]
        recovered += Job.update(handed_back).where(Job.id.in_(ids), stranded).execute()
        index.schedule.add_by_queue((queue, job_id, now) for job_id, queue in rows)
    return (
        [f"put {recovered} running jobs without a lease back on the schedule"] if recovered else []
    )
