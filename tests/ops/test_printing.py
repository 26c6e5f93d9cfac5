"""What job writers chose (ext, data, results, errors) is shown, never obeyed: escape
sequences, carriage returns, bells and bidi overrides come out of `list`, `show`, `peek`
and `run -v` as visible escapes, and rich's markup in them is plain text."""

from __future__ import annotations

import json
import unicodedata

import pytest

from delayq.ops.printing import printable
from tests.support.invoke import invoke

H = "tests.sample_handlers.jobs"
HOSTILE = "a\x1b[31mred\r\x07\u202eevil[/x][bold]b:smile:"
SHOWN = "a\\x1b[31mred\\r\\x07\\u202eevil[/x][bold]b:smile:"


def hidden_characters(text: str) -> list[str]:
    """Characters a terminal would act on, line breaks aside."""
    return [
        char
        for char in text
        if char != "\n" and unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs")
    ]


def test_printable_writes_controls_and_format_characters_as_escapes():
    assert printable(HOSTILE) == SHOWN
    assert printable("line\nnext\ttab\x7f\x9b\u2028") == "line\\nnext\\ttab\\x7f\\x9b\\u2028"
    assert printable("déjà vu 東京 🙂") == "déjà vu 東京 🙂"
    assert printable(None) == ""


@pytest.fixture
def hostile_jobs(queue, cli_env, log):
    pending = queue.add(H, "echo", HOSTILE, ext=HOSTILE, delay=3600)
    done = queue.add(H, "echo", HOSTILE, ext=HOSTILE)
    failed = queue.add(H, "fail", {"n": HOSTILE, "log": log}, ext=HOSTILE)
    ran = invoke(cli_env, "run", "-v")
    assert ran.exit_code == 0, ran.output
    assert not hidden_characters(ran.stdout), ran.stdout
    assert "evil" in ran.stdout
    return pending, done, failed


@pytest.mark.parametrize(
    "command",
    [
        ["list"],
        ["peek"],
        ["status"],
        ["show", "{pending}"],
        ["show", "{done}"],
        ["show", "{failed}"],
    ],
    ids=["list", "peek", "status", "show-pending", "show-success", "show-failed"],
)
def test_tables_and_show_escape_what_job_writers_chose(cli_env, hostile_jobs, command):
    pending, done, failed = hostile_jobs
    args = [part.format(pending=pending, done=done, failed=failed) for part in command]

    result = invoke(cli_env, *args)

    assert result.exit_code == 0, result.output
    assert not hidden_characters(result.stdout), result.stdout
    if command[0] != "status":
        assert "\\x1b[31mred\\r\\x07\\u202eevil[/x][bold]" in result.stdout


def test_show_of_a_failure_escapes_the_error_text(cli_env, hostile_jobs):
    _, _, failed = hostile_jobs

    result = invoke(cli_env, "show", str(failed))

    (message,) = [line for line in result.stdout.splitlines() if line.startswith("message")]
    assert "ValueError: boom a\\x1b[31mred\\r\\x07\\u202eevil" in message


def test_json_output_keeps_the_values_exactly(cli_env, hostile_jobs):
    pending, _, _ = hostile_jobs

    view = json.loads(invoke(cli_env, "show", str(pending), "--json").stdout)

    assert (view["ext"], view["data"]) == (HOSTILE, HOSTILE)
