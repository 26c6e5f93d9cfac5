"""`delayq run -v --json`: one JSON object per job as it finishes and one summing up the run,
with the job keys of --log-json's records, so a script can read a run line by line. Every
command is a real `delayq` process with stdout a pipe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from delayq import Status
from delayq.store.table.model import Job
from tests.faults.test_processes import delayq
from tests.ops.test_printing import HOSTILE, hidden_characters

H = "tests.sample_handlers.jobs"
R = "tests.sample_handlers.retrying"
JOB_KEYS = {"job_id", "class", "method", "queue", "attempt", "duration", "outcome", "will_retry"}


def json_lines(stdout: bytes) -> list[dict[str, Any]]:
    """Every line of `stdout`, each of which must be one JSON object."""
    text = stdout.decode()
    assert text.endswith("\n"), text
    lines = [json.loads(line) for line in text.splitlines()]
    assert all(isinstance(line, dict) for line in lines), lines
    return lines


def test_each_job_and_the_summary_are_json_lines_matching_the_json_log(
    queue, cli_env, log, tmp_path: Path
):
    succeeded = queue.add(H, "record", {"n": 1, "log": log}, ext="order-1")
    failed = queue.add(H, "fail", {"n": 2, "log": log})
    deferred = queue.add(R, "rate_limited", {"log": str(tmp_path / "rate.log")})
    log_file = tmp_path / "run.jsonl"

    result = delayq(
        cli_env, "run", "-v", "--json", "--log-level", "info", "--log-json",
        "--log-file", str(log_file),
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    *jobs, summary = json_lines(result.stdout)
    assert [line["record"] for line in jobs] == ["job"] * 3
    by_id = {line["job_id"]: line for line in jobs}
    assert set(by_id) == {succeeded, failed, deferred}
    assert {line["outcome"] for line in jobs} == {"success", "failed", "deferred"}
    assert by_id[failed]["will_retry"] is True
    assert by_id[failed]["detail"].startswith("ValueError: boom 2")
    assert by_id[deferred]["detail"].startswith("RetryLater: rate limited (deferred 1h")
    assert all(line["lateness"] >= 0 and line["duration"] >= 0 for line in jobs)
    logged = [entry for entry in json_lines(log_file.read_bytes()) if "job_id" in entry]
    assert len(logged) == 3
    for entry in logged:  # the keys both carry hold the same values
        line = by_id[entry["job_id"]]
        assert line.keys() >= JOB_KEYS
        assert {key: line[key] for key in JOB_KEYS} == {key: entry[key] for key in JOB_KEYS}
    assert summary["record"] == "summary"
    counts = {key: summary[key] for key in ("ran", "succeeded", "failed", "retried", "deferred")}
    assert counts == {"ran": 2, "succeeded": 1, "failed": 1, "retried": 1, "deferred": 1}
    assert summary["interrupted"] is None and summary["stuck"] == 0
    assert summary["stopped_early"] is False and summary["elapsed"] >= 0


def test_an_empty_run_prints_only_its_summary(queue, cli_env):
    result = delayq(cli_env, "run", "-v", "--json")

    assert result.returncode == 0, result.stderr
    (summary,) = json_lines(result.stdout)
    assert summary["record"] == "summary" and summary["ran"] == 0


def test_hostile_handler_text_comes_out_escaped_and_whole(queue, cli_env, log):
    queue.add(H, "fail", {"n": HOSTILE, "log": log}, ext=HOSTILE)

    result = delayq(cli_env, "run", "-v", "--json")

    assert result.returncode == 0, result.stderr
    assert not hidden_characters(result.stdout.decode())
    job, _ = json_lines(result.stdout)
    # The head line of a failure is one line: its own CR and LF are written as escapes.
    head = HOSTILE.replace("\r", "\\r").replace("\n", "\\n")
    assert job["detail"].startswith(f"ValueError: boom {head}")


def test_json_without_verbose_is_refused_before_anything_runs(queue, cli_env, log, tmp_path):
    job = queue.add(H, "record", {"n": 1, "log": log})
    log_file = tmp_path / "run.log"

    result = delayq(cli_env, "run", "--json", "--log-file", str(log_file))

    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr == b"delayq: error: --json shapes the lines of -v; add -v\n"
    assert not log_file.exists()
    assert not Path(log).exists()
    assert Job.get_by_id(job).status == Status.PENDING


def test_each_process_of_a_supervised_run_prints_json_lines(queue, cli_env, log):
    ids = {queue.add(H, "record", {"n": n, "log": log}) for n in range(6)}

    result = delayq(cli_env, "run", "-v", "--json", "--processes", "2")

    assert result.returncode == 0, result.stderr
    lines = json_lines(result.stdout)
    assert {line["job_id"] for line in lines if line["record"] == "job"} == ids
    summaries = [line for line in lines if line["record"] == "summary"]
    assert len(summaries) == 2
    assert sum(line["succeeded"] for line in summaries) == 6
