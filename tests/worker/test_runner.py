"""run_once through the Queue: outcomes, the retry ladder, the window, and rows the runner
must refuse. Every test runs on both backends."""

from __future__ import annotations

import json
import time

import pytest

from delayq import Status
from delayq.store.index.keys import LAST_RUN_KEY, schedule_key
from delayq.store.table.model import Job
from delayq.worker.retry import LADDER, MAX_RETRIES
from tests.sample_handlers.jobs import read_log

NOW = 1_800_000_000.0
H = "tests.sample_handlers.jobs"


def test_due_job_runs_once_and_records_success(queue, log):
    job_id = queue.add(H, "record", {"log": log, "n": 7}, now=NOW)

    report = queue.run(now=NOW)

    assert read_log(log) == ["7"]
    view = queue.show(job_id)
    assert view["status"] == "success"
    assert view["message"] == "recorded 7"
    assert (report.succeeded, report.failed) == (1, 0)
    assert queue.run(now=NOW + 60).claimed == 0
    assert read_log(log) == ["7"]


def test_job_not_yet_due_waits(queue, log):
    job_id = queue.add(H, "record", {"log": log, "n": 1}, delay=60, now=NOW)

    queue.run(now=NOW + 59.9)
    assert queue.show(job_id)["status"] == "pending"
    assert read_log(log) == []

    queue.run(now=NOW + 60)
    assert queue.show(job_id)["status"] == "success"


def test_class_method_gets_an_instance_and_static_method_does_not(queue, log):
    first = queue.add(f"{H}.Refund", "run", {"log": log, "order": 42}, now=NOW)
    second = queue.add(f"{H}.Refund", "audit", {"log": log}, now=NOW)

    queue.run(now=NOW)

    assert queue.show(first)["message"] == "refunded 42"
    assert queue.show(second)["message"] == "audited"
    assert read_log(log) == ["refund 42", "audit"]


def test_failure_records_error_and_schedules_first_ladder_step(queue, log):
    job_id = queue.add(H, "fail", {"log": log, "n": 1}, ext="order:1", now=NOW)

    report = queue.run(now=NOW)

    failed = queue.show(job_id)
    assert failed["status"] == "failed"
    assert failed["message"] == "ValueError: boom 1"
    chain = queue.history(job_id)
    assert [step["status"] for step in chain] == ["failed", "pending"]
    retry = chain[1]
    assert retry["retry_times"] == 1
    assert retry["run_at"] == pytest.approx(NOW + LADDER[0])
    assert (retry["class"], retry["method"], retry["data"], retry["ext"]) == (
        H,
        "fail",
        {"log": log, "n": 1},
        "order:1",
    )
    assert (report.failed, report.retried) == (1, 1)
    score = queue.index.client.zscore(schedule_key("default"), str(retry["id"]))
    assert score == pytest.approx(NOW + LADDER[0])


def test_retries_follow_the_ladder_and_stop_after_fifteen(queue, log):
    queue.add(H, "fail", {"log": log}, now=NOW)
    now = NOW
    for step in range(MAX_RETRIES + 1):
        report = queue.run(now=now)
        assert report.failed == 1, f"attempt {step} did not run"
        if step < MAX_RETRIES:
            now += LADDER[step]
    assert len(read_log(log)) == MAX_RETRIES + 1
    assert report.retried == 0
    assert Job.select().where(Job.status == Status.PENDING).count() == 0
    assert Job.select().where(Job.status == Status.FAILED).count() == MAX_RETRIES + 1
    assert queue.run(now=now + 10**6).claimed == 0


def test_no_retry_fails_without_a_retry_row(queue, log):
    job_id = queue.add(H, "fail_for_good", {"log": log}, now=NOW)

    report = queue.run(now=NOW)

    assert queue.show(job_id)["message"] == "NoRetry: the order is gone"
    assert len(queue.history(job_id)) == 1
    assert (report.failed, report.retried) == (1, 0)


def test_handler_error_does_not_stop_the_run(queue, log):
    queue.add(H, "exit_process", {"log": log}, now=NOW)
    queue.add(H, "fail", {"log": log, "n": 2}, now=NOW)
    last = queue.add(H, "record", {"log": log, "n": 3}, now=NOW)

    report = queue.run(now=NOW)

    assert queue.show(last)["status"] == "success"
    assert read_log(log) == ["exit", "fail 2", "3"]
    assert (report.succeeded, report.failed) == (1, 2)


