"""What lives as long as the runner and what lives for a pass: async handlers share one event
loop across passes; the heartbeat, bookkeeping and pool threads are started once; the
`on_shutdown` functions run when the runner ends. And what a runner says when stopped: at
`-c 3` a stop signal speaks of the jobs in flight, and a second one hands back what has not
finished; the `-v` summary of a loop names its wall and busy times."""

from __future__ import annotations

import logging
import re
import signal
import threading
import time

import pytest

from delayq import JobSpec, Status
from delayq.store.table.model import Job
from tests.faults.test_processes import delayq, start
from tests.sample_handlers import lifetime
from tests.sample_handlers.jobs import read_log
from tests.support.waiting import wait_for

L = "tests.sample_handlers.lifetime"
H = "tests.sample_handlers.jobs"
RUNNER_THREADS = ("delayq-heartbeat", "delayq-bookkeeper", "delayq-pool", "delayq-asyncio")


def runner_threads() -> dict[str, set[int]]:
    """{kind: idents} of the runner threads alive in this process."""
    alive: dict[str, set[int]] = {}
    for thread in threading.enumerate():
        kind = next((kind for kind in RUNNER_THREADS if thread.name.startswith(kind)), None)
        if kind is not None and thread.ident is not None:
            alive.setdefault(kind, set()).add(thread.ident)
    return alive


@pytest.mark.parametrize("concurrency", [1, 4])
def test_async_handlers_run_on_one_event_loop_across_passes(make_queue, log, concurrency):
    queue = make_queue()
    for _ in range(3):
        queue.add_many([JobSpec(L, "loop_id", {"log": log}) for _ in range(4)], now=time.time())
        assert queue.run(concurrency=concurrency).succeeded == 4

    loops = {line for line in read_log(log)}
    assert len(read_log(log)) == 12 and len(loops) == 1, loops


def test_the_runner_threads_are_started_once_and_end_with_the_queue(make_queue, log):
    before = runner_threads()  # other tests' queues, still open or ending
    queue = make_queue()
    seen: list[dict[str, set[int]]] = []
    for _ in range(3):
        queue.add_many([JobSpec(L, "loop_id", {"log": log}) for _ in range(6)], now=time.time())
        queue.add_many([JobSpec(H, "record", {"log": log}) for _ in range(6)], now=time.time())
        queue.run(concurrency=3, on_outcome=lambda outcome: seen.append(runner_threads()))
    ours = [
        {kind: idents - before.get(kind, set()) for kind, idents in alive.items()} for alive in seen
    ]

    for kind in RUNNER_THREADS:
        started = set().union(*(alive.get(kind, set()) for alive in ours))
        most = 3 if kind == "delayq-pool" else 1
        assert 1 <= len(started) <= most, (kind, started)  # the same ones, pass after pass
    queue.close()
    started = set().union(*(idents for alive in ours for idents in alive.values()))
    wait_for(
        lambda: not started & set().union(*runner_threads().values()), 10, "the threads to end"
    )


def test_on_shutdown_functions_run_on_the_handlers_loop_when_the_queue_closes(make_queue, log):
    queue = make_queue()
    queue.add(L, "loop_id", {"log": log}, now=time.time())
    queue.run()
    lifetime.armed["log"] = log
    try:
        queue.close()
    finally:
        lifetime.armed.clear()

    handler_loop, plain, shutdown = read_log(log)  # the last registered first
    assert plain == "plain shutdown"
    assert shutdown == "shutdown on loop " + handler_loop.removeprefix("loop ")


def test_a_failing_on_shutdown_function_is_logged_and_the_rest_still_run(make_queue, log, caplog):
    queue = make_queue()
    queue.add(L, "loop_id", {"log": log}, now=time.time())
    queue.run()
    lifetime.armed.update(log=log, raise_=True)
    try:
        with caplog.at_level(logging.ERROR, logger="delayq"):
            queue.close()
    finally:
        lifetime.armed.clear()

    assert read_log(log)[1:3] == ["plain shutdown", read_log(log)[2]]
    assert read_log(log)[2].startswith("shutdown on loop")
    failed = [r.getMessage() for r in caplog.records if "on_shutdown" in r.getMessage()]
    assert failed == ["on_shutdown function report_shutdown failed: RuntimeError: cleanup failed"]


