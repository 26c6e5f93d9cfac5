"""The allowlist as a whole: a run refuses an allowlist no job could run under, or one naming
code that is not the application's, before it claims anything; `add` refuses such a job and
`delayq doctor` fails it. Real `delayq` processes on both backends;
the rows, the schedule and the handlers' own log say what happened.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from delayq.errors import ConfigError
from delayq.store.index.keys import DEFAULT_QUEUE_KEY
from delayq.store.table.model import Job, Status
from tests.conftest import DELAYQ
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke

H = "tests.sample_handlers.jobs"


def delayq(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*DELAYQ, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def assert_untouched(queue, job_id: int, log: str) -> None:
    """The job is still the one pending row, on the schedule, and its handler never ran."""
    rows = list(Job.select())
    assert [(row.id, row.status, row.retry_times) for row in rows] == [(job_id, Status.PENDING, 0)]
    assert queue.index.client.zscore(DEFAULT_QUEUE_KEY, str(job_id)) is not None
    assert read_log(log) == []


@pytest.mark.parametrize("extra", [[], ["--processes", "2"], ["--loop", "--for", "1s"]])
def test_run_with_an_empty_allowlist_refuses_and_claims_nothing(queue, cli_env, log, extra):
    job_id = queue.add(H, "record", {"log": log, "n": 1})

    completed = delayq(dict(cli_env, DELAYQ_HANDLERS=""), "run", *extra)

    assert completed.returncode == 2
    assert completed.stdout == ""
    (line,) = completed.stderr.splitlines()
    assert line.startswith("delayq: error: DELAYQ_HANDLERS is empty")
    assert "DELAYQ_HANDLERS=" in line
    assert_untouched(queue, job_id, log)


def test_a_config_file_without_handlers_is_refused_the_same(queue, cli_env, log, tmp_path):
    job_id = queue.add(H, "record", {"log": log, "n": 1})
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    (workdir / "delayq.toml").write_text("handlers = []\n")
    env = {key: value for key, value in cli_env.items() if key != "DELAYQ_HANDLERS"}

    completed = delayq(env, "run", cwd=workdir)

    assert completed.returncode == 2
    assert len(completed.stderr.splitlines()) == 1
    assert_untouched(queue, job_id, log)


def test_the_api_run_refuses_an_empty_allowlist_before_claiming(make_queue, log):
    producer = make_queue()
    job_id = producer.add(H, "record", {"log": log, "n": 1})
    runner = make_queue(handlers=[])

    with pytest.raises(ConfigError, match="DELAYQ_HANDLERS is empty"):
        runner.run()
    with pytest.raises(ConfigError, match="DELAYQ_HANDLERS is empty"):
        runner.run_loop(duration=0.1)
    assert_untouched(producer, job_id, log)


def test_doctor_fails_an_empty_allowlist(queue, cli_env):
    result = invoke(dict(cli_env, DELAYQ_HANDLERS=""), "doctor")

    assert result.exit_code == 1
    handlers = [line for line in result.stdout.splitlines() if line.split()[1] == "handlers"]
    assert len(handlers) == 1
    assert handlers[0].split()[0] == "FAIL"
    assert "DELAYQ_HANDLERS is empty" in handlers[0]


FOREIGN = "tests.sample_handlers.foreign"


def test_add_of_a_class_with_a_foreign_constructor_exits_2_and_writes_nothing(
    queue, cli_env, tmp_path
):
    spawned = tmp_path / "spawned"

    completed = delayq(
        cli_env, "add", FOREIGN, "Spawner", "--data", json.dumps(["touch", str(spawned)])
    )

    assert completed.returncode == 2
    (line,) = completed.stderr.splitlines()
    assert "would run __init__ of subprocess.Popen" in line
    assert Job.select().count() == 0
    assert queue.index.client.zcard(DEFAULT_QUEUE_KEY) == 0
    assert not spawned.exists()


def test_a_planted_row_naming_a_foreign_constructor_fails_for_good_without_running_it(
    queue, cli_env, tmp_path
):
    spawned = tmp_path / "spawned"
    params = json.dumps({"class": FOREIGN, "method": "Spawner", "data": ["touch", str(spawned)]})
    job_id = Job.create(params=params, run_at=time.time() - 1).id
    queue.index.schedule.add("default", job_id, time.time() - 1)

    completed = delayq(cli_env, "run")

    assert completed.returncode == 0, completed.stderr
    (row,) = Job.select()
    assert (row.id, row.status) == (job_id, Status.FAILED)
    assert "would run __init__ of subprocess.Popen" in row.message
    assert not spawned.exists()


@pytest.mark.parametrize("entry", ["subprocess", "os", "redis", "delayq"])
def test_an_entry_naming_foreign_code_is_refused_at_add_and_run_and_fails_doctor(
    queue, cli_env, log, entry
):
    job_id = queue.add(H, "record", {"log": log, "n": 1})
    env = dict(cli_env, DELAYQ_HANDLERS=f"tests.sample_handlers,{entry}")

    added = delayq(env, "add", H, "record", "--data", json.dumps({"log": log}))
    ran = delayq(env, "run")
    doctor = invoke(env, "doctor")

    for completed in (added, ran):
        assert (completed.returncode, completed.stdout) == (2, "")
        (line,) = completed.stderr.splitlines()
        assert line.startswith(f"delayq: error: DELAYQ_HANDLERS entry {entry!r} names ")
    assert_untouched(queue, job_id, log)
    assert doctor.exit_code == 1
    handlers = [line.split(None, 2) for line in doctor.stdout.splitlines() if " handlers " in line]
    assert [level for level, _, _ in handlers] == ["ok", "FAIL"]
    assert handlers[1][2].startswith(f"DELAYQ_HANDLERS entry {entry!r} names ")


@pytest.mark.parametrize("extra", [[], ["--processes", "2"], ["--loop", "--for", "1s"]])
def test_run_with_an_entry_that_does_not_import_refuses_and_claims_nothing(
    queue, cli_env, log, tmp_path, extra
):
    job_id = queue.add(H, "record", {"log": log, "n": 1})
    env = dict(cli_env, DELAYQ_HANDLERS="tests.sample_handlers,no_such_module")

    completed = delayq(env, "run", *extra, cwd=tmp_path)

    assert (completed.returncode, completed.stdout) == (2, "")
    (line,) = completed.stderr.splitlines()
    assert line.startswith("delayq: error: DELAYQ_HANDLERS entry 'no_such_module' does not import")
    assert f"working directory ({tmp_path.resolve()})" in line
    assert "DELAYQ_PATH (not set)" in line
    assert_untouched(queue, job_id, log)


def test_a_run_from_the_wrong_directory_names_where_it_looked(queue, cli_env, log, tmp_path):
    for layout in ("src", "lib"):
        (tmp_path / "app" / layout).mkdir(parents=True)
    (tmp_path / "app" / "src" / "tasks.py").write_text("def send(data):\n    return 'sent'\n")
    job_id = queue.add(H, "record", {"log": log, "n": 1})
    env = dict(cli_env, DELAYQ_HANDLERS="tests.sample_handlers,tasks", DELAYQ_PATH="app/lib")

    wrong = delayq(env, "run", cwd=tmp_path)

    assert (wrong.returncode, wrong.stdout) == (2, "")
    (line,) = wrong.stderr.splitlines()
    assert "entry 'tasks' does not import: no module 'tasks'" in line
    assert f"DELAYQ_PATH ({(tmp_path / 'app' / 'lib').resolve()})" in line
    assert_untouched(queue, job_id, log)
    right = delayq(dict(env, DELAYQ_PATH="src"), "run", cwd=tmp_path / "app")
    assert (right.returncode, right.stdout, right.stderr) == (0, "", "")
    assert queue.show(job_id)["status"] == "success"


def test_run_with_an_entry_whose_import_raises_says_why(queue, cli_env, log):
    job_id = queue.add(H, "record", {"log": log, "n": 1})
    env = dict(cli_env, DELAYQ_HANDLERS="tests.sample_handlers.jobs,tests.sample_handlers.broken")

    completed = delayq(env, "run")

    assert (completed.returncode, completed.stdout) == (2, "")
    (line,) = completed.stderr.splitlines()
    assert "'tests.sample_handlers.broken' does not import" in line
    assert "RuntimeError: broken on purpose" in line
    assert_untouched(queue, job_id, log)
