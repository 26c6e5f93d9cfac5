"""Pausing and resuming queues (delayq/flow/settings.py, which the Queue's `pause` and `resume`
call) on both backends, through every surface but real runners (test_gate.py has those):

- the API: a paused queue's due jobs are claimed by no run and never turned missed; after the
  resume they run once each, late counting from the resume; the pause is kept in the table,
  so a Redis that lost everything still holds it.
- the command line: what `delayq pause` and `delayq resume` print, what they refuse (one line
  on stderr, exit 2, nothing written), and how `status` and `peek` show a paused queue to
  someone who never read the docs.
- the web page: the overview shows which queues are paused and since when; a logged-in
  visitor's button, with the session's CSRF token, pauses and resumes through the same Queue
  call as the command line; no one else can."""

from __future__ import annotations

import importlib.util
import json
import re
import time
from collections.abc import Callable

import pytest
import redis

import delayq
from delayq.store.table.model import Job, Status
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke

WEB = importlib.util.find_spec("starlette") is not None
if WEB:
    from tests.web.test_web import client_of, csrf_of, logged_in
needs_the_web_extra = pytest.mark.skipif(not WEB, reason="the web extra is not installed")

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0
DAY = 86400.0


def add(queue: delayq.Queue, log: str, n: int, at: float, name: str = "sms") -> int:
    return queue.add(H, "record", {"log": log, "n": n}, at=at, queue=name, now=NOW)


def status_of(job_id: int) -> int:
    return Job.get_by_id(job_id).status


def test_a_paused_queue_runs_nothing_and_its_jobs_run_once_after_the_resume(
    queue: delayq.Queue, log: str
) -> None:
    sms = [add(queue, log, n, NOW - 5) for n in (1, 2)]
    other = add(queue, log, 3, NOW - 5, name="email")
    paused = queue.pause("sms", now=NOW - 1)
    assert paused["sms"].paused_at == NOW - 1

    report = queue.run(now=NOW)

    assert read_log(log) == ["3"]  # the other queue runs on
    assert report.ran == 1 and status_of(other) == Status.SUCCESS
    assert [status_of(job_id) for job_id in sms] == [Status.PENDING, Status.PENDING]
    assert queue.paused() == {"sms": paused["sms"]}

    resumed = queue.resume("sms", now=NOW + 1)
    assert resumed["sms"].paused_at is None and resumed["sms"].resumed_at == NOW + 1
    queue.run(now=NOW + 2)
    assert sorted(read_log(log)) == ["1", "2", "3"]
    assert queue.paused() == {}


def test_pause_and_resume_are_idempotent_and_the_first_pause_says_since_when(
    queue: delayq.Queue,
) -> None:
    first = queue.pause("sms", now=NOW)["sms"]
    again = queue.pause("sms", now=NOW + 60)["sms"]
    assert again.paused_at == NOW and again.version == first.version
    resumed = queue.resume("sms", now=NOW + 120)["sms"]
    assert queue.resume("sms", now=NOW + 180)["sms"] == resumed
    # A queue never paused is left as it is: resuming it moves no overdue window.
    assert queue.resume("email", now=NOW)["email"].resumed_at is None


def test_a_paused_queues_due_jobs_are_never_missed_and_lateness_counts_from_the_resume(
    queue: delayq.Queue, log: str
) -> None:
    on_time = add(queue, log, 1, NOW)
    queue.pause("sms", now=NOW + 1)
    queue.run(now=NOW + 3 * DAY)  # far past the one-day window: still paused
    assert status_of(on_time) == Status.PENDING

    queue.resume("sms", now=NOW + 3 * DAY)
    queue.run(now=NOW + 3 * DAY + 60)  # due three days ago, resumed a minute ago: runs
    assert status_of(on_time) == Status.SUCCESS and read_log(log) == ["1"]

    late = add(queue, log, 2, NOW + 3 * DAY + 100)
    queue.pause("sms", now=NOW + 3 * DAY + 200)
    queue.resume("sms", now=NOW + 3 * DAY + 300)
    queue.run(now=NOW + 3 * DAY + 300 + DAY + 1)  # a day after the resume: missed
    assert status_of(late) == Status.MISSED and read_log(log) == ["1"]


def test_a_pause_outlives_a_redis_that_lost_everything(
    make_queue: Callable[..., delayq.Queue], log: str
) -> None:
    queue = make_queue()
    job_id = add(queue, log, 1, NOW - 5)
    queue.pause("sms", now=NOW - 1)
    queue.index.client.flushdb()
    after = add(queue, log, 2, NOW - 4)  # on a schedule Redis has again

    queue.run(now=NOW)  # rebuilds the schedule, and the pause from the table

    assert read_log(log) == []
    assert queue.index.flow.paused(["sms"]) == {"sms"}
    queue.resume("sms", now=NOW + 1)
    queue.index.client.flushdb()
    queue.run(now=NOW + 2)
    assert sorted(read_log(log)) == ["1", "2"]
    assert {status_of(job_id), status_of(after)} == {Status.SUCCESS}


