"""`delayq requeue`: a bulk manual retry of the latest attempt of each matching chain —
counted, filterable, dry-runnable, and never twice for one chain."""

from __future__ import annotations

import json
import subprocess

import pytest

from delayq import BadInput, Status
from delayq.ops.overview import JobFilter
from delayq.store.index.keys import schedule_key
from delayq.store.table.model import Job, utc_stamp
from tests.conftest import DELAYQ
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke

NOW = 1_800_000_000.0
H = "tests.sample_handlers.jobs"
FAILED = JobFilter(statuses=(Status.FAILED,))


def failed_job(dq, log, n=0, **options) -> int:
    """A job that failed for good (no automatic retry) at NOW."""
    job_id = dq.add(H, "fail_for_good", {"log": log, "n": n}, now=NOW, **options)
    dq.run(now=NOW, queues=[options.get("queue", "default")])
    return job_id


def test_each_failed_chain_gets_one_new_pending_attempt_like_retry(queue, log):
    job_id = failed_job(queue, log, ext="order:1")

    result = queue.requeue(FAILED, now=NOW + 10)

    (new_id,) = result.ids
    view = queue.show(new_id)
    assert (view["status"], view["retry_times"], view["ext"]) == ("pending", 1, "order:1")
    assert view["run_at"] == pytest.approx(NOW + 10)
    assert [step["id"] for step in queue.history(job_id)] == [job_id, new_id]
    score = queue.index.client.zscore(schedule_key("default"), str(new_id))
    assert score == pytest.approx(NOW + 10)
    queue.run(now=NOW + 10)
    assert read_log(log) == ["fail_for_good 0", "fail_for_good 0"]


def test_requeue_twice_does_not_duplicate_but_moves_the_attempt_to_now(queue, log):
    failed_job(queue, log)

    (new_id,) = queue.requeue(FAILED, now=NOW).ids
    assert queue.requeue(FAILED, now=NOW + 5).ids == [new_id]

    assert [row.id for row in Job.select().where(Job.status == Status.PENDING)] == [new_id]
    assert Job.get_by_id(new_id).run_at == pytest.approx(NOW + 5)
    assert queue.index.client.zscore(schedule_key("default"), str(new_id)) == pytest.approx(NOW + 5)


def test_a_failure_whose_ladder_retry_is_pending_has_that_retry_pulled_forward(queue, log):
    job_id = queue.add(H, "fail", {"log": log}, now=NOW)
    queue.run(now=NOW)
    (_, ladder_id) = [step["id"] for step in queue.history(job_id)]
    assert Job.get_by_id(ladder_id).run_at > NOW + 1

    assert queue.requeue(FAILED, now=NOW + 1).ids == [ladder_id]

    assert [step["id"] for step in queue.history(job_id)] == [job_id, ladder_id]
    assert Job.get_by_id(ladder_id).run_at == pytest.approx(NOW + 1)
    queue.run(now=NOW + 1)
    assert read_log(log) == ["fail ", "fail "]


def test_only_the_latest_failed_attempt_of_a_chain_is_repeated(queue, log):
    first = failed_job(queue, log)
    second = queue.retry(first, now=NOW)
    queue.run(now=NOW)

    (new_id,) = queue.requeue(FAILED, now=NOW).ids

    assert Job.get_by_id(new_id).retry_times == 2
    assert [step["id"] for step in queue.history(first)] == [first, second, new_id]


def test_filters_by_class_queue_and_age(queue, log):
    params = json.dumps({"class": f"{H}.Refund", "method": "run", "data": {}})
    refund = Job.create(params=params, status=Status.FAILED, run_at=NOW, modified=utc_stamp(NOW)).id
    mail = failed_job(queue, log, queue="mail")
    old = failed_job(queue, log, n=1)
    Job.update(modified=utc_stamp(NOW - 7200)).where(Job.id == old).execute()

    def requeued(**fields):
        filters = JobFilter(statuses=(Status.FAILED,), **fields)
        return queue.requeue(filters, dry_run=True, now=NOW).ids

    assert requeued(class_path=f"{H}.Refund") == [refund]
    assert requeued(queue="mail") == [mail]
    assert requeued(since=3600) == [refund, mail]
    assert requeued() == [refund, mail, old]


