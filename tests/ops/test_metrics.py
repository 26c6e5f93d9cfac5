"""Metrics for Prometheus: counters and histograms that separate `delayq run` processes add up
in Redis, the queue gauges, the textfile (atomic, rewritten by a loop), `delayq metrics`, and
what hostile names or a Redis outage do to them — on both backends, parsed with
prometheus_client's own parser."""

from __future__ import annotations

import json
import os
import signal
import stat
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from delayq import ConfigError
from delayq.ops.metrics import exposition
from delayq.ops.textfile import write_file
from delayq.store.index.keys import METRICS_HANDLERS_KEY
from delayq.store.index.tallies import MAX_HANDLERS, OTHER_HANDLERS, label
from delayq.store.table.jobs import Jobs
from delayq.store.table.leases import Leases
from delayq.store.table.model import Job, Status
from delayq.store.table.outcomes import Outcome
from delayq.worker.group_commits import OutcomeBuffer
from delayq.worker.retry import MAX_LOST_LEASES
from tests.faults.test_outages import private_redis, queue_on  # noqa: F401 - a fixture
from tests.faults.test_processes import delayq, start
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> tuple[Samples, dict[str, str]]:
    """({(sample name, sorted labels): value}, {family: type}) of an exposition."""
    found, types = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found, types


def of(handler: str, queue: str = "default") -> tuple[tuple[str, str], ...]:
    return (("handler", f"{H}.{handler}"), ("queue", queue))


def test_counters_and_histograms_add_up_over_two_separate_runs(queue, cli_env, log, tmp_path):
    path = tmp_path / "delayq.prom"
    queue.add(H, "record", {"log": log})
    queue.add(H, "fail", {"log": log})
    first = delayq(cli_env, "run", "--metrics-file", str(path))
    queue.add(H, "record", {"log": log})
    queue.add(H, "record", {"log": log}, queue="mail")
    queue.add(H, "record", {"log": log}, delay=3600, queue="mail")

    second = delayq(cli_env, "run", "--metrics-file", str(path))

    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    assert (first.stdout, second.stdout) == (b"", b"")
    found, types = parse(path.read_text())
    assert found[("delayq_jobs_succeeded_total", of("record"))] == 2
    assert found[("delayq_jobs_processed_total", of("record"))] == 2
    assert found[("delayq_jobs_failed_total", of("fail"))] == 1
    assert found[("delayq_jobs_retried_total", of("fail"))] == 1
    assert found[("delayq_jobs_succeeded_total", of("record", "mail"))] == 1
    assert found[("delayq_job_lateness_seconds_count", of("record"))] == 2
    assert found[("delayq_job_duration_seconds_count", of("fail"))] == 1
    assert found[("delayq_job_duration_seconds_sum", of("record"))] > 0
    inf = (("handler", f"{H}.record"), ("le", "+Inf"), ("queue", "default"))
    assert found[("delayq_job_lateness_seconds_bucket", inf)] == 2
    assert types["delayq_jobs_succeeded"] == "counter"
    assert types["delayq_job_lateness_seconds"] == "histogram"
    assert found[("delayq_pending_jobs", (("queue", "mail"),))] == 1  # the one due later
    assert found[("delayq_backlog_jobs", (("queue", "mail"),))] == 0
    assert found[("delayq_pending_jobs", (("queue", "default"),))] == 1  # the retry, in 15 s
    assert found[("delayq_backlog_jobs", (("queue", "default"),))] == 0
    assert found[("delayq_last_run_jobs", (("outcome", "succeeded"),))] == 2  # this run's own
    assert found[("delayq_last_run_duration_seconds", ())] > 0


def test_the_text_has_help_and_type_lines_and_cumulative_buckets(queue, cli_env, log):
    queue.add(H, "record", {"log": log})
    assert delayq(cli_env, "run").returncode == 0

    text = exposition(queue.table, queue.index, time.time()).decode()

    assert "# TYPE delayq_jobs_succeeded_total counter" in text
    assert "# HELP delayq_job_lateness_seconds " in text
    found, _ = parse(text)
    buckets = [
        value
        for (name, labels), value in found.items()
        if name == "delayq_job_lateness_seconds_bucket" and ("queue", "default") in labels
    ]
    assert buckets == sorted(buckets) and buckets[-1] == 1


def test_a_loop_rewrites_the_file_while_it_runs(queue, cli_env, log, tmp_path):
    path = tmp_path / "delayq.prom"
    args = ("--metrics-file", str(path), "--metrics-interval", "1s", "--log-level", "warning")
    runner = start(cli_env, "run", "--loop", *args)
    wait_for(path.exists, 30, "the first rewrite")
    queue.add(H, "record", {"log": log})

    def counted() -> bool:
        found, _ = parse(path.read_text())
        return found.get(("delayq_jobs_succeeded_total", of("record"))) == 1

    wait_for(counted, 30, "a rewrite counting the job")
    assert runner.poll() is None  # rewritten by the running loop, not at its exit
    runner.send_signal(signal.SIGTERM)
    runner.communicate(timeout=30)
    assert runner.returncode == 128 + signal.SIGTERM
    assert ("delayq_last_run_jobs", (("outcome", "succeeded"),)) in parse(path.read_text())[0]


