"""What `delayq doctor` reads of the database: the server and whether it takes writes, the
table's columns and SQL indexes against the model, and which running rows hold leases. Only
reads; ops/doctor.py judges what it finds and words the lines."""

from __future__ import annotations

from typing import NamedTuple

from .model import TABLE_NAME, Job, Status, Table, tuples


class DatabaseServer(NamedTuple):
    """The database server: MySQL's (or MariaDB's) `VERSION()`, or SQLite's version, and
    whether it refuses writes (`read_only`: a replica; SQLite never does)."""

    mysql: bool
    version: str
    read_only: bool


class Columns(NamedTuple):
    """The model's columns, in its order, and those of them the table lacks."""

    expected: list[str]
    missing: list[str]


class ModelIndex(NamedTuple):
    """An SQL index the model declares, by its columns, and whether the table has it."""

    columns: tuple[str, ...]
    present: bool


class Inspection:
    """The checks doctor makes of one table's database, each a read named for what it finds."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def server(self) -> DatabaseServer:
        """The server's version and whether it takes writes, in one round trip."""
        db = self.table.db
        if not self.table.mysql:
            (version,) = db.execute_sql("SELECT sqlite_version()").fetchone()
            return DatabaseServer(False, str(version), False)
        version, read_only = db.execute_sql("SELECT VERSION(), @@global.read_only").fetchone()
        return DatabaseServer(True, str(version), bool(read_only))

    def has_table(self) -> bool:
        """Whether `delay_queue` exists."""
        return self.table.exists()

    def columns(self) -> Columns:
        """The model's columns and those the table lacks."""
        present = {column.name for column in self.table.db.get_columns(TABLE_NAME)}
        expected = [field.column_name for field in Job._meta.sorted_fields]
        return Columns(expected, [name for name in expected if name not in present])

    def indexes(self) -> list[ModelIndex]:
        """Each SQL index the model declares, and whether the table has it."""
        found = [tuple(index.columns) for index in self.table.db.get_indexes(TABLE_NAME)]
        declared = [
            tuple(Job._meta.fields[name].column_name for name in names)
            for names, _unique in Job._meta.indexes
        ]
        return [ModelIndex(columns, columns in found) for columns in declared]

    def running_leases(self, queue: str) -> list[tuple[int, str | None]]:
        """(id, lease token) of the queue's RUNNING rows: the jobs in flight and the runs
        holding them."""
        Job = self.table.model
        running = Job.select(Job.id, Job.lease_token).where(
            Job.status == Status.RUNNING, Job.queue == queue
        )
        return [(job_id, token) for job_id, token in tuples(running)]
