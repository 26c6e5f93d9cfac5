"""`add(..., using=conn)` joins the application's transaction, on MariaDB and SQLite, through
each kind of connection: nothing is seen or run before the commit, a rollback leaves nothing
that will ever run, a committed job runs with no further call (after a crash right after the
commit too, and within a second under `run --loop`), and a connection to another database is
refused."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from urllib.parse import urlparse

import pymysql
import pytest

import delayq
from delayq.store.index.keys import schedule_key
from delayq.store.table.model import Job
from tests.conftest import DELAYQ, ROOT, STARTED
from tests.sample_handlers.jobs import read_log
from tests.support.callers import IN_PROCESS, KINDS, H, add_three, open_transaction
from tests.support.waiting import wait_for


def _rows(queue: delayq.Queue) -> int:
    return queue.table.model.select().count()


def _scheduled(queue: delayq.Queue) -> int:
    return int(queue.index.client.zcard(schedule_key("default")))


@pytest.mark.parametrize("kind", IN_PROCESS)
def test_jobs_added_in_a_transaction_are_unseen_until_it_commits_then_run(
    kind, backend, queue, log
):
    transaction = open_transaction(kind, backend["database_url"])
    try:
        ids = add_three(queue, transaction.using, log)
        assert len(set(ids)) == 3
        assert _rows(queue) == 0  # delayq's own session sees nothing yet
        assert _scheduled(queue) == 0
        assert queue.run().ran == 0
        transaction.commit()
    finally:
        transaction.close()
    assert _rows(queue) == 3
    report = queue.run()
    assert report.succeeded == 3
    assert sorted(read_log(log)) == ["1", "2", "3"]
    assert [job.status for job in Job.select().where(Job.id.in_(ids))] == [10, 10, 10]


@pytest.mark.parametrize("kind", IN_PROCESS)
def test_a_rolled_back_add_leaves_nothing_that_ever_runs(kind, backend, queue, log):
    transaction = open_transaction(kind, backend["database_url"])
    try:
        add_three(queue, transaction.using, log)
        transaction.rollback()
    finally:
        transaction.close()
    # SQLite hands a rolled-back id to the next insert: that job runs once, as itself.
    queue.add(H, "record", {"log": log, "n": "plain"})
    assert queue.run().ran == 1
    assert queue.run(now=time.time() + 86400).ran == 0
    assert read_log(log) == ["plain"]
    assert _rows(queue) == 1


def _add_in_a_process(kind: str, backend: dict[str, str], log: str, action: str) -> list[int]:
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.callers", kind, backend["database_url"],
         backend["redis_url"], log, action],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [int(word) for word in result.stdout.split()]


@pytest.mark.parametrize("kind", KINDS)
def test_jobs_committed_by_a_process_that_dies_at_once_still_run(kind, backend, queue, log):
    ids = _add_in_a_process(kind, backend, log, "crash")
    assert len(ids) == 3
    assert queue.run().succeeded == 3
    assert sorted(read_log(log)) == ["1", "2", "3"]


def test_a_django_rollback_leaves_nothing_that_ever_runs(backend, queue, log):
    _add_in_a_process("django", backend, log, "rollback")
    assert queue.run(now=time.time() + 86400).ran == 0
    assert _rows(queue) == 0
    assert read_log(log) == []


def _foreign_connection(backend: dict[str, str], tmp_path):
    url = backend["database_url"]
    if url.startswith("sqlite"):
        return sqlite3.connect(tmp_path / "app.db")
    parts = urlparse(url)
    # The same server, another database.
    return pymysql.connect(
        host=parts.hostname, port=parts.port or 3306, user=parts.username or "root",
        password=parts.password or "", database="information_schema",
    )  # fmt: skip


def test_a_connection_to_another_database_is_refused_in_one_line(backend, queue, log, tmp_path):
    conn = _foreign_connection(backend, tmp_path)
    try:
        with pytest.raises(delayq.BadInput) as refused:
            queue.add(H, "record", {"log": log}, using=conn)
        conn.commit()
    finally:
        conn.close()
    message = str(refused.value)
    assert "\n" not in message and "not to delayq's" in message, message
    assert _rows(queue) == 0 and _scheduled(queue) == 0
    if backend["database_url"].startswith("sqlite"):
        tables = sqlite3.connect(tmp_path / "app.db").execute("SELECT name FROM sqlite_master")
        assert tables.fetchall() == []


def test_using_takes_only_connections(queue, log):
    with pytest.raises(delayq.BadInput, match="using= takes a DB-API connection"):
        queue.add(H, "record", {"log": log}, using=object())
    assert _rows(queue) == 0


def test_the_sweep_reads_only_the_marked_rows_through_their_index(backend, queue):
    sweep = "SELECT id FROM delay_queue WHERE unindexed = 1 LIMIT 1000"
    if backend["database_url"].startswith("mysql"):
        plan = queue.db.execute_sql(f"EXPLAIN {sweep}").fetchall()
        assert [row[5] for row in plan] == ["job_unindexed"], plan  # the key used
    else:
        plan = queue.db.execute_sql(f"EXPLAIN QUERY PLAN {sweep}").fetchall()
        assert [row[3] for row in plan] == [
            "SEARCH delay_queue USING COVERING INDEX job_unindexed (unindexed=?)"
        ], plan


def test_a_committed_due_job_starts_within_a_second_under_run_loop(backend, queue, cli_env, log):
    runner = subprocess.Popen([*DELAYQ, "run", "--loop"], env=cli_env, cwd=ROOT)
    STARTED.append(runner)
    queue.add(H, "record", {"log": log, "n": "warm"})
    wait_for(lambda: read_log(log) == ["warm"], 30, "the loop to run a first job")
    transaction = open_transaction("dbapi", backend["database_url"])
    try:
        queue.add(H, "record", {"log": log, "n": "committed"}, using=transaction.using)
        transaction.commit()
        committed_at = time.monotonic()
    finally:
        transaction.close()
    wait_for(lambda: len(read_log(log)) == 2, 10, "the committed job to run")
    assert time.monotonic() - committed_at < 1.0
    runner.terminate()
    assert runner.wait(30) in (0, 143)
