"""`delayq status`: counts per queue with pending split into due and later, the oldest due job
and its lateness, the next due time, recent failures, the last run, and `--check`."""

from __future__ import annotations

import json
import time

import pytest

from delayq import JobSpec
from delayq.store.index.keys import LAST_RUN_KEY, schedule_key
from delayq.store.table.model import Job, Status, utc_stamp
from tests.support.invoke import invoke
from tests.support.sqlite_steps import sqlite_steps

NOW = 1_800_000_000.0
H = "tests.sample_handlers.jobs"

QUEUE_KEYS = {
    "pending",
    "pending_due",
    "pending_later",
    "running",
    "success",
    "failed",
    "cancelled",
    "missed",
    "failed_last_hour",
    "failed_retried",
    "failed_terminal",
    "oldest_due_id",
    "oldest_due_at",
    "oldest_due_lag",
    "next_due_at",
    "scheduled",
    "estimated",
    "paused",
    "paused_at",
    "resumed_at",
    "rate",
    "concurrency",
}


def test_pending_is_split_into_due_and_later_and_finished_rows_are_counted(queue, log):
    queue.add(H, "record", {"log": log}, now=NOW)
    queue.add(H, "fail_for_good", {"log": log}, now=NOW)
    cancelled = queue.add(H, "record", {"log": log}, delay=60, now=NOW)
    queue.cancel(cancelled, now=NOW)
    queue.run(now=NOW)
    queue.add(H, "record", {"log": log}, now=NOW)
    queue.add(H, "record", {"log": log}, delay=600, now=NOW)
    queue.add(H, "record", {"log": log}, delay=60, queue="mail", now=NOW)

    stats = queue.status(now=NOW + 1).queues

    assert list(stats) == ["default", "mail"]
    default = stats["default"]
    assert (default.pending, default.pending_due, default.pending_later) == (2, 1, 1)
    assert (default.success, default.failed, default.cancelled, default.missed) == (1, 1, 1, 0)
    assert default.running == 0
    assert default.next_due_at == pytest.approx(NOW + 600)
    assert default.scheduled == 2
    assert (stats["mail"].pending_due, stats["mail"].pending_later) == (0, 1)


def test_oldest_due_job_and_how_late_it_is(queue, log):
    queue.add(H, "record", {"log": log}, at=NOW - 60, now=NOW - 100)
    oldest = queue.add(H, "record", {"log": log}, at=NOW - 600, now=NOW - 700)
    queue.add(H, "record", {"log": log}, at=NOW + 30, now=NOW - 700)

    default = queue.status(now=NOW).queues["default"]

    assert default.oldest_due_id == oldest
    assert default.oldest_due_at == pytest.approx(NOW - 600)
    assert default.oldest_due_lag == pytest.approx(600)
    assert default.next_due_at == pytest.approx(NOW + 30)


def test_a_row_without_run_at_is_due_since_it_was_created(queue):
    written = Job.create(
        params=json.dumps({"class": H, "method": "echo", "data": 1}),
        created=utc_stamp(NOW - 3600),
    )
    queue.add(H, "echo", 2, at=NOW - 60, now=NOW - 60)

    default = queue.status(now=NOW).queues["default"]

    assert default.oldest_due_id == written.id
    assert default.oldest_due_lag == pytest.approx(3600, abs=1)
    assert default.pending_due == 2


def test_failures_in_the_last_hour_count_only_recent_ones(queue, log):
    queue.add(H, "fail_for_good", {"log": log}, now=NOW - 7200)
    queue.run(now=NOW - 7200)
    queue.add(H, "fail_for_good", {"log": log}, now=NOW - 60)
    queue.run(now=NOW - 60)

    default = queue.status(now=NOW).queues["default"]

    assert (default.failed, default.failed_last_hour) == (2, 1)


def test_failures_that_were_retried_are_told_apart_from_those_that_ended_a_chain(
    queue, cli_env, log
):
    retried = queue.add(H, "fail", {"log": log, "n": 1}, now=NOW)
    queue.add(H, "fail_for_good", {"log": log}, now=NOW)
    queue.add(H, "fail", {"log": log, "n": 2}, queue="mail", now=NOW)
    queue.run(now=NOW)
    [retry] = [row for row in queue.history(retried) if row["id"] != retried]
    queue.cancel(retry["id"], now=NOW)  # a cancelled retry is still a later attempt

    body = json.loads(invoke(cli_env, "status", "--json").stdout)
    lines = invoke(cli_env, "status").stdout.splitlines()

    counts = {
        name: (stats["failed"], stats["failed_terminal"], stats["failed_retried"])
        for name, stats in body["queues"].items()
    }
    assert counts == {"default": (2, 1, 1), "mail": (1, 0, 1)}
    timing = {line.split()[0]: line.split()[-2:] for line in lines[lines.index("") + 1 :]}
    assert (timing["default"], timing["mail"]) == (["1", "1"], ["0", "1"])


