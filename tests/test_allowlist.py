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
from delayq.store.keys import DEFAULT_QUEUE_KEY
from delayq.store.table import Job, Status
from tests.conftest import DELAYQ
from tests.invoke import invoke
from tests.sample_handlers.jobs import read_log

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
