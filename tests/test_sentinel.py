"""delayq on a redis+sentinel:// URL, against a Sentinel group of real servers the test
starts (tests/sentinels.py): jobs run through the primary the sentinels name, and after a
failover (SENTINEL FAILOVER, or kill -9 of the primary) a looping run that was up and a run
started afterwards both go on against the new primary, each job running once.

Each test waits for the failover to settle: what a failover may roll back before that is
not what these tests are about.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import delayq
from delayq.config import Settings
from delayq.store.index import Index
from delayq.store.keys import queue_key, schedule_key
from delayq.store.urls import open_redis
from tests.conftest import DELAYQ, HANDLERS, IN_CI, ROOT, _drop_table
from tests.sample_handlers.jobs import read_log
from tests.sentinels import SentinelGroup
from tests.test_processes import start
from tests.waiting import wait_for

H = "tests.sample_handlers.jobs"
FAULTS: dict[str, Callable[[SentinelGroup], int]] = {
    "sentinel-failover": SentinelGroup.fail_over,
    "kill-9-primary": SentinelGroup.kill_primary,
}


@pytest.fixture
def group(tmp_path: Path) -> Iterator[SentinelGroup]:
    if shutil.which("redis-server") is None:
        message = "redis-server is not installed; bin/test installs it"
        pytest.fail(message) if IN_CI else pytest.skip(message)
    servers = SentinelGroup(tmp_path)
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def database_url(mariadb_url: str) -> Iterator[str]:
    _drop_table(mariadb_url)
    yield mariadb_url
    _drop_table(mariadb_url)


@pytest.fixture
def env(group: SentinelGroup, database_url: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a `delayq` process on the group and the test database."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env.update(
        DELAYQ_DATABASE_URL=database_url,
        DELAYQ_REDIS_URL=group.url,
        DELAYQ_HANDLERS=",".join(HANDLERS),
        DELAYQ_HOME=str(tmp_path / "home"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    return env


@pytest.fixture
def queue(group: SentinelGroup, database_url: str, tmp_path: Path) -> Iterator[delayq.Queue]:
    settings = Settings(
        database_url=database_url,
        redis_url=group.url,
        handlers=HANDLERS,
        home=tmp_path / "home",
    )
    queue = delayq.connect(settings)
    queue.init()
    yield queue
    queue.close()


def add(queue: delayq.Queue, log: str, *names: str, delay: str | None = None) -> list[int]:
    return [queue.add(H, "record", {"log": log, "n": name}, delay=delay) for name in names]


def run_once(env: dict[str, str]) -> None:
    done = subprocess.run([*DELAYQ, "run"], env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""


def assert_each_ran_once(queue: delayq.Queue, log: str, names: dict[int, str]) -> None:
    assert Counter(read_log(log)) == Counter(names.values())
    assert {queue.show(job_id)["status"] for job_id in names} == {"success"}


def test_a_queue_on_a_sentinel_url_adds_and_runs_jobs(group, queue, env, log):
    ids = add(queue, log, "a", "b", "c")

    run_once(env)

    assert_each_ran_once(queue, log, dict(zip(ids, "abc", strict=True)))
    primary = group.client(group.primary_port())
    assert primary.exists(schedule_key("default")) == 0  # claimed there, and emptied
    assert primary.hlen(queue_key("default", "journal")) == 0
    primary.close()


@pytest.mark.parametrize("concurrency", ["1", "4"], ids=["sequential", "concurrent"])
@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS)
def test_runs_go_on_against_the_new_primary_after_a_failover(
    group, queue, env, log, fault, concurrency
):
    before = add(queue, log, "before")
    due_later = add(queue, log, "due-later-1", "due-later-2", delay="2s")
    loop = start(env, "run", "--loop", "--concurrency", concurrency, "--log-level", "warning")
    wait_for(lambda: "before" in read_log(log), 60, "the job added before the failover")
    # Nothing a failover may roll back: the replica has every write so far.
    assert queue.index.client.wait(1, 5000) == 1

    fault(group)
    after = add(queue, log, "after-1", "after-2")
    expected = ["before", "due-later-1", "due-later-2", "after-1", "after-2"]
    wait_for(lambda: sorted(read_log(log)) == sorted(expected), 60, "the loop to run them all")
    loop.send_signal(signal.SIGTERM)
    _, stderr = loop.communicate(timeout=60)
    assert loop.returncode == 128 + signal.SIGTERM, stderr.decode()
    assert b"Traceback" not in stderr
    later = add(queue, log, "started-after")
    run_once(env)

    names = dict(zip(before + due_later + after + later, [*expected, "started-after"], strict=True))
    assert_each_ran_once(queue, log, names)


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS)
def test_scripts_and_the_journal_follow_the_primary_through_a_failover(group, fault):
    client = open_redis(group.url, socket_connect_timeout=5, socket_timeout=30)
    index = Index(client)
    index.schedule.add("default", 1, 100.0)
    index.journal.write("default", 1, "before")
    assert client.wait(1, 5000) == 1

    new = group.client(fault(group))
    sha = index.schedule._add_jobs.sha
    assert new.script_exists(sha) == [False]  # the script cache is not replicated
    index.schedule.add("default", 2, 200.0)  # finds the new primary, loads the script
    # The journal's connection was on the old primary: it takes one on the new primary
    # instead of writing into a connection nobody reads any more.
    index.journal.write("default", 2, "after")
    index.journal.close()

    assert new.script_exists(sha) == [True]
    assert new.zrange(schedule_key("default"), 0, -1, withscores=True) == [
        (b"1", 100.0),
        (b"2", 200.0),
    ]
    assert new.hgetall(queue_key("default", "journal")) == {b"1": b"before", b"2": b"after"}
    assert client.lrange("no-such-list", 0, -1) == []  # no stray replies left to read
    new.close()
    client.close()


def test_an_add_while_the_primary_is_down_waits_for_the_new_one(group, queue, env, log):
    old = group.kill_primary_now()

    job_id = queue.add(H, "record", {"log": log, "n": "during"})  # retried until promoted

    new = group.wait_for_new_primary(old)
    primary = group.client(new)
    assert primary.zscore(schedule_key("default"), job_id) is not None
    primary.close()
    run_once(env)
    assert_each_ran_once(queue, log, {job_id: "during"})


def test_status_and_doctor_work_on_a_sentinel_url_from_the_config_file(group, queue, env, tmp_path):
    config = tmp_path / "delayq.toml"
    config.write_text(f'redis_url = "{group.url}"\n')
    env = {key: value for key, value in env.items() if key != "DELAYQ_REDIS_URL"}
    env["DELAYQ_CONFIG"] = str(config)

    status = subprocess.run([*DELAYQ, "status"], env=env, capture_output=True, timeout=60)
    doctor = subprocess.run([*DELAYQ, "doctor"], env=env, capture_output=True, timeout=60)

    assert status.returncode == 0, status.stderr.decode()
    assert doctor.returncode == 0, doctor.stdout.decode() + doctor.stderr.decode()
    assert "redis+sentinel://127.0.0.1:" in doctor.stdout.decode()