def test_adds_and_cancels_go_on_while_a_queue_is_paused(queue: delayq.Queue, log: str) -> None:
    queue.pause("sms", now=NOW)
    kept = add(queue, log, 1, NOW + 10)
    cancelled = add(queue, log, 2, NOW + 10)
    queue.cancel(cancelled)
    assert status_of(kept) == Status.PENDING and status_of(cancelled) == Status.CANCELLED


@pytest.mark.parametrize("names", [(), ("bad name",), ("sms", "x" * 65)])
def test_a_bad_queue_name_pauses_nothing(queue: delayq.Queue, names: tuple[str, ...]) -> None:
    with pytest.raises(delayq.BadInput):
        queue.pause(*names)
    assert queue.paused() == {}


def test_a_pause_takes_effect_for_a_run_that_has_its_queues_mirror_cached(
    queue: delayq.Queue, log: str
) -> None:
    add(queue, log, 1, NOW - 5)
    queue.run(now=NOW)  # the mirror now holds "running"
    add(queue, log, 2, NOW - 4)
    client = redis.Redis.from_url(queue.settings.redis_url)
    assert client.exists("{delay_queue_job:sms}:flow")
    queue.pause("sms", now=NOW)
    queue.run(now=NOW + 1)
    assert read_log(log) == ["1"]
    client.close()


def test_a_pause_an_older_redis_forgot_is_put_back_before_the_next_claim(
    queue: delayq.Queue, log: str
) -> None:
    """A failover to a replica that had not yet seen the pause: its hash says "running", at
    an older version than the table's; the run's sweep puts the table's back first."""
    add(queue, log, 1, NOW - 5)
    queue.pause("sms", now=NOW - 1)
    client = redis.Redis.from_url(queue.settings.redis_url)
    client.hset("{delay_queue_job:sms}:flow", mapping={"version": 0, "paused_at": ""})

    queue.run(now=NOW)

    assert read_log(log) == []
    assert queue.index.flow.paused(["sms"]) == {"sms"}
    client.close()


# The command line.


def add_on_real_clock(queue: delayq.Queue, log: str, name: str = "sms", delay: float = -1.0) -> int:
    """A job of queue `name`, due `delay` from now on the real clock, as the command sees it."""
    return queue.add(H, "record", {"log": log}, queue=name, at=time.time() + delay)


def test_pause_says_since_when_and_what_waits_and_resume_lets_it_go(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    add_on_real_clock(queue, log)
    paused = invoke(cli_env, "pause", "sms")
    assert paused.exit_code == 0 and paused.stderr == ""
    assert paused.stdout.startswith("sms: paused since ")
    assert paused.stdout.endswith("1 job due waits until `delayq resume sms`\n")
    first = queue.paused()["sms"]
    again = invoke(cli_env, "pause", "sms")
    assert again.stdout.startswith("sms: already paused since ")
    assert queue.paused()["sms"] == first  # paused since the first pause

    resumed = invoke(cli_env, "resume", "sms")
    assert (resumed.exit_code, resumed.stdout) == (0, "sms: resumed; 1 job due start now\n")
    assert invoke(cli_env, "resume", "sms").stdout == "sms: was not paused\n"
    assert queue.paused() == {}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("pause", "smss"), "cannot pause 'smss': no job has used that queue; check the name"),
        (("resume", "smss"), "cannot resume 'smss': no job has used that queue"),
        (("pause", "bad name"), "queue name 'bad name' must be 1-64 characters"),
        (("pause", "sms", "x" * 65), "must be 1-64 characters"),
        (("pause",), "Missing argument 'NAME...'"),
        (("resume",), "Missing argument 'NAME...'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_pauses_nothing(
    queue: delayq.Queue,
    cli_env: dict[str, str],
    log: str,
    args: tuple[str, ...],
    message: str,
) -> None:
    add_on_real_clock(queue, log)
    result = invoke(cli_env, *args)
    assert result.exit_code == 2
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1
    assert message in result.stderr
    assert queue.paused() == {}


def test_a_queue_with_no_jobs_yet_is_paused_with_new(
    queue: delayq.Queue, cli_env: dict[str, str]
) -> None:
    result = invoke(cli_env, "pause", "--new", "reports")
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("0 jobs due wait until `delayq resume reports`\n")
    assert list(queue.paused()) == ["reports"]
    # Known now: its resume needs no flag.
    assert invoke(cli_env, "resume", "reports").stdout == "reports: resumed; 0 jobs due start now\n"


