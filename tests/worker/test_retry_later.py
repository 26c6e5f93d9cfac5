"""`raise delayq.RetryLater(delay)` from a handler: the same row, the same attempt, due again
`delay` later, with no failure counted (retry_times unchanged), the deferral told in its
message; bounded at MAX_DEFERRALS in a row, after which the attempt fails as any other."""

from __future__ import annotations

import time

import pytest

from delayq import Status
from delayq.store.index.keys import schedule_key
from delayq.store.table.leases import Leases
from delayq.store.table.model import Job
from delayq.store.table.outcomes import Outcome
from delayq.worker.retry import MAX_DEFERRALS
from tests.faults.test_processes import delayq, statuses
from tests.sample_handlers.jobs import read_log

NOW = 1_800_000_000.0
R = "tests.sample_handlers.retrying"


def score(queue, job_id: int) -> float | None:
    return queue.index.client.zscore(schedule_key("default"), str(job_id))


def test_a_real_run_defers_the_same_row_without_counting_a_failure(queue, cli_env, log):
    job_id = queue.add(R, "rate_limited", {"log": log}, ext="sms:1")
    before = time.time()

    ran = delayq(cli_env, "run", "-v")

    assert (ran.returncode, ran.stderr) == (0, b"")
    line, summary = ran.stdout.decode().splitlines()
    assert line.startswith(f"{job_id} {R}.rate_limited attempt 0 deferred ")
    assert line.endswith("RetryLater: rate limited (deferred 1h, 1 of at most 100 in a row)")
    assert "0 failed (0 retried), 1 deferred," in summary
    assert read_log(log) == ["rate_limited"]
    assert statuses() == {job_id: Status.PENDING}
    row = Job.get_by_id(job_id)
    assert row.retry_times == 0
    assert before + 3600 <= row.run_at <= time.time() + 3600
    assert row.message == "RetryLater: rate limited (deferred 1h, 1 of at most 100 in a row)"
    assert row.retry_policy == '{"deferrals":1}'
    shown = delayq(cli_env, "show", str(job_id))
    assert b"RetryLater: rate limited (deferred 1h" in shown.stdout

    assert queue.run(now=row.run_at - 1).claimed == 0  # not a second early
    report = queue.run(now=row.run_at + 1)

    assert (report.succeeded, report.failed) == (1, 0)
    assert read_log(log) == ["rate_limited", "rate_limited"]
    assert [(a["id"], a["status"], a["retry_times"]) for a in queue.history(job_id)] == [
        (job_id, "success", 0)
    ]


def test_a_deferral_counts_in_the_report_not_as_a_failure(queue, log):
    job_id = queue.add(R, "rate_limited", {"log": log, "after": "90s"}, now=NOW)

    report = queue.run(now=NOW)

    assert (report.succeeded, report.failed, report.retried, report.deferred) == (0, 0, 0, 1)
    assert Job.get_by_id(job_id).run_at == pytest.approx(NOW + 90, abs=5)


def test_deferrals_are_bounded_and_start_over_after_a_real_failure(queue, log):
    job_id = queue.add(R, "always_later", {"log": log}, retries=1, retry_delays=[1], now=NOW)

    report = queue.run(now=NOW)  # RetryLater(0): due again at once, in the same pass

    assert (report.deferred, report.failed, report.retried) == (MAX_DEFERRALS, 1, 1)
    failed = Job.get_by_id(job_id)
    assert (failed.status, failed.retry_times) == (Status.FAILED, 0)
    assert failed.message == f"RetryLater (deferred {MAX_DEFERRALS} times in a row: failed instead)"
    (retry,) = Job.select().where(Job.status == Status.PENDING)
    assert (retry.retry_times, retry.chain_id, retry.retry_policy) == (
        1,
        job_id,
        '{"retries":1,"delays":[1]}',
    )

    report = queue.run(now=NOW + 5)  # the retry may defer as many times again

    assert (report.deferred, report.failed, report.retried) == (MAX_DEFERRALS, 1, 0)
    assert len(read_log(log)) == 2 * (MAX_DEFERRALS + 1)
    assert Job.get_by_id(retry.id).status == Status.FAILED


def test_a_real_run_of_a_handler_that_always_defers_ends_failed(queue, cli_env, log):
    job_id = queue.add(R, "always_later", {"log": log}, retries=0)

    runs = 0
    while Job.get_by_id(job_id).status == Status.PENDING and runs < 2 * MAX_DEFERRALS:
        ran = delayq(cli_env, "run")
        assert (ran.returncode, ran.stdout, ran.stderr) == (0, b"", b"")
        runs += 1

    assert statuses() == {job_id: Status.FAILED}
    assert len(read_log(log)) == MAX_DEFERRALS + 1
    assert Job.get_by_id(job_id).retry_times == 0


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ("2m", 120.0),
        (7.5, 7.5),
    ],
)
def test_retry_later_takes_seconds_and_duration_text(queue, log, after, expected):
    job_id = queue.add(R, "later_by", {"log": log, "after": after}, now=NOW)

    queue.run(now=NOW)

    row = Job.get_by_id(job_id)
    assert (row.status, row.retry_times) == (Status.PENDING, 0)
    assert row.run_at - expected == pytest.approx(NOW, abs=5)


