"""A live job taken over: a run stalls past its lease (SIGSTOP here; a database that hangs or
a handler that starves the heartbeat do the same) while its handler runs, a second run takes
the job over and finishes it, and then the first run's handler finishes too. Its outcome
must be refused by the lease check and logged, never recorded as a second success."""

from __future__ import annotations

import signal
import subprocess

import pytest

from delayq import Status
from delayq.store.table.model import Job
from tests.conftest import DELAYQ
from tests.sample_handlers.jobs import read_log
from tests.support.waiting import wait_for

X = "tests.sample_handlers.hostile"
LEASE = "2"  # seconds: the least DELAYQ_LEASE allows
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("args", [[], ["--concurrency", "2"]], ids=["one-at-a-time", "pool"])
@pytest.mark.parametrize("every", [None, 3600], ids=["once", "recurring"])
def test_a_stalled_runs_late_outcome_is_refused_and_logged(
    queue, cli_env, log, tmp_path, args, every
):
    gate = tmp_path / "gate"
    job_id = queue.add(X, "first_call_waits", {"log": log, "gate": str(gate)}, every=every)
    env = {**cli_env, "DELAYQ_LEASE": LEASE}
    first = subprocess.Popen(
        [*DELAYQ, "run", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_for(lambda: read_log(log) == [f"start {first.pid}"], 30, "the first run's call")
        first.send_signal(signal.SIGSTOP)  # heartbeat and all: as a stalled process
        lease_until = Job.get_by_id(job_id).lease_until
        wait_for(
            lambda: queue.index.clock.now() > lease_until, 30, "the first run's lease to lapse"
        )

        second = subprocess.run([*DELAYQ, "run", *args], env=env, capture_output=True, timeout=60)
        assert second.returncode == 0, second.stderr
        taken = Job.get_by_id(job_id)
        assert (taken.status, taken.lost_leases) == (Status.SUCCESS, 1)
    finally:
        gate.touch()
        first.send_signal(signal.SIGCONT)
    _, stderr = first.communicate(timeout=60)

    assert first.returncode == 0
    assert f"job {job_id} finished but its lease had been taken over" in stderr.decode()
    row = Job.get_by_id(job_id)
    assert (row.status, row.message) == (Status.SUCCESS, f"ran in {second_pid(log, first.pid)}")
    assert Job.select().where(Job.chain_id == job_id).count() == 0  # no retry of the attempt
    series = Job.select().where(Job.id != job_id, Job.status == Status.PENDING).count()
    assert series == (0 if every is None else 1)  # one next occurrence, not one per finisher
    # Two calls, one per run; only the second run's is recorded.
    assert read_log(log) == [
        f"start {first.pid}",
        f"start {second_pid(log, first.pid)}",
        f"done {second_pid(log, first.pid)}",
        f"done {first.pid}",
    ]


def second_pid(log: str, first_pid: int) -> int:
    """The pid of the run that took the job over, from the handler's own log."""
    [pid] = {int(line.split()[1]) for line in read_log(log)} - {first_pid}
    return pid
