"""delayq on a redis+sentinel:// URL, against a Sentinel group of real servers the test
starts (tests/support/sentinels.py): jobs run through the primary the sentinels name, and after a
failover (SENTINEL FAILOVER, or kill -9 of the primary) a looping run that was up and a run
started afterwards both go on against the new primary, each job running once.

Each test waits for the failover to settle: what a failover may roll back before that is
not what these tests are about.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import delayq
from delayq.store.index.keys import queue_key, schedule_key
from delayq.store.index.parts import Index
from delayq.store.urls import open_redis
from tests.conftest import DELAYQ
from tests.support.sentinels import SentinelGroup
from tests.support.topologies import (
    a_rolled_back_add_is_put_back_at_once,
    add,
    assert_each_ran_once,
    database_url,  # noqa: F401 - a fixture
    need_servers,
    open_queue,
    process_env,
    run_once,
    run_through_a_failover,
    status_doctor_and_the_web_page_show_the_topology,
)
from tests.support.waiting import wait_for

FAULTS: dict[str, Callable[[SentinelGroup], int]] = {
    "sentinel-failover": SentinelGroup.fail_over,
    "kill-9-primary": SentinelGroup.kill_primary,
}


@pytest.fixture
def group(tmp_path: Path) -> Iterator[SentinelGroup]:
    need_servers("redis-server")
    servers = SentinelGroup(tmp_path)
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def env(group: SentinelGroup, database_url: str, tmp_path: Path) -> dict[str, str]:  # noqa: F811
    return process_env(group.url, database_url, tmp_path)


@pytest.fixture
def queue(
    group: SentinelGroup,
    database_url: str,  # noqa: F811
    tmp_path: Path,
) -> Iterator[delayq.Queue]:
    queue = open_queue(group.url, database_url, tmp_path)
    yield queue
    queue.close()


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
    run_through_a_failover(
        queue,
        env,
        log,
        concurrency,
        replicated=lambda: queue.index.client.wait(1, 5000),
        fail_over=lambda: fault(group),
    )


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS)
def test_scripts_and_the_journal_follow_the_primary_through_a_failover(group, fault):
    client = open_redis(group.url)
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

    [job_id] = add(queue, log, "during")  # retried until promoted

    new = group.wait_for_new_primary(old)
    primary = group.client(new)
    assert primary.zscore(schedule_key("default"), job_id) is not None
    primary.close()
    run_once(env)
    assert_each_ran_once(queue, log, {job_id: "during"})


def test_jobs_a_failover_rolled_back_are_put_back_by_the_next_run(group, queue, env, log):
    primary = group.primary_port()
    replica = next(port for port in group.data_ports if port != primary)
    a_rolled_back_add_is_put_back_at_once(
        queue,
        env,
        log,
        (primary, replica),
        kill_primary=group.kill_primary_now,
        new_primary=group.wait_for_new_primary,
    )


def test_status_doctor_and_the_web_page_show_the_sentinel_url_from_the_config_file(
    group, queue, env, tmp_path
):
    replica = next(port for port in group.data_ports if port != group.primary_port())
    status_doctor_and_the_web_page_show_the_topology(
        queue,
        env,
        tmp_path,
        "redis+sentinel",
        f"a primary with 1 replica: 127.0.0.1:{replica} (lag ",
    )


def test_doctor_fails_a_url_that_names_a_replica(group, queue, env):
    primary = group.primary_port()
    replica = next(port for port in group.data_ports if port != primary)
    env = dict(env, DELAYQ_REDIS_URL=f"redis://127.0.0.1:{replica}/0")

    doctor = subprocess.run([*DELAYQ, "doctor"], env=env, capture_output=True, timeout=60)

    assert doctor.returncode == 1
    lines = doctor.stdout.decode().splitlines()
    (shown,) = [line for line in lines if line.split(None, 2)[1:2] == ["topology"]]
    # The checks that need a usable Redis say they were not made, and why.
    assert any(line.startswith("skip") and "topology" in line for line in lines), lines
    assert shown.split(None, 2) == [
        "FAIL",
        "topology",
        f"redis://127.0.0.1:{replica}/0 is a replica of 127.0.0.1:{primary}: it takes no writes"
        " (or drops them at its next sync); name the primary, or the sentinels with"
        " redis+sentinel://",
    ]


def test_a_command_cut_off_by_the_primarys_death_is_retried_on_the_new_primary(group):
    # redis-py reconnects a connection that broke mid-command to the address it had and
    # retries there until its budget is spent, then fails the command; in the failover soak
    # a looping run stalled 10 s and more after a kill -9 of the primary.
    client = open_redis(group.url)
    client.ping()
    result: list[object] = []
    waiting = threading.Thread(target=lambda: result.append(client.blpop(["nothing"], 4)))
    waiting.start()  # blocked on the primary when it dies
    wait_for(lambda: _blocked_clients(group) == 1, 10, "the BLPOP to block")

    new = group.wait_for_new_primary(group.kill_primary_now())
    waiting.join(timeout=20)

    assert not waiting.is_alive() and result == [None]  # given again to the new primary
    assert client.connection_pool.get_master_address()[1] == new
    client.close()


def _blocked_clients(group: SentinelGroup) -> int:
    primary = group.client(group.primary_port())
    with contextlib.closing(primary):
        return int(primary.info("clients")["blocked_clients"])