def test_cancelled_row_still_in_index_is_dropped_not_run(queue, log):
    now = time.time()  # due now: within the horizon, so its entry is on the schedule
    job_id = queue.add(H, "record", {"log": log, "n": 1}, now=now)
    Job.update(status=Status.CANCELLED).where(Job.id == job_id).execute()
    assert queue.index.schedule.size("default") == 1

    report = queue.run(now=now)

    assert read_log(log) == []
    assert report.dropped == 1
    assert queue.show(job_id)["status"] == "cancelled"


def test_cancel_by_ext_cancels_every_pending_job_with_that_key(queue, log):
    kept = queue.add(H, "record", {"log": log, "n": 0}, ext="order:2", now=NOW)
    ids = [queue.add(H, "record", {"log": log, "n": n}, ext="order:1", now=NOW) for n in (1, 2)]

    assert queue.cancel(ext="order:1", now=NOW) == 2
    assert queue.cancel(ext="order:1", now=NOW) == 0

    queue.run(now=NOW)
    assert read_log(log) == ["0"]
    assert [queue.show(job_id)["status"] for job_id in ids] == ["cancelled", "cancelled"]
    assert queue.show(kept)["status"] == "success"
    assert queue.index.schedule.size("default") == 0


def test_cancel_by_id_only_touches_a_pending_job(queue, log):
    job_id = queue.add(H, "record", {"log": log}, delay=10, now=NOW)

    assert queue.cancel(job_id, now=NOW) == 1
    assert queue.cancel(job_id, now=NOW) == 0
    assert queue.show(job_id)["status"] == "cancelled"


def test_manual_retry_copies_the_job_as_the_next_attempt(queue, log):
    job_id = queue.add(H, "fail_for_good", {"log": log, "n": 5}, ext="x", now=NOW)
    queue.run(now=NOW)

    new_id = queue.retry(job_id, delay=30, now=NOW)

    view = queue.show(new_id)
    assert (view["status"], view["retry_times"], view["ext"]) == ("pending", 1, "x")
    assert view["data"] == {"log": log, "n": 5}
    assert view["run_at"] == pytest.approx(NOW + 30)
    assert [step["id"] for step in queue.history(new_id)] == [job_id, new_id]
    queue.run(now=NOW + 30)
    assert queue.show(new_id)["status"] == "failed"


def test_manual_retry_of_a_chain_with_a_pending_attempt_moves_that_attempt_to_now(queue, log):
    job_id = queue.add(H, "fail", {"log": log}, now=NOW)
    queue.run(now=NOW)
    (_, ladder_id) = [step["id"] for step in queue.history(job_id)]

    assert queue.retry(job_id, now=NOW + 1) == ladder_id
    assert queue.retry(ladder_id, now=NOW + 2) == ladder_id

    assert [step["id"] for step in queue.history(job_id)] == [job_id, ladder_id]
    assert queue.show(ladder_id)["run_at"] == pytest.approx(NOW + 2)
    queue.run(now=NOW + 2)
    assert read_log(log) == ["fail ", "fail "]


def test_a_run_records_itself_for_status(queue, log):
    queue.add(H, "record", {"log": log}, now=NOW)

    queue.run(now=NOW)

    last = {k.decode(): v.decode() for k, v in queue.index.client.hgetall(LAST_RUN_KEY).items()}
    assert (last["outcome"], last["jobs"]) == ("ok", "1")
    assert float(last["started_at"]) == NOW


def test_job_due_before_the_window_is_missed_and_retry_still_runs_it(queue, log):
    job_id = queue.add(H, "record", {"log": log, "n": 1}, at=NOW - 2 * 86400, now=NOW - 3 * 86400)

    report = queue.run(now=NOW)

    view = queue.show(job_id)
    assert view["status"] == "missed"
    assert "missed" in view["message"] and "delayq retry" in view["message"]
    assert read_log(log) == []
    assert report.missed == 1
    new_id = queue.retry(job_id, now=NOW)
    queue.run(now=NOW)
    assert queue.show(new_id)["status"] == "success"
    assert read_log(log) == ["1"]


