"""A handler that forks, and whose child returns into delayq: the child must leave at once,
never carry on as a second runner with the same batch. Run as `delayq run` subprocesses,
since a child carrying on inside the test process would run the rest of the test suite."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from delayq import Status
from delayq.store.table.model import Job
from tests.conftest import DELAYQ
from tests.sample_handlers.jobs import read_log

H = "tests.sample_handlers.jobs"
X = "tests.sample_handlers.hostile"
pytestmark = pytest.mark.slow


def run_to_the_end(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    """`delayq run ARGS`; a run that never ends (a child serving on) is killed, with its
    process group, and fails the test."""
    runner = subprocess.Popen(
        [*DELAYQ, "run", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        stdout, stderr = runner.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(runner.pid, signal.SIGKILL)
        runner.communicate()
        pytest.fail("the run did not end: a forked child went on serving")
    return subprocess.CompletedProcess(runner.args, runner.returncode, stdout, stderr)


@pytest.mark.parametrize("args", [[], ["--concurrency", "2"]], ids=["one-at-a-time", "pool"])
@pytest.mark.parametrize("method", ["fork", "fork_async"])
def test_a_forked_child_returning_into_the_run_leaves_and_the_batch_runs_once(
    queue, cli_env, log, args, method
):
    forking = queue.add(X, method, {"log": log})
    rest = [queue.add(H, "record", {"log": log, "n": n}) for n in range(3)]

    done = run_to_the_end(cli_env, *args)

    assert (done.returncode, done.stderr) == (0, b"")
    lines = read_log(log)
    assert lines.count("fork") == 1
    assert len([line for line in lines if line.startswith("child ")]) == 1
    assert sorted(line for line in lines if line.isdigit()) == ["0", "1", "2"]  # once each
    assert (Job.get_by_id(forking).status, Job.get_by_id(forking).message) == (
        Status.SUCCESS,
        "parent",  # the parent's result; the child recorded nothing
    )
    assert [Job.get_by_id(job_id).status for job_id in rest] == [Status.SUCCESS] * 3
    assert Job.select().count() == 4  # no retry row, no second outcome
    assert queue.run().claimed == 0  # nothing left behind for a second pass
