"""`delayq list`: newest first, filtered by status, queue, ext, exact class and age, paged
with --before-id, as a table or as JSON."""

from __future__ import annotations

import json

import pytest

from delayq import BadInput
from delayq.ops.overview import JobFilter
from delayq.store.table.model import Job, Status
from tests.support.invoke import invoke

NOW = 1_800_000_000.0
H = "tests.sample_handlers.jobs"

ROW_KEYS = {
    "id",
    "status",
    "retry_times",
    "message",
    "ext",
    "run_at",
    "class",
    "method",
    "data",
    "queue",
    "chain_id",
    "created",
    "modified",
    "schedule",
    "every",
    "lock",
}


def ids(rows):
    return [row["id"] for row in rows]


def test_newest_first_and_limit(queue, log):
    added = [queue.add(H, "record", {"log": log, "n": n}, now=NOW) for n in range(5)]

    assert ids(queue.list_jobs(JobFilter(), now=NOW)) == added[::-1]
    assert ids(queue.list_jobs(JobFilter(), limit=2, now=NOW)) == added[:2:-1]


def test_before_id_pages_through_everything_once(queue, log):
    added = [queue.add(H, "record", {"log": log, "n": n}, now=NOW) for n in range(7)]

    seen, before = [], None
    while True:
        page = queue.list_jobs(JobFilter(), limit=3, before_id=before, now=NOW)
        seen += ids(page)
        if len(page) < 3:
            break
        before = page[-1]["id"]

    assert seen == added[::-1]


def test_filters_by_status_queue_and_ext(queue, log):
    done = queue.add(H, "record", {"log": log}, ext="order:1", now=NOW)
    failed = queue.add(H, "fail_for_good", {"log": log}, ext="order:1", now=NOW)
    queue.run(now=NOW)
    mail = queue.add(H, "record", {"log": log}, ext="order:1", queue="mail", now=NOW)
    other = queue.add(H, "record", {"log": log}, ext="order:2", now=NOW)

    def listed(**fields):
        return ids(queue.list_jobs(JobFilter(**fields), now=NOW))

    assert listed(statuses=(Status.FAILED,)) == [failed]
    assert listed(statuses=(Status.SUCCESS, Status.FAILED)) == [failed, done]
    assert listed(queue="mail") == [mail]
    assert listed(ext="order:1") == [mail, failed, done]
    assert listed(ext="order:2", statuses=(Status.PENDING,)) == [other]


def test_class_filter_matches_the_exact_class_only(queue, log):
    refund = queue.add(f"{H}.Refund", "run", {"log": log, "order": 1}, now=NOW)
    module = queue.add(H, "record", {"log": log}, now=NOW)
    # A handler whose data mentions the class name must not match: only "class" counts.
    mention = queue.add(H, "echo", {"note": f"{H}.Refund"}, now=NOW)
    # LIKE wildcards in the filter are taken literally.
    Job.create(params=json.dumps({"class": "tests_sample%handlers", "method": "x"}), run_at=NOW)

    assert ids(queue.list_jobs(JobFilter(class_path=f"{H}.Refund"), now=NOW)) == [refund]
    assert ids(queue.list_jobs(JobFilter(class_path=H), now=NOW)) == [mention, module]
    assert queue.list_jobs(JobFilter(class_path="tests.sample_handlers"), now=NOW) == []


def test_class_filter_fills_the_limit_past_rows_it_rejects(queue, log):
    wanted = [queue.add(f"{H}.Refund", "run", {"log": log, "order": n}, now=NOW) for n in (1, 2)]
    for n in range(150):
        queue.add(H, "echo", {"note": f"{H}.Refund", "n": n}, now=NOW)

    found = queue.list_jobs(JobFilter(class_path=f"{H}.Refund"), limit=2, now=NOW)

    assert ids(found) == wanted[::-1]


def test_since_keeps_rows_changed_recently(queue, log):
    queue.add(H, "record", {"log": log}, now=NOW - 7200)
    recent = queue.add(H, "record", {"log": log}, now=NOW - 60)

    assert ids(queue.list_jobs(JobFilter(since=3600), now=NOW)) == [recent]


def test_rows_that_are_not_json_are_still_listed(queue):
    bad = Job.create(params="not json", run_at=NOW)

    (row,) = queue.list_jobs(JobFilter(), now=NOW)

    assert (row["id"], row["class"], row["method"]) == (bad.id, None, None)


def test_limit_below_one_is_bad_input(queue):
    with pytest.raises(BadInput):
        queue.list_jobs(JobFilter(), limit=0)


def test_list_json_has_the_documented_keys_and_the_next_page(queue, cli_env, log):
    first = queue.add(H, "record", {"log": log, "n": 1}, ext="k")
    second = queue.add(H, "record", {"log": log, "n": 2}, ext="k", queue="mail")

    result = invoke(cli_env, "list", "--json", "--limit", "1")

    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert set(body) == {"jobs", "next_before_id"}
    (row,) = body["jobs"]
    assert set(row) == ROW_KEYS
    assert (row["id"], row["queue"], row["status"], row["ext"]) == (second, "mail", "pending", "k")
    assert body["next_before_id"] == second
    rest = json.loads(invoke(cli_env, "list", "--json", "--before-id", str(second)).stdout)
    assert ids(rest["jobs"]) == [first]
    assert rest["next_before_id"] is None


def test_list_table_and_a_hint_for_the_next_page_on_stderr(queue, cli_env, log):
    for n in range(3):
        queue.add(H, "record", {"log": log, "n": n})

    result = invoke(cli_env, "list", "--status", "pending", "--limit", "2")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["id", "status", "queue", "call", "ext", "try", "run_at", "message"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["3", "pending", "default"],
        ["2", "pending", "default"],
    ]
    assert result.stderr == "more: add --before-id 2\n"


def test_unknown_status_word_is_bad_input_exit_2(queue, cli_env):
    result = invoke(cli_env, "list", "--status", "done")

    assert result.exit_code == 2
    assert "--status 'done' is not allowed here" in result.stderr


@pytest.mark.parametrize(
    ("every", "shown"), [("1h", "every 1h"), ("90m", "every 90m"), ("100000", "every 100000s")]
)
def test_an_every_job_shows_its_period_in_show_list_and_peek(queue, cli_env, every, shown):
    added = invoke(cli_env, "add", H, "record", "--every", every, "--delay", "1h")
    assert added.exit_code == 0, added.output
    job_id = int(added.stdout)

    show_text = invoke(cli_env, "show", str(job_id)).stdout
    show_json = json.loads(invoke(cli_env, "show", str(job_id), "--json").stdout)
    (listed,) = json.loads(invoke(cli_env, "list", "--json").stdout)["jobs"]
    (peeked,) = json.loads(invoke(cli_env, "peek", "--json").stdout)["jobs"]

    assert f"schedule    {shown}\n" in show_text
    assert show_json["schedule"] == listed["schedule"] == peeked["schedule"] == shown
    assert show_json["every"] == listed["every"] == Job.get_by_id(job_id).every
    for command in ("list", "peek"):
        assert f"({shown})" in invoke(cli_env, command).stdout


def test_a_job_that_runs_once_has_no_schedule(queue, cli_env):
    job_id = queue.add(H, "record", {})

    show_json = json.loads(invoke(cli_env, "show", str(job_id), "--json").stdout)

    assert (show_json["schedule"], show_json["every"]) == (None, None)
    assert "schedule" not in invoke(cli_env, "show", str(job_id)).stdout
