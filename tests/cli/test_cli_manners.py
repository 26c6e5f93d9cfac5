"""What any command line is expected to do, on the real `delayq` process: -h and --help on
every command, --version, usage errors as one line and exit 2 with no box drawn, a shell
completion script that completes, and --json output that parses wherever a table or a list
of lines is printed."""

from __future__ import annotations

import json
import os
import re
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest
import redis
from typer.main import get_command

from delayq.cli import app
from delayq.store.index.keys import DEFAULT_QUEUE_KEY
from tests.conftest import DELAYQ, ROOT

H = "tests.sample_handlers.jobs"
COMMANDS = sorted(get_command(app).commands)  # type: ignore[attr-defined]
# What rich draws boxes and rules with: none of it may reach a pipe, a file or cron mail.
BOX_DRAWING = re.compile("[\u2500-\u257f]")


def delayq(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DELAYQ, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def json_of(env: dict[str, str], *args: str, code: int = 0) -> dict:
    result = delayq(env, *args)
    assert (result.returncode, result.stderr) == (code, ""), result.stderr
    assert BOX_DRAWING.search(result.stdout) is None, result.stdout
    return json.loads(result.stdout)


@pytest.fixture
def initialised(cli_env: dict[str, str]) -> dict[str, str]:
    result = delayq(cli_env, "init")
    assert result.returncode == 0, result.stderr
    return cli_env


@pytest.fixture
def offline_env(tmp_path: Path) -> dict[str, str]:
    """For what must not need a server, on one backend only: servers no one listens on, so
    a command that tried one would fail instead of passing by luck."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env.update(
        DELAYQ_DATABASE_URL="mysql://root@127.0.0.1:1/nowhere",
        DELAYQ_REDIS_URL="redis://127.0.0.1:1/0",
        DELAYQ_HANDLERS="tests.sample_handlers",
        DELAYQ_HOME=str(tmp_path / "home"),
        PYTHONPATH=str(ROOT),
    )
    return env


def test_the_commands_are_found():
    assert {"add", "run", "status", "doctor", "completion"} <= set(COMMANDS)


@pytest.mark.parametrize("flag", ["-h", "--help"])
@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_every_command_prints_plain_help_with_both_flags(offline_env, command, flag):
    result = delayq(offline_env, *command.split(), flag)

    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert result.stdout.startswith(f"Usage: delayq {command}".rstrip() + " "), result.stdout
    assert BOX_DRAWING.search(result.stdout) is None, result.stdout


def test_version_is_the_installed_distributions(offline_env):
    result = delayq(offline_env, "--version")

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"delayq {version('delayq')}\n"


USAGE_ERRORS = {
    "unknown-command": (["bogus"], "No such command 'bogus'", "delayq"),
    "unknown-option": (["--bogus"], "No such option: --bogus", "delayq"),
    "unknown-option-of-a-command": (["add", "-x"], "No such option: -x", "delayq add"),
    "missing-argument": (["show"], "Missing argument 'ID'", "delayq show"),
    "missing-second-argument": (["add", H], "Missing argument 'METHOD'", "delayq add"),
    "missing-option-value": (["list", "--limit"], "requires an argument", "delayq list"),
    "bad-choice": (["completion", "tcsh"], "'tcsh' is not one of", "delayq completion"),
    "bad-number": (["peek", "ten"], "'ten' is not a valid int", "delayq peek"),
    "bad-number-of-run": (["run", "--limit", "x"], "'x' is not a valid int", "delayq run"),
    "value-of-a-flag": (["status", "--json=yes"], "does not take a value", "delayq status"),
    "escape-in-a-choice": (
        ["completion", "\x1b]0;owned\x07"],
        "'\\x1b]0;owned\\x07'",
        "delayq completion",
    ),
    "bidi-in-a-command": (["st\u202eatus"], "'st\\u202eatus'", "delayq"),
    "not-utf8-in-an-option": (["list", "--st\udcffatus"], "--st\\udcffatus", "delayq list"),
    "huge-unknown-option": (["peek", "--" + "x" * 100_000], "No such option", "delayq peek"),
}


@pytest.mark.parametrize(("args", "fragment", "command"), USAGE_ERRORS.values(), ids=USAGE_ERRORS)
def test_a_usage_error_is_one_plain_line_pointing_at_help_and_exit_2(
    offline_env, args, fragment, command
):
    result = delayq(offline_env, *args)

    assert (result.returncode, result.stdout) == (2, "")
    (line,) = result.stderr.splitlines()
    # casefold: typer spells a metavar METHOD or method depending on its release
    assert line.startswith("delayq: error: ") and fragment.casefold() in line.casefold(), line
    assert line.endswith(f"(see {command} --help)"), line
    assert BOX_DRAWING.search(result.stderr) is None


def test_delayq_alone_prints_the_help_without_a_box(offline_env):
    result = delayq(offline_env)

    assert result.returncode == 2
    assert "Commands:" in result.stdout + result.stderr
    assert BOX_DRAWING.search(result.stdout + result.stderr) is None


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish", "powershell"])
def test_completion_prints_the_script_for_each_shell(offline_env, shell):
    result = delayq(offline_env, "completion", shell)

    assert (result.returncode, result.stderr) == (0, "")
    assert re.search(f"_DELAYQ_COMPLETE\\W+complete_{shell}", result.stdout), result.stdout


def test_the_bash_script_completes_command_names(offline_env):
    script = delayq(offline_env, "completion", "bash").stdout
    # What the script's function runs on <TAB> after `delayq sta`.
    assert "COMP_WORDS" in script and "COMP_CWORD" in script
    request = {"_DELAYQ_COMPLETE": "complete_bash", "COMP_WORDS": "delayq sta", "COMP_CWORD": "1"}

    result = delayq({**offline_env, **request})

    assert (result.returncode, result.stdout.split()) == (0, ["status"]), result.stderr


def test_add_json_is_the_new_job(initialised):
    job = json_of(
        initialised,
        "add",
        H,
        "echo",
        "--data",
        '{"n": 1}',
        "--delay",
        "1h",
        "--ext",
        "k:1",
        "--json",
    )

    assert job["queue"] == "default" and job["status"] == "pending"
    assert (job["class"], job["method"], job["data"], job["ext"]) == (H, "echo", {"n": 1}, "k:1")
    assert job == {**json_of(initialised, "show", str(job["id"]), "--json"), "queue": "default"}
    listed = json_of(initialised, "list", "--json")["jobs"]
    assert [(row["id"], row["queue"], row["run_at"]) for row in listed] == [
        (job["id"], "default", job["run_at"])
    ]


def test_add_json_names_the_queue_it_was_added_to(initialised):
    job = json_of(initialised, "add", H, "echo", "--queue", "sms", "--json")

    assert job["queue"] == "sms"
    assert json_of(initialised, "peek", "--json")["jobs"][0]["queue"] == "sms"


def test_a_refused_add_with_json_prints_one_error_line_and_no_json(initialised):
    result = delayq(initialised, "add", "os", "system", "--json")

    assert (result.returncode, result.stdout) == (2, "")
    assert len(result.stderr.splitlines()) == 1
    assert json_of(initialised, "list", "--json")["jobs"] == []


def test_reconcile_json_counts_what_it_put_back(initialised, backend):
    job = json_of(initialised, "add", H, "echo", "--json")
    client = redis.Redis.from_url(backend["redis_url"])
    assert client.zrem(DEFAULT_QUEUE_KEY, job["id"]) == 1
    client.close()

    assert json_of(initialised, "reconcile", "--json") == {
        "queues": {"default": {"reindexed": 1, "removed": 0}},
        "counts_corrected": {},
        "rows": 1,
    }
    again = json_of(initialised, "reconcile", "--json")
    assert again == {
        "queues": {"default": {"reindexed": 0, "removed": 0}},
        "counts_corrected": {},
        "rows": 1,
    }


def test_doctor_json_lists_the_checks_and_keeps_its_exit_code(initialised):
    result = delayq(initialised, "doctor", "--json")
    checks = json.loads(result.stdout)["checks"]

    assert {"config", "handlers", "database", "redis"} <= {check["name"] for check in checks}
    assert all(set(check) == {"level", "name", "detail"} for check in checks)
    failed = any(check["level"] == "FAIL" for check in checks)
    assert result.returncode == (1 if failed else 0), checks


def test_doctor_json_with_a_failure_exits_1(initialised):
    broken = {key: value for key, value in initialised.items() if key != "DELAYQ_HANDLERS"}

    checks = json_of(broken, "doctor", "--json", code=1)["checks"]

    assert {"level": "FAIL", "name": "handlers"}.items() <= checks[1].items()


@pytest.mark.parametrize(
    "args", [["status", "--json"], ["list", "--json"], ["peek", "--json"]], ids=lambda a: a[0]
)
def test_json_of_the_table_commands_is_one_object(initialised, args):
    json_of(initialised, "add", H, "echo", "--delay", "1h")

    assert isinstance(json_of(initialised, *args), dict)