def test_status_shows_a_paused_queue_in_its_rows_and_in_a_sentence(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    add_on_real_clock(queue, log)
    add_on_real_clock(queue, log, delay=3600)
    add_on_real_clock(queue, log, name="email")
    invoke(cli_env, "pause", "sms")

    lines = invoke(cli_env, "status").stdout.splitlines()

    rows = [line.split() for line in lines if line.startswith("sms")]
    assert rows[0][:4] == ["sms", "(paused)", "1", "1"]  # due, later
    assert rows[1][:2] == ["sms", "(paused)"]
    assert not any("paused" in line for line in lines if line.startswith("email"))
    sentence = lines[-1]
    assert sentence.startswith("sms: paused since ")
    assert sentence.endswith("1 job due waits until `delayq resume sms`")

    report = json.loads(invoke(cli_env, "status", "--json").stdout)["queues"]
    sms, email = report["sms"], report["email"]
    assert (sms["paused"], sms["pending_due"], sms["resumed_at"]) == (True, 1, None)
    assert abs(sms["paused_at"] - time.time()) < 600
    assert (email["paused"], email["paused_at"]) == (False, None)


def test_a_paused_queues_late_jobs_do_not_fail_status_check(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    add_on_real_clock(queue, log, delay=-3600)
    invoke(cli_env, "pause", "sms")
    result = invoke(cli_env, "status", "--check", "--max-idle", "1000d", "--max-lag", "1m")
    assert result.exit_code == 1  # no run recorded: the one problem
    assert "late" not in result.stderr and "no run recorded" in result.stderr


def test_peek_marks_the_jobs_of_a_paused_queue(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    add_on_real_clock(queue, log)
    add_on_real_clock(queue, log, name="email")
    invoke(cli_env, "pause", "sms")

    lines = invoke(cli_env, "peek").stdout.splitlines()
    assert [line.endswith("pending (queue paused)") for line in lines[1:]] == [True, False]
    jobs = json.loads(invoke(cli_env, "peek", "--json").stdout)["jobs"]
    assert [(job["queue"], job["paused"]) for job in jobs] == [("sms", True), ("email", False)]


def test_metrics_say_which_queues_are_paused_and_since_when(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    add_on_real_clock(queue, log)
    add_on_real_clock(queue, log, name="email")
    paused_at = queue.pause("sms")["sms"].paused_at

    result = invoke(cli_env, "metrics")

    assert result.exit_code == 0, result.output
    samples = {
        (sample.name, sample.labels.get("queue")): sample.value
        for family in text_string_to_metric_families(result.stdout)
        for sample in family.samples
    }
    assert samples[("delayq_queue_paused", "sms")] == 1.0
    assert samples[("delayq_queue_paused", "email")] == 0.0
    assert samples[("delayq_queue_paused_timestamp_seconds", "sms")] == paused_at
    assert ("delayq_queue_paused_timestamp_seconds", "email") not in samples


# The web page.


def row_of(page: str, name: str) -> str:
    found = re.search(rf'<tr data-queue="{name}">(.*?)</tr>', page, re.S)
    assert found, page
    return found.group(1)


@needs_the_web_extra
def test_a_logged_in_visitor_pauses_and_resumes_a_queue_from_the_overview(
    queue: delayq.Queue, log: str
) -> None:
    queue.add(H, "record", {"log": log}, queue="mail", delay=0)
    client = logged_in(queue)
    page = client.get("/").text
    assert 'action="/queues/mail/pause"' in row_of(page, "mail")

    paused = client.post("/queues/mail/pause", data={"csrf": csrf_of(page)}, follow_redirects=False)

    assert paused.status_code == 303 and list(queue.paused()) == ["mail"]
    page = client.get("/").text
    assert "paused since" in row_of(page, "mail")
    assert 'action="/queues/mail/resume"' in row_of(page, "mail")
    assert '<span class="paused">(paused)</span>' in page  # its job, up next
    client.post("/queues/mail/resume", data={"csrf": csrf_of(page)})
    assert queue.paused() == {}
    assert "paused since" not in row_of(client.get("/").text, "mail")


@needs_the_web_extra
def test_pausing_needs_a_session_and_its_csrf_token(queue: delayq.Queue, log: str) -> None:
    queue.add(H, "record", {"log": log}, queue="mail", delay=0)
    client = logged_in(queue)
    csrf = csrf_of(client.get("/").text)
    anonymous = client_of(queue)
    assert anonymous.post("/queues/mail/pause", data={"csrf": csrf}).status_code == 403
    assert client.post("/queues/mail/pause", data={"csrf": "0" * 64}).status_code == 403
    assert client_of(queue, token=None).post("/queues/mail/pause").status_code == 403
    assert 'action="/queues/mail/pause"' not in client_of(queue, token=None).get("/").text
    assert queue.paused() == {}


@needs_the_web_extra
def test_a_bad_queue_name_in_the_path_is_400_and_pauses_nothing(
    queue: delayq.Queue, log: str
) -> None:
    queue.add(H, "record", {"log": log}, queue="mail", delay=0)
    client = logged_in(queue)
    csrf = csrf_of(client.get("/").text)
    assert client.post("/queues/bad%20name/pause", data={"csrf": csrf}).status_code == 400
    assert queue.paused() == {}
