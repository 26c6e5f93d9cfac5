"""Many jobs in flight in one run (`--concurrency N`): handlers overlap, each job runs once, a
handler past its time limit is given up on without holding up the others, stuck threads
stop the run, and a stop signal lets calls in flight finish within the grace period.

Overlap is read from the handlers' own log (a "start" and a "done" line per call), never
from wall-clock time.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter

import pytest

import delayq
from delayq import JobSpec, Status
from delayq.errors import BadInput
from delayq.store.index.keys import schedule_key
from tests.conftest import DELAYQ
from tests.faults.test_processes import start, wait_for
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke

H = "tests.sample_handlers.jobs"
P = "tests.sample_handlers.procs"


def slow_jobs(
    queue: delayq.Queue, log: str, count: int, seconds: float, handlers: str = H, **kwargs
) -> list[int]:
    specs = [
        JobSpec(handlers, "slow", {"log": log, "n": n, "seconds": seconds}, **kwargs)
        for n in range(count)
    ]
    return queue.add_many(specs, now=time.time() - 1)


def most_at_once(log: str) -> int:
    """The most calls that were between their "start" and "done" lines at one moment."""
    running = most = 0
    for line in read_log(log):
        running += 1 if line.startswith("start") else -1
        most = max(most, running)
    return most


def statuses(queue: delayq.Queue) -> Counter[str]:
    model = queue.table.model
    return Counter(Status(status).word for (status,) in model.select(model.status).tuples())


def test_a_run_with_concurrency_overlaps_its_handlers_and_runs_each_job_once(queue, log):
    slow_jobs(queue, log, 12, 0.3)

    report = queue.run(concurrency=6)

    assert (report.succeeded, report.failed) == (12, 0)
    assert most_at_once(log) == 6
    starts = Counter(line for line in read_log(log) if line.startswith("start"))
    assert starts == Counter(f"start {n}" for n in range(12))
    assert statuses(queue) == Counter({"success": 12})
    assert queue.index.client.zcard(schedule_key("default")) == 0


def test_concurrency_one_calls_one_handler_at_a_time(queue, log):
    slow_jobs(queue, log, 4, 0.05)

    report = queue.run(concurrency=1)

    assert report.succeeded == 4
    assert most_at_once(log) == 1


def test_many_jobs_through_a_small_pool_keep_their_results_and_retries(queue, log):
    specs = [JobSpec(H, "record", {"log": log, "n": n}) for n in range(300)]
    specs += [JobSpec(H, "fail", {"log": log, "n": n}) for n in range(20)]
    queue.add_many(specs, now=time.time() - 1)

    report = queue.run(concurrency=8)

    assert (report.succeeded, report.failed, report.retried) == (300, 20, 20)
    assert Counter(read_log(log)) == Counter(
        [str(n) for n in range(300)] + [f"fail {n}" for n in range(20)]
    )
    assert statuses(queue) == Counter({"success": 300, "failed": 20, "pending": 20})


def test_a_limit_counts_the_jobs_started_across_the_pool(queue, log):
    slow_jobs(queue, log, 10, 0.05)

    report = queue.run(concurrency=4, limit=5)

    assert report.succeeded == 5
    assert len([line for line in read_log(log) if line.startswith("start")]) == 5
    assert statuses(queue) == Counter({"success": 5, "pending": 5})
    assert queue.index.client.zcard(schedule_key("default")) == 5


def test_a_handler_past_its_time_limit_is_given_up_on_and_its_thread_replaced(queue, log):
    [hung] = slow_jobs(queue, log, 1, 30, timeout=1)
    quick = queue.add_many(
        [JobSpec(H, "record", {"log": log, "n": n}) for n in range(6)], now=time.time()
    )

    report = queue.run(concurrency=2)

    assert (report.succeeded, report.failed, report.retried) == (6, 1, 1)
    assert report.stuck == 0
    assert [queue.show(job_id)["status"] for job_id in quick] == ["success"] * 6
    view = queue.show(hung)
    assert view["status"] == "failed"
    assert view["message"] == "JobTimeout: ran longer than its 1s time limit"
    assert [step["status"] for step in queue.history(hung)] == ["failed", "pending"]
    assert "done 0" not in read_log(log)  # the hung call is still asleep in its thread


def test_stuck_threads_stop_the_run_once_every_pool_thread_is_stuck(queue, log):
    hung = slow_jobs(queue, log, 2, 30, timeout=1)
    later = queue.add(H, "record", {"log": log, "n": "later"}, now=time.time())

    report = queue.run(concurrency=2)

    assert report.stuck == 2
    assert [queue.show(job_id)["status"] for job_id in hung] == ["failed", "failed"]
    # It ran on a fresh thread if one hung call was given up on before the other; if both
    # were given up on together, it was never started and waits for the next run.
    ran = "later" in read_log(log)
    assert queue.show(later)["status"] == ("success" if ran else "pending")
    assert (queue.index.client.zscore(schedule_key("default"), str(later)) is None) == ran


def test_stuck_threads_make_the_command_exit_1_with_one_line(queue, cli_env, log):
    slow_jobs(queue, log, 2, 30, timeout=1)

    result = invoke(cli_env, "run", "--concurrency", "2")

    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "delayq: error: 2 handler threads are stuck past their time limit; the run stopped "
        "so that a fresh process takes over"
    ]


@pytest.mark.parametrize("bad", [0, -1, 1001, True, 2.5, "4"])
def test_a_concurrency_out_of_range_is_refused_before_anything_runs(queue, log, bad):
    [job_id] = slow_jobs(queue, log, 1, 0)

    with pytest.raises(BadInput):
        queue.run(concurrency=bad)

    assert queue.show(job_id)["status"] == "pending"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "--concurrency must be between 1 and 1000"),
        (["--grace", "-1"], "--grace"),
        (["--concurrency", "many"], None),  # typer's own usage error
    ],
)
def test_bad_run_options_exit_2_and_run_nothing(queue, cli_env, log, args, message):
    [job_id] = slow_jobs(queue, log, 1, 0)

    result = invoke(cli_env, "run", *args)

    assert result.exit_code == 2
    if message is not None:
        [line] = result.stderr.splitlines()
        assert line.startswith("delayq: error: ") and message in line
    assert queue.show(job_id)["status"] == "pending"


def test_delayq_concurrency_in_the_environment_sets_the_default(queue, cli_env, log):
    slow_jobs(queue, log, 6, 0.3)

    result = invoke(dict(cli_env, DELAYQ_CONCURRENCY="3"), "run")

    assert result.exit_code == 0, result.stderr
    assert most_at_once(log) == 3


def started(log: str) -> int:
    return sum(1 for line in read_log(log) if line.startswith("start"))


# Plain handlers on pool threads, and async ones as tasks on the run's event loop.
SLOW_KINDS = pytest.mark.parametrize("handlers", [H, "tests.sample_handlers.aio"])


@SLOW_KINDS
def test_sigterm_lets_calls_in_flight_finish_and_hands_back_the_rest(queue, cli_env, log, handlers):
    ids = slow_jobs(queue, log, 8, 1.5, handlers)
    runner = start(cli_env, "run", "--concurrency", "3", "--grace", "20s")
    wait_for(lambda: started(log) == 3, 30, "three calls in flight")

    runner.send_signal(signal.SIGTERM)
    runner.communicate(timeout=30)

    assert runner.returncode == 128 + signal.SIGTERM
    lines = read_log(log)
    assert started(log) == 3 and len([x for x in lines if x.startswith("done")]) == 3
    views = [queue.show(job_id) for job_id in ids]
    assert Counter(view["status"] for view in views) == Counter({"success": 3, "pending": 5})
    model = queue.table.model
    assert {row.lost_leases for row in model.select()} == {0}
    assert queue.index.client.zcard(schedule_key("default")) == 5


@SLOW_KINDS
def test_calls_still_running_after_the_grace_period_are_handed_back(queue, cli_env, log, handlers):
    ids = slow_jobs(queue, log, 2, 30, handlers)
    runner = start(cli_env, "run", "--concurrency", "2", "--grace", "0.5s")
    wait_for(lambda: started(log) == 2, 30, "two calls in flight")

    runner.send_signal(signal.SIGTERM)
    runner.communicate(timeout=30)

    assert runner.returncode == 128 + signal.SIGTERM
    assert [queue.show(job_id)["status"] for job_id in ids] == ["pending", "pending"]
    assert queue.index.client.zcard(schedule_key("default")) == 2


@pytest.mark.slow
def test_two_concurrent_runs_with_large_pools_run_each_job_exactly_once(queue, cli_env, log):
    count = 400
    queue.add_many(
        [JobSpec(P, "record_pid", {"log": log, "n": n}) for n in range(count)],
        now=time.time() - 60,
    )

    runners = [
        start(cli_env, "run", "--concurrency", "8", DELAYQ_BATCH_SIZE="20") for _ in range(2)
    ]
    outputs = [runner.communicate(timeout=60) for runner in runners]

    assert [runner.returncode for runner in runners] == [0, 0], outputs
    lines = [line.split() for line in read_log(log)]
    assert Counter(int(n) for n, _ in lines) == Counter(range(count))
    assert statuses(queue) == Counter({"success": count})


def test_the_console_script_takes_concurrency(queue, cli_env, log):
    slow_jobs(queue, log, 4, 0.3)

    completed = subprocess.run(
        [*DELAYQ, "run", "-c", "4"], env=cli_env, capture_output=True, timeout=60, check=False
    )

    assert (completed.returncode, completed.stdout, completed.stderr) == (0, b"", b"")
    assert most_at_once(log) == 4


def test_a_run_killed_with_jobs_in_flight_charges_only_the_jobs_that_had_started(
    queue, cli_env, log
):
    now = time.time()
    quick = [queue.add(H, "record", {"log": log, "n": f"quick {n}"}, at=now - 30) for n in range(2)]
    hung = [
        queue.add(H, "slow", {"log": log, "n": n, "seconds": 60}, at=now - 20) for n in range(3)
    ]
    unstarted = [queue.add(H, "record", {"log": log, "n": n}, at=now - 10) for n in range(4)]
    runner = start(cli_env, "run", "--concurrency", "3", DELAYQ_LEASE="2")
    wait_for(lambda: started(log) == 3, 30, "three calls in flight")
    wait_for(lambda: read_log(log)[:2] == ["quick 0", "quick 1"] or len(read_log(log)) >= 5, 5, "")

    runner.kill()
    runner.wait(10)
    model = queue.table.model
    wait_for(
        lambda: model.select().where(model.lease_until >= time.time()).count() == 0,
        30,
        "the dead run's leases to lapse",
    )
    queue.run(max_seconds=0)  # recovery only: claims nothing

    rows = {row.id: row for row in model.select()}
    assert [rows[job_id].status for job_id in quick] == [Status.SUCCESS] * 2
    assert [rows[job_id].lost_leases for job_id in hung] == [1, 1, 1]
    assert [rows[job_id].lost_leases for job_id in unstarted] == [0, 0, 0, 0]
    assert {rows[job_id].status for job_id in hung + unstarted} == {Status.PENDING}
    assert sorted(read_log(log)) == ["quick 0", "quick 1", "start 0", "start 1", "start 2"]
    # Nothing of the dead run is left in the journal: no start notes, no start mark.
    assert queue.index.client.hgetall("{delay_queue_job}:journal") == {}


def test_a_job_in_flight_put_back_on_the_schedule_is_not_started_again(
    queue, cli_env, log, tmp_path
):
    gate = tmp_path / "gate"
    job_id = queue.add(H, "gated", {"log": log, "n": 0, "gate": str(gate)}, now=time.time() - 1)
    run = start(cli_env, "run", "--concurrency", "2")
    wait_for(lambda: read_log(log) == ["start 0"], 30, "the job to start")

    # What a rebuild after a FLUSHDB does when it read the row just before the run leased it.
    queue.index.schedule.add("default", job_id, time.time() - 1)
    key = schedule_key("default")
    wait_for(lambda: queue.index.client.zscore(key, job_id) is None, 30, "the run's claim")
    gate.touch()
    _, stderr = run.communicate(timeout=30)

    assert run.returncode == 0, stderr
    assert read_log(log) == ["start 0", "done 0"]
    assert queue.show(job_id)["status"] == "success"
