"""`delayq doctor`: the checks an operator would otherwise make by hand — settings, database
and Redis reachability and versions, the table against the model, the handler allowlist,
Redis's eviction policy, the index marker — each an ok / warn / FAIL line saying what to fix.

It only reads; cli/ops.py connects, prints the lines and turns a FAIL into exit 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import peewee
import redis

from ..config import Settings, redact_url
from ..durations import format_delta
from ..errors import BadInput, ConfigError
from ..store.backend_errors import one_line
from ..store.index import Index
from ..store.keys import INDEXED_KEY, job_id_of
from ..store.table import Job, Table, is_mysql
from ..store.upgrade import column_problems
from ..worker.allowlist import EMPTY_ALLOWLIST, check_entry
from ..worker.handlers import import_prefix

OK, WARN, FAIL = "ok", "warn", "FAIL"
MIN_REDIS = (6, 2)  # ZMSCORE, which the runner's orphan sweep uses


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    level: str
    name: str
    detail: str


def settings_check(settings: Settings) -> Check:
    return Check(
        OK,
        "config",
        f"lease {format_delta(settings.lease)}, batch {settings.batch_size}, "
        f"since {format_delta(settings.since)}, max-seconds {format_delta(settings.max_seconds)}",
    )


def handler_checks(prefixes: tuple[str, ...]) -> list[Check]:
    """One line per DELAYQ_HANDLERS entry: may it be one, and does it import here? An empty
    allowlist, which `run` refuses, is one FAIL line."""
    if not prefixes:
        return [Check(FAIL, "handlers", EMPTY_ALLOWLIST)]
    checks = []
    for prefix in prefixes:
        try:
            check_entry(prefix)  # before importing: a refused entry runs none of its code
        except ConfigError as exc:
            checks.append(Check(FAIL, "handlers", str(exc)))
            continue
        try:
            import_prefix(prefix)
        except BadInput as exc:
            checks.append(Check(FAIL, "handlers", f"DELAYQ_HANDLERS entry {prefix!r}: {exc}"))
        else:
            checks.append(Check(OK, "handlers", f"{prefix} imports"))
    return checks


def database_checks(db: peewee.Database, url: str | None) -> list[Check]:
    """Reachability and version, then the table's columns and indexes against the model."""
    where = redact_url(url)
    try:
        version = _database_version(db)
        if not db.table_exists(Job._meta.table_name):
            return [
                Check(OK, "database", f"{version} at {where}"),
                Check(FAIL, "table", "delay_queue does not exist; run `delayq init`"),
            ]
        return [Check(OK, "database", f"{version} at {where}"), *_table_checks(db)]
    except (peewee.DatabaseError, peewee.InterfaceError) as exc:
        return [Check(FAIL, "database", f"{where} cannot be used: {one_line(exc, url)}")]


def _database_version(db: peewee.Database) -> str:
    if is_mysql(db):
        version = str(db.execute_sql("SELECT VERSION()").fetchone()[0])
        return version if "mariadb" in version.lower() else f"MySQL {version}"
    return f"SQLite {db.execute_sql('SELECT sqlite_version()').fetchone()[0]}"


def _table_checks(db: peewee.Database) -> list[Check]:
    table = Job._meta.table_name
    present = {column.name for column in db.get_columns(table)}
    expected = [field.column_name for field in Job._meta.sorted_fields]
    missing = [name for name in expected if name not in present]
    problems = [] if missing else column_problems(Table(db))
    if missing:
        columns = Check(
            FAIL, "columns", f"{table} lacks {', '.join(missing)}; add them as schema.sql defines"
        )
    elif problems:
        columns = Check(FAIL, "columns", f"{table}: {'; '.join(problems)}; run `delayq init`")
    else:
        columns = Check(OK, "columns", f"all {len(expected)} columns of the model are present")
    return [columns, *_index_checks(db)]


def _index_checks(db: peewee.Database) -> list[Check]:
    table = Job._meta.table_name
    present = [tuple(index.columns) for index in db.get_indexes(table)]
    checks = []
    for names, _unique in Job._meta.indexes:
        columns = tuple(Job._meta.fields[name].column_name for name in names)
        listed = ", ".join(columns)
        if columns in present:
            checks.append(Check(OK, "index", f"({listed})"))
        else:
            checks.append(
                Check(
                    WARN,
                    "index",
                    f"({listed}) is missing, so queries scan the table; "
                    f"CREATE INDEX job_{'_'.join(columns)} ON {table} ({listed})",
                )
            )
    return checks


def redis_checks(index: Index, settings: Settings) -> list[Check]:
    """Reachability and version, eviction policy, and whether the index is complete."""
    where = redact_url(settings.redis_url)
    try:
        server = index.client.info("server")
        memory = index.client.info("memory")
        complete = index.registry.is_complete()
        strays = _stray_members(index)
    except redis.RedisError as exc:
        detail = one_line(exc, settings.redis_url)
        return [Check(FAIL, "redis", f"{where} cannot be used: {detail}")]
    version = str(server.get("redis_version", "?"))
    return [
        _version_check(version, where),
        _policy_check(str(memory.get("maxmemory_policy", "unknown"))),
        Check(OK, "schedule", f"{INDEXED_KEY} is set: the schedule is complete")
        if complete
        else Check(
            WARN,
            "schedule",
            f"{INDEXED_KEY} is missing; the next run (or `delayq init`) "
            "rebuilds the schedule from the table",
        ),
        _strays_check(strays),
    ]


def _stray_members(index: Index) -> dict[str, int]:
    """{queue: members of its schedule that are not job ids}, for queues that have any."""
    found: dict[str, int] = {}
    for queue in index.registry.known_queues():
        count = sum(
            job_id_of(member) is None
            for chunk in index.schedule.members(queue)
            for member, _ in chunk
        )
        if count:
            found[queue] = count
    return found


def _strays_check(strays: dict[str, int]) -> Check:
    if not strays:
        return Check(OK, "members", "every schedule member is a job id")
    counts = ", ".join(f"{queue} {count}" for queue, count in strays.items())
    return Check(
        WARN,
        "members",
        f"schedule members that are not job ids ({counts}): another producer wrote them; "
        "a run drops them when they fall due, `delayq reconcile` at once",
    )


def _version_check(version: str, where: str) -> Check:
    try:
        parsed = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        parsed = MIN_REDIS
    if parsed < MIN_REDIS:
        return Check(FAIL, "redis", f"Redis {version} at {where}; delayq needs 6.2 or later")
    return Check(OK, "redis", f"Redis {version} at {where}")


def _policy_check(policy: str) -> Check:
    if policy == "noeviction":
        return Check(OK, "eviction", "maxmemory-policy is noeviction")
    return Check(
        WARN,
        "eviction",
        f"maxmemory-policy is {policy}: an evicting Redis silently drops schedule entries "
        "(the table keeps the jobs, but they run late); set maxmemory-policy noeviction",
    )