def test_delayq_metrics_prints_the_exposition_or_writes_the_file(queue, cli_env, log, tmp_path):
    queue.add(H, "record", {"log": log})
    assert delayq(cli_env, "run").returncode == 0
    path = tmp_path / "delayq.prom"

    printed = invoke(cli_env, "metrics")
    written = invoke(cli_env, "metrics", "--file", str(path))

    assert (printed.exit_code, written.exit_code, written.stdout) == (0, 0, "")
    assert parse(printed.stdout)[0][("delayq_jobs_succeeded_total", of("record"))] == 1
    assert parse(path.read_text())[0][("delayq_jobs_succeeded_total", of("record"))] == 1
    assert "delayq_last_run_jobs" not in printed.stdout  # no run of its own to report


def test_delayq_metrics_says_when_the_last_recorded_run_ended(queue, cli_env, log, tmp_path):
    # A cron'd `delayq metrics --file` is the only writer of the file in that setup: the
    # DelayqRunOverdue alert needs the time `delayq status` reads from Redis, from it too.
    never = invoke(cli_env, "metrics")
    queue.add(H, "record", {"log": log})
    assert delayq(cli_env, "run").returncode == 0
    last = queue.status().last_run
    path = tmp_path / "delayq.prom"

    printed = invoke(cli_env, "metrics")
    written = invoke(cli_env, "metrics", "--file", str(path))

    assert (never.exit_code, printed.exit_code, written.exit_code) == (0, 0, 0)
    # No run recorded: no series, so that the alert's absent() fires rather than a made-up 0.
    assert "delayq_last_run_timestamp_seconds" not in never.stdout
    assert last is not None and last.finished_at is not None
    for text in (printed.stdout, path.read_text()):
        found, types = parse(text)
        assert found[("delayq_last_run_timestamp_seconds", ())] == last.finished_at
        assert types["delayq_last_run_timestamp_seconds"] == "gauge"


@pytest.mark.parametrize("where", ["missing/x.prom", "a-directory", "nul\0.prom"])
def test_metrics_to_an_unwritable_file_is_one_line_and_exit_2(queue, cli_env, tmp_path, where):
    (tmp_path / "a-directory").mkdir()

    result = invoke(cli_env, "metrics", "--file", str(tmp_path / where))

    assert (result.exit_code, result.stdout) == (2, "")
    (line,) = result.stderr.splitlines()
    assert line.startswith("delayq: error: --metrics-file")


@pytest.mark.parametrize("interval", ["0", "0.5s", "-1", "soon", "1e400"])
def test_a_bad_metrics_interval_is_refused_before_any_job_runs(queue, cli_env, log, interval):
    job_id = queue.add(H, "record", {"log": log})

    result = invoke(cli_env, "run", "--loop", "--metrics-interval", interval)

    assert (result.exit_code, result.stdout) == (2, "")
    (line,) = result.stderr.splitlines()
    assert "--metrics-interval" in line
    assert queue.show(job_id)["status"] == "pending"
    assert read_log(log) == []


HOSTILE = 'a"b\\c\nd\udcff\x07{}="'


def test_hostile_handler_names_are_escaped_labels_that_parse_back(queue, cli_env, log):
    job_id = queue.add(H, "record", {"log": log}, now=time.time() - 600)
    params = json.dumps({"class": HOSTILE, "method": "m\r", "data": {}})
    Job.update(params=params).where(Job.id == job_id).execute()

    result = delayq(cli_env, "run", "--since", "5m")

    assert result.returncode == 0, result.stderr
    assert queue.show(job_id)["status"] == "missed"
    found, _ = parse(invoke(cli_env, "metrics").stdout)
    expected = label(f"{HOSTILE}.m\r")
    assert "\n" not in expected and "\udcff" not in expected and '"' in expected
    assert found[("delayq_jobs_missed_total", (("handler", expected), ("queue", "default")))] == 1


def test_handlers_past_the_cap_share_one_label(queue, cli_env, log):
    queue.index.client.sadd(METRICS_HANDLERS_KEY, *[f"h{n}" for n in range(MAX_HANDLERS)])
    queue.add(H, "record", {"log": log})

    assert delayq(cli_env, "run").returncode == 0

    found, _ = parse(invoke(cli_env, "metrics").stdout)
    other = (("handler", OTHER_HANDLERS), ("queue", "default"))
    assert found[("delayq_jobs_succeeded_total", other)] == 1
    assert ("delayq_jobs_succeeded_total", of("record")) not in found
    assert queue.index.client.scard(METRICS_HANDLERS_KEY) == MAX_HANDLERS


