"""What handlers leave behind when `delayq` exits. The command freezes what its imports made
(delayq.cli.main) so that the interpreter's collections skip it; what handlers make
afterwards must still be collected and finalized, at the latest as the process exits, as in
any Python program."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import DELAYQ

# Each job leaves an object in a reference cycle: reference counting never frees it, only a
# collection, which calls its __del__ (a line appended to a file, unbuffered).
LEAVES_A_CYCLE = """
import os


class Leftover:
    def __init__(self, path, n):
        self.path, self.n, self.me = path, n, self

    def __del__(self):
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(fd, b"finalized %d\\n" % self.n)
        os.close(fd)


def leave(data):
    Leftover(data["path"], data["n"])
"""


def test_objects_handlers_leave_in_cycles_are_finalized_by_the_time_the_run_exits(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "leftovers.py").write_text(LEAVES_A_CYCLE)
    env = {**cli_env, "DELAYQ_HANDLERS": "leftovers"}
    out = tmp_path / "finalized.txt"

    def delayq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*DELAYQ, *args], cwd=app, env=env, capture_output=True, text=True, timeout=120
        )

    assert delayq("init").returncode == 0
    for n in (1, 2, 3):
        data = f'{{"path": "{out}", "n": {n}}}'
        added = delayq("add", "leftovers", "leave", "--data", data)
        assert (added.returncode, added.stderr) == (0, ""), added.stderr

    ran = delayq("run", "--concurrency", "1")
    assert (ran.returncode, ran.stderr) == (0, ""), ran.stderr
    assert sorted(out.read_text().splitlines()) == ["finalized 1", "finalized 2", "finalized 3"]
