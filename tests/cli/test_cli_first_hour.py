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
from delayq.config import load_settings
from tests.cli.test_cli import (
    delayq,  # noqa: F401 - a fixture
    stored,  # noqa: F401 - a fixture
)
from tests.conftest import changes_made

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

    *added, last = first
    assert changes_made(added) == [
        "created table delay_queue",
        "built the schedule index from 0 pending job(s)",
    ]
    assert last.startswith("initialised database ")
    *changed, last = second
    assert changes_made(changed) == []
    assert last.startswith("all in place: database ")


def test_cancelling_a_finished_job_says_its_status_on_stderr(delayq: Invoke) -> None:  # noqa: F811
    job_id = delayq("add", H, "echo").stdout.strip()
    assert delayq("run").exit_code == 0

    result = delayq("cancel", job_id)

    assert (result.exit_code, result.stdout) == (0, "0\n")
    assert result.stderr == f"delayq: job {job_id} is success, not pending; nothing cancelled\n"
    assert json.loads(delayq("show", job_id, "--json").stdout)["status"] == "success"


def test_cancelling_a_pending_job_prints_the_count_alone(delayq: Invoke) -> None:  # noqa: F811
    job_id = delayq("add", H, "echo", "--delay", "1h").stdout.strip()

    result = delayq("cancel", job_id)

    assert (result.exit_code, result.stdout, result.stderr) == (0, "1\n", "")


@pytest.mark.parametrize(
    ("url", "shown", "fix"),
    [
        ("not a url", "'not a url'", "use mysql://user:pw@host:3306/db"),
        ("root:hunter2@host/db", "'root:***@host/db'", "use mysql://"),
        ("mysql://root:p@ss#word@host/db", "'mysql://root:***@host/db'", "percent-encoded"),
        ("mysql://root:p@s?sword@host/db", "'mysql://root:***@host/db'", "percent-encoded"),
    ],
)
def test_a_bad_database_url_is_shown_with_only_its_password_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, shown: str, fix: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DELAYQ_DATABASE_URL", url)

    line = _refused(CliRunner().invoke(app, ["list"]))

    assert line.startswith(f"delayq: error: DELAYQ_DATABASE_URL {shown}: ")
    assert fix in line
    assert "hunter2" not in line and "ss#word" not in line and "s?sword" not in line


@pytest.mark.parametrize(
    ("args", "wanted"),
    [
        (["--retries", "-1"], "--retries '-1' is negative; give 0 or more"),
        (["--timeout", "0"], "--timeout must be a positive number of seconds"),
        (["--cron", "0 0 31 2 *"], "'0 0 31 2 *' is a cron expression that never fires"),
        (["--delay", "5", "--at", "2030-01-01T00:00:00Z"], "give --delay or --at, not both"),
    ],
)
def test_add_s_messages_name_the_option_and_what_is_wrong(
    delayq: Invoke,  # noqa: F811
    args: list[str],
    wanted: str,
) -> None:
    assert wanted in _refused(delayq("add", H, "echo", *args))


def test_api_errors_name_at_as_the_api_spells_it(queue: delayq_api.Queue) -> None:
    for bad in ({"at": "tomorrow"}, {"at": [1]}, {"at": 1.0, "delay": 5}, {"at": -5.0}):
        with pytest.raises(BadInput) as refused:
            queue.add(H, "echo", **bad)  # type: ignore[arg-type]
        assert "--at" not in str(refused.value) and "at=" in str(refused.value)


def test_a_handler_that_is_not_importable_points_at_delayq_path(
    delayq: Invoke,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DELAYQ_HANDLERS", "tests.sample_handlers,billing_nowhere")

    line = _refused(delayq("add", "billing_nowhere.jobs", "run"))

    assert "DELAYQ_PATH" in line and "path in delayq.toml" in line


def test_a_config_file_s_relative_path_is_taken_from_the_file_s_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_root = tmp_path / "app"
    (app_root / "src").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    config = app_root / "delayq.toml"
    config.write_text('path = ["src", "/"]\n')
    monkeypatch.chdir(tmp_path / "elsewhere")

    settings = load_settings({"DELAYQ_CONFIG": str(config)})

    assert settings.path == (app_root / "src", Path("/"))
    as_text = load_settings({"DELAYQ_CONFIG": str(config), "DELAYQ_PATH": "."}).path
    assert as_text == (Path("."),)  # the environment's stays the working directory's


def test_a_config_file_s_path_given_as_text_is_taken_from_the_file_s_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "app" / "src").mkdir(parents=True)
    config = tmp_path / "app" / "delayq.toml"
    config.write_text('path = "src"\n')
    monkeypatch.chdir(tmp_path)

    assert load_settings({"DELAYQ_CONFIG": str(config)}).path == (tmp_path / "app" / "src",)


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ("add", "delayq add [OPTIONS] CLASS METHOD"),
        ("cancel", "delayq cancel [OPTIONS] [ID]"),
        ("retry", "delayq retry [OPTIONS] ID"),
        ("show", "delayq show [OPTIONS] ID"),
        ("peek", "delayq peek [OPTIONS] [N]"),
        ("completion", "delayq completion [OPTIONS] SHELL"),
    ],
)
def test_usage_lines_name_arguments_in_one_style(command: str, usage: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"], prog_name="delayq")

    assert f"Usage: {usage}\n" in result.stdout


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["add"], "'CLASS'"),
        (["add", H], "'METHOD'"),
        (["show"], "'ID'"),
        (["cancel", "x"], "'ID'"),
        (["peek", "x"], "'N'"),
        (["completion"], "'SHELL'"),
        (["completion", "tcsh"], "'SHELL'"),
    ],
)
def test_usage_errors_name_arguments_as_the_usage_line_does(args: list[str], named: str) -> None:
    result = CliRunner().invoke(app, args, prog_name="delayq")

    assert result.exit_code == 2
    assert f"argument {named}" in result.stderr or f"value for {named}" in result.stderr
