"""`delayq run -v` on a terminal draws a progress bar under the job lines; without a
terminal (cron) it prints the lines alone. A real pseudo-terminal comes from script(1)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import delayq
from tests.conftest import DELAYQ

H = "tests.sample_handlers.jobs"


def backlog(queue: delayq.Queue, count: int) -> None:
    queue.add_many([delayq.JobSpec(H, "echo", n) for n in range(count)])


def on_a_terminal(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`delayq ARGS` with a pseudo-terminal as stdout; its output and the exit code."""
    script = shutil.which("script")
    assert script, "script(1) from util-linux provides the pseudo-terminal for this test"
    return subprocess.run(
        [script, "-qec", shlex.join([*DELAYQ, *args]), "/dev/null"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_verbose_run_on_a_terminal_shows_a_progress_bar(queue, cli_env):
    backlog(queue, 60)

    result = on_a_terminal(cli_env, "run", "-v")

    assert result.returncode == 0, result.stdout
    assert "60/60" in result.stdout
    assert result.stdout.count(" success ") == 60


def test_verbose_run_without_a_terminal_prints_no_bar(queue, cli_env):
    backlog(queue, 60)

    result = subprocess.run(
        [*DELAYQ, "run", "-v"], env=cli_env, capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0, result.stderr
    assert "/60" not in result.stdout and "\x1b" not in result.stdout
    assert len(result.stdout.splitlines()) == 61  # a line per job and the summary


def test_add_before_init_says_to_run_init(backend, cli_env):
    result = subprocess.run(
        [*DELAYQ, "add", H, "echo"], env=cli_env, capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 1
    if backend["database_url"].startswith("sqlite"):  # not even the file: nothing is made
        path = backend["database_url"].removeprefix("sqlite:///")
        assert result.stderr.startswith(f"delayq: error: no delayq database at {path}: run ")
        assert not Path(path).exists()
    else:
        assert result.stderr == (
            "delayq: error: the delay_queue table does not exist here; run `delayq init` first\n"
        )


def test_verbose_json_run_on_a_terminal_prints_json_lines_and_no_bar(queue, cli_env):
    backlog(queue, 60)

    result = on_a_terminal(cli_env, "run", "-v", "--json")

    assert result.returncode == 0, result.stdout
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["record"] for line in lines] == ["job"] * 60 + ["summary"]
    assert lines[-1]["succeeded"] == 60


def test_reconcile_on_a_terminal_counts_the_rows_it_compared(queue, cli_env):
    backlog(queue, 60)

    result = on_a_terminal(cli_env, "reconcile")

    assert result.returncode == 0, result.stdout
    assert "pending rows compared" in result.stdout and "60, " in result.stdout
    assert "default: re-indexed 0, removed 0" in result.stdout


def test_reconcile_without_a_terminal_prints_its_report_alone(queue, cli_env):
    backlog(queue, 60)

    result = subprocess.run(
        [*DELAYQ, "reconcile"], env=cli_env, capture_output=True, text=True, timeout=60
    )

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "default: re-indexed 0, removed 0\n"