def test_failures_past_the_exact_bound_are_not_looked_up_one_by_one(
    queue, cli_env, log, monkeypatch
):
    from delayq.ops import overview

    monkeypatch.setattr(overview, "EXACT_UP_TO", 1)
    queue.add(H, "fail", {"log": log, "n": 1}, now=NOW)
    queue.add(H, "fail_for_good", {"log": log}, now=NOW)
    queue.run(now=NOW)

    stats = queue.status(now=NOW).queues["default"]

    # SQLite counts past the bound, MariaDB estimates; neither looks up each failure's chain.
    assert stats.failed >= 2 and (stats.failed_retried, stats.failed_terminal) == (None, None)
    assert "failed_retried" in stats.estimated
    assert "failed" in stats.estimated or not queue.table.mysql
    body = json.loads(invoke(cli_env, "status", "--json").stdout)["queues"]["default"]
    assert (body["failed_retried"], body["failed_terminal"]) == (None, None)


@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
def test_on_sqlite_a_look_reads_the_due_rows_not_every_pending_one(queue, log):
    def add_later(n: int) -> None:
        later = [JobSpec(H, "record", {"log": log}, at=NOW + 3600 + i) for i in range(n)]
        queue.add_many(later, now=NOW)

    queue.add_many([JobSpec(H, "record", {"log": log}, at=NOW - i) for i in (1, 2)], now=NOW)
    add_later(100)
    few, before = sqlite_steps(queue, lambda: queue.status(now=NOW).queues["default"])
    add_later(3000)

    many, after = sqlite_steps(queue, lambda: queue.status(now=NOW).queues["default"])

    assert (few.pending_due, many.pending_due, many.pending) == (2, 2, 3102)
    assert after < 2 * before  # counting every pending row of the queue takes 20 times more


def test_index_that_lost_entries_shows_fewer_scheduled_than_pending(queue, log):
    for _ in range(3):
        queue.add(H, "record", {"log": log}, delay=60, now=NOW)
    queue.index.client.delete(schedule_key("default"))

    default = queue.status(now=NOW).queues["default"]

    assert (default.pending, default.scheduled) == (3, 0)


def test_last_run_is_read_from_redis_and_absent_until_a_run_records_it(queue):
    assert queue.status(now=NOW).last_run is None

    queue.index.client.hset(
        LAST_RUN_KEY,
        mapping={"started_at": NOW - 90, "duration": 1.5, "outcome": "ok", "jobs": 12},
    )
    last = queue.status(now=NOW).last_run

    assert last is not None
    assert (last.started_at, last.duration, last.outcome, last.jobs) == (NOW - 90, 1.5, "ok", 12)
    assert last.finished_at == pytest.approx(NOW - 88.5)


def test_problems_name_an_idle_runner_and_a_late_queue(queue, log):
    late = queue.add(H, "record", {"log": log}, at=NOW - 900, now=NOW - 900)
    queue.add(H, "record", {"log": log}, at=NOW - 60, queue="mail", now=NOW - 60)

    report = queue.status(now=NOW)
    assert report.problems(max_idle=300, max_lag=600) == [
        "no run recorded (delay_queue_last_run is empty): is cron running delayq run?",
        f"queue default: job {late} is 15m late (max 10m), 1 due in all",
    ]

    queue.index.client.hset(LAST_RUN_KEY, mapping={"started_at": NOW - 400, "duration": 2})
    report = queue.status(now=NOW)
    assert report.problems(max_idle=300, max_lag=3600) == [
        "no run for 6.6m (max 5m): is cron running delayq run?"
    ]
    queue.index.client.hset(LAST_RUN_KEY, mapping={"started_at": NOW - 30})
    assert queue.status(now=NOW).problems(max_idle=300, max_lag=3600) == []


def test_status_json_keeps_queues_at_the_top_and_lists_every_field(queue, cli_env, log):
    queue.add(H, "record", {"log": log}, delay=3600)
    queue.index.client.hset(
        LAST_RUN_KEY,
        mapping={"started_at": time.time() - 5, "duration": 0.5, "outcome": "ok", "jobs": 3},
    )

    result = invoke(cli_env, "status", "--json")

    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert set(body) == {"queues", "last_run", "now"}
    assert set(body["queues"]) == {"default"}
    assert set(body["queues"]["default"]) == QUEUE_KEYS
    assert body["queues"]["default"]["pending_later"] == 1
    assert set(body["last_run"]) == {
        *("started_at", "duration", "outcome", "jobs", "age", "loop", "beat_at")
    }
    assert body["last_run"]["jobs"] == 3
    assert 4 <= body["last_run"]["age"] < 60


def test_status_table_names_each_queue_and_a_run_that_never_happened(queue, cli_env, log):
    queue.add(H, "record", {"log": log}, delay=3600, queue="mail")

    result = invoke(cli_env, "status")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "last run: never"
    assert lines[1].split() == [
        "queue",
        "due",
        "later",
        "running",
        "success",
        "failed",
        "cancelled",
        "missed",
    ]
    # Not a terminal: no rule under the headers, rows right below them.
    assert lines[2].split() == ["mail", "0", "1", "0", "0", "0", "0", "0"]
    assert lines[3] == ""
    assert lines[4].split() == [
        *("queue", "oldest", "due", "late", "next", "due", "failed", "1h"),
        *("terminal", "retried"),
    ]
    assert lines[5].split()[:4] == ["mail", "-", "-", "in"]