def test_missed_jobs_can_be_requeued_too(queue, log):
    missed = queue.add(H, "record", {"log": log}, at=NOW - 3 * 86400, now=NOW - 3 * 86400)
    queue.run(now=NOW)

    filters = JobFilter(statuses=(Status.FAILED, Status.MISSED))
    (new_id,) = queue.requeue(filters, now=NOW).ids

    assert Job.get_by_id(new_id).chain_id == missed


def test_dry_run_counts_and_writes_nothing(queue, log):
    ids = [failed_job(queue, log, n=n) for n in range(3)]
    rows_before = Job.select().count()

    result = queue.requeue(FAILED, dry_run=True, now=NOW)

    assert result.ids == ids
    assert Job.select().count() == rows_before
    assert queue.index.schedule.size("default") == 0


def test_rows_whose_handler_is_not_allowed_are_skipped_with_the_reason(queue, log):
    good = failed_job(queue, log)
    params = json.dumps({"class": "os", "method": "system", "data": "true"})
    bad = Job.create(params=params, status=Status.FAILED, run_at=NOW)

    result = queue.requeue(FAILED, now=NOW)

    assert len(result.ids) == 1
    assert Job.get_by_id(result.ids[0]).chain_id == good
    ((skipped_id, reason),) = result.skipped
    assert skipped_id == bad.id and "DELAYQ_HANDLERS" in reason


@pytest.mark.parametrize("statuses", [(), (Status.FAILED, Status.PENDING), (Status.RUNNING,)])
def test_pending_running_or_no_status_is_refused(queue, statuses):
    with pytest.raises(BadInput, match="requeue needs --status"):
        queue.requeue(JobFilter(statuses=statuses), now=NOW)


def test_requeue_command_prints_the_count_and_skips_on_stderr(queue, cli_env, log):
    failed_job(queue, log)
    params = json.dumps({"class": "os", "method": "system", "data": "true"})
    bad = Job.create(params=params, status=Status.FAILED, run_at=NOW)

    dry = invoke(cli_env, "requeue", "--status", "failed", "--dry-run")
    real = invoke(cli_env, "requeue", "--status", "failed", "--class", H)
    again = invoke(cli_env, "requeue", "--status", "failed", "--class", H)

    assert (dry.exit_code, dry.stdout) == (0, "1\n")
    assert dry.stderr.startswith(f"delayq: skipped job {bad.id}: DELAYQ_HANDLERS")
    assert (real.exit_code, real.stdout, real.stderr) == (0, "1\n", "")
    assert (again.exit_code, again.stdout) == (0, "1\n")
    assert Job.select().where(Job.status == Status.PENDING).count() == 1


def test_requeue_command_refuses_pending_with_exit_2(queue, cli_env):
    result = invoke(cli_env, "requeue", "--status", "pending")

    assert result.exit_code == 2


@pytest.mark.slow
def test_two_requeues_at_once_add_one_attempt_per_chain(queue, cli_env, log):
    params = json.dumps({"class": H, "method": "echo", "data": None})
    Job.insert_many(
        [{"params": params, "status": Status.FAILED, "run_at": NOW} for _ in range(200)]
    ).execute()

    runs = [
        subprocess.Popen(
            [*DELAYQ, "requeue", "--status", "failed", "--all"],
            env=cli_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [run.communicate(timeout=120) for run in runs]

    assert [run.returncode for run in runs] == [0, 0, 0], outputs
    # Each sees every chain: failed, or with the pending attempt another one made, moved.
    assert [out for out, _ in outputs] == ["200\n"] * 3
    assert Job.select().where(Job.status == Status.PENDING).count() == 200
    assert queue.index.schedule.size("default") == 200
