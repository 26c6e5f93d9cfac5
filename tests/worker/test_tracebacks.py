"""A failed attempt keeps its traceback: in its row under the head line, in `show` and its
JSON, and in the log of a run at info level; a default run still prints nothing."""

from __future__ import annotations

import itertools
import json

import pytest

from delayq.store.table.model import MESSAGE_MAX, TEXT_MAX, TRACEBACK_START, Job, Status
from tests.faults.test_processes import delayq
from tests.sample_handlers.jobs import read_log

H = "tests.sample_handlers.jobs"
X = "tests.sample_handlers.hostile"


def failed_row(job_id: int) -> Job:
    row = Job.get_by_id(job_id)
    assert row.status == Status.FAILED
    return row


def test_a_failed_row_keeps_the_head_line_then_the_handlers_traceback(queue, cli_env, log):
    job_id = queue.add(H, "fail", {"log": log, "n": 1})

    completed = delayq(cli_env, "run")

    assert (completed.returncode, completed.stdout, completed.stderr) == (0, b"", b"")
    head, traceback = failed_row(job_id).message.split("\n", 1)
    assert head == "ValueError: boom 1"
    assert traceback.startswith(TRACEBACK_START + "\n")
    assert 'sample_handlers/jobs.py", line' in traceback and ", in fail\n" in traceback
    assert "delayq/worker" not in traceback, "the runner's frames are left out"
    assert traceback.endswith("ValueError: boom 1")
    view = queue.show(job_id)
    assert (view["message"], view["traceback"]) == (head, traceback)


def test_show_prints_the_traceback_and_its_json_carries_it(queue, cli_env, log):
    job_id = queue.add(H, "fail", {"log": log, "n": 2})
    delayq(cli_env, "run")

    shown = delayq(cli_env, "show", str(job_id))
    as_json = json.loads(delayq(cli_env, "show", str(job_id), "--json").stdout)

    assert shown.returncode == 0 and shown.stderr == b""
    lines = shown.stdout.decode().splitlines()
    assert "message     ValueError: boom 2" in lines
    start = lines.index("traceback")
    assert lines[start + 1] == "  " + TRACEBACK_START
    assert lines[-1] == "  ValueError: boom 2"
    assert any(line.strip() == "raise ValueError(f\"boom {data.get('n', '')}\")" for line in lines)
    assert as_json["message"] == "ValueError: boom 2"
    assert as_json["traceback"].splitlines() == [line[2:] for line in lines[start + 1 :]]


def test_a_no_retry_failure_keeps_its_reason_and_traceback(queue, cli_env, log):
    job_id = queue.add(H, "fail_for_good", {"log": log})

    delayq(cli_env, "run")

    view = queue.show(job_id)
    assert view["message"] == "NoRetry: the order is gone"
    assert "in fail_for_good" in view["traceback"]


def test_a_log_file_at_info_holds_each_failed_attempt_with_its_traceback(
    queue, cli_env, log, tmp_path
):
    ids = [queue.add(H, "fail", {"log": log, "n": n}) for n in (1, 2)]
    path = tmp_path / "delayq.log"

    completed = delayq(cli_env, "run", "--log-file", str(path), "--log-level", "info")

    assert (completed.returncode, completed.stderr) == (0, b"")
    text = path.read_text()
    for n, job_id in enumerate(ids, 1):
        start = text.index(f"job {job_id} {H}.fail attempt 0: failed in")
        first, *rest = text[start:].splitlines()
        record = [first] + list(itertools.takewhile(lambda line: line.startswith("    "), rest))
        assert record[1:3] == [f"    ValueError: boom {n}", f"    {TRACEBACK_START}"]
        assert record[-1] == f"    ValueError: boom {n}"


def test_json_log_lines_carry_the_traceback_as_a_field(queue, cli_env, log, tmp_path):
    job_id = queue.add(H, "fail", {"log": log, "n": 3})
    path = tmp_path / "delayq.jsonl"

    completed = delayq(cli_env, "run", "--log-file", str(path), "--log-level", "info", "--log-json")

    assert completed.returncode == 0
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    (entry,) = [entry for entry in entries if entry.get("job_id") == job_id]
    assert entry["error"] == "ValueError: boom 3"
    assert entry["traceback"] == queue.show(job_id)["traceback"]


def test_info_on_stderr_logs_the_traceback_and_the_default_stays_silent(queue, cli_env, log):
    queue.add(H, "fail", {"log": log, "n": 4})
    quiet = delayq(cli_env, "run")
    queue.add(H, "fail", {"log": log, "n": 5})

    loud = delayq(cli_env, "run", "--log-level", "info")

    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, b"", b"")
    assert b"    ValueError: boom 5\n    " + TRACEBACK_START.encode() in loud.stderr


def assert_fits_the_column(message: str) -> None:
    assert len(message) <= TEXT_MAX
    assert len(message.encode("utf-8")) <= 65535


