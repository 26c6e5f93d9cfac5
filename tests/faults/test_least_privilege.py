"""`delayq init` as an application's database user on a server set up as production ones are:
binary logging on (every replicated primary, the managed services' default), that user
granted ALL on its database and nothing global (no SUPER), log_bin_trust_function_creators
off (the default). It finishes, saying in one line that pending counts are read from the
index and which setting lets it keep them, and everything works; a user who may not even
create the table gets one line and nothing is made. One mariadbd of its own for the module
(tests/support/mysql_servers.py), each test on a database and user of its own."""

from __future__ import annotations

import itertools
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis

from delayq import JobSpec
from delayq.store.table import counts
from delayq.store.table.counts import Counts
from tests.conftest import DELAYQ
from tests.faults.test_mysql_failover import need_mariadbd
from tests.support.mysql_servers import MariaDB
from tests.support.topologies import need_servers, open_queue, process_env

pytestmark = pytest.mark.slow

H = "tests.sample_handlers.jobs"
PASSWORD = "app-pw"
APPLICATION = "ALL"  # what an application's user is granted on its own database
NO_CREATE = "SELECT, INSERT, UPDATE, DELETE"
NO_TRIGGER = "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX"
_NAMES = itertools.count(1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDB]:
    """A mariadbd with binary logs and log_bin_trust_function_creators off, as a managed
    service's primary is by default."""
    need_servers("mariadb-install-db")
    need_mariadbd()
    mariadb = MariaDB(
        tmp_path_factory.mktemp("least_privilege"), 1, "--log-bin-trust-function-creators=0"
    )
    try:
        mariadb.install()
        mariadb.start()
        yield mariadb
    finally:
        mariadb.stop()


def user_url(server: MariaDB, grants: str) -> str:
    """A database of its own and a user granted `grants` on it alone, as a mysql:// URL."""
    name = f"app{next(_NAMES)}"
    server.execute(
        f"CREATE DATABASE {name}",
        f"CREATE USER '{name}'@'%' IDENTIFIED BY '{PASSWORD}'",
        f"GRANT {grants} ON {name}.* TO '{name}'@'%'",
    )
    return f"mysql://{name}:{PASSWORD}@127.0.0.1:{server.port}/{name}"


def delayq_command(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DELAYQ, *args], env=env, capture_output=True, text=True, timeout=60)


def schema(server: MariaDB, url: str) -> tuple[list[str], list[str]]:
    """The tables and the triggers of the URL's database, as root sees them."""
    name = url.rsplit("/", 1)[1]
    tables = [str(row[0]) for row in server.execute(f"SHOW TABLES FROM {name}")]
    triggers = server.execute(
        f"SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = '{name}'"
    )
    return sorted(tables), sorted(str(row[0]) for row in triggers)


def counted_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(counts.WITHOUT_TRIGGERS)]


def doctor_counts(env: dict[str, str]) -> tuple[str, str]:
    result = delayq_command(env, "doctor")
    for line in result.stdout.splitlines():
        level, name, detail = line.split(None, 2)
        if name == "counts":
            return level, detail
    raise AssertionError(f"no counts line in doctor's output:\n{result.stdout}{result.stderr}")


def test_init_as_an_application_user_on_a_binlog_server_finishes_and_the_queue_works(
    server, redis_url, tmp_path, log
):
    url = user_url(server, APPLICATION)
    env = process_env(redis_url, url, tmp_path)

    first = delayq_command(env, "init")

    assert (first.returncode, first.stderr) == (0, ""), first.stdout + first.stderr
    (said,) = counted_lines(first.stdout)
    assert "log_bin_trust_function_creators=1" in said
    assert first.stdout.startswith("created table delay_queue\n")
    # Nothing half made: no counts table that no trigger keeps, no trigger.
    assert schema(server, url) == (["delay_queue", "delay_queue_locks", "delay_queue_settings"], [])

    queue = open_queue(redis_url, url, tmp_path, init=False)
    try:
        now = time.time()
        queue.add(H, "record", {"log": log}, at=now - 5)
        queue.add_many([JobSpec(H, "record", {"log": log}, delay=60) for _ in range(600)])
        queue.add_many([JobSpec(H, "record", {"log": log}, queue="mail") for _ in range(3)])
        assert queue.status(now=now).queues["default"].pending == 601
        queue.run(now=now + 1)
        stats = queue.status(now=now + 1).queues
        assert (stats["default"].pending, stats["default"].success) == (600, 1)
        assert (stats["mail"].pending, stats["mail"].success) == (0, 3)
        assert b'delayq_pending_jobs{queue="default"} 600.0' in queue.metrics()
    finally:
        queue.close()

    again = delayq_command(env, "init")

    assert (again.returncode, again.stderr) == (0, ""), again.stdout + again.stderr
    assert counted_lines(again.stdout) == [said]
    assert schema(server, url) == (["delay_queue", "delay_queue_locks", "delay_queue_settings"], [])


def test_a_user_who_may_not_create_the_table_gets_one_line_and_nothing_is_made(
    server, redis_url, tmp_path
):
    url = user_url(server, NO_CREATE)
    env = process_env(redis_url, url, tmp_path)

    result = delayq_command(env, "init")

    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "CREATE" in result.stderr
    assert schema(server, url) == ([], [])
    assert redis.Redis.from_url(redis_url).dbsize() == 0


def test_a_user_without_the_trigger_privilege_is_told_the_grant(server, redis_url, tmp_path):
    url = user_url(server, NO_TRIGGER)
    env = process_env(redis_url, url, tmp_path)
    server.execute("SET GLOBAL log_bin_trust_function_creators = 1")
    try:
        result = delayq_command(env, "init")
    finally:
        server.execute("SET GLOBAL log_bin_trust_function_creators = 0")

    assert (result.returncode, result.stderr) == (0, ""), result.stdout + result.stderr
    assert schema(server, url) == (["delay_queue", "delay_queue_locks", "delay_queue_settings"], [])
    (said,) = counted_lines(result.stdout)
    name = url.rsplit("/", 1)[1]
    assert f"GRANT TRIGGER ON `{name}`.* TO '{name}'@'%'" in said


def test_doctor_says_how_counts_are_kept_and_init_keeps_them_once_the_server_allows(
    server, redis_url, tmp_path, log
):
    url = user_url(server, APPLICATION)
    env = process_env(redis_url, url, tmp_path)
    assert delayq_command(env, "init").returncode == 0
    queue = open_queue(redis_url, url, tmp_path, init=False)
    try:
        queue.add_many([JobSpec(H, "record", {"log": log}, delay=60) for _ in range(5)])

        level, detail = doctor_counts(env)
        assert level == "warn"
        assert detail.startswith(counts.WITHOUT_TRIGGERS)
        assert "log_bin_trust_function_creators=1" in detail

        server.execute("SET GLOBAL log_bin_trust_function_creators = 1")
        try:
            result = delayq_command(env, "init")
        finally:
            server.execute("SET GLOBAL log_bin_trust_function_creators = 0")
        assert result.returncode == 0, result.stdout + result.stderr
        assert counts.ADDED in result.stdout.splitlines()
        assert doctor_counts(env) == ("ok", counts.KEPT_BY_TRIGGERS)
        assert Counts(queue.table).installed()
        queue.add(H, "record", {"log": log}, delay=60)
        assert queue.status().queues["default"].pending == 6
    finally:
        queue.close()
