"""Passwords never reach output: hostile passwords (holding # ? / @ %, raw and
percent-encoded, in the user:password part and as ?password=) in every URL form, against a
port where nothing listens and against the real servers with a wrong password, through
every command that connects, `doctor` included. Nothing of the secret may appear."""

from __future__ import annotations

import os
from collections.abc import Iterator
from urllib.parse import quote, urlsplit

import pytest
import redis
from typer.testing import CliRunner

from delayq.cli import app
from tests.conftest import MARIADB_URL, REDIS_URL

# Each three-character chunk is distinctive, so any piece of the secret that leaks is seen.
CHUNKS = ("Xq7", "Zr9", "Wp2", "Lm4", "Km5", "Jn6")
RAW = "Xq7#Zr9?Wp2/Lm4@Km5%Jn6"
PASSWORDS = {"raw": RAW, "encoded": quote(RAW, safe="")}
MYSQL = urlsplit(MARIADB_URL)
REDIS = urlsplit(REDIS_URL)
MYSQL_AT = f"{MYSQL.hostname}:{MYSQL.port or 3306}{MYSQL.path}"
REDIS_AT = f"{REDIS.hostname}:{REDIS.port or 6379}{REDIS.path}"
NOWHERE = "127.0.0.1:1"  # nothing listens there: the connection is refused at once

DATABASE_FORMS = {
    "mysql-nowhere": "mysql://root:{pw}@" + NOWHERE + "/delayq",
    "mysql-wrong-password": "mysql://root:{pw}@" + MYSQL_AT,
    "mysql-parameter-nowhere": "mysql://root@" + NOWHERE + "/delayq?password={pw}",
    "mysql-parameter-wrong": "mysql://root@" + MYSQL_AT + "?connect_timeout=3&password={pw}",
}
REDIS_FORMS = {
    "redis-nowhere": "redis://:{pw}@" + NOWHERE + "/0",
    "redis-wrong-password": "redis://nobody:{pw}@" + REDIS_AT,
    "redis-parameter-nowhere": "redis://" + NOWHERE + "/0?password={pw}",
    "redis-parameter-wrong": "redis://" + REDIS_AT + "?username=nobody&password={pw}",
}
COMMANDS = [
    ["status"],
    ["init"],
    ["doctor"],
    ["run"],
    ["add", "tests.sample_handlers.jobs", "echo"],
]


@pytest.fixture(autouse=True)
def redis_left_empty(server_redis_url: str) -> Iterator[None]:
    """Commands that reach Redis may write to it before the database fails them."""
    yield
    client = redis.Redis.from_url(server_redis_url)
    client.flushdb()
    client.close()


def run_with(database_url: str, redis_url: str, tmp_path, command: list[str]):
    env = {key: None for key in os.environ if key.startswith("DELAYQ_")}
    env.update(
        DELAYQ_DATABASE_URL=database_url,
        DELAYQ_REDIS_URL=redis_url,
        DELAYQ_HANDLERS="tests.sample_handlers",
        DELAYQ_HOME=str(tmp_path / "home"),
    )
    return CliRunner().invoke(app, command, env=env)


def assert_no_secret(result) -> None:
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), result.exception
    assert result.exit_code in (1, 2), (result.stdout, result.stderr)
    shown = result.stdout + result.stderr
    leaked = [chunk for chunk in CHUNKS if chunk in shown]
    assert not leaked, shown


@pytest.mark.parametrize("password", PASSWORDS.values(), ids=PASSWORDS.keys())
@pytest.mark.parametrize("form", DATABASE_FORMS.values(), ids=DATABASE_FORMS.keys())
@pytest.mark.parametrize("command", COMMANDS, ids=[command[0] for command in COMMANDS])
def test_a_database_password_never_appears(mariadb_url, tmp_path, password, form, command):
    database_url = form.format(pw=password)

    result = run_with(database_url, REDIS_URL, tmp_path, command)

    assert_no_secret(result)
    if command != ["doctor"]:
        assert len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.parametrize("password", PASSWORDS.values(), ids=PASSWORDS.keys())
@pytest.mark.parametrize("form", REDIS_FORMS.values(), ids=REDIS_FORMS.keys())
@pytest.mark.parametrize("command", COMMANDS, ids=[command[0] for command in COMMANDS])
def test_a_redis_password_never_appears(tmp_path, password, form, command):
    database_url = f"sqlite:///{tmp_path / 'delayq.db'}"
    redis_url = form.format(pw=password)

    result = run_with(database_url, redis_url, tmp_path, command)

    assert_no_secret(result)
    if command != ["doctor"]:
        assert len(result.stderr.splitlines()) == 1, result.stderr
