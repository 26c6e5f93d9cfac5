"""A queue's rate limit through every surface:

- the API, on both backends: a run starts no more than the window allows, the jobs held back
  stay pending (no failure, no retry) and start in due order as the window frees; the limit
  is kept in the table, so a Redis that lost everything still holds it; lifting it lets the
  rest go at once; entries of jobs that ran already spend none of the window.
- the command line: what `delayq limit --rate` prints, and how `status`, `peek`, the metrics
  and the web page show a rate-limited queue to someone who never read the docs.
- real runners: three `delayq run --loop` processes (two one job at a time, one with a pool)
  share one queue's limit. Measured from the handlers' own start times, no window of the
  period holds more starts than the limit; every job runs once, none before it is due; the
  limit holds after Redis lost everything; lifting it lets the rest go at once.

How a rate is written, and a bad one refused, is test_limits.py's."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

import delayq
from delayq.store.index.keys import schedule_key
from delayq.store.table.model import Job, Status
from tests.faults.test_processes import start
from tests.flow.test_gate import passes_go_on, stop
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0


def add_many(queue: delayq.Queue, log: str, count: int, name: str = "sms") -> list[int]:
    return [
        queue.add(
            H, "record", {"log": log, "n": f"{name}-{n}"}, at=NOW - 10 + n, queue=name, now=NOW
        )
        for n in range(count)
    ]


def test_a_run_starts_what_the_window_allows_and_the_rest_wait_pending_in_order(
    queue: delayq.Queue, log: str
) -> None:
    ids = add_many(queue, log, 5)
    other = add_many(queue, log, 1, name="email")
    limited = queue.limit("sms", rate="2/s", now=NOW - 1)
    assert limited["sms"].rate == (2, 1.0)

    queue.run(now=NOW)
    assert sorted(read_log(log)) == ["email-0", "sms-0", "sms-1"]
    held = [Job.get_by_id(job_id) for job_id in ids[2:]]
    # Held back, not failed: pending at their own due times, no retry, no lost lease.
    assert [(job.status, job.run_at, job.retry_times, job.lost_leases) for job in held] == [
        (Status.PENDING, NOW - 10 + n, 0, 0) for n in (2, 3, 4)
    ]
    assert Job.select().count() == 6
    assert Job.get_by_id(other[0]).status == Status.SUCCESS

    queue.run(now=NOW + 0.5)  # the window still holds both grants
    assert len(read_log(log)) == 3
    queue.run(now=NOW + 1.2)  # both grants left the window: two more, next in due order
    assert read_log(log)[3:] == ["sms-2", "sms-3"]
    assert list(queue.limited()) == ["sms"]


def test_a_limit_outlives_a_redis_that_lost_everything(
    make_queue: Callable[..., delayq.Queue], log: str
) -> None:
    queue = make_queue()
    add_many(queue, log, 4)
    queue.limit("sms", rate="1/m", now=NOW - 1)
    queue.index.client.flushdb()

    queue.run(now=NOW)  # rebuilds the schedule, and the limit from the table

    assert read_log(log) == ["sms-0"]
    assert queue.index.flow.read(["sms"])["sms"].rate == (1, 60.0)  # type: ignore[union-attr]
    queue.limit("sms", rate=None, now=NOW + 1)
    queue.run(now=NOW + 2)  # lifted: the rest at once
    assert read_log(log) == [f"sms-{n}" for n in range(4)]
    assert queue.limited() == {}


def test_entries_of_jobs_that_ran_already_spend_no_starts_of_the_window(
    queue: delayq.Queue, log: str
) -> None:
    """A failover that rolled back claims, or a Redis restarted from an older snapshot, puts
    back entries whose jobs ran already: a claim drops them, and the grants it took for them
    come back, or each would cost the queue a start (at 2/s, ten of them five seconds)."""
    ran = add_many(queue, log, 10)
    queue.run(now=NOW)
    assert len(read_log(log)) == 10
    queue.limit("sms", rate="2/s", now=NOW)
    queue.index.client.zadd(schedule_key("sms"), {str(job_id): NOW - 10 for job_id in ran})
    fresh = queue.add(H, "record", {"log": log, "n": "fresh"}, at=NOW - 1, queue="sms", now=NOW)

    report = queue.run(now=NOW + 1)

    assert (report.dropped, report.succeeded) == (10, 1)
    assert Job.get_by_id(fresh).status == Status.SUCCESS


# The command line.


def add(queue: delayq.Queue, log: str) -> int:
    return queue.add(H, "record", {"log": log}, queue="sms", at=time.time() - 1)


def limit_says(cli_env: dict[str, str], *args: str) -> str:
    """What `delayq limit ARGS` prints, having checked that it succeeded."""
    result = invoke(cli_env, "limit", *args)
    assert result.exit_code == 0 and result.stderr == ""
    return result.stdout


def test_limit_says_what_it_means_and_clear_lifts_it(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    add(queue, log)
    assert limit_says(cli_env, "sms", "--rate", "600/m") == (
        "sms: at most 600 job starts a minute (600/m) across all runners; due jobs beyond "
        "that wait in order (`delayq limit sms --clear` lifts it)\n"
    )
    assert queue.limited()["sms"].rate == (600, 60.0)

    status = invoke(cli_env, "status")
    assert "sms (600/m)" in status.stdout
    assert "sms: at most 600 job starts a minute (600/m) across all runners" in status.stdout
    assert json.loads(invoke(cli_env, "status", "--json").stdout)["queues"]["sms"]["rate"] == (
        "600/m"
    )

    cleared = invoke(cli_env, "limit", "sms", "--clear")
    assert cleared.stdout == "sms: no limits; runners start its due jobs as fast as they can\n"
    assert queue.limited() == {}
    assert json.loads(invoke(cli_env, "status", "--json").stdout)["queues"]["sms"]["rate"] is None


def test_metrics_give_each_limited_queues_rate_as_starts_a_second(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    add(queue, log)
    queue.add(H, "record", {"log": log}, queue="email")
    queue.limit("sms", rate="30/m")

    result = invoke(cli_env, "metrics")

    assert result.exit_code == 0, result.output
    rates = {
        sample.labels["queue"]: sample.value
        for family in text_string_to_metric_families(result.stdout)
        for sample in family.samples
        if sample.name == "delayq_queue_rate_limit"
    }
    assert rates == {"sms": 0.5}


def test_the_web_overview_marks_a_limited_queue_with_its_rate(
    queue: delayq.Queue, log: str
) -> None:
    pytest.importorskip("starlette")
    from tests.flow.test_pausing import row_of
    from tests.web.test_web import client_of

    add(queue, log)
    client = client_of(queue)
    assert "limited to" not in row_of(client.get("/").text, "sms")
    queue.limit("sms", rate="10/s")
    assert ">limited to 10/s</span>" in row_of(client.get("/").text, "sms")
    assert "at once" not in row_of(client.get("/").text, "sms")
    queue.limit("sms", concurrency=3)
    assert ">3 at once</span>" in row_of(client.get("/").text, "sms")


def test_peek_says_a_jobs_queue_is_rate_limited(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    add(queue, log)
    queue.limit("sms", rate="10/s")
    assert "(queue limited to 10/s)" in invoke(cli_env, "peek").stdout
    assert json.loads(invoke(cli_env, "peek", "--json").stdout)["jobs"][0]["rate"] == "10/s"


# Real runners.


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
