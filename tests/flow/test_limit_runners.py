"""A rate limit under real runners: three `delayq run --loop` processes (two one job at a time,
one with a pool) share one queue's limit. Measured from the handlers' own start times, no
window of the period holds more starts than the limit; every job runs once, none before it is
due; the limit holds after Redis lost everything; lifting it lets the rest go at once."""

from __future__ import annotations

import time

import delayq
from delayq.store.table.model import Job, Status
from tests.faults.test_processes import start
from tests.flow.test_pause_runners import passes_go_on, stop
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"
RATE = 20  # starts a second


def add_jobs(queue: delayq.Queue, log: str, tag: str, count: int) -> dict[str, float]:
    """`count` jobs of queue sms, all due now; {n: due}."""
    due = time.time()
    for n in range(count):
        data = {"log": log, "n": f"{tag}{n}", "seconds": 0}
        queue.add(H, "timed", data, queue="sms", at=due)
    return {f"{tag}{n}": due for n in range(count)}


def starts(log: str, tag: str) -> dict[str, list[float]]:
    """{n: its start times} of the jobs named `tag...`, from "start <n> <host> <time>"."""
    found: dict[str, list[float]] = {}
    for line in read_log(log):
        word, n, _, at = (line.split() + ["", "", "", ""])[:4]
        if word == "start" and n.startswith(tag):
            found.setdefault(n, []).append(float(at))
    return found


def most_in_any_second(times: list[float]) -> int:
    """The most start times that any window of one second holds."""
    times = sorted(times)
    ends = 0
    most = 0
    for begin, at in enumerate(times):
        while ends < len(times) and times[ends] < at + 1.0:
            ends += 1
        most = max(most, ends - begin)
    return most


def limit(cli_env: dict[str, str], *args: str) -> None:
    result = invoke(cli_env, "limit", "sms", *args)
    assert result.exit_code == 0, result.output


def test_runners_on_one_queue_never_start_more_than_its_rate_in_any_second(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    limit(cli_env, "--rate", f"{RATE}/s", "--new")
    runners = [start(cli_env, "run", "--loop") for _ in range(2)]
    runners.append(start(cli_env, "run", "--loop", "--concurrency", "8"))
    due = add_jobs(queue, log, "j", 100)

    wait_for(lambda: len(starts(log, "j")) == len(due), 60, "every job to start")

    found = starts(log, "j")
    assert {n: len(times) for n, times in found.items()} == {n: 1 for n in due}  # once each
    assert all(times[0] >= due[n] for n, times in found.items())  # none early
    assert most_in_any_second([times[0] for times in found.values()]) <= RATE
    wait_for(lambda: Job.select().where(Job.status != Status.SUCCESS).count() == 0, 30, "records")
    for runner in runners:
        stop(runner)


def test_a_limit_holds_after_redis_lost_everything_and_lifting_it_frees_the_rest(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    limit(cli_env, "--rate", "2/m", "--new")
    runner = start(cli_env, "run", "--loop")
    queue.index.client.flushdb()
    due = add_jobs(queue, log, "k", 6)

    wait_for(lambda: len(starts(log, "k")) == 2, 30, "the first two jobs to start")
    passes_go_on(queue, log, "while-limited")  # whole passes went by: the rest wait
    assert len(starts(log, "k")) == 2
    assert queue.index.flow.read(["sms"])["sms"].rate == (2, 60.0)  # type: ignore[union-attr]
    assert Job.select().where(Job.queue == "sms", Job.status == Status.PENDING).count() == 4

    limit(cli_env, "--clear")
    wait_for(lambda: len(starts(log, "k")) == len(due), 30, "the rest to start")
    assert {n: len(times) for n, times in starts(log, "k").items()} == {n: 1 for n in due}
    stop(runner)
