"""`delayq run --processes P`: P runner processes under one parent that forwards stop
signals, replaces a child that dies, and gives up when children keep dying."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter

import pytest

from delayq import JobSpec, Status
from delayq.store.table.database import sqlite_url
from delayq.store.table.model import Job
from delayq.worker import rebuilds
from delayq.worker.rebuilds import Rebuild
from tests.conftest import DELAYQ
from tests.faults.test_processes import start, wait_for
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke

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


def test_children_that_keep_dying_make_the_parent_give_up(cli_env, tmp_path):
    # Both servers answer the parent, but a child finds no delay_queue table (no `delayq
    # init`): it dies the same way every time.
    env = dict(cli_env, DELAYQ_DATABASE_URL=sqlite_url(tmp_path / "never-initialised.db"))
    parent = start(env, "run", "--processes", "2", "--loop")

    stdout, stderr = parent.communicate(timeout=60)

    assert parent.returncode == 1
    assert b"runner processes keep dying" in stderr
    assert b"the delay_queue table does not exist here" in stderr


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


def stuck_child_scenario(queue, cli_env, log, handler: str, *options: str):
    """One job whose first call freezes its runner, 20 others, two runner processes with a
    2 s lease and a 2 s grace; returns the frozen pid, the stuck job's id and the parent's
    stderr once the stuck job has run again and the parent was stopped."""
    stuck = queue.add(P, handler, {"log": log}, timeout=1, now=time.time() - 1)
    queue.add_many(
        [JobSpec(P, "record_pid", {"log": log, "n": n}) for n in range(20)],
        now=time.time() - 1,
    )
    parent = start(
        cli_env,
        *("run", "--processes", "2", "--loop", "--grace", "2", *options),
        DELAYQ_LEASE="2",
        DELAYQ_BATCH_SIZE="1",
    )
    try:
        wait_for(lambda: queue.show(stuck)["status"] == "success", 60, "the stuck job to rerun")
        wait_for(lambda: len([x for x in read_log(log) if " " in x]) >= 22, 30, "the others")
    finally:
        parent.send_signal(signal.SIGTERM)
        stderr = stop_or_kill(parent, log)
    assert parent.returncode == 128 + signal.SIGTERM, stderr
    frozen = [int(x.split()[1]) for x in read_log(log) if x.startswith("frozen")]
    assert len(frozen) == 1, read_log(log)
    return frozen[0], stuck, stderr


def stop_or_kill(parent: subprocess.Popen[bytes], log: str) -> bytes:
    """The parent's stderr once it has exited; if it does not (a frozen child that nothing
    kills keeps it waiting), kill it and the frozen child, so no test leaves them behind."""
    try:
        return parent.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        parent.kill()
        for line in read_log(log):
            if line.startswith("frozen") and alive(pid := int(line.split()[1])):
                os.kill(pid, signal.SIGKILL)
        raise


def assert_killed_once_and_charged_once(queue, log, frozen, stuck, stderr):
    killed = [line for line in stderr.splitlines() if b"made no progress" in line]
    assert len(killed) == 1, stderr
    assert f"runner process {frozen} made no progress for ".encode() in killed[0]
    assert b"died (exit" not in stderr, stderr.decode()  # the kill is reported once, above
    assert not alive(frozen)
    # Recovered as after any kill -9: the same row ran again, elsewhere, charged once.
    row = Job.get_by_id(stuck)
    assert (row.status, row.retry_times, row.lost_leases) == (Status.SUCCESS, 0, 1)
    assert Job.select().count() == 21
    # A job it had leased ahead and not started comes back uncharged.
    assert [job.id for job in Job.select().where(Job.lost_leases > 0)] == [stuck]
    done = [int(x.split()[1]) for x in read_log(log) if x.startswith("done")]
    assert len(done) == 1 and done[0] != frozen
    recorded = [line.split() for line in read_log(log) if line[0].isdigit()]
    assert Counter(int(n) for n, _ in recorded) == Counter(range(20))


def test_a_child_whose_job_cannot_be_stopped_is_killed_past_limit_and_grace(queue, cli_env, log):
    # Signals blocked, asleep in C: SIGALRM never reaches the handler, SIGTERM never stops it.
    frozen, stuck, stderr = stuck_child_scenario(queue, cli_env, log, "freeze_once")

    assert_killed_once_and_charged_once(queue, log, frozen, stuck, stderr)


def test_a_child_frozen_whole_is_killed_and_its_pool_s_jobs_recovered(queue, cli_env, log):
    # The GIL held in C: with --concurrency the main loop stops too, not only the pool's thread.
    frozen, stuck, stderr = stuck_child_scenario(
        queue, cli_env, log, "hog_once", "--concurrency", "2"
    )

    assert_killed_once_and_charged_once(queue, log, frozen, stuck, stderr)


def test_a_child_busy_within_its_jobs_time_limit_is_left_alone(queue, cli_env, log):
    # Silent for 5 s on the main thread, longer than the lease plus grace (3 s), but within
    # the job's own limit plus grace (9 s): the child promised that much as the job began.
    job_id = queue.add(
        P, "slow_pid", {"log": log, "n": 0, "seconds": 5}, timeout=8, now=time.time() - 1
    )
    parent = start(cli_env, "run", "--processes", "2", "--loop", "--grace", "1", DELAYQ_LEASE="2")
    try:
        wait_for(lambda: queue.show(job_id)["status"] == "success", 60, "the slow job")
    finally:
        parent.send_signal(signal.SIGTERM)
        stderr = stop_or_kill(parent, log)

    assert b"made no progress" not in stderr, stderr.decode()
    assert Job.get_by_id(job_id).lost_leases == 0
    assert [line.split()[0] for line in read_log(log)] == ["start", "done"]


def test_a_liveness_pipe_that_is_not_open_exits_2(queue, cli_env, log):
    job_id = queue.add(H, "record", {"log": log}, now=time.time())

    result = invoke(cli_env, "run", "--liveness-fd", "987")

    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "delayq: error: --liveness-fd 987: not an open pipe (Bad file descriptor)"
    ]
    assert queue.show(job_id)["status"] == "pending"


def test_a_rebuild_of_a_large_index_beats_before_each_batch(queue, log, monkeypatch):
    # Rebuilding after Redis lost its data can outlast a promise made before it began, so it
    # beats as it goes: a runner under --processes is not killed for that work.
    queue.add_many([JobSpec(H, "record", {"log": log}, delay=60) for _ in range(12000)])
    queue.index.client.flushdb()
    beats = []
    monkeypatch.setattr(rebuilds, "BATCH", 5000)

    added = Rebuild(queue.table, queue.index).rebuild_all(lambda: beats.append(1))

    assert (added, len(beats)) == (12000, 3)  # batches of 5000 rows
