"""Per-key locks (delayq/flow/locking.py) through every surface:

- the API, on both backends: jobs that share a lock never run while another holds it, and run
  in due order as it is handed on; a lock held by a run whose lease lapsed is taken over; the
  lock travels with retries and recurring occurrences and composes with replace=; a bad lock
  writes nothing (check_lock).
- real runners: three `delayq run --loop` processes, two with a pool of 8, share 5 locks of 8
  jobs each. Measured from the handlers' own start and end times, no two jobs of a lock ever
  run at once and each lock's jobs start in due order, while jobs of different locks run side
  by side; a lock held by a runner killed mid-job is free once its lease lapses, and the job
  waiting on it runs.
- the command line: `add --lock` takes a lock and refuses a bad one."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

import delayq
from delayq.errors import BadInput
from delayq.flow.locking import let_go, lock_of
from delayq.store.index.lock_waits import PARKED_FOR
from delayq.store.table import locks
from delayq.store.table.leases import Leases
from delayq.store.table.locks import Locks
from delayq.store.table.model import Job, Status
from tests.faults.test_processes import start
from tests.flow.test_concurrency_limits import LEASE, most_at_once, spans
from tests.flow.test_gate import passes_go_on, stop
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0


def add(queue: delayq.Queue, log: str, name: str, due: float, lock: str | None = "order:42") -> int:
    data = {"log": log, "n": name}
    return queue.add(H, "record", data, at=due, lock=lock, queue="orders", now=NOW - 100)


def hold_elsewhere(queue: delayq.Queue, job_id: int, lease_until: float = NOW + 60) -> None:
    """Job `job_id` runs in another run and holds its lock, until `lease_until`."""
    assert Leases(queue.table).mark_running([job_id], "elsewhere", lease_until, NOW)
    queue.index.schedule.remove("orders", [job_id])
    assert Locks(queue.table).take("order:42", job_id, NOW)


def test_jobs_wait_for_a_held_lock_and_run_in_due_order_as_it_is_handed_on(
    queue: delayq.Queue, log: str
) -> None:
    holder = add(queue, log, "holder", NOW - 30)
    later = add(queue, log, "later", NOW - 10)
    sooner = add(queue, log, "sooner", NOW - 20)
    add(queue, log, "free", NOW - 5, lock="order:43")
    hold_elsewhere(queue, holder)

    queue.run(now=NOW)
    assert read_log(log) == ["free"]  # another lock's job runs; these two wait
    assert [Job.get_by_id(job_id).status for job_id in (sooner, later)] == [Status.PENDING] * 2
    waiting = queue.index.lock_waits.waiting("order:42")
    assert [(waiter.job_id, waiter.due) for waiter in waiting] == [
        (sooner, NOW - 20),
        (later, NOW - 10),
    ]
    assert queue.index.schedule.scores("orders", [sooner, later]) == {
        sooner: NOW + PARKED_FOR,
        later: NOW + PARKED_FOR,
    }

    # The other run's job ends: it hands the lock to the earliest waiting job.
    job = queue.table.model.get_by_id(holder)
    Leases(queue.table).finish(holder, "elsewhere", Status.SUCCESS, "done", NOW + 1)
    let_go(queue.table, queue.index, [claimed(queue, job)], NOW + 1)
    assert Locks(queue.table).held() == [("order:42", sooner, NOW + 1 + locks.RESERVED_FOR)]
    queue.run(now=NOW + 2)
    assert read_log(log) == ["free", "sooner", "later"]
    assert Locks(queue.table).held() == []
    assert Job.select().where(Job.status != Status.SUCCESS).count() == 0


def claimed(queue: delayq.Queue, job: Job) -> object:
    from delayq.store.table.model import ClaimedJob

    return ClaimedJob(*[getattr(job, name) for name in ClaimedJob._fields])


def test_a_lock_whose_holders_lease_lapsed_is_taken_over(queue: delayq.Queue, log: str) -> None:
    holder = add(queue, log, "holder", NOW - 30)
    waiter = add(queue, log, "waiter", NOW - 10)
    hold_elsewhere(queue, holder, lease_until=NOW + 5)
    queue.run(now=NOW)
    assert read_log(log) == []

    # The holder's run died: past its lease, its job comes back and runs first, then hands on.
    queue.run(now=NOW + 6)
    assert read_log(log) == ["holder", "waiter"]
    assert Job.get_by_id(waiter).status == Status.SUCCESS
    assert Locks(queue.table).held() == []


def test_the_lock_travels_with_the_job_its_retries_and_its_occurrences(
    queue: delayq.Queue, log: str
) -> None:
    job_id = queue.add(H, "record", {"log": log}, lock="report", every="1h", now=NOW, at=NOW - 1)
    assert queue.show(job_id)["lock"] == "report"
    queue.run(now=NOW)
    occurrence = Job.get((Job.id != job_id) & (Job.status == Status.PENDING))
    assert lock_of(claimed(queue, occurrence)) == "report"  # type: ignore[arg-type]
    assert queue.show(job_id)["lock"] == "report"


def test_a_lock_composes_with_replace(queue: delayq.Queue, log: str) -> None:
    first = queue.add(H, "record", {"log": log}, ext="order:42", lock="order:42", replace=True)
    second = queue.add(H, "record", {"log": log}, ext="order:42", lock="order:42", replace=True)
    assert first == second
    pending = Job.select().where(Job.status == Status.PENDING)
    assert [(job.id, lock_of(claimed(queue, job))) for job in pending] == [(first, "order:42")]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "lock, message",
    [
        ("", "lock is empty"),
        ("k" * 192, "lock is 192 characters; the limit is 191"),
        ("\ud800", "lock is not valid UTF-8"),
        (42, "lock must be text"),
    ],
)
def test_a_bad_lock_is_refused_and_writes_nothing(
    queue: delayq.Queue, log: str, lock: object, message: str
) -> None:
    with pytest.raises(BadInput, match=message):
        queue.add(H, "record", {"log": log}, lock=lock)  # type: ignore[arg-type]
    assert Job.select().count() == 0
    assert queue.add(H, "record", {"log": log}, lock="k" * 191) > 0  # the longest there is


def test_a_lock_handed_to_a_waiting_job_stays_its_own_when_an_earlier_one_comes(
    queue: delayq.Queue, log: str
) -> None:
    holder = add(queue, log, "holder", NOW - 30)
    add(queue, log, "handed", NOW - 10)
    hold_elsewhere(queue, holder)
    queue.run(now=NOW)
    job = queue.table.model.get_by_id(holder)
    Leases(queue.table).finish(holder, "elsewhere", Status.SUCCESS, "done", NOW + 1)
    let_go(queue.table, queue.index, [claimed(queue, job)], NOW + 1)  # reserved for `handed`
    add(queue, log, "earlier", NOW - 20)  # due before it, and claimed with it

    queue.run(now=NOW + 2)
    assert read_log(log) == ["handed", "earlier"]  # the reservation holds; nothing is stuck
    assert Locks(queue.table).held() == []


# Real runners.


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
