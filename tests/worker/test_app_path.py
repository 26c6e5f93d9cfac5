"""Where the commands find the application's handler modules: the working directory (see
the README's Quickstart, run by test_readme.py) and the directories DELAYQ_PATH (`path` in
delayq.toml) lists, for layouts such as `src/`. A bad entry is one line and exit 2, before
anything is written or run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DELAYQ

HANDLER = "class Mailer:\n    def send(self, data):\n        return f\"mailed {data['to']}\"\n"
ADD = ["add", "tasks.Mailer", "send", "--data", '{"to": "ann@example.com"}']


@pytest.fixture
def app_env(cli_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The backend's URLs, no allowlist or PYTHONPATH beyond delayq's own checkout: only the
    application directory's delayq.toml says where `tasks` lives."""
    env = {key: value for key, value in cli_env.items() if key != "DELAYQ_HANDLERS"}
    env["PYTHONPATH"] = cli_env["PYTHONPATH"]
    for layout in ("src", "lib"):
        (tmp_path / "app" / layout).mkdir(parents=True)
    (tmp_path / "app" / "src" / "tasks.py").write_text(HANDLER)
    (tmp_path / "app" / "lib" / "notes.py").write_text("def write(data):\n    return 'noted'\n")
    return env


def delayq(app: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DELAYQ, *args], cwd=app, env=env, capture_output=True, text=True, timeout=120
    )


def configure(app: Path, text: str) -> None:
    (app / "delayq.toml").write_text(f'handlers = ["tasks", "notes"]\n{text}\n')


def test_a_src_layout_named_in_the_config_file_is_found_by_add_and_run(app_env, tmp_path):
    app = tmp_path / "app"
    # Both entries' directories: a run refuses an allowlist entry that does not import.
    configure(app, 'path = ["src", "lib"]')
    assert delayq(app, app_env, "init").returncode == 0

    added = delayq(app, app_env, *ADD)
    assert (added.returncode, added.stderr) == (0, ""), added.stderr
    ran = delayq(app, app_env, "run")
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")

    shown = json.loads(delayq(app, app_env, "show", added.stdout.strip(), "--json").stdout)
    assert (shown["status"], shown["message"]) == ("success", "mailed ann@example.com")


def test_the_variable_takes_several_directories(app_env, tmp_path):
    app = tmp_path / "app"
    configure(app, "")
    env = {**app_env, "DELAYQ_PATH": os.pathsep.join(["lib", str(app / "src")])}
    assert delayq(app, env, "init").returncode == 0

    for args in (ADD, ["add", "notes", "write"]):
        added = delayq(app, env, *args)
        assert (added.returncode, added.stderr) == (0, ""), added.stderr


def test_without_the_path_the_module_is_not_importable_and_the_error_says_where_to_look(
    app_env, tmp_path
):
    app = tmp_path / "app"
    configure(app, "")
    assert delayq(app, app_env, "init").returncode == 0  # else: no database, exit 1

    added = delayq(app, app_env, *ADD)

    assert (added.returncode, added.stdout) == (2, "")
    (line,) = added.stderr.splitlines()
    assert "'tasks.Mailer' is not importable; start delayq in the directory" in line


BAD_PATHS = {
    "missing-directory": ('path = ["nope"]', "DELAYQ_PATH entry 'nope' is not a directory"),
    "a-file": ('path = ["src/tasks.py"]', "'src/tasks.py' is not a directory"),
    "not-a-list": ("path = 5", "DELAYQ_PATH must be a list of directories"),
    "not-strings": ("path = [1, 2]", "DELAYQ_PATH must be a list of directories"),
    "nul": ('path = ["src\\u0000x"]', "DELAYQ_PATH contains a NUL character"),
    "escape": ('path = ["\\u001b[2J"]', "'\\x1b[2J' is not a directory"),
}


@pytest.mark.parametrize(("setting", "fragment"), BAD_PATHS.values(), ids=BAD_PATHS)
def test_a_bad_path_is_one_line_exit_2_and_adds_nothing(
    app_env, tmp_path, queue, setting, fragment
):
    app = tmp_path / "app"
    configure(app, setting)

    assert_refused(delayq(app, app_env, *ADD), fragment)
    assert queue.status().as_json()["queues"] == {}


@pytest.mark.parametrize("loop", [[], ["--loop"]], ids=["once", "loop"])
def test_a_run_with_a_bad_path_runs_nothing(app_env, tmp_path, queue, loop):
    app = tmp_path / "app"
    due = queue.add("tests.sample_handlers.jobs", "echo", "due")
    configure(app, BAD_PATHS["missing-directory"][0])

    assert_refused(delayq(app, app_env, "run", *loop), BAD_PATHS["missing-directory"][1])
    assert queue.show(due)["status"] == "pending"


def assert_refused(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert (result.returncode, result.stdout) == (2, "")
    (line,) = result.stderr.splitlines()
    assert line.startswith("delayq: error: ") and fragment in line, line


PRODUCE = """
import sys
import delayq
q = delayq.connect(database_url=sys.argv[1], redis_url=sys.argv[2], handlers=["tasks"])
try:
    q.add("tasks.Mailer", "send", {"to": "bob@example.com"})
except delayq.BadInput as exc:
    print("refused:", exc, file=sys.stderr)
print(q.add("tasks.Mailer", "send", {"to": "bob@example.com"}, check=False))
"""


def test_a_producer_without_the_handlers_code_adds_with_check_off_and_the_worker_runs_it(
    app_env, backend, tmp_path
):
    """As rq enqueues a dotted name it does not import: the producer's directory has no
    tasks.py, so a checked add is refused; the worker, which has it, decides at run."""
    app, producer = tmp_path / "app", tmp_path / "producer"
    producer.mkdir()
    configure(app, 'path = ["src", "lib"]')
    assert delayq(app, app_env, "init").returncode == 0

    env = {key: value for key, value in app_env.items() if not key.startswith("DELAYQ_")}
    added = subprocess.run(
        [sys.executable, "-c", PRODUCE, backend["database_url"], backend["redis_url"]],
        cwd=producer, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "refused: " in added.stderr and "not importable" in added.stderr, added.stderr

    ran = delayq(app, app_env, "run")
    assert (ran.returncode, ran.stderr) == (0, "")
    shown = json.loads(delayq(app, app_env, "show", added.stdout.strip(), "--json").stdout)
    assert (shown["status"], shown["message"]) == ("success", "mailed bob@example.com")