def test_check_exits_1_with_one_line_per_problem_on_stderr(queue, cli_env, log):
    queue.add(H, "record", {"log": log}, at=time.time() - 1200)

    result = invoke(cli_env, "status", "--check", "--max-lag", "10m")

    assert result.exit_code == 1
    assert result.stdout == ""
    problems = result.stderr.splitlines()
    assert len(problems) == 2
    assert problems[0].startswith("delayq: check: no run recorded")
    assert problems[1].startswith("delayq: check: queue default: job")


def test_check_is_silent_and_exits_0_when_runs_are_recent_and_nothing_is_late(queue, cli_env, log):
    queue.add(H, "record", {"log": log}, at=time.time() - 30)
    queue.index.client.hset(LAST_RUN_KEY, mapping={"started_at": time.time() - 60})

    result = invoke(cli_env, "status", "--check", "--max-idle", "5m", "--max-lag", "10m")

    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_check_with_json_still_prints_the_object(queue, cli_env):
    result = invoke(cli_env, "status", "--check", "--json")

    assert result.exit_code == 1
    assert json.loads(result.stdout)["last_run"] is None


def test_unknown_status_numbers_are_left_out_of_the_counts(queue):
    Job.create(params="{}", status=99, run_at=NOW)
    Job.create(params="{}", status=Status.SUCCESS, run_at=NOW)

    default = queue.status(now=NOW).queues["default"]

    assert (default.success, default.pending) == (1, 0)


def test_the_python_status_is_the_json_status_prints(queue, cli_env, log):
    from starlette.responses import JSONResponse

    queue.add(H, "record", {"log": log}, queue="mail", now=NOW)
    report = queue.status(now=NOW)

    assert json.loads(json.dumps(report)) == json.loads(json.dumps(report.as_json()))
    assert report["queues"]["mail"]["pending"] == report.queues["mail"].pending == 1
    assert json.loads(JSONResponse(report).body)["now"] == NOW
    printed = json.loads(invoke(cli_env, "status", "--json").stdout)
    assert set(printed) == set(report) and set(printed["queues"]["mail"]) == QUEUE_KEYS


def test_finished_rows_past_the_exact_bound_are_estimated_and_say_so(
    queue, cli_env, log, monkeypatch
):
    from delayq.ops import overview

    monkeypatch.setattr(overview, "EXACT_UP_TO", 3)
    ids = queue.add_many([JobSpec(H, "record", {"log": log}) for _ in range(8)], now=NOW - 10)
    queue.add(H, "record", {"log": log}, queue="mail", now=NOW - 10)
    Job.update(status=Status.SUCCESS).where(Job.id.in_(ids[:5])).execute()
    Job.update(status=Status.FAILED).where(Job.id.in_(ids[5:7])).execute()

    stats = queue.status(now=NOW).queues

    default, mail = stats["default"], stats["mail"]
    assert (default.pending, default.pending_due, default.failed) == (1, 1, 2)
    assert (mail.pending, mail.estimated) == (1, [])
    lines = invoke(cli_env, "status").stdout.splitlines()
    counts_table = lines[: lines.index("")]  # the timing table follows a blank line
    row = {line.split()[0]: line.split() for line in counts_table}
    if queue.table.mysql:  # MariaDB's estimate of a range past the bound
        assert default.estimated == ["success"]
        assert default.success >= 4
        assert row["default"][4] == f"~{default.success}"  # queue due later running success
    else:  # SQLite counts them all
        assert (default.estimated, default.success) == ([], 5)
        assert row["default"][4] == "5"
    assert default.failed_terminal == 2


def test_without_triggers_pending_is_counted_to_the_bound_and_estimated_beyond(
    queue, log, monkeypatch
):
    """Where the server refused `init` the triggers, a look at a queue of ten million pending
    rows must not count them all (1.6 s): up to the bound they are counted, beyond it the
    database's estimate is shown and named, as for the finished statuses."""
    from delayq.store.table import counts
    from delayq.store.table.counts import Counts

    if Counts(queue.table).installed():  # the suite's MariaDB refused them already
        counts._drop_triggers(queue.table)  # as `init` leaves them where the server refused
    monkeypatch.setattr(counts, "EXACT_PENDING", 3)
    queue.add_many([JobSpec(H, "record", {"log": log}, delay=60) for _ in range(8)], now=NOW)
    queue.add(H, "record", {"log": log}, queue="mail", now=NOW)

    stats = queue.status(now=NOW).queues

    assert (stats["mail"].pending, stats["mail"].estimated) == (1, [])
    if queue.table.mysql:  # MariaDB's estimate of a range past the bound
        assert stats["default"].estimated[:1] == ["pending"]
        assert stats["default"].pending >= 4
    else:  # SQLite counts them all
        assert (stats["default"].pending, stats["default"].estimated) == (8, [])
