"""`delayq retry ID` as "retry now": a chain's pending attempt is moved to now (or --delay),
a finished chain gets one new attempt, and only a running attempt is refused. Concurrent
retries of one chain, from threads or processes, on both backends, leave one pending attempt.
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from delayq.errors import BadInput
from delayq.store.index.keys import DEFAULT_QUEUE_KEY
from delayq.store.table.model import Job, Status
from tests.conftest import DELAYQ
from tests.sample_handlers.jobs import read_log
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0
RETRIERS = 6


def chain_rows(job_id: int) -> list[tuple[int, int]]:
    root = Job.get_by_id(job_id).chain_id or job_id
    rows = Job.select().where((Job.id == root) | (Job.chain_id == root)).order_by(Job.id)
    return [(row.id, row.status) for row in rows]


def scheduled(queue) -> list[int]:
    return [int(member) for member in queue.index.client.zrange(DEFAULT_QUEUE_KEY, 0, -1)]


def failed_for_good(queue, log: str) -> int:
    job_id = queue.add(H, "fail_for_good", {"log": log, "n": 1}, now=NOW)
    queue.run(now=NOW)
    assert chain_rows(job_id) == [(job_id, Status.FAILED)]
    return job_id


def test_retry_with_a_delay_moves_a_pending_job_there_without_a_new_row(queue, log):
    job_id = queue.add(H, "record", {"log": log}, delay=60, now=NOW)

    assert queue.retry(job_id, delay=3600, now=NOW) == job_id

    assert chain_rows(job_id) == [(job_id, Status.PENDING)]
    assert queue.show(job_id)["run_at"] == pytest.approx(NOW + 3600)
    assert queue.run(now=NOW + 60).succeeded == 0  # not at its old time
    assert queue.run(now=NOW + 3599).succeeded == 0
    assert queue.run(now=NOW + 3600).succeeded == 1
    assert chain_rows(job_id) == [(job_id, Status.SUCCESS)]


def test_concurrent_retries_from_threads_leave_one_pending_attempt(make_queue, log):
    job_id = failed_for_good(make_queue(), log)
    queues = [make_queue() for _ in range(RETRIERS)]
    barrier = threading.Barrier(RETRIERS)
    results: list[int | BaseException] = []

    def retry(queue) -> None:
        barrier.wait()
        try:
            results.append(queue.retry(job_id, now=NOW + 1))
        except BaseException as exc:  # the test reports it below, not the thread
            results.append(exc)

    threads = [threading.Thread(target=retry, args=(queue,)) for queue in queues]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(set(results)) == 1, results
    (new_id,) = set(results)
    assert chain_rows(job_id) == [(job_id, Status.FAILED), (new_id, Status.PENDING)]
    assert scheduled(queues[0]) == [new_id]


def test_concurrent_retry_commands_print_the_same_attempt(queue, cli_env, log):
    job_id = failed_for_good(queue, log)

    retries = [
        subprocess.Popen(
            [*DELAYQ, "retry", str(job_id)],
            env=cli_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(RETRIERS)
    ]
    outputs = [retry.communicate(timeout=120) for retry in retries]

    assert [retry.returncode for retry in retries] == [0] * RETRIERS, outputs
    (printed,) = {out for out, _ in outputs}
    new_id = int(printed)
    assert chain_rows(job_id) == [(job_id, Status.FAILED), (new_id, Status.PENDING)]
    assert scheduled(queue) == [new_id]


def test_retry_of_a_running_job_is_refused_with_exit_2_and_changes_nothing(
    queue, cli_env, log, tmp_path
):
    gate = tmp_path / "gate"
    job_id = queue.add(H, "gated", {"log": log, "n": 1, "gate": str(gate)}, at=time.time() - 1)
    runner = subprocess.Popen([*DELAYQ, "run"], env=cli_env)
    try:
        wait_for(lambda: read_log(log) == ["start 1"], 30, "the job to start")

        refused = subprocess.run(
            [*DELAYQ, "retry", str(job_id)], env=cli_env, capture_output=True, text=True
        )
        with pytest.raises(BadInput, match="is running"):
            queue.retry(job_id)

        assert refused.returncode == 2
        assert refused.stdout == ""
        assert refused.stderr == (
            f"delayq: error: job {job_id} is running (attempt {job_id}); "
            "retry it once it has finished\n"
        )
        assert chain_rows(job_id) == [(job_id, Status.RUNNING)]
    finally:
        gate.touch()
        assert runner.wait(timeout=60) == 0
    assert chain_rows(job_id) == [(job_id, Status.SUCCESS)]
    assert scheduled(queue) == []
