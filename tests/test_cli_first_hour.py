"""What a new user met in the first hour at the command line and the API: empty filters,
due times without a zone or before the run's window, what `init` and `cancel` say, and
messages that name the option and the fix."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import delayq as delayq_api
from delayq import BadInput, JobSpec
from delayq.cli import app
from tests.test_cli import (
    delayq,  # noqa: F401 - a fixture
    stored,  # noqa: F401 - a fixture
)

H = "tests.sample_handlers.jobs"
Invoke = Callable[..., Result]


def _refused(result: Result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("delayq: error: "), result.stderr
    assert result.stdout == ""
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ("list", "--status", ""),
        ("list", "--status", ","),
        ("list", "--status", "failed,"),
        ("peek", "--queue", ""),
        ("list", "--queue", ""),
        ("list", "--ext", ""),
        ("list", "--class", ""),
        ("purge", "--older-than", "1d", "--status", ""),
        ("requeue", "--status", ",", "--all"),
    ],
)
def test_an_empty_filter_is_refused_not_read_as_everything(
    delayq: Invoke,  # noqa: F811
    args: tuple[str, ...],
) -> None:
    assert delayq("add", H, "echo").exit_code == 0
    _refused(delayq(*args))


@pytest.mark.parametrize("when", ["2026-11-25T20:00:00", "2030-01-01", "2030-01-01 08:00"])
def test_an_at_without_a_zone_is_refused_at_the_cli(
    delayq: Invoke,  # noqa: F811
    stored: Callable[[], tuple[int, int, list[str]]],  # noqa: F811
    when: str,
) -> None:
    line = _refused(delayq("add", H, "echo", "--at", when))

    assert "--at" in line and "add Z (UTC) or +HH:MM" in line
    assert stored()[:2] == (0, 0)


def test_at_takes_z_and_an_offset_as_the_same_moment(delayq: Invoke) -> None:  # noqa: F811
    by_z = delayq("add", H, "echo", "--at", "2030-01-01T00:00:00Z", "--json")
    by_offset = delayq("add", H, "echo", "--at", "2030-01-01T09:00:00+09:00", "--json")

    assert json.loads(by_z.stdout)["run_at"] == json.loads(by_offset.stdout)["run_at"] == 1893456000


def test_add_help_says_at_needs_its_zone(delayq: Invoke) -> None:  # noqa: F811
    assert "Z or" in " ".join(delayq("add", "--help").stdout.split())


def test_an_at_string_without_a_zone_is_refused_by_the_api(queue: delayq_api.Queue) -> None:
    with pytest.raises(BadInput) as refused:
        queue.add(H, "echo", at="2030-01-01T00:00:00")

    assert str(refused.value).startswith("at= ") and "--at" not in str(refused.value)
    assert "add Z (UTC) or +HH:MM" in str(refused.value)


def test_a_due_time_before_the_window_is_refused_naming_the_window_as_written(
    delayq: Invoke,  # noqa: F811
    stored: Callable[[], tuple[int, int, list[str]]],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    line = _refused(delayq("add", H, "echo", "--at", "2020-01-01T00:00:00Z"))
    assert "--at is more than 1d (DELAYQ_SINCE) ago" in line and "86400" not in line

    monkeypatch.setenv("DELAYQ_SINCE", "36h")
    line = _refused(delayq("add", H, "echo", "--at", _ago(40 * 3600)))
    assert "36h (DELAYQ_SINCE)" in line
    assert stored()[:2] == (0, 0)

    assert delayq("add", H, "echo", "--at", _ago(30 * 3600)).exit_code == 0


def test_the_api_refuses_a_due_time_before_the_window_too(queue: delayq_api.Queue) -> None:
    now = time.time()
    with pytest.raises(BadInput, match=r"^at= is more than 1d \(DELAYQ_SINCE\) ago"):
        queue.add(H, "echo", at=now - 2 * 86400, now=now)
    with pytest.raises(BadInput, match="at= is more than 1d"):
        queue.add_many([JobSpec(H, "echo", at=now - 2 * 86400, cron="0 * * * *")], now=now)

    assert queue.add(H, "echo", at=now - 3600, now=now) > 0


def _ago(seconds: float) -> str:
    return datetime.fromtimestamp(time.time() - seconds, timezone.utc).isoformat()


def test_init_says_what_it_added_then_that_all_is_in_place(
    backend: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DELAYQ_DATABASE_URL", backend["database_url"])
    monkeypatch.setenv("DELAYQ_REDIS_URL", backend["redis_url"])
    monkeypatch.setenv("DELAYQ_HANDLERS", "tests.sample_handlers")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    first = runner.invoke(app, ["init"]).stdout.splitlines()
    second = runner.invoke(app, ["init"]).stdout.splitlines()

    assert first[:2] == [
        "created table delay_queue",
        "built the schedule index from 0 pending job(s)",
    ]
    assert first[2].startswith("initialised database ")
    assert len(second) == 1 and second[0].startswith("all in place: database ")
