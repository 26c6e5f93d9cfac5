"""A queue's concurrency limit through every surface:

- the API, on both backends: the limit is kept in the table; a job running elsewhere holds its
  slot, counted when the limit is set and again after Redis lost everything, until its lease
  lapses; jobs held back stay pending, in due order.
- the command line: the limit reads in every look (`limit`, `status`, `peek`, the metrics),
  and `--clear` lifts it with the rate.
- real runners: three `delayq run --loop` processes, two with a pool of 8, share one queue's
  limit. Measured from the handlers' own start and end times, no moment has more of its jobs
  running than the limit, and the limit is used; a runner killed with its jobs running frees
  their slots when their leases lapse, not later; after Redis lost everything, a job still
  running keeps its slot.

How a limit is written, and a bad one refused, is test_limits.py's."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import delayq
from delayq.store.index.keys import slots_key
from delayq.store.table.leases import Leases
from delayq.store.table.model import Job, Status
from tests.faults.test_processes import start
from tests.flow.test_gate import passes_go_on, stop
from tests.flow.test_rate_limits import add, limit, limit_says
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0
DEFAULT_LEASE = 60.0  # the suite's runs keep the default lease


def add_many(queue: delayq.Queue, log: str, count: int) -> list[int]:
    return [
        queue.add(H, "record", {"log": log, "n": f"x-{n}"}, at=NOW - 10 + n, queue="x", now=NOW)
        for n in range(count)
    ]


def run_elsewhere(queue: delayq.Queue, job_id: int) -> None:
    """Job `job_id` is running in another run, whose lease lasts until NOW + DEFAULT_LEASE."""
    assert Leases(queue.table).mark_running([job_id], "elsewhere", NOW + DEFAULT_LEASE, NOW)
    queue.index.schedule.remove("x", [job_id])


def test_a_limit_is_kept_read_back_and_lifted_alone(queue: delayq.Queue, log: str) -> None:
    add_many(queue, log, 1)
    assert queue.limit("x", concurrency=4, now=NOW)["x"].concurrency == 4
    assert queue.limit("x", rate="5/s", now=NOW)["x"][3:] == (5, 1.0, 4)  # the other stays
    assert queue.limited()["x"].concurrency == 4
    assert queue.index.flow.read(["x"])["x"].concurrency == 4  # type: ignore[union-attr]
    lifted = queue.limit("x", concurrency=None, now=NOW)["x"]
    assert (lifted.rate, lifted.concurrency) == ((5, 1.0), None)
    assert queue.limit("x", rate=None, now=NOW)["x"].limited is False
    assert queue.limited() == {}


def test_a_job_running_elsewhere_holds_its_slot_when_the_limit_is_set(
    queue: delayq.Queue, log: str
) -> None:
    ids = add_many(queue, log, 3)
    run_elsewhere(queue, ids[0])
    queue.limit("x", concurrency=1, now=NOW)

    queue.run(now=NOW)
    assert read_log(log) == []  # the one slot is the running job's
    assert [Job.get_by_id(job_id).status for job_id in ids[1:]] == [Status.PENDING] * 2

    Leases(queue.table).finish(ids[0], "elsewhere", Status.SUCCESS, "done", NOW + 1)
    queue.index.free_slots("x", [ids[0]])  # as the other run does when its job ends
    queue.run(now=NOW + 1)
    assert read_log(log) == ["x-1", "x-2"]  # in due order, one at a time


def test_running_slots_come_back_from_the_table_after_redis_lost_everything(
    queue: delayq.Queue, log: str
) -> None:
    ids = add_many(queue, log, 3)
    queue.limit("x", concurrency=1, now=NOW)
    run_elsewhere(queue, ids[0])
    queue.index.flow.hold_slots("x", [(ids[0], NOW + DEFAULT_LEASE)])
    queue.index.client.flushdb()

    queue.run(now=NOW)  # rebuilds the schedule, puts the limit and its slot back: runs none
    assert read_log(log) == []
    assert queue.index.client.zscore(slots_key("x"), str(ids[0])) == NOW + DEFAULT_LEASE

    # Its run died: once its lease lapsed, the slot is free and the job itself comes back.
    queue.run(now=NOW + DEFAULT_LEASE + 1)
    assert sorted(read_log(log)) == ["x-0", "x-1", "x-2"]
    assert [Job.get_by_id(job_id).status for job_id in ids] == [Status.SUCCESS] * 3


# The command line.


def test_a_concurrency_limit_reads_in_every_look_and_clear_lifts_both(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    add(queue, log)
    assert limit_says(cli_env, "sms", "--concurrency", "4") == (
        "sms: at most 4 jobs running at once across all runners; due jobs beyond that wait in "
        "order (`delayq limit sms --clear` lifts it)\n"
    )
    both = invoke(cli_env, "limit", "sms", "--rate", "10/s")  # the concurrency stays
    assert both.stdout.startswith(
        "sms: at most 10 job starts a second (10/s) and at most 4 jobs running at once"
    )
    assert both.stdout.endswith("(`delayq limit sms --clear` lifts them)\n")

    status = invoke(cli_env, "status")
    assert "sms (10/s) (4 at once)" in status.stdout
    assert "sms: at most 10 job starts a second (10/s) and at most 4 jobs running" in status.stdout
    reported = json.loads(invoke(cli_env, "status", "--json").stdout)["queues"]["sms"]
    assert (reported["rate"], reported["concurrency"]) == ("10/s", 4)
    assert "(queue limited to 4 at once)" in invoke(cli_env, "peek").stdout
    assert json.loads(invoke(cli_env, "peek", "--json").stdout)["jobs"][0]["concurrency"] == 4
    metrics = invoke(cli_env, "metrics").stdout
    limits = {
        sample.labels["queue"]: sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "delayq_queue_concurrency_limit"
    }
    assert limits == {"sms": 4.0}

    assert invoke(cli_env, "limit", "sms", "--clear").exit_code == 0
    assert queue.limited() == {}
    reported = json.loads(invoke(cli_env, "status", "--json").stdout)["queues"]["sms"]
    assert (reported["rate"], reported["concurrency"]) == (None, None)


# Real runners.


LEASE = 3.0  # seconds; the kill test's runners renew it every second


def add_timed(queue: delayq.Queue, log: str, tag: str, count: int, seconds: float) -> list[str]:
    due = time.time()
    for n in range(count):
        data = {"log": log, "n": f"{tag}{n}", "seconds": seconds}
        queue.add(H, "timed", data, queue="sms", at=due)
    return [f"{tag}{n}" for n in range(count)]


def spans(log: str) -> dict[str, list[tuple[float, float | None]]]:
    """{n: its (start, end or None) spans}, from the timed handlers' "start/done <n> <host>
    <time>" (a gated job's lines, which give no time, are left out)."""
    found: dict[str, list[tuple[float, float | None]]] = {}
    for line in read_log(log):
        word, n, _, at = (line.split() + ["", "", "", ""])[:4]
        if not at:
            continue
        if word == "start":
            found.setdefault(n, []).append((float(at), None))
        elif word == "done":
            begun, _ = found[n][-1]
            found[n][-1] = (begun, float(at))
    return found


