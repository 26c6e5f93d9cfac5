"""`delayq peek`: the table's next pending jobs across queues, soonest first, read without
claiming: those on the schedule, those beyond a queue's horizon, those not yet indexed."""

from __future__ import annotations

import json
import time

from delayq.store.index.keys import schedule_key
from delayq.store.table.model import Job, Status
from tests.support.callers import open_transaction
from tests.support.invoke import invoke

NOW = 1_800_000_000.0
H = "tests.sample_handlers.jobs"


def test_next_jobs_across_queues_soonest_first_with_their_rows(queue, log):
    later = queue.add(H, "record", {"log": log}, delay=300, ext="b", now=NOW)
    soon = queue.add(f"{H}.Refund", "run", {"log": log}, delay=10, queue="mail", now=NOW)
    queue.add(H, "record", {"log": log}, delay=900, now=NOW)

    upcoming = queue.peek(2)

    assert [(entry.id, entry.queue, entry.run_at) for entry in upcoming] == [
        (soon, "mail", NOW + 10),
        (later, "default", NOW + 300),
    ]
    assert upcoming[1].row is not None and upcoming[1].row.ext_string == "b"


def test_peek_claims_nothing(queue, log):
    now = time.time()  # due now, so on the schedule, where a claim would take it from
    queue.add(H, "record", {"log": log}, now=now)

    queue.peek(5)

    assert queue.index.schedule.size("default") == 1
    assert queue.run(now=now).succeeded == 1


def test_peek_of_one_queue(queue, log):
    queue.add(H, "record", {"log": log}, now=NOW)
    mail = queue.add(H, "record", {"log": log}, delay=60, queue="mail", now=NOW)

    assert [entry.id for entry in queue.peek(5, queues=["mail"])] == [mail]


def test_entries_of_no_pending_row_are_no_jobs_to_run(queue, log):
    job_id = queue.add(H, "record", {"log": log}, now=NOW)
    cancelled = queue.add(H, "record", {"log": log}, delay=5, now=NOW)
    Job.update(status=Status.CANCELLED).where(Job.id == cancelled).execute()  # as the seed did
    queue.index.client.zadd(schedule_key("default"), {"999999": NOW, "junk": NOW - 1})

    assert [entry.id for entry in queue.peek(5)] == [job_id]


def test_an_entry_far_ahead_hides_no_job_that_only_the_table_holds(queue, log):
    """Beyond its horizon a job waits in the table alone; an entry on the schedule due later
    still (a foreign producer's ZADD, one from before an upgrade) must not hide it."""
    now = time.time()
    beyond = queue.add(H, "record", {"log": log}, at=now + 2 * 3600, now=now)
    foreign = queue.add(H, "record", {"log": log}, at=now + 30 * 86400, now=now)
    queue.index.client.zadd(schedule_key("default"), {str(foreign): now + 30 * 86400})

    assert [entry.id for entry in queue.peek(1)] == [beyond]
    assert [entry.id for entry in queue.peek(5)] == [beyond, foreign]


def test_peek_json_has_time_until_due_and_the_row_fields(queue, cli_env, log):
    job_id = queue.add(H, "record", {"log": log}, delay=120, ext="order:9")

    result = invoke(cli_env, "peek", "3", "--json")

    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert set(body) == {"now", "jobs"}
    (view,) = body["jobs"]
    assert set(view) == {
        "id",
        "queue",
        "run_at",
        "due_in",
        "indexed",
        "class",
        "method",
        "ext",
        "status",
        "schedule",
        "paused",
        "rate",
        "concurrency",
    }
    assert (view["id"], view["method"], view["ext"], view["status"]) == (
        job_id,
        "record",
        "order:9",
        "pending",
    )
    assert 100 < view["due_in"] <= 120


def test_peek_table(queue, cli_env, log):
    job_id = queue.add(H, "record", {"log": log}, delay=3600)

    result = invoke(cli_env, "peek")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["id", "queue", "due", "call", "ext", "status"]
    assert lines[1].split() == [str(job_id), "default", "in", "60m", f"{H}.record", "pending"]


def test_jobs_added_in_a_caller_transaction_show_as_not_yet_indexed(backend, queue, cli_env, log):
    indexed = queue.add(H, "record", {"log": log}, delay=300)
    transaction = open_transaction("dbapi", backend["database_url"])
    try:
        waiting = queue.add(H, "record", {"log": log}, delay=60, ext="tx", using=transaction.using)
        transaction.commit()
    finally:
        transaction.close()

    upcoming = queue.peek(5)
    body = json.loads(invoke(cli_env, "peek", "--json").stdout)
    text = invoke(cli_env, "peek").stdout.splitlines()

    assert [(entry.id, entry.indexed) for entry in upcoming] == [(waiting, False), (indexed, True)]
    assert [(view["id"], view["indexed"]) for view in body["jobs"]] == [
        (waiting, False),
        (indexed, True),
    ]
    assert text[1].split()[0] == str(waiting)
    assert text[1].rstrip().endswith("pending (not yet indexed)")
    assert text[2].rstrip().endswith("pending")


def test_a_job_the_sweep_has_indexed_is_shown_once(backend, queue, log):
    transaction = open_transaction("dbapi", backend["database_url"])
    try:
        job_id = queue.add(H, "record", {"log": log}, delay=60, using=transaction.using)
        transaction.commit()
    finally:
        transaction.close()
    queue.run()  # its sweep puts the job on the schedule

    assert [(entry.id, entry.indexed) for entry in queue.peek(5)] == [(job_id, True)]


def test_not_yet_indexed_jobs_of_other_queues_are_left_out(backend, queue, log):
    transaction = open_transaction("dbapi", backend["database_url"])
    try:
        queue.add(H, "record", {"log": log}, queue="mail", using=transaction.using)
        transaction.commit()
    finally:
        transaction.close()

    assert queue.peek(5, queues=["default"]) == []
    assert [entry.queue for entry in queue.peek(5, queues=["mail"])] == ["mail"]
