"""The `delay_queue` table, the durable truth about every job: `Job` describes its columns, a
`Table` binds that model to one database (two Queues on two databases share nothing).

Every status change is a compare-and-set UPDATE guarded by the expected status (and, for a
running job, the lease token); the affected-row count says who won, never the Redis index.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from enum import IntEnum
from functools import cached_property
from typing import Any, NamedTuple, Protocol, cast
from weakref import WeakKeyDictionary

from peewee import (
    SQL,
    BigAutoField,
    BigIntegerField,
    CharField,
    Database,
    DateTimeField,
    DoubleField,
    IntegerField,
    Model,
    SmallIntegerField,
    TextField,
    fn,
)

TABLE_NAME = "delay_queue"
UNIX_EPOCH_JULIAN_DAY = 2440587.5
EXT_MAX = 255
MESSAGE_MAX = 2000  # a result's text, or a failure's head line
# The whole column: MySQL's `text` holds 65535 bytes, and a character takes up to 4 in UTF-8.
TEXT_MAX = 16000
TRACEBACK_START = "Traceback (most recent call last):"


def storable(text: str, limit: int = MESSAGE_MAX) -> str:
    """`text` as a message column can hold it: at most `limit` characters, and what UTF-8
    cannot encode (a lone surrogate) as a backslash escape, visible where a replacement
    character would hide it."""
    text = text[:limit]  # first: a result may be megabytes long
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")[:limit]
    return text


def failure_parts(message: str | None) -> tuple[str | None, str | None]:
    """A failed row's message as (head line, traceback or None): older rows and other
    writers have no traceback after the head line."""
    head, newline, rest = (message or "").partition("\n")
    if newline and rest.startswith(TRACEBACK_START):
        return head, rest
    return message, None


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
    return Status(value).word if value in Status._value2member_map_ else f"unknown({value})"


def utc_stamp(now: float) -> datetime:
    """Epoch seconds as `created`/`modified` hold them: in UTC, whatever the time zone of
    this process or of the database server."""
    return datetime.fromtimestamp(now, timezone.utc).replace(tzinfo=None)


def stamp_text(now: float) -> str:
    """`now` as a `created`/`modified` value in hand-written SQL: UTC, to the second."""
    return utc_stamp(now).strftime("%Y-%m-%d %H:%M:%S")


def quoted(table: Table, name: str) -> str:
    """A table's name quoted for hand-written SQL on its backend."""
    return f"`{name}`" if table.mysql else f'"{name}"'


def table_exists(table: Table, name: str) -> bool:
    """Whether the table `name` (one delayq adds beside its own: settings, locks) is there;
    once it is, not asked again for this Table, since delayq never drops one: a run's sweep
    costs no query for it."""
    found = _FOUND_TABLES.setdefault(table, set())
    if name not in found and table.db.table_exists(name):
        found.add(name)
    return name in found


_FOUND_TABLES: WeakKeyDictionary[Table, set[str]] = WeakKeyDictionary()


def utc_now() -> datetime:
    return utc_stamp(time.time())


class Job(Model):
    """The table's columns, bound to no database: `Table(db).model` is the model to query."""

    id = BigAutoField()
    params = TextField()  # {"class": ..., "method": ..., "data": ...}
    message = TextField(null=True)  # result text or error
    ext_string = CharField(max_length=EXT_MAX, default="", constraints=[SQL("DEFAULT ''")])
    retry_times = IntegerField(default=0, constraints=[SQL("DEFAULT 0")])
    status = SmallIntegerField(default=Status.PENDING, constraints=[SQL("DEFAULT 1")])
    created = DateTimeField(default=utc_now, constraints=[SQL("DEFAULT CURRENT_TIMESTAMP")])
    modified = DateTimeField(default=utc_now, constraints=[SQL("DEFAULT CURRENT_TIMESTAMP")])
    run_at = DoubleField(null=True)  # due time, epoch seconds; the index can be rebuilt from it
    queue = CharField(max_length=64, default="default", constraints=[SQL("DEFAULT 'default'")])
    chain_id = BigIntegerField(null=True)  # first attempt of a retry chain; NULL on that row
    lease_until = DoubleField(null=True)  # while running: when the lease lapses
    lease_token = CharField(max_length=32, null=True)  # which run holds the lease
    lost_leases = IntegerField(default=0, constraints=[SQL("DEFAULT 0")])
    timeout = DoubleField(null=True)  # seconds the handler may take; NULL: the configured default
    every = DoubleField(null=True)  # a recurring job's period in seconds; NULL: runs once
    # A recurring job's cron expression and zone ("0 9 * * MON-FRI Europe/Berlin"; recurrence.py)
    schedule = CharField(max_length=255, null=True)
    # The job's own retry policy and its attempt's RetryLater count, compact JSON;
    # NULL: the handler's policy or the default ladder.
    retry_policy = CharField(max_length=255, null=True)
    # 1 on a row added inside the caller's transaction (`add(using=...)`), which no one puts
    # on the schedule before it commits; a run's sweep does, then clears it. NULL otherwise.
    unindexed = SmallIntegerField(null=True)

    class Meta:
        table_name = TABLE_NAME
        indexes = (
            (("status", "queue", "run_at"), False),
            (("ext_string",), False),
            (("chain_id",), False),
            # Recent failures (the web page's "failed in the last hour") as a range, not a
            # visit to every failed row of a table that has run for months.
            (("status", "modified"), False),
            # The sweep for committed rows the schedule lacks reads only the marked ones.
            (("unindexed",), False),
        )