def test_retry_later_takes_a_timedelta(queue, log):
    job_id = queue.add(R, "later_by_timedelta", {"log": log}, now=NOW)

    queue.run(now=NOW)

    row = Job.get_by_id(job_id)
    assert (row.status, row.retry_times) == (Status.PENDING, 0)
    assert row.run_at == pytest.approx(NOW + 300, abs=10)
    assert row.message == "RetryLater: quota (deferred 5m, 1 of at most 100 in a row)"


def test_a_hostile_retry_later_delay_fails_the_attempt_with_one_escaped_line(queue, log):
    job_id = queue.add(R, "later_by_hostile_text", {"log": log}, now=NOW)

    report = queue.run(now=NOW)

    assert (report.failed, report.retried, report.deferred) == (1, 1, 0)
    message = Job.get_by_id(job_id).message
    assert message.startswith("RetryLater: ") and "not a duration" in message
    assert r"\x1b" in message and r"\udcff" in message and "\n" not in message


@pytest.mark.parametrize(
    "after",
    [[1], "soon", -1, 1e300, True, {"s": 1}],
    ids=["list", "word", "negative", "beyond-horizon", "bool", "dict"],
)
def test_a_wrong_retry_later_delay_fails_the_attempt_and_retries_it(queue, log, after):
    job_id = queue.add(R, "later_by", {"log": log, "after": after}, now=NOW)

    report = queue.run(now=NOW)

    assert (report.failed, report.retried, report.deferred) == (1, 1, 0)
    row = Job.get_by_id(job_id)
    assert row.status == Status.FAILED
    assert row.message.startswith("RetryLater: ")
    assert "\n" not in row.message


def test_a_deferred_occurrence_of_a_recurring_job_re_arms_only_once_it_runs(queue, log):
    job_id = queue.add(R, "rate_limited", {"log": log}, every="1d", ext="digest", now=NOW)

    queue.run(now=NOW)

    assert statuses() == {job_id: Status.PENDING}  # no next occurrence yet
    deferred_to = Job.get_by_id(job_id).run_at
    assert deferred_to == pytest.approx(NOW + 3600, abs=5)

    queue.run(now=deferred_to)

    rows = statuses()
    (next_id,) = [other for other in rows if other != job_id]
    assert rows == {job_id: Status.SUCCESS, next_id: Status.PENDING}
    assert Job.get_by_id(next_id).run_at == deferred_to + 86400
    assert Job.get_by_id(next_id).every == 86400


def test_a_run_with_jobs_in_flight_defers_as_one_at_a_time_does(queue, log):
    ids = [
        queue.add(R, "later_by", {"log": log, "after": "10m", "n": n}, now=NOW) for n in range(4)
    ]

    report = queue.run(now=NOW, concurrency=2)

    assert (report.deferred, report.failed, report.succeeded) == (4, 0, 0)
    for job_id in ids:
        row = Job.get_by_id(job_id)
        assert (row.status, row.retry_times, row.retry_policy) == (
            Status.PENDING,
            0,
            '{"deferrals":1}',
        )
        assert score(queue, job_id) == row.run_at


@pytest.mark.parametrize("concurrency", [1, 2])
def test_an_async_handler_defers_and_declares_its_policy_as_a_plain_one(queue, log, concurrency):
    later = queue.add(R, "async_later", {"log": log}, now=NOW)
    failing = queue.add(R, "async_later", {"log": log, "fail": True}, now=NOW)

    report = queue.run(now=NOW, concurrency=concurrency)

    assert (report.deferred, report.failed, report.retried) == (1, 1, 0)
    row = Job.get_by_id(later)
    assert (row.status, row.retry_times, row.run_at) == (
        Status.PENDING,
        0,
        pytest.approx(NOW + 30, abs=5),
    )
    assert row.message == "RetryLater: busy (deferred 30s, 1 of at most 100 in a row)"
    assert statuses() == {later: Status.PENDING, failing: Status.FAILED}  # retries=0


def test_a_deferral_journaled_by_a_run_that_died_is_recorded_by_the_next(queue, log):
    job_id = queue.add(R, "rate_limited", {"log": log}, now=NOW)
    (job,) = Leases(queue.table).mark_running([job_id], "dead-run", NOW + 60, NOW)
    deferral = Outcome(
        job=job,
        status=Status.PENDING,
        message="RetryLater: busy",
        next_in=300.0,
        finished_at=NOW + 1,
    )
    queue.index.journal.write("default", job_id, deferral.to_record())

    report = queue.run(now=NOW + 120)  # after the dead run's lease lapsed

    assert (report.recovered, report.claimed, report.failed) == (1, 0, 0)
    row = Job.get_by_id(job_id)
    assert (row.status, row.retry_times, row.run_at) == (Status.PENDING, 0, NOW + 301)
    assert (row.message, row.retry_policy) == ("RetryLater: busy", '{"deferrals":1}')
    assert score(queue, job_id) == NOW + 301
    assert read_log(log) == []  # recorded from the journal, not run again


def test_a_retry_later_subclass_whose_delay_is_code_fails_the_attempt_not_the_run(queue, log):
    job_id = queue.add(R, "later_sneakily", {"log": log}, now=NOW)

    report = queue.run(now=NOW)

    assert (report.failed, report.retried, report.deferred) == (1, 1, 0)
    assert Job.get_by_id(job_id).message.startswith("SneakyLater: RetryLater takes seconds")
