"""delayq on a redis+cluster:// URL, against a Redis Cluster of real servers the test starts
(tests/support/clusters.py: three masters, a replica each): queues spread over the masters, jobs run
once each, a looping run over queues in several hash slots wakes for a sooner job in any of them,
and after a master's failover (CLUSTER FAILOVER, or kill -9) runs go on against the new
master.

Each test waits for the failover to settle: what a failover may roll back before that is
not what these tests are about.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import delayq
from delayq.store.index.clusters import HashSlotWaits
from delayq.store.index.keys import queue_key, schedule_key
from delayq.store.index.parts import Index
from delayq.store.urls import open_redis
from tests.faults.test_processes import start
from tests.sample_handlers.jobs import read_log
from tests.support.clusters import Cluster
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
    stop,
)
from tests.support.waiting import wait_for

QUEUES = ["default", "orders", "mail", "refunds"]
FAULTS: dict[str, Callable[[Cluster, str], int]] = {
    "cluster-failover": Cluster.fail_over,
    "kill-9-master": Cluster.kill_master_of,
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    need_servers("redis-server", "redis-cli")
    (tmp_path / "cluster").mkdir()
    servers = Cluster(tmp_path / "cluster")
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def env(cluster: Cluster, database_url: str, tmp_path: Path) -> dict[str, str]:  # noqa: F811
    return process_env(cluster.url, database_url, tmp_path)


@pytest.fixture
def queue(cluster: Cluster, database_url: str, tmp_path: Path) -> Iterator[delayq.Queue]:  # noqa: F811
    queue = open_queue(cluster.url, database_url, tmp_path)
    yield queue
    queue.close()


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


def test_a_looping_run_over_queues_in_several_hash_slots_wakes_for_a_sooner_job(
    cluster, queue, env, log
):
    for name in QUEUES:
        add(queue, log, f"{name}-far", on=name, delay="1h")
    served = [part for name in QUEUES for part in ("--queue", name)]
    loop = start(env, "run", "--loop", *served, "--log-level", "warning")
    wait_for(lambda: _waiting(cluster), 60, "the loop to block on its wake-up lists")
    # Each queue in turn: the loop would otherwise sleep until the far jobs are due.
    for name in reversed(QUEUES):
        add(queue, log, f"{name}-now", on=name)
        wait_for(lambda name=name: f"{name}-now" in read_log(log), 30, f"{name}-now to run")
    stop(loop)
    assert sorted(read_log(log)) == sorted(f"{name}-now" for name in QUEUES)


def test_the_wake_threads_block_the_runs_signals(cluster):
    """A BLPOP a hash slot, each on a thread: one that took a SIGTERM would leave the loop's main
    thread asleep in its wait instead of stopping."""
    client = open_redis(cluster.url)
    blocked: list[set[int]] = []
    blpop = client.blpop

    def noting_the_mask(keys: list[str], timeout: float) -> object:
        blocked.append(signal.pthread_sigmask(signal.SIG_BLOCK, []))
        return blpop(keys, timeout=timeout)

    client.blpop = noting_the_mask  # type: ignore[method-assign]
    keys = [queue_key(name, "wake") for name in QUEUES]
    assert not HashSlotWaits(client).wait(keys, 0.5)
    assert len(blocked) > 1  # several hash slots, a thread each
    assert all({signal.SIGALRM, signal.SIGINT, signal.SIGTERM} <= mask for mask in blocked)
    client.close()


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
    def replicated() -> int:
        master = cluster.client(cluster.master_of(schedule_key("default")))
        try:
            return int(master.wait(1, 5000))
        finally:
            master.close()

    run_through_a_failover(
        queue,
        env,
        log,
        concurrency,
        replicated=replicated,
        fail_over=lambda: fault(cluster, schedule_key("default")),
    )


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS)
def test_scripts_and_the_journal_follow_the_master_through_a_failover(cluster, fault):
    client = open_redis(cluster.url)
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


def test_jobs_a_failover_rolled_back_are_put_back_by_the_next_run(cluster, queue, env, log):
    key = schedule_key("default")
    master = cluster.master_of(key)
    a_rolled_back_add_is_put_back_at_once(
        queue,
        env,
        log,
        (master, cluster.replica_of(master)),
        kill_primary=lambda: cluster.kill_master_now(key),
        new_primary=lambda old: cluster.wait_for_new_master(key, old),
    )


def test_status_doctor_and_the_web_page_show_the_cluster_url_from_the_config_file(
    cluster, queue, env, tmp_path
):
    status_doctor_and_the_web_page_show_the_topology(
        queue, env, tmp_path, "redis+cluster", "a cluster of 3 masters: 127.0.0.1:"
    )