def most_at_once(found: dict[str, list[tuple[float, float | None]]]) -> int:
    """The most spans that overlap at any moment (an unfinished one runs on)."""
    edges = []
    for runs in found.values():
        for begun, ended in runs:
            edges += [(begun, 1), (float("inf") if ended is None else ended, -1)]
    running = most = 0
    for _, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):  # an end before a start
        running += step
        most = max(most, running)
    return most


def test_runners_never_run_more_than_the_limit_at_once(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    limit(cli_env, "--concurrency", "2", "--new")
    runners = [start(cli_env, "run", "--loop", "--concurrency", "8") for _ in range(2)]
    runners.append(start(cli_env, "run", "--loop"))
    names = add_timed(queue, log, "c", 30, 0.2)

    done = lambda: sum(1 for runs in spans(log).values() if runs[-1][1] is not None)  # noqa: E731
    wait_for(lambda: done() == len(names), 60, "every job to finish")

    found = spans(log)
    assert {n: len(runs) for n, runs in found.items()} == {n: 1 for n in names}  # once each
    assert most_at_once(found) == 2  # never more than the limit, and the limit is used
    wait_for(lambda: Job.select().where(Job.status != Status.SUCCESS).count() == 0, 30, "records")
    for runner in runners:
        stop(runner)


def slot_lapse(queue: delayq.Queue, member: str) -> float:
    """When the running slot of job `member` lapses, as Redis holds it (0: none held)."""
    return queue.index.client.zscore(slots_key("sms"), member) or 0.0


def test_a_killed_runners_slot_is_free_when_its_lease_lapses(
    queue: delayq.Queue, cli_env: dict[str, str], log: str, tmp_path: Path
) -> None:
    limit(cli_env, "--concurrency", "1", "--new")
    env = {**cli_env, "DELAYQ_LEASE": str(LEASE)}
    doomed = start(env, "run", "--loop")
    gate = tmp_path / "gate"
    data = {"log": log, "n": "held", "gate": str(gate), "seconds": 60}
    held_id = str(queue.add(H, "gated", data, queue="sms"))
    wait_for(lambda: "start held" in read_log(log), 30, "the doomed runner to start its job")

    survivor = start(env, "run", "--loop")
    add_timed(queue, log, "after", 1, 0)
    first_lapse = slot_lapse(queue, held_id)
    # The heartbeat renewed the slot with the lease, past the first lease's end...
    wait_for(lambda: slot_lapse(queue, held_id) > first_lapse + LEASE, 30, "a renewed slot")
    passes_go_on(queue, log, "held")  # ...and the survivor ran whole passes: the slot is held
    assert "after0" not in spans(log)

    doomed.send_signal(signal.SIGKILL)
    killed_at = time.time()
    doomed.wait(10)
    gate.touch()  # the held job, recovered, ends at once when it runs again
    wait_for(lambda: "after0" in spans(log), 30, "the waiting job to start")
    started = spans(log)["after0"][0][0]
    # Its lease was renewed at most a third of a lease before the kill: the slot lapsed
    # within a lease of it, and the sleeping survivor woke for it.
    assert started - killed_at <= LEASE + 1.5
    wait_for(lambda: Job.select().where(Job.status != Status.SUCCESS).count() == 0, 30, "records")
    stop(survivor)


def test_a_running_job_keeps_its_slot_after_redis_lost_everything(
    queue: delayq.Queue, cli_env: dict[str, str], log: str, tmp_path: Path
) -> None:
    limit(cli_env, "--concurrency", "1", "--new")
    holder = start(cli_env, "run", "--loop")
    gate = tmp_path / "gate"
    queue.add(H, "gated", {"log": log, "n": "held", "gate": str(gate)}, queue="sms")
    wait_for(lambda: "start held" in read_log(log), 30, "the runner to start its job")

    runner = start(cli_env, "run", "--loop", "--concurrency", "4")
    queue.index.client.flushdb()
    names = add_timed(queue, log, "later", 3, 0.05)
    passes_go_on(queue, log, "flushed")  # whole passes went by, the schedule rebuilt
    assert not any(name in spans(log) for name in names)

    opened_at = time.time()
    gate.touch()
    wait_for(lambda: all(name in spans(log) for name in names), 30, "the rest to start")
    found = spans(log)
    assert most_at_once({n: runs for n, runs in found.items() if n in names}) == 1
    assert all(found[name][0][0] >= opened_at for name in names)  # after the held job's end
    stop(runner)
    stop(holder)
