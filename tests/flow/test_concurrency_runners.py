"""A concurrency limit under real runners: three `delayq run --loop` processes, two with a
pool of 8, share one queue's limit. Measured from the handlers' own start and end times, no
moment has more of its jobs running than the limit, and the limit is used; a runner killed
with its jobs running frees their slots when their leases lapse, not later; after Redis lost
everything, a job still running keeps its slot."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import delayq
from delayq.store.index.keys import slots_key
from delayq.store.table.model import Job, Status
from tests.faults.test_processes import start
from tests.flow.test_limit_runners import limit
from tests.flow.test_pause_runners import passes_go_on, stop
from tests.sample_handlers.jobs import read_log
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"
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
