"""Metrics for node_exporter's textfile collector: the exposition's names and values, the
atomic replace, the lateness histogram, and `delayq run --metrics-file` on both backends."""

from __future__ import annotations

import os
import stat

import pytest
from prometheus_client.parser import text_string_to_metric_families

from delayq import ConfigError
from delayq.ops.metrics import write_metrics
from delayq.ops.overview import QueueStats
from delayq.worker.run import RunReport
from tests.invoke import invoke
from tests.sample_handlers.jobs import read_log

H = "tests.sample_handlers.jobs"
REPORT = RunReport(claimed=5, succeeded=3, failed=2, retried=1, missed=4, elapsed=1.25)
STATS = {
    "default": QueueStats(pending=7, pending_due=2, oldest_due_id=9, oldest_due_lag=42.5),
    "mail": QueueStats(pending=1),
}


def samples(path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of an exposition file."""
    out = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_run_totals_duration_and_per_queue_backlog(tmp_path):
    path = tmp_path / "delayq.prom"

    write_metrics(path, REPORT, STATS, now=1_800_000_000.0)

    found = samples(path)
    for outcome, value in [
        ("claimed", 5),
        ("succeeded", 3),
        ("failed", 2),
        ("retried", 1),
        ("missed", 4),
    ]:
        key = ("delayq_last_run_jobs", (("outcome", outcome), ("queue", "all")))
        assert found[key] == value
    assert found[("delayq_last_run_duration_seconds", ())] == 1.25
    assert found[("delayq_last_run_timestamp_seconds", ())] == 1_800_000_000.0
    assert found[("delayq_backlog_jobs", (("queue", "default"),))] == 2
    assert found[("delayq_backlog_jobs", (("queue", "mail"),))] == 0
    assert found[("delayq_oldest_due_age_seconds", (("queue", "default"),))] == 42.5
    assert found[("delayq_oldest_due_age_seconds", (("queue", "mail"),))] == 0
    assert found[("delayq_last_run_lateness_seconds_count", (("queue", "all"),))] == 0


def test_lateness_histogram_comes_from_the_report(tmp_path):
    path = tmp_path / "delayq.prom"
    report = RunReport(succeeded=4)
    for seconds in (0.0005, 0.003, 45, 4000):
        report.lateness.observe(seconds)

    write_metrics(path, report, STATS)

    found = samples(path)

    def bucket(le: str) -> float:
        return found[("delayq_last_run_lateness_seconds_bucket", (("le", le), ("queue", "all")))]

    assert (bucket("0.001"), bucket("0.005"), bucket("60.0"), bucket("300.0")) == (1, 2, 3, 3)
    assert bucket("+Inf") == 4
    assert found[("delayq_last_run_lateness_seconds_count", (("queue", "all"),))] == 4
    assert found[("delayq_last_run_lateness_seconds_sum", (("queue", "all"),))] == 4045.0035


def test_file_is_replaced_whole_world_readable_with_no_temporary_left(tmp_path):
    path = tmp_path / "delayq.prom"
    path.write_text("old contents\n")
    inode = path.stat().st_ino

    write_metrics(path, REPORT, STATS)

    assert path.stat().st_ino != inode  # a new file renamed over the old one
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["delayq.prom"]
    assert "old contents" not in path.read_text()


def test_a_directory_that_does_not_exist_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="--metrics-file"):
        write_metrics(tmp_path / "missing" / "delayq.prom", REPORT, STATS)


def test_run_writes_the_metrics_file(queue, cli_env, log, tmp_path):
    queue.add(H, "record", {"log": log})
    queue.add(H, "fail", {"log": log})
    queue.add(H, "record", {"log": log}, delay=3600, queue="mail")
    path = tmp_path / "delayq.prom"

    result = invoke(cli_env, "run", "--metrics-file", str(path))

    assert (result.exit_code, result.stdout) == (0, ""), result.output
    found = samples(path)
    assert found[("delayq_last_run_jobs", (("outcome", "succeeded"), ("queue", "all")))] == 1
    assert found[("delayq_last_run_jobs", (("outcome", "retried"), ("queue", "all")))] == 1
    assert found[("delayq_backlog_jobs", (("queue", "default"),))] == 0
    assert found[("delayq_backlog_jobs", (("queue", "mail"),))] == 0
    assert found[("delayq_last_run_duration_seconds", ())] > 0


def test_run_with_an_unwritable_metrics_path_says_so_and_exits_2(queue, cli_env, tmp_path):
    result = invoke(cli_env, "run", "--metrics-file", str(tmp_path / "no" / "x.prom"))

    assert result.exit_code == 2
    assert result.stderr.startswith("delayq: error: --metrics-file")


@pytest.mark.parametrize(
    "where", ["missing/delayq.prom", "a-directory", "nul\0.prom"], ids=["missing", "dir", "nul"]
)
def test_an_unwritable_metrics_path_is_refused_before_any_job_is_claimed(
    queue, cli_env, log, tmp_path, where
):
    (tmp_path / "a-directory").mkdir()
    job_id = queue.add(H, "record", {"log": log})

    result = invoke(cli_env, "run", "--metrics-file", str(tmp_path / where))

    assert result.exit_code == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("delayq: error: --metrics-file")
    assert queue.show(job_id)["status"] == "pending"
    assert queue.index.size("default") == 1
    assert read_log(log) == []
