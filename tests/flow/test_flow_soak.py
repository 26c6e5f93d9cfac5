"""Flow control under load: four queues at once, one paused and resumed twice, one at a rate
of 20/s, one at a concurrency of 2, one whose jobs share 50 locks; three `delayq run --loop
-c 8` runners (one of them `-p 2`), one killed with SIGKILL mid-soak. Measured from the
handlers' own start and end times: every job runs, none before it is due, none twice but
those the killed runner was calling; no start while its queue is paused; the rate is never
exceeded in any window of a second, the concurrency and the locks never at any moment (a
call the kill cut short counts as running until the kill)."""

from __future__ import annotations

import signal
import time
from collections import defaultdict

import delayq
from delayq.store.table.model import Job, Status
from tests.faults.test_processes import start
from tests.flow.test_concurrency_limits import most_at_once
from tests.flow.test_gate import pause, resume, stop
from tests.flow.test_rate_limits import most_in_any_second
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"
RATE = 20
LOCKS = 50
SPREAD = 8.0  # seconds over which the jobs fall due
PAUSE_SLACK = 1.0  # a job claimed before a pause may still start this long after it


def limit(cli_env: dict[str, str], *args: str) -> None:
    result = invoke(cli_env, "limit", *args, "--new")
    assert result.exit_code == 0, result.output


def add_jobs(queue: delayq.Queue, log: str, begin: float) -> dict[str, tuple[float, str | None]]:
    """The soak's jobs: {name: (due, lock or None)}, named QUEUE-N."""
    jobs: dict[str, tuple[float, str | None]] = {}
    plan = {"paused": (60, 0.05), "rated": (120, 0.0), "slotted": (60, 0.1), "locked": (200, 0.05)}
    specs = []
    for name, (count, seconds) in plan.items():
        for n in range(count):
            due = begin + SPREAD * n / count
            lock = f"key:{n % LOCKS}" if name == "locked" else None
            data = {"log": log, "n": f"{name}-{n}", "seconds": seconds}
            jobs[f"{name}-{n}"] = (due, lock)
            specs.append(delayq.JobSpec(H, "timed", data, at=due, queue=name, lock=lock))
    queue.add_many(specs)
    return jobs


def parsed(log: str) -> dict[str, list[tuple[str, float, float | None]]]:
    """{job: its calls, (host, start, end or None)}, from "start/done <n> <host> <time>"."""
    calls: dict[str, list[tuple[str, float, float | None]]] = defaultdict(list)
    for line in read_log(log):
        word, n, host, at = (line.split() + ["", "", "", ""])[:4]
        if word == "start":
            calls[n].append((host, float(at), None))
        elif word == "done":
            index = max(i for i, call in enumerate(calls[n]) if call[0] == host and call[2] is None)
            calls[n][index] = (host, calls[n][index][1], float(at))
    return calls


def test_four_limited_queues_three_runners_and_a_kill(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    limit(cli_env, "rated", "--rate", f"{RATE}/s")
    limit(cli_env, "slotted", "--concurrency", "2")
    env = {**cli_env, "DELAYQ_LEASE": "3"}
    runners = {
        "a": start(env, "run", "--loop", "-c", "8", DELAYQ_TEST_HOST="a"),
        "b": start(env, "run", "--loop", "-c", "8", DELAYQ_TEST_HOST="b"),
        "c": start(env, "run", "--loop", "-c", "8", "-p", "2", DELAYQ_TEST_HOST="c"),
    }
    begin = time.time() + 2
    jobs = add_jobs(queue, log, begin)

    paused: list[tuple[float, float]] = []
    for pause_at in (begin + 1, begin + 4):  # paused twice, 1.5 s each
        wait_for(lambda at=pause_at: time.time() >= at, 30, "the pause's time")  # type: ignore[misc]
        pause(cli_env, "paused")
        paused_at = time.time()
        wait_for(lambda at=paused_at: time.time() >= at + 1.5, 30, "the pause to last")  # type: ignore[misc]
        resume_at = time.time()
        resume(cli_env, "paused")
        paused.append((paused_at, resume_at))
        if len(paused) == 1:
            runners["a"].send_signal(signal.SIGKILL)  # mid-soak, with jobs in its hands
            killed_at = time.time()
            runners["a"].wait(10)

    def finished() -> bool:
        calls = parsed(log)
        return all(any(end is not None for _, _, end in calls.get(name, [])) for name in jobs)

    wait_for(finished, 120, "every job to finish")
    calls = parsed(log)

    # Every job ran, none before it was due, none twice but what the kill cut short.
    assert all(min(begun for _, begun, _ in calls[name]) >= due for name, (due, _) in jobs.items())
    cut_short = {
        name for name, runs in calls.items() for host, _, end in runs if host == "a" and end is None
    }
    twice = {name for name, runs in calls.items() if len(runs) > 1}
    assert twice <= cut_short, f"ran twice without a kill: {sorted(twice - cut_short)}"

    def spans(prefix: str) -> dict[str, list[tuple[float, float | None]]]:
        return {
            name: [(begun, killed_at if end is None else end) for _, begun, end in runs]
            for name, runs in calls.items()
            if name.startswith(prefix)
        }

    starts = [begun for runs in spans("rated-").values() for begun, _ in runs]
    assert most_in_any_second(starts) <= RATE
    assert most_at_once(spans("slotted-")) <= 2
    by_lock: dict[str, dict[str, list[tuple[float, float | None]]]] = defaultdict(dict)
    for name, runs in spans("locked-").items():
        by_lock[str(jobs[name][1])][name] = runs
    assert max(most_at_once(of_lock) for of_lock in by_lock.values()) == 1
    for paused_at, resume_at in paused:
        during = [
            begun
            for runs in spans("paused-").values()
            for begun, _ in runs
            if paused_at + PAUSE_SLACK < begun < resume_at
        ]
        assert during == [], "a paused queue's job started"

    wait_for(lambda: Job.select().where(Job.status != Status.SUCCESS).count() == 0, 60, "records")
    for name in ("b", "c"):
        stop(runners[name])
