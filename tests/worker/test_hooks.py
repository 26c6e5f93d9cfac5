"""The on_failure hook: called after each failed attempt is recorded, with the job's facts and
the exception; a hook that raises or hangs is logged and changes nothing else; a hook the
allowlist refuses stops the run before it runs anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from delayq.store.table.model import Job, Status
from tests.faults.test_processes import delayq
from tests.sample_handlers.jobs import read_log

H = "tests.sample_handlers.jobs"
HOOKS = "tests.sample_handlers.hooks"


def hook_calls(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def hook_log(tmp_path: Path) -> Path:
    return tmp_path / "hook.jsonl"


def test_the_hook_gets_every_failed_attempt_with_its_exception(queue, cli_env, log, hook_log):
    retried = queue.add(H, "fail", {"log": log, "n": 1}, ext="order:1", queue="mail")
    terminal = queue.add(H, "fail_for_good", {"log": log})
    queue.add(H, "record", {"log": log, "n": 2})

    completed = delayq(cli_env, "run", DELAYQ_ON_FAILURE=f"{HOOKS}.record", HOOK_LOG=str(hook_log))

    assert (completed.returncode, completed.stdout, completed.stderr) == (0, b"", b"")
    calls = {call["job"]["id"]: call for call in hook_calls(hook_log)}
    assert set(calls) == {retried, terminal}
    first = calls[retried]
    assert first["raised"] == ["ValueError", "boom 1"]
    assert {key: first["job"][key] for key in ("queue", "class", "method", "ext", "attempt")} == {
        "queue": "mail",
        "class": H,
        "method": "fail",
        "ext": "order:1",
        "attempt": 0,
    }
    assert (first["job"]["will_retry"], first["job"]["terminal"]) == (True, False)
    assert first["job"]["error"] == "ValueError: boom 1"
    assert first["job"]["traceback"] == queue.show(retried)["traceback"]
    last = calls[terminal]
    assert last["raised"] == ["NoRetry", "the order is gone"]
    assert (last["job"]["will_retry"], last["job"]["terminal"]) == (False, True)
    assert "data" not in last["job"] and "params" not in last["job"]


def test_on_failure_option_names_the_hook_too(queue, cli_env, log, hook_log):
    job_id = queue.add(H, "fail", {"log": log, "n": 3})

    completed = delayq(cli_env, "run", "--on-failure", f"{HOOKS}.record", HOOK_LOG=str(hook_log))

    assert completed.returncode == 0
    assert [call["job"]["id"] for call in hook_calls(hook_log)] == [job_id]


def test_runner_processes_each_call_the_hook_they_were_given(queue, cli_env, log, hook_log):
    ids = [queue.add(H, "fail", {"log": log, "n": n}) for n in range(4)]

    completed = delayq(
        cli_env, "run", "-p", "2", "--on-failure", f"{HOOKS}.record", HOOK_LOG=str(hook_log)
    )

    assert (completed.returncode, completed.stderr) == (0, b"")
    assert sorted(call["job"]["id"] for call in hook_calls(hook_log)) == ids


def test_a_refused_hook_stops_runner_processes_before_they_run_anything(queue, cli_env, log):
    job_id = queue.add(H, "fail", {"log": log})

    completed = delayq(cli_env, "run", "-p", "2", "--on-failure", "os.system", timeout=30)

    assert completed.returncode == 2, completed.stderr
    (line,) = completed.stderr.decode().splitlines()
    assert "does not allow 'os'" in line
    assert Job.get_by_id(job_id).status == Status.PENDING
    assert read_log(log) == []


def test_on_failure_in_the_config_file_names_the_hook(queue, cli_env, log, hook_log, tmp_path):
    job_id = queue.add(H, "fail", {"log": log, "n": 4})
    config = tmp_path / "delayq.toml"
    config.write_text(f'on_failure = "{HOOKS}.record"\n')

    completed = delayq(cli_env, "run", DELAYQ_CONFIG=str(config), HOOK_LOG=str(hook_log))

    assert completed.returncode == 0
    assert [call["job"]["id"] for call in hook_calls(hook_log)] == [job_id]


def test_a_hook_that_raises_is_logged_and_the_queue_goes_on(queue, cli_env, log, hook_log):
    ids = [queue.add(H, "fail", {"log": log, "n": n}) for n in (1, 2)]
    after = queue.add(H, "record", {"log": log, "n": "after"})

    completed = delayq(cli_env, "run", DELAYQ_ON_FAILURE=f"{HOOKS}.broken", HOOK_LOG=str(hook_log))

    assert completed.returncode == 0
    lines = completed.stderr.decode().splitlines()
    assert len(lines) == 2
    for job_id, line in zip(ids, lines, strict=True):
        assert line.endswith(
            f"on_failure hook {HOOKS}.broken raised for job {job_id}: "
            f"RuntimeError: hook broke on job {job_id}"
        )
    assert [Job.get_by_id(job_id).status for job_id in ids] == [Status.FAILED, Status.FAILED]
    assert Job.get_by_id(after).status == Status.SUCCESS
    assert Job.select().where(Job.chain_id.in_(ids)).count() == 2, "each failure retried"
    assert len(hook_calls(hook_log)) == 2


def test_a_hook_runs_with_the_runs_signals_blocked(queue, cli_env, log, hook_log):
    """A hook left behind, hung, runs beside the next jobs: a SIGALRM the kernel gave its
    thread would leave a handler asleep past its time limit."""
    queue.add(H, "fail", {"log": log, "n": 1})

    completed = delayq(
        cli_env, "run", DELAYQ_ON_FAILURE=f"{HOOKS}.blocked_signals", HOOK_LOG=str(hook_log)
    )

    assert completed.returncode == 0
    (call,) = hook_calls(hook_log)
    assert {"SIGALRM", "SIGINT", "SIGTERM"} <= set(call["blocked"])


def test_a_hook_that_hangs_is_left_behind_and_the_outcome_kept(queue, cli_env, log, hook_log):
    failed = queue.add(H, "fail", {"log": log, "n": 1})
    after = queue.add(H, "record", {"log": log, "n": "after"})

    completed = delayq(cli_env, "run", DELAYQ_ON_FAILURE=f"{HOOKS}.hang", HOOK_LOG=str(hook_log))

    assert completed.returncode == 0
    (line,) = completed.stderr.decode().splitlines()
    assert line.endswith(
        f"on_failure hook {HOOKS}.hang still running for job {failed} after 10s; left behind"
    )
    assert (Job.get_by_id(failed).status, Job.get_by_id(after).status) == (
        Status.FAILED,
        Status.SUCCESS,
    )
    assert read_log(log) == ["fail 1", "after"]


BAD_HOOKS = {
    "not allowed": ("os.system", "does not allow"),
    "no dots": ("record", "must be a dotted path"),
    "missing": (f"{HOOKS}.nothing_here", "DELAYQ_ON_FAILURE"),
    "not a function": (f"{HOOKS}.NOT_CALLABLE", "outside DELAYQ_HANDLERS"),
    "control": (f"{HOOKS}.rec\x1bord", "must be a dotted path"),
    "surrogate": (f"{HOOKS}.rec\udcfford", "must be a dotted path"),
    "huge": ("a." * 30_000 + "b", "must be a dotted path"),
}


@pytest.mark.parametrize(("hook", "fragment"), BAD_HOOKS.values(), ids=BAD_HOOKS.keys())
def test_a_bad_hook_is_one_line_exit_2_and_nothing_runs(queue, cli_env, log, hook, fragment):
    job_id = queue.add(H, "fail", {"log": log})

    completed = delayq(cli_env, "run", DELAYQ_ON_FAILURE=hook)

    assert completed.returncode == 2, completed.stderr
    (line,) = completed.stderr.decode(errors="replace").splitlines()
    assert line.startswith("delayq: error: ") and fragment in line
    assert "\x1b" not in line
    assert Job.get_by_id(job_id).status == Status.PENDING
    assert read_log(log) == []
