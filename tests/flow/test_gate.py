"""The run-time gate (delayq/flow/gate.py) under real runners, where their claims and drains
meet a queue's pause: a `delayq run --loop` started before the pause starts none of the
queue's jobs while it is paused, hands back those it claimed and had not started (asking at
most every PAUSE_LOOK), keeps it paused after Redis lost everything, and runs each of them once
after the resume; a runner with many jobs in flight does the same.

A runner's passes after the pause are proven by jobs of another queue that it runs: two in
turn, so that at least one whole pass (every queue's turn) began after the pause. The runner
tests of the other parts share these helpers: proving passes, pausing, resuming, stopping."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import delayq
from delayq.flow.gate import PAUSE_LOOK
from delayq.store.table.model import Job, Status
from tests.faults.test_processes import start
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"


def add(queue: delayq.Queue, log: str, n: str, name: str = "sms", **data: object) -> int:
    method = "gated" if "gate" in data else "record"
    return queue.add(H, method, {"log": log, "n": n, **data}, queue=name, at=time.time() - 1)


def passes_go_on(queue: delayq.Queue, log: str, tag: str) -> None:
    """Wait until the runner has run two jobs of another queue, one after the other."""
    for step in ("a", "b"):
        add(queue, log, f"{tag}-{step}", name="email")
        wait_for(lambda s=step: f"{tag}-{s}" in read_log(log), 30, f"the runner to run {tag}")


def pause(cli_env: dict[str, str], *names: str) -> None:
    result = invoke(cli_env, "pause", *names)
    assert result.exit_code == 0, result.output


def resume(cli_env: dict[str, str], *names: str) -> None:
    result = invoke(cli_env, "resume", *names)
    assert result.exit_code == 0, result.output


def stop(runner: subprocess.Popen[bytes]) -> None:
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(30) == 128 + signal.SIGTERM  # stopped by the signal, as asked


def started_and_paused(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> subprocess.Popen[bytes]:
    """A `run --loop` that has run a job of queue sms, which is then paused."""
    runner = start(cli_env, "run", "--loop")
    add(queue, log, "warm")
    wait_for(lambda: "warm" in read_log(log), 30, "the runner to run a job")
    pause(cli_env, "sms")
    return runner


def ran_once_each(log: str, names: list[str]) -> bool:
    counts = Counter(read_log(log))
    return all(counts[name] == 1 for name in names)


def test_a_looping_runner_starts_no_job_of_a_paused_queue_and_each_once_after_resume(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    runner = started_and_paused(queue, cli_env, log)
    names = [f"sms-{n}" for n in range(5)]
    ids = [add(queue, log, name) for name in names]

    passes_go_on(queue, log, "while-paused")

    assert not set(names) & set(read_log(log))
    assert {Job.get_by_id(job_id).status for job_id in ids} == {Status.PENDING}
    resume(cli_env, "sms")
    wait_for(lambda: ran_once_each(log, names), 30, "the paused jobs to run")
    passes_go_on(queue, log, "after")
    assert Counter(read_log(log))["sms-0"] == 1 and ran_once_each(log, names)
    stop(runner)


def test_jobs_claimed_before_the_pause_and_not_started_are_handed_back(
    queue: delayq.Queue, cli_env: dict[str, str], log: str, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    first = add(queue, log, "first", gate=str(gate))
    names = [f"sms-{n}" for n in range(4)]
    ids = [add(queue, log, name) for name in names]  # due after the first, in its batch
    runner = start(cli_env, "run", "--loop")
    wait_for(lambda: "start first" in read_log(log), 30, "the first job to start")
    assert {Job.get_by_id(job_id).status for job_id in ids} == {Status.RUNNING}  # leased

    pause(cli_env, "sms")
    # The promise: a job claimed before the pause starts no later than PAUSE_LOOK after it
    # (a runner asks Redis that often, not before every job). Past that, none starts.
    time.sleep(PAUSE_LOOK)
    gate.touch()  # the running job finishes

    wait_for(lambda: Job.get_by_id(first).status == Status.SUCCESS, 30, "the first job to end")
    handed_back = lambda: {Job.get_by_id(job_id).status for job_id in ids} == {Status.PENDING}  # noqa: E731
    wait_for(handed_back, 30, "the jobs not started to be handed back")
    passes_go_on(queue, log, "while-paused")
    assert not set(names) & set(read_log(log))

    resume(cli_env, "sms")
    wait_for(lambda: ran_once_each(log, names), 30, "the handed-back jobs to run")
    assert Counter(read_log(log))["start first"] == 1
    stop(runner)


def test_a_pause_holds_when_redis_loses_everything_under_a_looping_runner(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    runner = started_and_paused(queue, cli_env, log)

    queue.index.client.flushdb()
    names = [f"sms-{n}" for n in range(3)]
    for name in names:
        add(queue, log, name)
    passes_go_on(queue, log, "after-flush")

    assert not set(names) & set(read_log(log))
    assert queue.index.flow.paused(["sms"]) == {"sms"}  # put back from the table
    resume(cli_env, "sms")
    wait_for(lambda: ran_once_each(log, names), 30, "the paused jobs to run")
    stop(runner)


def test_a_concurrent_runner_hands_back_and_resumes_the_same_way(
    queue: delayq.Queue, cli_env: dict[str, str], log: str, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    runner = start(cli_env, "run", "--loop", "--concurrency", "2")
    add(queue, log, "first", gate=str(gate))
    wait_for(lambda: "start first" in read_log(log), 30, "the first job to start")
    pause(cli_env, "sms")
    names = [f"sms-{n}" for n in range(4)]
    for name in names:
        add(queue, log, name)
    gate.touch()
    wait_for(lambda: "done first" in read_log(log), 30, "the running job to finish")
    passes_go_on(queue, log, "while-paused")
    assert not set(names) & set(read_log(log))
    resume(cli_env, "sms")
    wait_for(lambda: ran_once_each(log, names), 30, "the paused jobs to run")
    stop(runner)
