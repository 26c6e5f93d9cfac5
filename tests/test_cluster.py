"""delayq on a redis+cluster:// URL, against a Redis Cluster of real servers the test starts
(tests/clusters.py: three masters, a replica each): queues spread over the masters, jobs run
once each, a looping run over queues in several slots wakes for a sooner job in any of them,
and after a master's failover (CLUSTER FAILOVER, or kill -9) runs go on against the new
master.

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
from tests.clusters import Cluster
from tests.conftest import DELAYQ, HANDLERS, IN_CI, ROOT, _drop_table
from tests.sample_handlers.jobs import read_log
from tests.test_processes import start
from tests.waiting import wait_for

H = "tests.sample_handlers.jobs"
QUEUES = ["default", "orders", "mail", "refunds"]
FAULTS: dict[str, Callable[[Cluster, str], int]] = {
    "cluster-failover": Cluster.fail_over,
    "kill-9-master": Cluster.kill_master_of,
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        message = "redis-server or redis-cli is not installed; bin/test installs them"
        pytest.fail(message) if IN_CI else pytest.skip(message)
    servers = Cluster(tmp_path / "cluster")
    (tmp_path / "cluster").mkdir()
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
def env(cluster: Cluster, database_url: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a `delayq` process on the cluster and the test database."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env.update(
        DELAYQ_DATABASE_URL=database_url,
        DELAYQ_REDIS_URL=cluster.url,
        DELAYQ_HANDLERS=",".join(HANDLERS),
        DELAYQ_HOME=str(tmp_path / "home"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    return env


@pytest.fixture
def queue(cluster: Cluster, database_url: str, tmp_path: Path) -> Iterator[delayq.Queue]:
    settings = Settings(
        database_url=database_url,
        redis_url=cluster.url,
        handlers=HANDLERS,
        home=tmp_path / "home",
    )
    queue = delayq.connect(settings)
    queue.init()
    yield queue
    queue.close()


def add(
    queue: delayq.Queue, log: str, *names: str, on: str = "default", delay: str | None = None
) -> list[int]:
    return [
        queue.add(H, "record", {"log": log, "n": name}, delay=delay, queue=on) for name in names
    ]


def run_once(env: dict[str, str], *args: str) -> None:
    done = subprocess.run([*DELAYQ, "run", *args], env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""


def assert_each_ran_once(queue: delayq.Queue, log: str, names: dict[int, str]) -> None:
    assert Counter(read_log(log)) == Counter(names.values())
    assert {queue.show(job_id)["status"] for job_id in names} == {"success"}


def test_queues_on_a_cluster_spread_over_the_masters_and_each_job_runs_once(
    cluster, queue, env, log
):
    names = {}
    for name in QUEUES:
        ids = add(queue, log, f"{name}-1", f"{name}-2", on=name)
        names.update(zip(ids, [f"{name}-1", f"{name}-2"], strict=True))

    run_once(env, "--concurrency", "4")

    assert_each_ran_once(queue, log, names)
    masters = {cluster.master_of(schedule_key(name)) for name in QUEUES}
    assert len(masters) >= 2, "four queues all hashed to one master"
    for name in QUEUES:
        master = cluster.client(cluster.master_of(schedule_key(name)))
        assert master.exists(schedule_key(name)) == 0  # claimed there, and emptied
        assert master.hlen(queue_key(name, "journal")) == 0
        master.close()


def test_a_looping_run_over_queues_in_several_slots_wakes_for_a_sooner_job(
    cluster, queue, env, log
):
    for name in QUEUES:
        add(queue, log, f"{name}-far", on=name, delay="1h")
    served = [part for name in QUEUES for part in ("--queue", name)]
    loop = start(env, "run", "--loop", *served, "--log-level", "warning")
    try:
        wait_for(lambda: _waiting(cluster), 60, "the loop to block on its wake-up lists")
        # Each queue in turn: the loop would otherwise sleep until the far jobs are due.
        for name in reversed(QUEUES):
            add(queue, log, f"{name}-now", on=name)
            wait_for(lambda name=name: f"{name}-now" in read_log(log), 30, f"{name}-now to run")
    finally:
        loop.send_signal(signal.SIGTERM)
        _, stderr = loop.communicate(timeout=60)
    assert loop.returncode == 128 + signal.SIGTERM, stderr.decode()
    assert b"Traceback" not in stderr
    assert sorted(read_log(log)) == sorted(f"{name}-now" for name in QUEUES)


def _waiting(cluster: Cluster) -> bool:
    """Whether some client is blocked on a wake-up list on every master that holds one."""
    masters = {cluster.master_of(queue_key(name, "wake")) for name in QUEUES}
    for port in masters:
        client = cluster.client(port)
        blocked = int(client.info("clients")["blocked_clients"])
        client.close()
        if blocked == 0:
            return False
    return True


@pytest.mark.parametrize("concurrency", ["1", "4"], ids=["sequential", "concurrent"])
@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS)
def test_runs_go_on_against_the_new_master_after_a_failover(
    cluster, queue, env, log, fault, concurrency
):
    before = add(queue, log, "before")
    due_later = add(queue, log, "due-later-1", "due-later-2", delay="2s")
    loop = start(env, "run", "--loop", "--concurrency", concurrency, "--log-level", "warning")
    wait_for(lambda: "before" in read_log(log), 60, "the job added before the failover")
    master = cluster.client(cluster.master_of(schedule_key("default")))
    # Nothing a failover may roll back: the replica has every write so far.
    assert master.wait(1, 5000) == 1
    master.close()

    fault(cluster, schedule_key("default"))
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
def test_scripts_and_the_journal_follow_the_master_through_a_failover(cluster, fault):
    client = open_redis(cluster.url, socket_connect_timeout=5, socket_timeout=30)
    index = Index(client)
    index.schedule.add("default", 1, 100.0)
    index.journal.write("default", 1, "before")
    index.journal.close()  # its reply proves the write was applied before the WAIT
    master = cluster.client(cluster.master_of(schedule_key("default")))
    assert master.wait(1, 5000) == 1
    master.close()

    new = cluster.client(fault(cluster, schedule_key("default")))
    index.schedule.add("default", 2, 200.0)
    index.journal.write("default", 2, "after")
    index.journal.close()

    assert new.zrange(schedule_key("default"), 0, -1, withscores=True) == [
        (b"1", 100.0),
        (b"2", 200.0),
    ]
    assert new.hgetall(queue_key("default", "journal")) == {b"1": b"before", b"2": b"after"}
    new.close()
    client.close()


def test_status_and_doctor_work_on_a_cluster_url_from_the_config_file(
    cluster, queue, env, tmp_path
):
    config = tmp_path / "delayq.toml"
    config.write_text(f'redis_url = "{cluster.url}"\n')
    env = {key: value for key, value in env.items() if key != "DELAYQ_REDIS_URL"}
    env["DELAYQ_CONFIG"] = str(config)

    status = subprocess.run([*DELAYQ, "status"], env=env, capture_output=True, timeout=60)
    doctor = subprocess.run([*DELAYQ, "doctor"], env=env, capture_output=True, timeout=60)

    assert status.returncode == 0, status.stderr.decode()
    assert doctor.returncode == 0, doctor.stdout.decode() + doctor.stderr.decode()
    assert "redis+cluster://127.0.0.1:" in doctor.stdout.decode()