def test_a_queue_that_ran_nothing_calls_no_on_shutdown_function(make_queue, log):
    queue = make_queue()
    lifetime.armed["log"] = log
    try:
        queue.close()
    finally:
        lifetime.armed.clear()

    assert read_log(log) == []


def gated_jobs(queue, log, gate, count: int) -> list[int]:
    data = [{"log": log, "n": n, "gate": str(gate), "seconds": 30} for n in range(count)]
    return queue.add_many([JobSpec(H, "gated", one) for one in data], now=time.time() - 1)


@pytest.mark.serial
def test_a_stop_at_c3_finishes_the_jobs_in_flight_and_says_so(queue, cli_env, log, tmp_path):
    gate = tmp_path / "gate"
    ids = gated_jobs(queue, log, gate, 3)
    runner = start(cli_env, "run", "-c", "3", "--log-file", str(run_log := tmp_path / "run.log"))
    wait_for(lambda: len(read_log(log)) == 3, 30, "the three jobs to start")

    runner.send_signal(signal.SIGINT)
    wait_for(lambda: "in flight" in run_log.read_text(), 10, "the stop to be logged")
    gate.touch()
    runner.communicate(timeout=30)

    assert runner.returncode == 128 + signal.SIGINT
    text = run_log.read_text()
    assert "received SIGINT: finishing the 3 jobs in flight within 25s" in text
    assert "handed back" not in text and "abandoned" not in text, text
    assert [queue.show(job_id)["status"] for job_id in ids] == ["success"] * 3


@pytest.mark.serial
def test_a_second_stop_at_c3_hands_back_what_has_not_finished(queue, cli_env, log, tmp_path):
    ids = gated_jobs(queue, log, tmp_path / "gate", 3)
    runner = start(cli_env, "run", "-c", "3", "--log-file", str(run_log := tmp_path / "run.log"))
    wait_for(lambda: len(read_log(log)) == 3, 30, "the three jobs to start")

    runner.send_signal(signal.SIGINT)
    wait_for(lambda: "in flight" in run_log.read_text(), 10, "the stop to be logged")
    signalled = time.monotonic()
    runner.send_signal(signal.SIGINT)
    runner.communicate(timeout=30)

    assert runner.returncode == 128 + signal.SIGINT
    assert time.monotonic() - signalled < 5  # at once, not after the 25 s grace
    assert "3 jobs that had not finished are back on the schedule" in run_log.read_text()
    rows = [Job.get_by_id(job_id) for job_id in ids]
    assert [(row.status, row.lease_token, row.lost_leases) for row in rows] == [
        (Status.PENDING, None, 0)
    ] * 3
    assert queue.index.schedule.size("default") == 3


def test_the_summary_of_a_loop_names_its_wall_and_busy_times(queue, cli_env, log):
    queue.add(H, "record", {"log": log, "n": 1}, now=time.time())

    done = delayq(cli_env, "run", "--loop", "--for", "2s", "-v")

    assert done.returncode == 0, done.stderr
    summary = done.stdout.decode().splitlines()[-1]
    times = re.search(r"; (\d+\.\d\d)s wall, (\d+\.\d\d)s busy$", summary)
    assert times is not None, summary
    wall, busy = map(float, times.groups())
    assert wall >= 2.0 and busy < wall, summary


def test_a_second_run_at_once_on_one_queue_leaves_on_shutdown_to_the_first(
    make_queue, log, tmp_path
):
    queue = make_queue()
    gate = tmp_path / "gate"
    queue.add(H, "gated", {"log": log, "n": "first", "gate": str(gate)}, now=time.time())
    first = threading.Thread(target=queue.run)
    first.start()
    wait_for(lambda: read_log(log) == ["start first"], 30, "the first run's job to start")
    lifetime.armed["log"] = log
    try:
        queue.add(L, "loop_id", {"log": log}, now=time.time(), queue="other")
        assert queue.run(queues=["other"]).succeeded == 1  # on a runner of its own meanwhile
        second_ran = read_log(log)
        gate.touch()
        first.join(30)
        queue.close()
    finally:
        lifetime.armed.clear()

    assert second_ran[0] == "start first" and second_ran[1].startswith("loop ")
    assert len(second_ran) == 2  # its own runner ended without the on_shutdown functions
    assert read_log(log)[-2:] == ["plain shutdown", read_log(log)[-1]]
    assert read_log(log)[-1].startswith("shutdown on loop")  # once, by the queue's runner
