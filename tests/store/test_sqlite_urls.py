"""A configured SQLite database (DELAYQ_DATABASE_URL=sqlite://...): a command that only reads
or changes jobs, where that file does not exist, says where it looked and creates nothing;
a relative path is taken from the working directory once, with a one-line warning."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from delayq.store.table.database import open_database
from tests.conftest import DELAYQ, ROOT
from tests.support.invoke import invoke

COMMANDS = [
    ["status"],
    ["list"],
    ["peek"],
    ["show", "1"],
    ["metrics"],
    ["doctor"],
    ["reconcile"],
    ["cancel", "1"],
    ["add", "tests.sample_handlers.jobs", "record"],
]


@pytest.fixture
def sqlite_env(server_redis_url: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The suite's Redis, emptied afterwards, and no database yet."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env.update(
        DELAYQ_REDIS_URL=server_redis_url,
        DELAYQ_HANDLERS="tests.sample_handlers",
        DELAYQ_HOME=str(tmp_path / "home"),
        PYTHONPATH=str(ROOT),
    )
    yield env
    client = redis.Redis.from_url(server_redis_url)
    client.flushdb()
    client.close()


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: args[0])
def test_a_command_on_a_missing_sqlite_file_creates_nothing(
    args: list[str], sqlite_env: dict[str, str], tmp_path: Path
):
    where = tmp_path / "data" / "jobs.db"
    env = dict(sqlite_env, DELAYQ_DATABASE_URL=f"sqlite:///{where}")

    result = invoke(env, *args)

    assert result.exit_code == 1, result.output
    assert f"no delayq database at {where}" in (result.stderr + result.stdout)
    assert sorted(path.name for path in tmp_path.iterdir()) == []


def test_a_relative_sqlite_path_is_taken_from_the_working_directory_with_a_warning(
    sqlite_env: dict[str, str], tmp_path: Path
):
    env = dict(sqlite_env, DELAYQ_DATABASE_URL="sqlite:///jobs.db")

    def delayq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*DELAYQ, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )

    refused = delayq("status")

    assert refused.returncode == 1
    assert refused.stderr == (
        f"delayq: error: no delayq database at {tmp_path / 'jobs.db'}: run `delayq init` to "
        "create it, or correct DELAYQ_DATABASE_URL (sqlite:////absolute/path.db)\n"
    )
    assert list(tmp_path.iterdir()) == []

    created = delayq("init")

    assert created.returncode == 0, created.stderr
    assert (tmp_path / "jobs.db").exists()
    (warning,) = created.stderr.splitlines()
    assert " WARNING DELAYQ_DATABASE_URL 'sqlite:///jobs.db' names a relative path" in warning
    absolute = f"sqlite:///{tmp_path / 'jobs.db'}"
    assert warning.endswith(f"write {absolute} to use that file from anywhere")


def test_a_relative_path_is_resolved_once_so_a_later_directory_change_keeps_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    db = open_database("sqlite:///jobs.db")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")

    db.execute_sql("CREATE TABLE t (x INTEGER)")
    db.close()

    assert (tmp_path / "jobs.db").exists()
    assert list((tmp_path / "elsewhere").iterdir()) == []