def test_redis_gone_while_the_tally_is_written_loses_no_outcome(
    backend,
    private_redis,  # noqa: F811 - the fixture imported above
    cli_env,
    log,
    tmp_path,
):
    queue = queue_on(backend, private_redis, tmp_path)
    job_id = queue.add(H, "stop_redis", {"log": log, "url": private_redis.url})
    env = {**cli_env, "DELAYQ_REDIS_URL": private_redis.url}

    result = delayq(env, "run")

    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith(b"delayq: error: Redis error"), result.stderr
    assert b"Traceback" not in result.stderr
    assert read_log(log) == ["stop_redis"]
    # This Queue's own model: the shared Job class is bound to the `queue` fixture's database,
    # whichever test on this worker set it up last.
    row = queue.table.model.get_by_id(job_id)
    assert row.status == Status.SUCCESS
    queue.close()


def test_the_running_gauge_reads_the_status_index_not_the_table(queue, backend):
    if not backend["database_url"].startswith("mysql"):
        pytest.skip("EXPLAIN's format is MariaDB's")
    sql, params = Jobs(queue.table).running_query().sql()

    plan = queue.db.execute_sql("EXPLAIN " + sql, params).fetchall()
    columns = [column[0] for column in queue.db.execute_sql("EXPLAIN " + sql, params).description]
    (row,) = [dict(zip(columns, line, strict=True)) for line in plan]

    assert row["type"] in ("ref", "range"), row
    assert "status" in (row["key"] or ""), row


def test_file_is_replaced_whole_world_readable_with_no_temporary_left(tmp_path):
    path = tmp_path / "delayq.prom"
    path.write_text("old contents\n")
    inode = path.stat().st_ino

    write_file(path, b"new\n")

    assert path.stat().st_ino != inode  # a new file renamed over the old one
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["delayq.prom"]
    assert path.read_text() == "new\n"


def test_a_directory_that_does_not_exist_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="--metrics-file"):
        write_file(tmp_path / "missing" / "delayq.prom", b"")


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
    assert queue.index.schedule.size("default") == 1
    assert read_log(log) == []


def _counted(queue, now: float) -> Samples:
    return parse(exposition(queue.table, queue.index, now).decode())[0]


def test_a_dead_runs_jobs_count_whether_recorded_from_its_journal_or_put_back(queue, log):
    """A run died holding two jobs: one had finished (its outcome journaled, its tally never
    sent), one had not (put back, then run). Both show in the metrics."""
    now = time.time()
    finished = queue.add(H, "record", {"log": log}, now=now - 200)
    unfinished = queue.add(H, "echo", "again", now=now - 200)
    Leases(queue.table).mark_running([finished, unfinished], "dead-run", now - 120, now - 180)
    record = json.dumps([int(Status.SUCCESS), "recorded", None, now - 170])
    queue.index.journal.write_many("default", [(finished, record)])

    report = queue.run(now=now)

    assert (report.recovered, report.succeeded) == (2, 1)  # the journaled one, the one put back
    found = _counted(queue, now)
    assert found[("delayq_jobs_succeeded_total", of("record"))] == 1
    assert found[("delayq_jobs_recovered_total", of("echo"))] == 1
    assert found[("delayq_jobs_succeeded_total", of("echo"))] == 1
    # The journal keeps no wall time: the journaled job adds no histogram sample.
    assert ("delayq_job_duration_seconds_count", of("record")) not in found


def test_a_poison_job_counts_as_failed_and_poisoned(queue, log):
    now = time.time()
    job_id = queue.add(H, "echo", "kills its run", now=now - 200)
    Leases(queue.table).mark_running([job_id], "dead-run", now - 120, now - 180)
    Job.update(lost_leases=MAX_LOST_LEASES - 1).where(Job.id == job_id).execute()

    report = queue.run(now=now)

    assert report.failed == 1 and queue.show(job_id)["status"] == "failed"
    found = _counted(queue, now)
    assert found[("delayq_jobs_poisoned_total", of("echo"))] == 1
    assert found[("delayq_jobs_failed_total", of("echo"))] == 1
    assert found[("delayq_jobs_recovered_total", of("echo"))] == 0


def test_outcomes_written_to_the_table_alone_count_once_redis_answers(queue):
    """`salvage`, the fallback when a group commit failed, writes the table without Redis;
    when Redis still answers, their tally is added too."""
    now = time.time()
    job_id = queue.add(H, "echo", "salvaged", now=now)
    (job,) = Leases(queue.table).mark_running([job_id], "run-a", now + 60, now)
    buffer = OutcomeBuffer(queue.table, queue.index, "default", "run-a")
    outcome = Outcome(
        job=job, status=Status.SUCCESS, message="ok", finished_at=now, class_path=H, method="echo"
    )
    buffer.add_many([outcome], more_coming=True)  # held for the group commit

    assert buffer.salvage().succeeded == 1

    assert queue.show(job_id)["status"] == "success"
    assert _counted(queue, now)[("delayq_jobs_succeeded_total", of("echo"))] == 1
