"""A job whose lease lapsed while its run still called it (a stalled database, a paused
process) and that another run's recovery put back on the schedule: when the same run claims
it again, the call in hand settles it; it is not called a second time, and the run goes on."""

from __future__ import annotations

import signal
import time

from delayq import Status
from delayq.store.table.model import Job
from tests.faults.test_processes import start, zset
from tests.sample_handlers.jobs import read_log
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"


def test_a_job_back_on_the_schedule_while_its_call_runs_is_not_called_again(
    queue, cli_env, log, tmp_path
):
    gate = tmp_path / "gate"
    job_id = queue.add(H, "gated", {"log": log, "n": 0, "gate": str(gate)}, now=time.time() - 1)
    other = queue.add(H, "record", {"log": log, "n": 1}, delay=3600)
    runner = start(cli_env, "run", "--loop", "--for", "60s", "--concurrency", "2")
    wait_for(lambda: read_log(log) == ["start 0"], 20, "the job to start")

    # What another run's recovery does once the lease has lapsed: pending, on the schedule.
    Job.update(status=Status.PENDING, lease_token=None, lease_until=None).where(
        Job.id == job_id
    ).execute()
    queue.index.schedule.add("default", job_id, time.time() - 1)
    wait_for(
        lambda: job_id not in zset(queue) and Job.get_by_id(job_id).status == Status.RUNNING,
        20,
        "the run to claim the job again",
    )
    gate.touch()
    wait_for(lambda: Job.get_by_id(job_id).status == Status.SUCCESS, 20, "the call to finish")
    queue.retry(other)  # the run is still serving its queue
    wait_for(lambda: "1" in read_log(log), 20, "a later job to run")
    runner.send_signal(signal.SIGTERM)
    runner.communicate(timeout=30)

    assert read_log(log) == ["start 0", "done 0", "1"]
    assert runner.returncode == 128 + signal.SIGTERM
    assert Job.get_by_id(job_id).message == "opened"