class JobRow(Protocol):
    """A row of `delay_queue` as read, for code that shows or checks a job and builds no
    query (jobspec.py's views, the web page, ops/): its columns, read-only, not the model. A
    `Job` read from a `Table` is one; `created` and `modified` may be text on SQLite."""

    @property
    def id(self) -> int: ...

    @property
    def params(self) -> str: ...

    @property
    def message(self) -> str | None: ...

    @property
    def ext_string(self) -> str: ...

    @property
    def retry_times(self) -> int: ...

    @property
    def status(self) -> int: ...

    @property
    def created(self) -> datetime | str | None: ...

    @property
    def modified(self) -> datetime | str | None: ...

    @property
    def run_at(self) -> float | None: ...

    @property
    def queue(self) -> str: ...

    @property
    def chain_id(self) -> int | None: ...

    @property
    def lease_until(self) -> float | None: ...

    @property
    def lease_token(self) -> str | None: ...

    @property
    def lost_leases(self) -> int: ...

    @property
    def timeout(self) -> float | None: ...

    @property
    def every(self) -> float | None: ...

    @property
    def schedule(self) -> str | None: ...

    @property
    def retry_policy(self) -> str | None: ...

    @property
    def unindexed(self) -> int | None: ...


# SQL indexes an earlier delayq made that `init` drops. (modified): every job moved in it twice
# (leased, finished) for the web page's time search over every status, which reads the
# (status, modified) ranges of the statuses present instead (listing.py).
RETIRED_INDEXES = (("modified",),)


class Table:
    """`delay_queue` in one database: the model bound to it, and the database's dialect."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.mysql = is_mysql(db)
        meta = type("Meta", (), {"database": db, "table_name": TABLE_NAME})
        # A subclass per database: peewee keeps a model's database in the class, so binding
        # the shared class would move every other Queue's queries to this database too.
        self.model: type[Job] = type("Job", (Job,), {"Meta": meta, "__module__": __name__})

    def exists(self) -> bool:
        """Whether `delay_queue` is in the database now, asked each time: after an error that
        may mean it is not, or by doctor before it reads it."""
        return bool(self.db.table_exists(TABLE_NAME))

    @cached_property
    def returning(self) -> bool:
        """Whether INSERT ... RETURNING works: MariaDB >= 10.5 or SQLite >= 3.35, not MySQL."""
        if not self.mysql:
            return sqlite3.sqlite_version_info >= (3, 35)
        version = str(self.db.execute_sql("SELECT VERSION()").fetchone()[0])
        numbers = tuple(int(n) for n in re.findall(r"\d+", version.split("-")[0])[:3])
        return "mariadb" in version.lower() and numbers >= (10, 5)

    @cached_property
    def consecutive_ids(self) -> bool:
        """Whether a multi-row INSERT gets consecutive ids from LAST_INSERT_ID(): promised by
        innodb_autoinc_lock_mode 0 or 1 (the default) and an auto_increment_increment of 1."""
        if not self.mysql:
            return False
        mode, step = self.db.execute_sql(
            "SELECT @@innodb_autoinc_lock_mode, @@auto_increment_increment"
        ).fetchone()
        return int(mode) in (0, 1) and int(step) == 1


def create_tables(table: Table) -> bool:
    """Create `delay_queue` and its SQL indexes unless the table exists; whether it did."""
    if table.db.table_exists(TABLE_NAME):
        return False
    settings = ["ENGINE=InnoDB", "DEFAULT CHARSET=utf8mb4"] if table.mysql else []
    table.model._meta.table_settings = settings
    table.db.create_tables([table.model])
    return True


def is_mysql(db: object) -> bool:
    return "mysql" in type(db).__name__.lower()


class ClaimedJob(NamedTuple):
    """The columns a run needs of a job it holds, named as the table's; a tuple, not a
    model, to stay cheap."""

    id: int
    params: str
    ext_string: str
    retry_times: int
    queue: str
    chain_id: int | None
    run_at: float | None
    timeout: float | None
    every: float | None
    schedule: str | None
    retry_policy: str | None


def tuples(query: Any) -> list[tuple[Any, ...]]:
    """The rows of a SELECT as plain tuples: cheaper than models, and typed as tuples."""
    return cast(list[tuple[Any, ...]], list(query.tuples()))


def stamp_epoch(value: datetime | str | None) -> float | None:
    """Epoch seconds of a `created`/`modified` value written in UTC (SQLite may give text)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return None if value is None else value.replace(tzinfo=timezone.utc).timestamp()


def id_batches(query: Any, batch: int) -> Iterator[list[Any]]:
    """The rows of `query` (models, or tuples led by the id) by id, `batch` at a time, each
    in a statement of its own: none holds locks for long, each sees what earlier ones left."""
    model = query.model
    last_id = 0
    while rows := list(query.where(model.id > last_id).order_by(model.id).limit(batch)):
        yield rows
        last_id = rows[-1][0] if isinstance(rows[-1], tuple) else rows[-1].id


def due_column(table: Table) -> Any:
    """A row's due time, as a column: `run_at`, or for a row another producer wrote without
    one, its `created` as the database's clock wrote it (MySQL: the server's time zone;
    SQLite: UTC), converted by the database so that no time zone can shift it."""
    created = table.model.created
    epoch: Any = fn.UNIX_TIMESTAMP(created)
    if not table.mysql:
        epoch = (fn.julianday(created) - UNIX_EPOCH_JULIAN_DAY) * 86400.0
    return fn.COALESCE(table.model.run_at, epoch, 0.0)


def pending_in(model: Any, queue: str) -> Any:
    """A condition on `model`'s rows: PENDING in `queue` (the first two columns of the
    (status, queue, run_at) SQL index)."""
    return (model.status == Status.PENDING) & (model.queue == queue)