def test_a_ten_megabyte_message_is_cut_and_the_innermost_frame_kept(queue, cli_env, log):
    job_id = queue.add(X, "fail_with", {"log": log, "text": "é" * 1000, "times": 10_000})

    completed = delayq(cli_env, "run")

    assert (completed.returncode, completed.stderr) == (0, b"")
    message = failed_row(job_id).message
    assert_fits_the_column(message)
    head, traceback = message.split("\n", 1)
    assert head == "ValueError: " + "é" * (MESSAGE_MAX - len("ValueError: "))
    assert "in fail_with\n" in traceback
    assert read_log(log) == ["fail_with"]


def test_a_2000_frame_recursion_keeps_the_innermost_frames(queue, cli_env, log):
    job_id = queue.add(X, "fail_deep", {"log": log, "depth": 2000})

    completed = delayq(cli_env, "run")

    assert (completed.returncode, completed.stderr) == (0, b"")
    message = failed_row(job_id).message
    assert_fits_the_column(message)
    lines = message.splitlines()
    assert lines[0] == "RecursionError: maximum recursion depth exceeded"
    assert lines[1] == TRACEBACK_START
    assert lines[-1] == lines[0]
    assert "in _descend" in lines[-4] and "_descend(depth - 1)" in lines[-3]
    assert read_log(log) == ["fail_deep"]
    assert "Previous line repeated" in lines[-2]


def test_a_long_traceback_keeps_its_innermost_frames_and_says_what_was_cut(queue, cli_env, log):
    job_id = queue.add(X, "fail_deep", {"log": log, "depth": 800, "alternate": True})

    delayq(cli_env, "run")

    message = failed_row(job_id).message
    assert_fits_the_column(message)
    lines = message.splitlines()
    assert lines[:2] == ["LookupError: bottom reached", TRACEBACK_START]
    assert lines[2].startswith("  ... ") and lines[2].endswith(" outer lines left out ...")
    assert "in _ping" in lines[-3] and lines[-2].strip() == 'raise LookupError("bottom reached")'
    assert len(message) > TEXT_MAX - MESSAGE_MAX - 200, "the bound is used, not wasted"


HOSTILE_TEXTS = {
    "control": "\x1b[2J\x07bell\r\nTraceback (most recent call last):\n  fake",
    "script": "<script>alert(1)</script>",
    "bidi": "abc\u202edcba\u2028next",
}


@pytest.mark.parametrize("text", HOSTILE_TEXTS.values(), ids=HOSTILE_TEXTS.keys())
def test_hostile_text_stays_on_the_head_line_and_show_prints_it_escaped(queue, cli_env, log, text):
    job_id = queue.add(X, "fail_with", {"log": log, "text": text})

    delayq(cli_env, "run")
    shown = delayq(cli_env, "show", str(job_id))

    head = failed_row(job_id).message.split("\n", 1)[0]
    assert head == "ValueError: " + text.replace("\r", "\\r").replace("\n", "\\n")
    assert "in fail_with" in queue.show(job_id)["traceback"]
    assert shown.returncode == 0
    for forbidden in (b"\x1b", b"\x07", b"\r", "\u202e".encode(), "\u2028".encode()):
        assert forbidden not in shown.stdout


@pytest.mark.parametrize("raised", ["Unprintable", "surrogate", "SlyText"])
def test_exceptions_that_resist_printing_still_leave_a_traceback(queue, cli_env, log, raised):
    job_id = queue.add(X, "raise_", {"log": log, "raise": raised})

    completed = delayq(cli_env, "run")

    assert (completed.returncode, completed.stderr) == (0, b"")
    view = queue.show(job_id)
    assert view["message"].startswith(raised if raised != "surrogate" else "ValueError")
    assert view["traceback"].startswith(TRACEBACK_START) and "in raise_" in view["traceback"]
    view["traceback"].encode("utf-8")


def test_the_servers_passwords_are_hidden_in_the_head_line_and_the_traceback(queue, log):
    password = "s3cret-Pa55"
    # Only the settings' URLs change: the queue keeps its connections, the runner its list
    # of secrets to hide.
    queue.settings = queue.settings.with_overrides(
        database_url=f"mysql://app:{password}@db.internal:3306/app",
        redis_url=f"redis://:{password}x@cache.internal:6379/0",
    )
    text = f"cannot connect to mysql://app:{password}@db.internal and {password}x"
    job_id = queue.add(X, "fail_with", {"log": log, "text": text})

    queue.run()

    message = failed_row(job_id).message
    assert password not in message
    head, traceback = message.split("\n", 1)
    assert head == "ValueError: cannot connect to mysql://app:***@db.internal and ***"
    assert traceback.endswith("ValueError: cannot connect to mysql://app:***@db.internal and ***")


def test_a_job_stopped_at_its_time_limit_says_so_and_where_it_was(queue, cli_env, log):
    job_id = queue.add(H, "slow", {"log": log, "n": 1, "seconds": 60}, timeout=1)

    completed = delayq(cli_env, "run")

    assert (completed.returncode, completed.stderr) == (0, b"")
    view = queue.show(job_id)
    assert view["message"] == "JobTimeout: ran longer than its 1s time limit"
    assert 'sample_handlers/jobs.py", line' in view["traceback"]
    assert ", in slow\n" in view["traceback"]
