"""Logging options of `delayq run`: quiet by default, a log file, a level, and JSON lines
carrying each job's id, class, method, queue, attempt, duration and outcome."""

from __future__ import annotations

import json
import logging

import pytest

from delayq import BadInput
from delayq.ops.logs import setup_logging
from tests.support.invoke import invoke

H = "tests.sample_handlers.jobs"
JOB_KEYS = {"job_id", "class", "method", "queue", "attempt", "duration", "outcome", "will_retry"}
BASE_KEYS = {"time", "level", "logger", "message", "pid"}


@pytest.fixture(autouse=True)
def restore_logging():
    yield
    setup_logging()


def test_run_is_silent_by_default(queue, cli_env, log):
    queue.add(H, "record", {"log": log})
    queue.add(H, "fail", {"log": log})

    result = invoke(cli_env, "run")

    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_log_file_at_info_gets_one_text_line_per_job(queue, cli_env, log, tmp_path):
    first = queue.add(H, "record", {"log": log, "n": 1})
    second = queue.add(H, "fail", {"log": log})
    path = tmp_path / "delayq.log"

    result = invoke(cli_env, "run", "--log-file", str(path), "--log-level", "info")

    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
    lines = path.read_text().splitlines()
    job_lines = [line for line in lines if " job " in line]
    assert len(job_lines) == 2
    assert f"job {first} {H}.record attempt 0: success in" in job_lines[0]
    assert f"job {second} {H}.fail attempt 0: failed in" in job_lines[1]
    assert job_lines[1].endswith("; will retry")


def test_log_json_lines_carry_the_job_fields(queue, cli_env, log, tmp_path):
    job_id = queue.add(H, "fail", {"log": log}, queue="mail")
    path = tmp_path / "delayq.jsonl"

    result = invoke(cli_env, "run", "--log-file", str(path), "--log-level", "INFO", "--log-json")

    assert result.exit_code == 0, result.output
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    (entry,) = [entry for entry in entries if "job_id" in entry]
    assert set(entry) == BASE_KEYS | JOB_KEYS | {"error", "traceback"}
    assert (entry["job_id"], entry["class"], entry["method"], entry["queue"]) == (
        job_id,
        H,
        "fail",
        "mail",
    )
    assert (entry["attempt"], entry["outcome"], entry["level"]) == (0, "failed", "warning")
    assert entry["will_retry"] is True
    assert 0 <= entry["duration"] < 5
    assert entry["logger"] == "delayq.worker.calls"


def test_records_without_a_job_have_only_the_base_keys(tmp_path):
    path = tmp_path / "delayq.jsonl"
    setup_logging("warning", path, json_lines=True)

    logging.getLogger("delayq.test").warning("index rebuilt: %d entries", 3)
    logging.getLogger("delayq.test").info("not at this level")

    (entry,) = [json.loads(line) for line in path.read_text().splitlines()]
    assert set(entry) == BASE_KEYS
    assert entry["message"] == "index rebuilt: 3 entries"


def test_text_lines_name_the_logger_of_another_library_and_delayq_for_its_own(tmp_path):
    path = tmp_path / "delayq.log"
    setup_logging("info", path)

    logging.getLogger("httpx").info('HTTP Request: POST https://example.com "HTTP/1.1 200 OK"')
    logging.getLogger("delayq.worker.calls").warning("job 12 shop.Refund.run attempt 0: failed")
    logging.getLogger().warning("from the root logger")
    logging.getLogger("delayqueue").warning("a library whose name only starts like ours")

    labels = [line.split()[2:4] for line in path.read_text().splitlines()]
    assert labels == [
        ["httpx", "INFO"],
        ["delayq", "WARNING"],
        ["root", "WARNING"],
        ["delayqueue", "WARNING"],
    ]


def test_warning_level_leaves_job_lines_out(queue, cli_env, log, tmp_path):
    queue.add(H, "record", {"log": log})
    path = tmp_path / "delayq.log"

    invoke(cli_env, "run", "--log-file", str(path))

    assert " job " not in path.read_text()


def test_a_log_file_at_the_default_level_gets_failed_attempts_only(queue, cli_env, log, tmp_path):
    queue.add(H, "record", {"log": log})
    failed = queue.add(H, "fail", {"log": log, "n": 7})
    path = tmp_path / "delayq.log"

    result = invoke(cli_env, "run", "--log-file", str(path))

    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
    lines = path.read_text().splitlines()
    job_lines = [line for line in lines if " job " in line]
    assert (
        len(job_lines) == 1 and f"WARNING job {failed} {H}.fail attempt 0: failed" in job_lines[0]
    )
    assert "    ValueError: boom 7" in lines
    assert "    Traceback (most recent call last):" in lines


def test_an_explicit_warning_level_on_stderr_still_leaves_job_failures_out(queue, cli_env, log):
    queue.add(H, "fail", {"log": log})

    result = invoke(cli_env, "run", "--log-level", "warning")

    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_unknown_level_is_bad_input():
    with pytest.raises(BadInput, match="--log-level 'loud'"):
        setup_logging("loud")


def test_log_file_that_cannot_be_opened_exits_2(queue, cli_env, tmp_path):
    result = invoke(cli_env, "run", "--log-file", str(tmp_path / "missing" / "x.log"))

    assert result.exit_code == 2
    assert result.stderr.startswith("delayq: error: --log-file")
