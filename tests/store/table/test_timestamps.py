"""`created` and `modified` are written in UTC; a row another producer wrote without run_at is
due when the database's own clock says it was created, whatever the time zone of this
process or of the database server."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone

import pytest

import delayq
from delayq.ops.overview import JobFilter
from delayq.store.index.keys import schedule_key
from tests.conftest import mysql_connect

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0


@pytest.fixture
def process_time_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Switch this process's local time zone (TZ and tzset), and back after the test."""

    def switch(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield switch
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def server_time_zone(
    backend: dict[str, str], request: pytest.FixtureRequest
) -> Iterator[Callable[[str], None]]:
    """Set MariaDB's global time zone (new connections take it), and back after the test: as
    the server's administrator, which delayq's user is not."""
    if not backend["database_url"].startswith("mysql"):
        yield lambda name: None
        return
    admin = mysql_connect(request.getfixturevalue("mariadb_admin_url"))
    with admin.cursor() as cursor:
        cursor.execute("SELECT @@global.time_zone")
        (original,) = cursor.fetchone()

    def switch(name: str) -> None:
        with admin.cursor() as cursor:
            cursor.execute("SET GLOBAL time_zone = %s", (name,))

    yield switch
    with admin.cursor() as cursor:
        cursor.execute("SET GLOBAL time_zone = %s", (original,))
    admin.close()


def utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, timezone.utc).replace(tzinfo=None)


def test_created_and_modified_are_written_in_utc_in_any_local_time_zone(
    make_queue, log, process_time_zone
):
    process_time_zone("Asia/Kathmandu")  # +05:45: no whole-hour mistake can hide
    queue = make_queue()
    job_id = queue.add(H, "record", {"log": log}, now=NOW)
    row = queue.table.model.get_by_id(job_id)
    assert (row.created, row.modified) == (utc(NOW), utc(NOW))

    queue.run(now=NOW + 5)

    row = queue.table.model.get_by_id(job_id)
    assert row.status == delayq.Status.SUCCESS
    assert (row.created, row.modified) == (utc(NOW), utc(NOW + 5))
    assert queue.list_jobs(JobFilter(), now=NOW + 5)[0]["modified"] == NOW + 5


def insert_without_run_at(queue: delayq.Queue, backend: dict[str, str], params: dict) -> int:
    """A foreign producer's row: no run_at, `created` from the database's clock, 2 min ago."""
    if backend["database_url"].startswith("mysql"):
        conn = mysql_connect(backend["database_url"])  # a new session, in the server's zone
        with conn.cursor() as cursor:
            cursor.execute(
                "INSERT INTO delay_queue (params, created) VALUES (%s, NOW() - INTERVAL 2 MINUTE)",
                (json.dumps(params),),
            )
            job_id = cursor.lastrowid
        conn.close()
        return int(job_id)
    cursor = queue.db.execute_sql(
        "INSERT INTO delay_queue (params, created) VALUES (?, datetime('now', '-2 minutes'))",
        (json.dumps(params),),
    )
    return int(cursor.lastrowid)


def test_a_row_without_run_at_is_due_from_its_created_in_the_servers_time_zone(
    make_queue, backend, log, process_time_zone, server_time_zone
):
    server_time_zone("+05:00")
    process_time_zone("Etc/GMT+12")  # UTC-12: read as local, `created` is 17 hours off
    queue = make_queue()
    job_id = insert_without_run_at(
        queue, backend, {"class": H, "method": "record", "data": {"log": log, "n": "foreign"}}
    )

    oldest = queue.status().queues["default"].oldest_due_at
    assert oldest is not None and abs(oldest - (time.time() - 120)) < 30
    report = queue.run()  # the orphan sweep indexes it at its due time, and it is due

    assert report.succeeded == 1
    assert queue.show(job_id)["status"] == "success"
    assert queue.index.client.zcard(schedule_key("default")) == 0
