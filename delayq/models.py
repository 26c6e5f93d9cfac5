"""The `delay_queue` table: the durable truth about every job, and the queries on it.

Every status change is a compare-and-set UPDATE guarded by the expected status (and, for a
running job, the lease token); the affected-row count says who won. The Redis index never
decides a job's fate; this table does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from enum import IntEnum
from typing import Any, NamedTuple, cast

from peewee import (
    SQL,
    BigAutoField,
    BigIntegerField,
    CharField,
    Database,
    DatabaseProxy,
    DateTimeField,
    DoubleField,
    IntegerField,
    Model,
    OperationalError,
    SmallIntegerField,
    TextField,
    fn,
)

database_proxy = DatabaseProxy()

EXT_MAX = 255
MESSAGE_MAX = 2000


class Status(IntEnum):
    PENDING = 1
    RUNNING = 2  # claimed by a run that holds its lease
    SUCCESS = 10
    FAILED = 20
    CANCELLED = 30
    MISSED = 40  # was due longer ago than a run's --since window; `retry` can still run it

    @property
    def word(self) -> str:
        """The lower-case contract word used in every output."""
        return self.name.lower()

    @classmethod
    def from_word(cls, word: str) -> Status:
        return cls[word.strip().upper()]


def status_word(value: int) -> str:
    """Contract word of a stored status, or `unknown(N)` for a number delayq never writes."""
    try:
        return Status(value).word
    except ValueError:
        return f"unknown({value})"


class Job(Model):
    id = BigAutoField()
    params = TextField()  # {"class": ..., "method": ..., "data": ...}
    message = TextField(null=True)  # result text or error
    ext_string = CharField(max_length=EXT_MAX, default="", constraints=[SQL("DEFAULT ''")])
    retry_times = IntegerField(default=0, constraints=[SQL("DEFAULT 0")])
    status = SmallIntegerField(default=Status.PENDING, constraints=[SQL("DEFAULT 1")])
    created = DateTimeField(default=datetime.now, constraints=[SQL("DEFAULT CURRENT_TIMESTAMP")])
    modified = DateTimeField(default=datetime.now, constraints=[SQL("DEFAULT CURRENT_TIMESTAMP")])
    run_at = DoubleField(null=True)  # due time, epoch seconds; the index can be rebuilt from it
    queue = CharField(max_length=64, default="default", constraints=[SQL("DEFAULT 'default'")])
    chain_id = BigIntegerField(null=True)  # first attempt of a retry chain; NULL on that row
    lease_until = DoubleField(null=True)  # while running: when the lease lapses
    lease_token = CharField(max_length=32, null=True)  # which run holds the lease
    lost_leases = IntegerField(default=0, constraints=[SQL("DEFAULT 0")])
    timeout = DoubleField(null=True)  # seconds the handler may take; NULL: the configured default
    every = DoubleField(null=True)  # a recurring job's period in seconds; NULL: runs once

    class Meta:
        table_name = "delay_queue"
        database = database_proxy
        indexes = (
            (("status", "queue", "run_at"), False),
            (("ext_string",), False),
            (("chain_id",), False),
        )


def create_tables(db: Database) -> list[str]:
    """Create `delay_queue` and its indexes, or add what an older table lacks; safe to run
    again. Returns what it added to an existing table."""
    table = Job._meta.table_name
    if not db.table_exists(table):
        Job._meta.table_settings = (
            ["ENGINE=InnoDB", "DEFAULT CHARSET=utf8mb4"] if is_mysql(db) else []
        )
        db.create_tables([Job])
        return []
    from playhouse.migrate import SchemaMigrator, migrate  # only when upgrading a table

    migrator = SchemaMigrator.from_database(db)
    added = []
    columns = {column.name for column in db.get_columns(table)}
    for field in Job._meta.sorted_fields:
        if field.column_name not in columns:
            migrate(migrator.add_column(table, field.column_name, field))
            added.append(f"column {field.column_name}")
    indexed = {tuple(index.columns) for index in db.get_indexes(table)}
    for fields, unique in Job._meta.indexes:
        if tuple(fields) not in indexed:
            migrate(migrator.add_index(table, fields, unique))
            added.append(f"index ({', '.join(fields)})")
    return added


def is_mysql(db: object) -> bool:
    """Whether `db` (or the database behind a proxy) speaks MySQL/MariaDB."""
    obj = getattr(db, "obj", None) or db
    return "mysql" in type(obj).__name__.lower()


class ClaimedJob(NamedTuple):
    """The columns a run needs of a job it holds; a tuple, not a model, to stay cheap."""

    id: int
    params: str
    ext_string: str
    retry_times: int
    queue: str
    chain_id: int | None
    run_at: float | None
    timeout: float | None
    every: float | None


CLAIMED_COLUMNS = (
    Job.id,
    Job.params,
    Job.ext_string,
    Job.retry_times,
    Job.queue,
    Job.chain_id,
    Job.run_at,
    Job.timeout,
    Job.every,
)


def tuples(query: Any) -> list[tuple[Any, ...]]:
    """The rows of a SELECT (or of a RETURNING cursor) as plain tuples: cheaper than models,
    and typed as tuples."""
    return cast(list[tuple[Any, ...]], list(query.tuples()))


def insert_next_occurrence(job: ClaimedJob, run_at: float, now: float) -> int | None:
    """The next occurrence of a recurring job, unless its series was stopped meanwhile.

    Runs inside the transaction that records the occurrence's outcome; the locking read
    orders it against `stop_series`, so a cancel never loses to a re-arm.
    """
    query = Job.select(Job.every).where(Job.id == job.id)
    if is_mysql(Job._meta.database):
        query = query.for_update()
    row = query.first()
    if row is None or row.every is None:
        return None
    return Job.insert(
        params=job.params,
        ext_string=job.ext_string,
        queue=job.queue,
        run_at=run_at,
        timeout=job.timeout,
        every=row.every,
        status=Status.PENDING,
        created=local_now(now),
        modified=local_now(now),
    ).execute()


@contextmanager
def exclusive(name: str) -> Iterator[None]:
    """Hold a lock named `name` across processes: GET_LOCK on MySQL; on SQLite an immediate
    transaction, which already excludes every other writer."""
    db = Job._meta.database
    if not is_mysql(db):
        with db.atomic("IMMEDIATE"):
            yield
        return
    lock = "delayq:" + hashlib.sha1(name.encode()).hexdigest()
    if db.execute_sql("SELECT GET_LOCK(%s, 30)", (lock,)).fetchone()[0] != 1:
        raise OperationalError(f"could not take lock {lock} within 30 s")
    try:
        with db.atomic():
            yield
    finally:
        db.execute_sql("SELECT RELEASE_LOCK(%s)", (lock,))


def replace_pending(row: dict[str, Any]) -> tuple[int, list[int]]:
    """Move the oldest PENDING job with the row's ext and queue to the row's time and data
    (or insert the row if there is none); cancel any further ones. Call under `exclusive`.

    Returns the job's id and the ids cancelled.
    """
    pending = [
        job_id
        for (job_id,) in tuples(
            Job.select(Job.id)
            .where(
                Job.ext_string == row["ext_string"],
                Job.queue == row["queue"],
                Job.status == Status.PENDING,
            )
            .order_by(Job.id)
        )
    ]
    moved = {key: row[key] for key in ("params", "run_at", "timeout", "every", "modified")}
    if not pending or not (
        Job.update(**moved).where(Job.id == pending[0], Job.status == Status.PENDING).execute()
    ):
        # None pending, or a run took it meanwhile: this becomes the pending job.
        return Job.insert(**row).execute(), []
    cancel(pending[1:], row["modified"].timestamp())
    return pending[0], pending[1:]


def stop_series(ext: str, queue: str | None) -> int:
    """Stop the recurring series with this business key from re-arming."""
    query = Job.update(every=None).where(Job.ext_string == ext, Job.every.is_null(False))
    if queue is not None:
        query = query.where(Job.queue == queue)
    return query.execute()


def get_job(job_id: int) -> Job | None:
    return Job.get_or_none(Job.id == job_id)


def local_now(now: float) -> datetime:
    return datetime.fromtimestamp(now)


def insert_retry(row: Job | ClaimedJob, run_at: float, now: float) -> int:
    """A new PENDING row repeating `row` as its next attempt; the old row stays as history."""
    return Job.insert(
        params=row.params,
        ext_string=row.ext_string,
        queue=row.queue,
        retry_times=row.retry_times + 1,
        chain_id=row.chain_id or row.id,
        run_at=run_at,
        timeout=row.timeout,
        every=None,  # a retry is a one-off; the series re-arms from the occurrence itself
        status=Status.PENDING,
        created=local_now(now),
        modified=local_now(now),
    ).execute()


def overdue_pending(queue: str, before: float, limit: int) -> list[tuple[int, float]]:
    """(id, due) of PENDING rows of `queue` due before `before`, oldest first."""
    query = (
        Job.select(Job.id, Job.run_at, Job.created)
        .where(
            Job.status == Status.PENDING,
            Job.queue == queue,
            (Job.run_at <= before) | Job.run_at.is_null(),
        )
        .order_by(Job.run_at)
        .limit(limit)
    )
    return [(row.id, due_of(row)) for row in query]


def still_pending(ids: Sequence[int]) -> list[int]:
    """Those of `ids` whose row is PENDING now, in the given order."""
    if not ids:
        return []
    query = Job.select(Job.id).where(Job.id.in_(list(ids)), Job.status == Status.PENDING)
    pending = {job_id for (job_id,) in tuples(query)}
    return [job_id for job_id in ids if job_id in pending]


def due_of(row: Job) -> float:
    """A row's due time; rows from producers that leave run_at empty count from `created`."""
    if row.run_at is not None:
        return float(row.run_at)
    created = row.created
    if isinstance(created, str):
        created = datetime.fromisoformat(created)
    return created.timestamp() if created else 0.0


