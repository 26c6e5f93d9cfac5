"""A command that reads or changes jobs, started on the embedded default in a directory that
never had delayq (the wrong directory, a typo in DELAYQ_HOME), says where it looked and
leaves nothing behind: no `.delayq`, no background redis-server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import DELAYQ, ROOT
from tests.support.embedded_processes import embedded_processes_under

COMMANDS = [
    ["status"],
    ["list"],
    ["peek"],
    ["show", "1"],
    ["cancel", "1"],
    ["retry", "1"],
    ["purge", "--older-than", "30d", "--dry-run"],
    ["requeue", "--status", "failed", "--dry-run"],
    ["metrics"],
    ["reconcile"],
    ["add", "tasks.Mailer", "send"],
]


def embedded_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: args[0])
def test_a_command_in_a_directory_without_delayq_starts_nothing(tmp_path: Path, args: list[str]):
    done = subprocess.run(
        [*DELAYQ, *args], cwd=tmp_path, env=embedded_env(), capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip

    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1
    assert f"no delayq database in {tmp_path.resolve() / '.delayq'}" in done.stderr
    assert list(tmp_path.iterdir()) == []
    assert embedded_processes_under(tmp_path) == {}


def test_after_init_the_same_commands_work_there(tmp_path: Path):
    env = embedded_env()
    try:
        for args in (["init"], ["status"], ["list"]):
            done = subprocess.run(
                [*DELAYQ, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, done.stderr
    finally:
        subprocess.run([*DELAYQ, "embedded-stop"], cwd=tmp_path, env=env, timeout=60)
    assert (tmp_path / ".delayq" / "delayq.db").exists()
