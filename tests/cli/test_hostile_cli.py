"""Every command and option of `delayq` given hostile text — control characters, a NUL,
a megabyte, argv bytes that are not UTF-8, nothing at all, a number no column holds —
answers with its result or one `delayq: error:` line, never a traceback."""

from __future__ import annotations

import os
import subprocess

import pytest
from typer.testing import CliRunner

from delayq.cli import app
from delayq.ops.overview import JobFilter
from tests.conftest import DELAYQ

H = "tests.sample_handlers.jobs"
HOSTILE = {
    "controls": "a\x1b[31m\r\x07\u202eb",
    "nul": "a\x00b",
    "megabyte": "x" * 1_000_000,
    "not-utf8": "a\udcffb",  # how Python hands over argv bytes that are not UTF-8
    "empty": "",
    "huge-number": str(10**30),
}
TEMPLATES = [
    ["add", "{}", "echo"],
    ["add", H, "{}"],
    ["add", H, "echo", "--data", "{}"],
    ["add", H, "echo", "--delay", "{}"],
    ["add", H, "echo", "--at", "{}"],
    ["add", H, "echo", "--ext", "{}", "--delay", "1h"],
    ["add", H, "echo", "--queue", "{}"],
    ["add", H, "echo", "--timeout", "{}"],
    ["add", H, "echo", "--every", "{}"],
    ["add", H, "echo", "--cron", "{}"],
    ["add", H, "echo", "--cron", "0 9 * * *", "--tz", "{}"],
    ["cancel", "{}"],
    ["cancel", "--ext", "{}"],
    ["cancel", "--ext", "x", "--queue", "{}"],
    ["retry", "{}"],
    ["retry", "1", "--delay", "{}"],
    ["show", "{}"],
    ["status", "--check", "--max-idle", "{}"],
    ["status", "--check", "--max-lag", "{}"],
    ["list", "--status", "{}"],
    ["list", "--queue", "{}"],
    ["list", "--ext", "{}"],
    ["list", "--class", "{}"],
    ["list", "--since", "{}"],
    ["list", "--limit", "{}"],
    ["list", "--before-id", "{}"],
    ["peek", "{}"],
    ["peek", "--queue", "{}"],
    ["purge", "--older-than", "{}", "--dry-run"],
    ["purge", "--older-than", "1d", "--status", "{}", "--dry-run"],
    ["requeue", "--status", "{}", "--dry-run"],
    ["requeue", "--status", "failed", "--class", "{}", "--dry-run"],
    ["requeue", "--status", "failed", "--queue", "{}", "--dry-run"],
    ["requeue", "--status", "failed", "--since", "{}", "--dry-run"],
    ["run", "--since", "{}"],
    ["run", "--limit", "{}"],
    ["run", "--max-seconds", "{}"],
    ["run", "--queue", "{}"],
    ["run", "--queues", "{}"],
    ["run", "--loop", "--for", "{}", "--max-seconds", "0"],
    ["run", "--log-level", "{}"],
    ["run", "--log-file", "{}"],
    ["run", "--metrics-file", "{}"],
    ["run", "--concurrency", "{}"],
    ["run", "--grace", "{}"],
    ["run", "--processes", "{}"],
]
BY_ID = ("cancel", "retry", "show")  # exit 1 is theirs for an unknown id


@pytest.fixture
def env(cli_env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # --log-file and --metrics-file values land here
    return cli_env


@pytest.mark.parametrize("template", TEMPLATES, ids=[" ".join(t) for t in TEMPLATES])
def test_hostile_values_get_a_result_or_one_error_line(queue, env, template):
    runner = CliRunner()
    for name, value in HOSTILE.items():
        args = [part.replace("{}", value) for part in template]

        result = runner.invoke(app, args, env=env)

        what = f"{name}: {result.exit_code} {result.stderr[:300]!r}"
        assert result.exception is None or isinstance(result.exception, SystemExit), what
        assert result.exit_code in ((0, 1, 2) if template[0] in BY_ID else (0, 2)), what
        if result.exit_code:
            (line,) = result.stderr.splitlines()
            assert line.startswith("delayq: error: "), what


@pytest.mark.parametrize(
    "command",
    [["list", "--ext"], ["cancel", "--ext"], ["add", H, "echo", "--ext"], ["list", "--class"]],
    ids=["list-ext", "cancel-ext", "add-ext", "list-class"],
)
def test_argv_bytes_that_are_not_utf8_are_a_usage_error(queue, cli_env, command):
    result = subprocess.run(
        [*DELAYQ, *command, os.fsdecode(b"\xff\xfe")],
        env=cli_env,
        capture_output=True,
        timeout=60,
    )

    assert (result.returncode, result.stdout) == (2, b"")
    (line,) = result.stderr.splitlines()
    assert line.startswith(b"delayq: error: ") and b"not valid UTF-8" in line
    assert queue.list_jobs(JobFilter()) == []
