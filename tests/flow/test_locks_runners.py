"""Per-key locks under real runners: three `delayq run --loop` processes, two with a pool of
8, share 5 locks of 8 jobs each. Measured from the handlers' own start and end times, no two
jobs of a lock ever run at once and each lock's jobs start in due order, while jobs of
different locks run side by side; a lock held by a runner killed mid-job is free once its
lease lapses, and the job waiting on it runs."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import delayq
from delayq.store.table.model import Job, Status
from tests.faults.test_processes import start
from tests.flow.test_concurrency_runners import LEASE, most_at_once, spans
from tests.flow.test_pause_runners import passes_go_on, stop
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"
SWEEP = 5.0  # a looping runner's sweep settles a dead run's jobs this often


def test_jobs_of_a_lock_never_overlap_and_start_in_due_order(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    runners = [start(cli_env, "run", "--loop", "--concurrency", "8") for _ in range(2)]
    runners.append(start(cli_env, "run", "--loop"))
    now = time.time()
    due: dict[str, float] = {}
    for n in range(8):
        for key in range(5):
            name = f"k{key}-{n}"
            due[name] = now - 1 + n * 0.01 + key * 0.001
            data = {"log": log, "n": name, "seconds": 0.1}
            queue.add(H, "timed", data, queue="sms", at=due[name], lock=f"order:{key}")

    finished = lambda: sum(1 for runs in spans(log).values() if runs[-1][1] is not None)  # noqa: E731
    wait_for(lambda: finished() == len(due), 90, "every job to finish")

    found = spans(log)
    assert {n: len(runs) for n, runs in found.items()} == {n: 1 for n in due}  # once each
    for key in range(5):
        of_lock = {n: runs for n, runs in found.items() if n.startswith(f"k{key}-")}
        assert most_at_once(of_lock) == 1, f"lock order:{key} ran two jobs at once"
        started = sorted(of_lock, key=lambda n: of_lock[n][0][0])
        assert started == sorted(of_lock, key=lambda n: due[n]), f"order:{key} out of order"
    assert most_at_once(found) >= 2  # different locks ran side by side
    wait_for(lambda: Job.select().where(Job.status != Status.SUCCESS).count() == 0, 30, "records")
    for runner in runners:
        stop(runner)


def test_a_lock_held_by_a_killed_runner_is_free_once_its_lease_lapses(
    queue: delayq.Queue, cli_env: dict[str, str], log: str, tmp_path: Path
) -> None:
    env = {**cli_env, "DELAYQ_LEASE": str(LEASE)}
    doomed = start(env, "run", "--loop")
    gate = tmp_path / "gate"
    data = {"log": log, "n": "held", "gate": str(gate), "seconds": 60}
    queue.add(H, "gated", data, queue="sms", lock="order:1")
    wait_for(lambda: "start held" in read_log(log), 30, "the doomed runner to start its job")

    survivor = start(env, "run", "--loop")
    queue.add(H, "timed", {"log": log, "n": "next", "seconds": 0}, queue="sms", lock="order:1")
    passes_go_on(queue, log, "held")  # the survivor ran whole passes: the lock is held
    assert "next" not in spans(log)

    doomed.send_signal(signal.SIGKILL)
    killed_at = time.time()
    doomed.wait(10)
    gate.touch()  # the held job, recovered, ends at once when it runs again
    wait_for(lambda: "next" in spans(log), 30, "the waiting job to start")
    # The lease lapsed within LEASE of the kill; the survivor's next sweep took the dead
    # run's job back, which ran and handed the lock on.
    assert spans(log)["next"][0][0] - killed_at <= LEASE + SWEEP + 2.0
    wait_for(lambda: Job.select().where(Job.status != Status.SUCCESS).count() == 0, 30, "records")
    assert read_log(log).count("start held") == 2  # it ran again: its run died mid-call
    stop(survivor)


def test_add_takes_a_lock_and_refuses_a_bad_one(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    added = invoke(cli_env, "add", H, "record", "--lock", "order:7", "--json")
    assert added.exit_code == 0, added.output
    assert '"lock": "order:7"' in added.stdout
    for bad, message in (("", "lock is empty"), ("k" * 192, "lock is 192 characters")):
        refused = invoke(cli_env, "add", H, "record", "--lock", bad)
        assert refused.exit_code == 2 and refused.stdout == ""
        assert message in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert Job.select().count() == 1
