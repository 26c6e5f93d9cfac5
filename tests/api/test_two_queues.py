"""Two Queues in one process, each on its own database and its own Redis server: side by side
and running at the same time in two threads, no row, index entry or outcome crosses over."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import delayq
from delayq import Status
from delayq.config import Settings
from delayq.store import embedded
from delayq.store.index.keys import schedule_key
from delayq.store.table.database import sqlite_url
from delayq.worker.report import RunReport
from tests.conftest import HANDLERS, mysql_connect

H = "tests.sample_handlers.jobs"
JOBS = 300  # several batches of 50, so the bookkeeping thread leases ahead and commits


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def second_redis_url(tmp_path: Path) -> Iterator[str]:
    """A Redis server of its own on a free loopback port, stopped after the test."""
    port = free_port()
    server = subprocess.Popen(
        [str(embedded.server_binary()), "--port", str(port), "--bind", "127.0.0.1"]
        + ["--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail(f"the second Redis on port {port} did not start", pytrace=False)
            time.sleep(0.02)
    client.close()
    yield url
    server.terminate()
    server.wait(10)


@pytest.fixture
def second_database_url(backend: dict[str, str], tmp_path: Path) -> str:
    """Another database on the same backend: a second SQLite file, or a second MariaDB
    database, created empty."""
    if backend["database_url"].startswith("sqlite"):
        return sqlite_url(tmp_path / "second.db")
    name = backend["database_url"].rsplit("/", 1)[1] + "_second"
    conn = mysql_connect(backend["database_url"])
    with conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
        cursor.execute(f"DROP TABLE IF EXISTS `{name}`.delay_queue")
    conn.close()
    return backend["database_url"].rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def two_queues(
    backend: dict[str, str],
    second_database_url: str,
    second_redis_url: str,
    tmp_path: Path,
) -> Iterator[tuple[delayq.Queue, delayq.Queue]]:
    def open_queue(database_url: str, redis_url: str) -> delayq.Queue:
        settings = Settings(
            database_url=database_url,
            redis_url=redis_url,
            handlers=HANDLERS,
            home=tmp_path / "home",
            batch_size=50,
        )
        queue = delayq.connect(settings)
        queue.init()
        return queue

    first = open_queue(backend["database_url"], backend["redis_url"])
    second = open_queue(second_database_url, second_redis_url)
    yield first, second
    first.close()
    second.close()


def add_jobs(queue: delayq.Queue, name: str, log: str, count: int) -> list[int]:
    specs = [delayq.JobSpec(H, "record", {"log": log, "n": f"{name}-{n}"}) for n in range(count)]
    return queue.add_many(specs)


def statuses(queue: delayq.Queue) -> Counter[str]:
    model = queue.table.model
    return Counter(Status(status).word for (status,) in model.select(model.status).tuples())


def logged(path: Path) -> Counter[str]:
    return Counter(path.read_text().splitlines()) if path.exists() else Counter()


def scheduled(queue: delayq.Queue) -> list[str]:
    return [member.decode() for member in queue.index.client.zrange(schedule_key("default"), 0, -1)]


def test_two_queues_side_by_side_keep_their_own_rows_and_schedules(two_queues, tmp_path):
    first, second = two_queues
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    second.cancel(add_jobs(second, "filler", str(second_log), 1)[0])  # ids no longer line up
    first_ids = add_jobs(first, "first", str(first_log), 3)
    second_ids = add_jobs(second, "second", str(second_log), 2)

    assert sorted(map(int, scheduled(first))) == first_ids
    assert sorted(map(int, scheduled(second))) == second_ids
    report = first.run()

    assert (report.succeeded, report.failed) == (3, 0)
    assert logged(first_log) == Counter({f"first-{n}": 1 for n in range(3)})
    assert not second_log.exists()
    assert statuses(first) == Counter({"success": 3})
    assert statuses(second) == Counter({"pending": 2, "cancelled": 1})
    assert sorted(map(int, scheduled(second))) == second_ids
    assert [view["status"] for view in map(second.show, second_ids)] == ["pending", "pending"]


def run_in_thread(queue: delayq.Queue, reports: dict[str, object], name: str) -> threading.Thread:
    def target() -> None:
        try:
            reports[name] = queue.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test to fail on
            reports[name] = exc

    return threading.Thread(target=target, name=f"run-{name}")


def test_two_queues_running_at_once_in_two_threads_do_not_cross_over(two_queues, tmp_path):
    first, second = two_queues
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    second.cancel(add_jobs(second, "filler", str(second_log), 1)[0])
    add_jobs(first, "first", str(first_log), JOBS)
    add_jobs(second, "second", str(second_log), JOBS - 17)
    reports: dict[str, object] = {}
    threads = [run_in_thread(first, reports, "first"), run_in_thread(second, reports, "second")]

    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    assert not any(thread.is_alive() for thread in threads)
    first_report, second_report = reports["first"], reports["second"]
    assert isinstance(first_report, RunReport), first_report
    assert isinstance(second_report, RunReport), second_report
    assert (first_report.succeeded, second_report.succeeded) == (JOBS, JOBS - 17)
    assert logged(first_log) == Counter({f"first-{n}": 1 for n in range(JOBS)})
    assert logged(second_log) == Counter({f"second-{n}": 1 for n in range(JOBS - 17)})
    assert statuses(first) == Counter({"success": JOBS})
    assert statuses(second) == Counter({"success": JOBS - 17, "cancelled": 1})
    assert scheduled(first) == scheduled(second) == []
    for queue, name in ((first, "first"), (second, "second")):
        messages = {row.message for row in queue.table.model.select()}
        assert all(name in message for message in messages - {"cancelled"}), messages


def test_one_queues_rows_are_invisible_to_the_other(two_queues, tmp_path):
    first, second = two_queues
    [job_id] = add_jobs(first, "first", str(tmp_path / "first.log"), 1)

    assert first.show(job_id)["status"] == "pending"
    with pytest.raises(delayq.JobNotFound):
        second.show(job_id)
    assert second.peek() == []
    assert statuses(second) == Counter()
    assert first.show(job_id)["status"] == "pending"
