"""A backlog: once a batch comes back full, the next one is leased on the bookkeeping thread
while this one runs, and group commits are written there too. Small batches make every
test here go through that path; each checks rows, the index and the journal afterwards."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from delayq import Status
from delayq.store.index.keys import queue_key
from delayq.store.table.model import Job
from tests.faults.test_faults import run_cli, start_run, wait_for_leases_to_lapse, wait_for_line
from tests.sample_handlers.jobs import read_log
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0


def statuses() -> Counter[str]:
    return Counter(Status(status).word for (status,) in Job.select(Job.status).tuples())


def journal_fields(queue) -> list[bytes]:
    return queue.index.client.hkeys(queue_key("default", "journal"))


def leased(ids: list[int]) -> int:
    """How many of these jobs are RUNNING: leased by a run."""
    return Job.select().where(Job.id.in_(ids), Job.status == Status.RUNNING).count()


def test_a_backlog_runs_each_job_once_in_due_order(make_queue, log):
    queue = make_queue(batch_size=3)
    for n in range(10):
        queue.add(H, "record", {"log": log, "n": n}, at=NOW - 10 + n, now=NOW)

    report = queue.run(now=NOW)

    assert read_log(log) == [str(n) for n in range(10)]
    assert (report.succeeded, report.claimed) == (10, 10)
    assert statuses() == {"success": 10}
    assert queue.index.schedule.size("default") == 0
    assert journal_fields(queue) == []  # outcomes settled, batch order forgotten


def test_failures_in_a_backlog_get_their_retries_indexed(make_queue, log):
    queue = make_queue(batch_size=2)
    ids = [queue.add(H, "fail", {"log": log, "n": n}, now=NOW) for n in range(5)]

    report = queue.run(now=NOW)

    assert (report.failed, report.retried) == (5, 5)
    assert statuses() == {"failed": 5, "pending": 5}
    assert queue.index.schedule.size("default") == 5
    for job_id in ids:
        assert [step["status"] for step in queue.history(job_id)] == ["failed", "pending"]


def test_limit_counts_the_batch_leased_ahead(make_queue, log):
    queue = make_queue(batch_size=3)
    for n in range(10):
        queue.add(H, "record", {"log": log, "n": n}, at=NOW - 10 + n, now=NOW)

    report = queue.run(now=NOW, limit=5)

    assert report.succeeded == 5
    assert read_log(log) == ["0", "1", "2", "3", "4"]
    assert statuses() == {"success": 5, "pending": 5}
    assert queue.index.schedule.size("default") == 5


def test_max_seconds_hands_back_the_batch_leased_ahead(make_queue, log):
    queue = make_queue(batch_size=2)
    budget = 1.0  # job 0 starts well within it and, lasting all of it, is the only one run
    for n in range(6):
        queue.add(H, "slow", {"log": log, "n": n, "seconds": budget}, at=NOW - 10 + n, now=NOW)

    report = queue.run(now=NOW, max_seconds=budget)

    assert report.stopped_early
    assert read_log(log) == ["start 0", "done 0"]
    assert statuses() == {"success": 1, "pending": 5}  # none left running under a lease
    assert queue.index.schedule.size("default") == 5


@pytest.mark.slow
def test_kill_in_a_backlog_reruns_only_the_running_job_and_charges_only_it(queue, cli_env, log):
    now = time.time()
    for n in range(8):
        queue.add(H, "record", {"log": log, "n": n}, at=now - 10 + n * 0.01)
    slow = queue.add(H, "slow", {"log": log, "n": "slow", "seconds": 30}, at=now - 9)
    behind = [  # behind the slow job: some leased ahead, none started
        queue.add(H, "record", {"log": log, "n": n}, at=now - 8 + n * 0.01) for n in range(8, 16)
    ]
    run = start_run(cli_env, DELAYQ_LEASE="2", DELAYQ_BATCH_SIZE="3")
    wait_for_line(log, "start slow")
    wait_for(lambda: leased(behind) > 0, 15, "the bookkeeping thread to lease the next batch")
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert queue.show(slow)["status"] == "running"
    assert leased(behind) == 3  # the batch leased ahead, all still held by the dead run

    wait_for_leases_to_lapse(queue)
    finish = run_cli(cli_env, "run", DELAYQ_LEASE="2", DELAYQ_TIMEOUT="0.5")
    assert finish.returncode == 0, finish.stderr

    counts = Counter(read_log(log))
    assert all(counts[str(n)] == 1 for n in range(16)), counts
    assert counts["start slow"] == 2
    lost = dict(Job.select(Job.id, Job.lost_leases).tuples())
    assert lost[slow] == 1
    assert sum(lost.values()) == 1  # the jobs leased ahead never ran and are not charged


@pytest.mark.slow
def test_sigterm_in_a_backlog_hands_back_the_batch_leased_ahead(queue, cli_env, log, tmp_path):
    now = time.time()
    gate = tmp_path / "gate"
    queue.add(H, "gated", {"log": log, "n": "current", "gate": str(gate)}, at=now - 10)
    records = [
        queue.add(H, "record", {"log": log, "n": n}, at=now - 9 + n * 0.01) for n in range(7)
    ]
    run = start_run(cli_env, DELAYQ_BATCH_SIZE="2")
    wait_for_line(log, "start current")
    # The first batch is the current job and record 0; the next one is leased ahead.
    wait_for(lambda: leased(records[1:]) > 0, 15, "the bookkeeping thread to lease the next batch")
    run.send_signal(signal.SIGTERM)
    gate.touch()  # the signal is pending before the job can end: it lands during the job

    assert run.wait(timeout=15) == 128 + signal.SIGTERM
    assert read_log(log)[:2] == ["start current", "done current"]
    ran = len(read_log(log)) - 2
    assert statuses() == {"success": 1 + ran, "pending": 7 - ran}
    assert queue.index.schedule.size("default") == 7 - ran  # back at once, not after the lease
    assert run_cli(cli_env, "run").returncode == 0
    assert statuses() == {"success": 8}