def iter_pending(batch: int = 5000) -> Iterator[list[tuple[str, int, float]]]:
    """Every PENDING row as (queue, id, due), in batches by id, for rebuilding the index."""
    last_id = 0
    while True:
        rows = list(
            Job.select(Job.id, Job.queue, Job.run_at, Job.created)
            .where(Job.status == Status.PENDING, Job.id > last_id)
            .order_by(Job.id)
            .limit(batch)
        )
        if not rows:
            return
        yield [(row.queue, row.id, due_of(row)) for row in rows]
        last_id = rows[-1].id


def pending_queues() -> list[str]:
    """Names of queues that have PENDING or RUNNING rows."""
    query = Job.select(Job.queue).where(Job.status.in_([Status.PENDING, Status.RUNNING])).distinct()
    return sorted(row.queue for row in query)


def pending_by_ext(ext: str, queue: str | None) -> list[tuple[int, str]]:
    """(id, queue) of PENDING rows with this business key."""
    query = Job.select(Job.id, Job.queue).where(Job.ext_string == ext, Job.status == Status.PENDING)
    if queue is not None:
        query = query.where(Job.queue == queue)
    return [(row.id, row.queue) for row in query]


def cancel(ids: Iterable[int], now: float) -> int:
    """PENDING rows among `ids` become CANCELLED; returns how many did."""
    ids = list(ids)
    if not ids:
        return 0
    return (
        Job.update(status=Status.CANCELLED, message="cancelled", modified=local_now(now))
        .where(Job.id.in_(ids), Job.status == Status.PENDING)
        .execute()
    )


def chain_of(job: Job) -> list[Job]:
    """Every attempt of the job's chain (first attempt and its retries), oldest first."""
    root = job.chain_id or job.id
    return list(Job.select().where((Job.id == root) | (Job.chain_id == root)).order_by(Job.id))


def counts_by_queue() -> dict[str, dict[int, int]]:
    """{queue: {status: count}} over the whole table."""
    out: dict[str, dict[int, int]] = {}
    query = Job.select(Job.queue, Job.status, fn.COUNT(Job.id).alias("n")).group_by(
        Job.queue, Job.status
    )
    for row in query.dicts():
        fields: dict = row  # type: ignore[assignment]  # .dicts() yields dicts, not models
        out.setdefault(fields["queue"], {})[fields["status"]] = fields["n"]
    return out
