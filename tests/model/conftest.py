"""The model's servers: MariaDB (DELAYQ_TEST_MARIADB_URL's database, as for every test) with a
redis-server of the test's own, which a step may restart without touching anybody else's
data; and the embedded default, a SQLite file with an embedded Redis server of its own."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from delayq.store import embedded
from tests.conftest import IN_CI
from tests.model.world import Servers
from tests.support.servers import PrivateRedis, answers, free_port
from tests.support.waiting import wait_for


@pytest.fixture(params=["mariadb", "embedded"])
def model_servers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Servers]:
    if request.param == "mariadb":
        yield from _mariadb(request.getfixturevalue("mariadb_url"), tmp_path)
    else:
        yield from _embedded(tmp_path)


def _mariadb(database_url: str, tmp_path: Path) -> Iterator[Servers]:
    if shutil.which("redis-server") is None:
        message = "redis-server is not on PATH; .ci/run installs it"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    server = PrivateRedis(free_port(), tmp_path)
    server.start()

    def restart() -> None:  # kill -9, and up again empty: no persistence
        server.kill()
        server.start()

    try:
        yield Servers("mariadb", database_url, server.url, restart)
    finally:
        if server.process is not None:
            server.kill()


def _embedded(tmp_path: Path) -> Iterator[Servers]:
    home = tmp_path / "redis"
    url = embedded.redis_url(home)
    files = tmp_path / "sqlite"
    files.mkdir()

    def restart() -> None:  # its append-only file brings its data back
        embedded.stop(home)
        client = redis.Redis.from_url(url)
        wait_for(lambda: not answers(client), 10, "the embedded Redis to stop")
        client.close()
        embedded.redis_url(home)

    try:
        yield Servers("embedded", str(files), url, restart)
    finally:
        embedded.stop(home)
