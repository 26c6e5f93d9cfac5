"""schema.sql and `delayq init` describe one table: on MariaDB the two agree column by column
and index by index (read back from information_schema), init on a schema.sql-made table
changes nothing, and init can be run again on SQLite too."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pymysql
import pytest
import redis
from pymysql.constants import CLIENT

import delayq
from delayq.config import Settings
from delayq.store import embedded
from delayq.store.table.database import sqlite_url
from tests.conftest import ROOT, changes_made
from tests.sample_handlers.jobs import read_log

HANDLERS = ("tests.sample_handlers",)
H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0
COLUMNS = [
    "id",
    "params",
    "message",
    "ext_string",
    "retry_times",
    "status",
    "created",
    "modified",
    "run_at",
    "queue",
    "chain_id",
    "lease_until",
    "lease_token",
    "lost_leases",
    "timeout",
    "every",
    "schedule",
    "retry_policy",
    "unindexed",
]
INDEXES = {
    "PRIMARY": ["id"],
    "job_status_queue_run_at": ["status", "queue", "run_at"],
    "job_ext_string": ["ext_string"],
    "job_chain_id": ["chain_id"],
    "job_status_modified": ["status", "modified"],
    "job_unindexed": ["unindexed"],
}


class Server:
    """The test user's access to a MariaDB server, beyond its database: information_schema,
    and databases of its own beside it."""

    def __init__(self, url: str) -> None:
        self.url = url
        parts = urlsplit(url)
        self.base_name = parts.path.lstrip("/")
        self.conn = pymysql.connect(
            host=parts.hostname,
            port=parts.port or 3306,
            user=parts.username or "root",
            password=parts.password or "",
            autocommit=True,
            client_flag=CLIENT.MULTI_STATEMENTS,
        )

    def url_of(self, name: str) -> str:
        parts = urlsplit(self.url)
        return urlunsplit((parts.scheme, parts.netloc, f"/{name}", "", ""))

    def execute(self, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cursor:
            cursor.execute(sql, args)
            rows = list(cursor.fetchall())
            while cursor.nextset():
                pass
        return rows

    def columns(self, schema: str) -> list[tuple[Any, ...]]:
        return self.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA, "
            "CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'delay_queue' ORDER BY ORDINAL_POSITION",
            (schema,),
        )

    def indexes(self, schema: str) -> dict[str, tuple[bool, list[str]]]:
        rows = self.execute(
            "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'delay_queue' "
            "ORDER BY INDEX_NAME, SEQ_IN_INDEX",
            (schema,),
        )
        out: dict[str, tuple[bool, list[str]]] = {}
        for name, non_unique, column in rows:
            out.setdefault(name, (not int(non_unique), []))[1].append(column)
        return out

    def table(self, schema: str) -> list[tuple[Any, ...]]:
        return self.execute(
            "SELECT ENGINE, TABLE_COLLATION FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'delay_queue'",
            (schema,),
        )

    def describe(self, schema: str) -> tuple[Any, ...]:
        return (self.table(schema), self.columns(schema), self.indexes(schema))


@pytest.fixture
def server(mariadb_trusting_url: str) -> Iterator[Server]:
    """The server that trusts function creators: schema.sql creates the triggers that keep
    pending counts, which a server with binary logging takes from the application's user
    only then (tests/faults/test_least_privilege.py is `init` where it does not)."""
    server = Server(mariadb_trusting_url)
    yield server
    server.conn.close()


@pytest.fixture
def fresh_databases(server: Server) -> Iterator[tuple[str, str]]:
    """Two empty databases, <test db>_schema1 and _schema2, dropped afterwards."""
    names = (f"{server.base_name}_schema1", f"{server.base_name}_schema2")
    for name in names:
        server.execute(f"DROP DATABASE IF EXISTS `{name}`")
        server.execute(f"CREATE DATABASE `{name}`")
    yield names
    for name in names:
        server.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def init_queue(server_redis_url: str, tmp_path: Path) -> Iterator[Callable[[str], delayq.Queue]]:
    """`delayq init` (Queue.init()) on a given database URL; closes the queues afterwards."""
    opened: list[delayq.Queue] = []

    def run_init(database_url: str) -> delayq.Queue:
        settings = Settings(
            database_url=database_url,
            redis_url=server_redis_url,
            handlers=HANDLERS,
            home=tmp_path / "home",
        )
        queue = delayq.connect(settings)
        opened.append(queue)
        queue.init()
        return queue

    yield run_init
    for queue in opened:
        queue.close()
    client = redis.Redis.from_url(server_redis_url)
    client.flushdb()
    client.close()


def apply_schema_sql(server: Server, name: str) -> None:
    server.execute(f"USE `{name}`")
    for statements in client_batches((ROOT / "schema.sql").read_text()):
        server.execute(statements)


def client_batches(text: str) -> list[str]:
    """The file's statements in batches a driver runs, as the mysql client reads them: the
    text between DELIMITER lines is one batch where the delimiter is `;` (the server splits
    it), else a batch a statement, split at the delimiter."""
    batches, lines, delimiter = [], [], ";"
    for line in [*text.splitlines(), "DELIMITER ;"]:
        if not line.upper().startswith("DELIMITER "):
            lines.append(line)
            continue
        batch = "\n".join(lines)
        if delimiter == ";":
            batches.append(batch)
        else:
            batches += [part for part in batch.split(delimiter) if part.strip()]
        lines, delimiter = [], line.split()[1]
    return [batch for batch in batches if batch.strip()]


def test_schema_sql_runs_through_the_mysql_client_as_through_a_driver(server, fresh_databases):
    from_client, from_driver = fresh_databases
    client = shutil.which("mariadb") or shutil.which("mysql")
    if client is None:
        pytest.skip("no mysql client on PATH")
    address = urlsplit(server.url_of(from_client))
    login = ["-h", address.hostname or "", "-P", str(address.port or 3306)]
    login += ["-u", address.username or "root"]
    login += [f"-p{address.password}"] if address.password else []
    schema = (ROOT / "schema.sql").read_bytes()
    subprocess.run([client, *login, from_client], input=schema, check=True)
    apply_schema_sql(server, from_driver)

    assert triggers(server, from_client) == triggers(server, from_driver)
    assert len(triggers(server, from_client)) == 4


def test_schema_sql_and_init_make_the_same_columns_and_indexes(server, fresh_databases, init_queue):
    from_file, from_init = fresh_databases
    apply_schema_sql(server, from_file)

    init_queue(server.url_of(from_init))

    assert [column[0] for column in server.columns(from_file)] == COLUMNS
    assert server.columns(from_init) == server.columns(from_file)
    assert server.indexes(from_init) == server.indexes(from_file)
    assert server.table(from_init) == server.table(from_file)
    assert {name: columns for name, (_, columns) in server.indexes(from_file).items()} == INDEXES


def test_init_on_a_table_made_by_schema_sql_changes_nothing(server, fresh_databases, init_queue):
    from_file, _ = fresh_databases
    apply_schema_sql(server, from_file)
    server.execute(  # due within the horizon, so init puts it on the schedule
        f"INSERT INTO `{from_file}`.delay_queue (params, ext_string, run_at) VALUES (%s, %s, %s)",
        (json.dumps({"class": H, "method": "echo", "data": 1}), "order:1", time.time() + 60),
    )
    before = server.describe(from_file)
    create_before = server.execute(f"SHOW CREATE TABLE `{from_file}`.delay_queue")

    queue = init_queue(server.url_of(from_file))
    init_queue(server.url_of(from_file))

    assert server.describe(from_file) == before
    assert server.execute(f"SHOW CREATE TABLE `{from_file}`.delay_queue") == create_before
    assert server.execute(f"SELECT COUNT(*) FROM `{from_file}`.delay_queue") == [(1,)]
    job_id = server.execute(f"SELECT id FROM `{from_file}`.delay_queue")[0][0]
    assert queue.show(job_id)["status"] == "pending"
    assert queue.index.schedule.size("default") == 1


def test_a_row_written_by_a_producer_into_the_schema_sql_table_runs(
    server, fresh_databases, init_queue
):
    from_file, _ = fresh_databases
    apply_schema_sql(server, from_file)
    server.execute(
        f"INSERT INTO `{from_file}`.delay_queue (params, run_at) VALUES (%s, %s)",
        (json.dumps({"class": H, "method": "echo", "data": {"n": 3}}), NOW),
    )
    queue = init_queue(server.url_of(from_file))

    report = queue.run(now=NOW)

    assert report.succeeded == 1
    view = queue.show(server.execute(f"SELECT id FROM `{from_file}`.delay_queue")[0][0])
    assert (view["status"], view["message"], view["retry_times"]) == ("success", '{"n": 3}', 0)


def sqlite_schema(queue: delayq.Queue) -> tuple[list[tuple[Any, ...]], ...]:
    master = queue.db.execute_sql(
        "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
    ).fetchall()
    columns = queue.db.execute_sql("PRAGMA table_info(delay_queue)").fetchall()
    return master, columns


def test_init_is_idempotent_on_sqlite(embedded_home, tmp_path):
    settings = Settings(
        database_url=sqlite_url(tmp_path / "delayq.db"),
        redis_url=embedded.redis_url(embedded_home),
        handlers=HANDLERS,
        home=tmp_path / "home",
    )
    with delayq.connect(settings) as queue:
        queue.index.client.flushdb()
        queue.init()
        first = sqlite_schema(queue)
        job_id = queue.add(H, "echo", {"n": 1}, delay=60)  # within the horizon

        queue.init()
        queue.init()

        assert sqlite_schema(queue) == first
        assert [column[1] for column in first[1]] == COLUMNS
        index_names = {name for kind, name, _, _ in first[0] if kind == "index"}
        assert {name for name in INDEXES if name != "PRIMARY"} <= index_names
        assert queue.show(job_id)["status"] == "pending"
        assert queue.index.schedule.size("default") == 1
        queue.index.client.flushdb()


SEED_TABLE = """
CREATE TABLE delay_queue (
  id INTEGER PRIMARY KEY {auto},
  params TEXT NOT NULL,
  message TEXT,
  ext_string VARCHAR(255) NOT NULL DEFAULT '',
  retry_times INT NOT NULL DEFAULT 0,
  status SMALLINT NOT NULL DEFAULT 1,
  created DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  modified DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
)
"""


def test_init_upgrades_a_seed_table_and_its_rows_still_run(backend, tmp_path):
    settings = Settings(
        database_url=backend["database_url"],
        redis_url=backend["redis_url"],
        handlers=("tests.sample_handlers",),
        home=tmp_path / "home",
    )
    queue = delayq.connect(settings)
    mysql = backend["database_url"].startswith("mysql")
    queue.db.execute_sql(SEED_TABLE.format(auto="AUTO_INCREMENT" if mysql else "AUTOINCREMENT"))
    log = str(tmp_path / "handler.log")
    params = {"class": "tests.sample_handlers.jobs", "method": "record", "data": {"log": log}}
    queue.db.execute_sql(
        "INSERT INTO delay_queue (params, ext_string) VALUES (%s, 'seed')"
        if mysql
        else "INSERT INTO delay_queue (params, ext_string) VALUES (?, 'seed')",
        (json.dumps(params),),
    )
    job_id = queue.db.execute_sql("SELECT MAX(id) FROM delay_queue").fetchone()[0]
    queue.index.client.zadd(
        "delay_queue_job", {str(job_id): queue.index.clock.now()}
    )  # as the seed

    added = queue.init()

    assert "added column run_at" in added and "added column every" in added
    assert "added column schedule" in added
    assert "added column retry_policy" in added
    assert "added index (status, queue, run_at)" in added
    assert changes_made(queue.init()) == []
    queue.run()
    assert read_log(log) == [""]
    assert queue.table.model.get(queue.table.model.ext_string == "seed").status == 10
    queue.close()


def test_init_drops_the_modified_index_an_earlier_delayq_made(queue):
    """Every job moved in it twice; the time search reads (status, modified) instead. A
    table that has it loses it at the next init, rows kept."""
    job_id = queue.add(H, "echo", {"n": 1}, delay=60, now=NOW)
    queue.db.execute_sql("CREATE INDEX job_modified ON delay_queue (modified)")

    assert changes_made(queue.init()) == ["dropped index (modified)"]
    indexed = {tuple(index.columns) for index in queue.db.get_indexes("delay_queue")}
    assert ("modified",) not in indexed and ("status", "modified") in indexed
    assert changes_made(queue.init()) == []
    assert queue.show(job_id)["status"] == "pending"


def triggers(server: Server, schema: str) -> list[tuple[Any, ...]]:
    rows = server.execute(
        "SELECT TRIGGER_NAME, EVENT_MANIPULATION, ACTION_TIMING, ACTION_STATEMENT "
        "FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s ORDER BY TRIGGER_NAME",
        (schema,),
    )
    return [(name, event, timing, " ".join(body.split())) for name, event, timing, body in rows]


def test_schema_sql_and_init_keep_pending_counts_with_the_same_table_and_triggers(
    server, fresh_databases, init_queue
):
    from_file, from_init = fresh_databases
    apply_schema_sql(server, from_file)
    init_queue(server.url_of(from_init))
    columns = (
        "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, COLUMN_KEY "
        "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = 'delay_queue_counts' ORDER BY ORDINAL_POSITION"
    )

    assert len(triggers(server, from_file)) == 4
    assert triggers(server, from_file) == triggers(server, from_init)
    assert server.execute(columns, (from_file,)) == server.execute(columns, (from_init,))
    server.execute(
        f"INSERT INTO `{from_file}`.delay_queue (params, run_at) VALUES ('{{}}', %s)", (NOW,)
    )
    assert server.execute(
        f"SELECT queue, SUM(pending) FROM `{from_file}`.delay_queue_counts GROUP BY queue"
    ) == [("default", 1)]


SETTINGS_COLUMNS = (
    "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, COLUMN_KEY "
    "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
    "AND TABLE_NAME = 'delay_queue_settings' ORDER BY ORDINAL_POSITION"
)


def test_schema_sql_and_init_make_the_same_queue_settings_table(
    server, fresh_databases, init_queue
):
    from_file, from_init = fresh_databases
    apply_schema_sql(server, from_file)
    init_queue(server.url_of(from_init))

    made = server.execute(SETTINGS_COLUMNS, (from_file,))
    assert [column[0] for column in made] == [
        "queue",
        "paused_at",
        "resumed_at",
        "version",
        "modified",
        "rate_count",
        "rate_period",
        "concurrency",
    ]
    assert made == server.execute(SETTINGS_COLUMNS, (from_init,))


@pytest.mark.parametrize(
    "dropped", ["rate_count, DROP COLUMN rate_period, DROP COLUMN concurrency", "concurrency"]
)
def test_init_adds_the_limit_columns_to_a_settings_table_from_before_limits(
    server, fresh_databases, init_queue, dropped
):
    """An install from before rate or concurrency limits: its settings table lacks their
    columns, and keeps its rows as init adds them in place."""
    from_file, from_init = fresh_databases
    apply_schema_sql(server, from_file)
    apply_schema_sql(server, from_init)
    server.execute(f"ALTER TABLE `{from_init}`.delay_queue_settings DROP COLUMN {dropped}")
    server.execute(
        f"INSERT INTO `{from_init}`.delay_queue_settings (queue, paused_at, version) "
        "VALUES ('mail', 5, 1)"
    )

    queue = init_queue(server.url_of(from_init))

    assert server.execute(SETTINGS_COLUMNS, (from_init,)) == server.execute(
        SETTINGS_COLUMNS, (from_file,)
    )
    assert queue.paused()["mail"].paused_at == 5.0
    assert changes_made(queue.init()) == []


LOCKS_COLUMNS = SETTINGS_COLUMNS.replace("delay_queue_settings", "delay_queue_locks")


def test_schema_sql_and_init_make_the_same_locks_table_and_init_adds_it_to_an_install(
    server, fresh_databases, init_queue
):
    from_file, from_init = fresh_databases
    apply_schema_sql(server, from_file)
    init_queue(server.url_of(from_init))
    made = server.execute(LOCKS_COLUMNS, (from_file,))
    assert [column[0] for column in made] == ["lock_key", "job_id", "reserved_until", "modified"]
    assert made == server.execute(LOCKS_COLUMNS, (from_init,))

    server.execute(f"DROP TABLE `{from_file}`.delay_queue_locks")  # an install from before locks
    queue = init_queue(server.url_of(from_file))
    assert server.execute(LOCKS_COLUMNS, (from_file,)) == made
    assert changes_made(queue.init()) == []


def test_init_adds_the_queue_settings_table_to_an_existing_install(
    server, fresh_databases, init_queue
):
    """An install from before pausing: its table is there, its settings table not yet."""
    name = fresh_databases[0]
    apply_schema_sql(server, name)
    server.execute(f"DROP TABLE `{name}`.delay_queue_settings")

    queue = init_queue(server.url_of(name))

    assert server.execute(SETTINGS_COLUMNS, (name,)) != []
    assert changes_made(queue.init()) == []  # and then nothing more to do