def test_since_option_narrows_the_window(queue, log):
    job_id = queue.add(H, "record", {"log": log}, at=NOW - 120, now=NOW - 200)

    queue.run(now=NOW, since=60)

    assert queue.show(job_id)["status"] == "missed"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"class": "os", "method": "system", "data": "touch {marker}"}, "DELAYQ_HANDLERS"),
        (
            {"class": "builtins", "method": "eval", "data": "open({marker!r},'w')"},
            "DELAYQ_HANDLERS",
        ),
        (
            {"class": "subprocess", "method": "getoutput", "data": "touch {marker}"},
            "DELAYQ_HANDLERS",
        ),
        (
            {"class": "tests.sample_handlers.leaky", "method": "system", "data": "touch {marker}"},
            "outside DELAYQ_HANDLERS",
        ),
        (
            {
                "class": "tests.sample_handlers.leaky.os",
                "method": "system",
                "data": "touch {marker}",
            },
            "not a class",
        ),
        (
            {
                "class": "tests.sample_handlers.leaky",
                "method": "ALIAS",
                "data": "open({marker!r},'w')",
            },
            "outside DELAYQ_HANDLERS",
        ),
        (
            {"class": "tests.sample_handlers.leaky", "method": "__import__", "data": "os"},
            "plain names",
        ),
    ],
)
def test_hostile_rows_fail_without_executing_and_are_not_retried(queue, tmp_path, params, expected):
    marker = tmp_path / "pwned"
    params = dict(params, data=params["data"].format(marker=str(marker)))
    job = Job.create(params=json.dumps(params), run_at=NOW, status=Status.PENDING)
    queue.index.schedule.add("default", job.id, NOW)

    report = queue.run(now=NOW)

    view = queue.show(job.id)
    assert view["status"] == "failed"
    assert expected in view["message"]
    assert not marker.exists()
    assert report.retried == 0
    assert len(queue.history(job.id)) == 1


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ("not json at all", "bad params: not JSON"),
        ('["a list"]', "bad params: not a JSON object"),
        ('{"method": "record"}', "bad params"),
    ],
)
def test_malformed_rows_fail_with_a_message_and_the_run_goes_on(queue, log, params, expected):
    bad = Job.create(params=params, run_at=NOW, status=Status.PENDING)
    queue.index.schedule.add("default", bad.id, NOW)
    good = queue.add(H, "record", {"log": log, "n": 1}, now=NOW)

    queue.run(now=NOW)

    assert queue.show(bad.id)["status"] == "failed"
    assert expected in queue.show(bad.id)["message"]
    assert len(queue.history(bad.id)) == 1
    assert queue.show(good)["status"] == "success"


def test_index_member_without_a_row_or_not_an_id_is_dropped(queue, log):
    queue.index.client.zadd(schedule_key("default"), {"999999": NOW, "junk": NOW})
    good = queue.add(H, "record", {"log": log, "n": 1}, now=NOW)

    report = queue.run(now=NOW)

    assert report.dropped == 2
    assert queue.show(good)["status"] == "success"
    assert queue.index.schedule.size("default") == 0


def test_limit_runs_at_most_n_and_leaves_the_rest_due(queue, log):
    for n in range(5):
        queue.add(H, "record", {"log": log, "n": n}, now=NOW)

    report = queue.run(now=NOW, limit=2)

    assert report.succeeded == 2
    assert read_log(log) == ["0", "1"]
    queue.run(now=NOW)
    assert sorted(read_log(log)) == ["0", "1", "2", "3", "4"]


def test_max_seconds_hands_unstarted_jobs_back_at_once(make_queue, log):
    queue = make_queue(batch_size=10)
    # The budget counts from the run's start: job 0 must start within it (1 s is ample even
    # on a loaded machine), and as it lasts the whole budget itself, it is the only one.
    budget = 1.0
    for n, seconds in enumerate([budget, 0.1, 0.1]):
        queue.add(H, "slow", {"log": log, "n": n, "seconds": seconds}, now=NOW)

    report = queue.run(now=NOW, max_seconds=budget)

    assert report.stopped_early
    assert read_log(log) == ["start 0", "done 0"]
    assert Job.select().where(Job.status == Status.PENDING).count() == 2
    assert queue.index.schedule.size("default") == 2
    queue.run(now=NOW)
    assert Job.select().where(Job.status == Status.SUCCESS).count() == 3


def test_queues_are_separate_schedules(queue, log):
    queue.add(H, "record", {"log": log, "n": "mail"}, queue="mail", now=NOW)
    queue.add(H, "record", {"log": log, "n": "default"}, now=NOW)

    queue.run(now=NOW, queues=["mail"])
    assert read_log(log) == ["mail"]
    assert queue.index.client.zcard("delay_queue_job:mail") == 0
    queue.run(now=NOW)
    assert read_log(log) == ["mail", "default"]
