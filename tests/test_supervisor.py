"""`delayq run --processes P`: P runner processes under one parent that forwards stop
signals, replaces a child that dies, and gives up when children keep dying."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter

import pytest

from delayq import JobSpec
from tests.conftest import DELAYQ
from tests.invoke import invoke
from tests.sample_handlers.jobs import read_log
from tests.test_processes import start, wait_for

H = "tests.sample_handlers.jobs"
P = "tests.sample_handlers.procs"
F = "tests.sample_handlers.faults"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_runner_processes_share_the_work_and_run_each_job_once(queue, cli_env, log, tmp_path):
    count = 600
    gate = tmp_path / "gate"
    queue.add_many(
        [JobSpec(P, "record_pid", {"log": log, "n": n, "gate": str(gate)}) for n in range(count)],
        now=time.time() - 60,
    )

    parent = start(cli_env, "run", "--processes", "2", DELAYQ_BATCH_SIZE="20")
    # Each child holds its first job at the gate, so neither drains the queue before the
    # other has started, however the two are scheduled.
    at_gate = tmp_path / "gate.waiting"
    wait_for(lambda: len(set(read_log(at_gate))) == 2, 60, "both children at the gate")
    gate.touch()
    stdout, stderr = parent.communicate(timeout=60)

    assert (parent.returncode, stdout, stderr) == (0, b"", b"")
    lines = [line.split() for line in read_log(log)]
    assert Counter(int(n) for n, _ in lines) == Counter(range(count))
    pids = {int(pid) for _, pid in lines}
    assert parent.pid not in pids
    assert pids == {int(pid) for pid in read_log(at_gate)}, "the two children shared the work"


def test_sigterm_to_the_parent_stops_its_children_gracefully(queue, cli_env, log):
    queue.add_many(
        [JobSpec(H, "slow", {"log": log, "n": n, "seconds": 1}) for n in range(2)],
        now=time.time() - 1,
    )
    parent = start(cli_env, "run", "--processes", "2", "--loop")
    wait_for(lambda: len([x for x in read_log(log) if x.startswith("start")]) == 2, 30, "starts")

    parent.send_signal(signal.SIGTERM)
    parent.communicate(timeout=30)

    assert parent.returncode == 128 + signal.SIGTERM
    assert sorted(read_log(log)) == ["done 0", "done 1", "start 0", "start 1"]
    assert [queue.show(job_id)["status"] for job_id in (1, 2)] == ["success", "success"]


def test_a_child_that_dies_is_replaced_and_the_work_goes_on(queue, cli_env, log):
    queue.add(F, "die", {"log": log}, now=time.time() - 1)
    queue.add_many(
        [JobSpec(P, "record_pid", {"log": log, "n": n}) for n in range(20)],
        now=time.time() + 3,  # due once the dead child's replacement is up
    )
    parent = start(cli_env, "run", "--processes", "2", "--loop", "--for", "8s", DELAYQ_LEASE="2")

    stdout, stderr = parent.communicate(timeout=60)

    assert parent.returncode == 0, stderr
    assert b"died (exit 9); starting another" in stderr
    recorded = [line.split() for line in read_log(log) if " " in line]
    assert Counter(int(n) for n, _ in recorded) == Counter(range(20))


def test_children_that_keep_dying_make_the_parent_give_up(queue, cli_env, log, monkeypatch):
    # A child that cannot even reach its database dies the same way every time.
    env = dict(cli_env, DELAYQ_REDIS_URL="redis://127.0.0.1:1/0")
    parent = start(env, "run", "--processes", "2", "--loop")

    stdout, stderr = parent.communicate(timeout=60)

    assert parent.returncode == 1
    assert b"runner processes keep dying" in stderr


@pytest.mark.parametrize("bad", ["0", "65", "-2"])
def test_a_process_count_out_of_range_exits_2(queue, cli_env, log, bad):
    job_id = queue.add(H, "record", {"log": log}, now=time.time())

    result = invoke(cli_env, "run", "--processes", bad)

    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["delayq: error: --processes must be between 1 and 64"]
    assert queue.show(job_id)["status"] == "pending"


def test_the_parent_passes_its_options_to_every_child(queue, cli_env, log):
    queue.add_many(
        [JobSpec(H, "slow", {"log": log, "n": n, "seconds": 0.3}) for n in range(8)],
        now=time.time() - 1,
    )

    completed = subprocess.run(
        [*DELAYQ, "run", "--processes", "2", "--concurrency", "4", "--limit", "3"],
        env=cli_env,
        capture_output=True,
        timeout=60,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr
    assert len([line for line in read_log(log) if line.startswith("start")]) == 6


def test_children_stop_when_the_parent_is_killed(queue, cli_env, log):
    queue.add_many(
        [JobSpec(P, "slow_pid", {"log": log, "n": n, "seconds": 1}) for n in range(2)],
        now=time.time() - 1,
    )
    parent = start(cli_env, "run", "--processes", "2", "--loop")
    wait_for(lambda: len([x for x in read_log(log) if x.startswith("start")]) == 2, 30, "starts")
    children = {int(line.split()[2]) for line in read_log(log)}

    parent.kill()
    parent.wait(10)

    wait_for(lambda: not any(alive(pid) for pid in children), 30, "the children to stop")
    # SIGTERM, not a crash: each finished the job it was running.
    assert sorted(line.split()[0] for line in read_log(log)) == ["done", "done", "start", "start"]
    assert [queue.show(job_id)["status"] for job_id in (1, 2)] == ["success", "success"]
