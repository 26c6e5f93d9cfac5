"""`delayq pause` and `delayq resume` from the command line: what they print, what they refuse
(one line on stderr, exit 2, nothing written), and how `status` and `peek` show a paused
queue to someone who never read the docs."""

from __future__ import annotations

import json
import time

import pytest

import delayq
from tests.support.invoke import invoke

H = "tests.sample_handlers.jobs"


def add(queue: delayq.Queue, log: str, name: str = "sms", delay: float = -1.0) -> int:
    return queue.add(H, "record", {"log": log}, queue=name, at=time.time() + delay)


def test_pause_says_since_when_and_what_waits_and_resume_lets_it_go(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    add(queue, log)
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
    add(queue, log)
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
    add(queue, log)
    add(queue, log, delay=3600)
    add(queue, log, name="email")
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
    add(queue, log, delay=-3600)
    invoke(cli_env, "pause", "sms")
    result = invoke(cli_env, "status", "--check", "--max-idle", "1000d", "--max-lag", "1m")
    assert result.exit_code == 1  # no run recorded: the one problem
    assert "late" not in result.stderr and "no run recorded" in result.stderr


def test_peek_marks_the_jobs_of_a_paused_queue(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    add(queue, log)
    add(queue, log, name="email")
    invoke(cli_env, "pause", "sms")

    lines = invoke(cli_env, "peek").stdout.splitlines()
    assert [line.endswith("pending (queue paused)") for line in lines[1:]] == [True, False]
    jobs = json.loads(invoke(cli_env, "peek", "--json").stdout)["jobs"]
    assert [(job["queue"], job["paused"]) for job in jobs] == [("sms", True), ("email", False)]


def test_metrics_say_which_queues_are_paused_and_since_when(
    queue: delayq.Queue, cli_env: dict[str, str], log: str
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    add(queue, log)
    add(queue, log, name="email")
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
