"""delayq on a Galera cluster of its own (tests/support/galera_servers.py): adds through every
node at
once all succeed, a certification conflict being run again rather than raised; `--replace`
through two nodes at once leaves one pending job per key, and a chain's retries one pending
attempt, since the named lock is a row write that Galera certifies (GET_LOCK is one node's
alone); a node cut off from the others answers as a server away does; and the failover
soak, short, as CI runs it: the writer behind HAProxy killed, and a node under runners
spread over all three killed: nothing lost, run twice or early."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import peewee
import pytest
import redis

import delayq
from delayq.config import Settings
from delayq.store.backend_errors import NODE_NOT_READY, is_outage, mysql_error_number
from delayq.store.table import mutexes
from delayq.store.table.leases import Leases
from tests.conftest import IN_CI, ROOT
from tests.faults.test_mysql_failover import need_mariadbd
from tests.faults.test_soak import counts
from tests.support.galera_servers import PROVIDER, GaleraCluster
from tests.support.haproxy import haproxy
from tests.support.mysql_servers import DATABASE
from tests.support.mysql_topologies import run_query
from tests.support.topologies import need_servers
from tests.support.waiting import at_once, wait_for

pytestmark = pytest.mark.slow
H = "tests.sample_handlers.jobs"
# Most of the race is in a key's first add (both nodes find no pending job and insert one)
# and a finished chain's first retry (both add an attempt): many keys, few rounds each.
ROUNDS = 3
KEYS = 100


def need_galera(proxy: bool = False) -> None:
    """galera-4's provider, rsync (its state transfers) and, for a way in, haproxy."""
    need_servers("mariadb-install-db", "rsync", "redis-server")
    need_mariadbd()
    missing = [] if Path(PROVIDER).is_file() else ["galera-4"]
    if proxy and not Path(haproxy()).is_file():
        missing.append("haproxy")
    if missing:
        message = f"{' and '.join(missing)} not installed; bin/test installs them"
        pytest.fail(message) if IN_CI else pytest.skip(message)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GaleraCluster]:
    need_galera()
    servers = GaleraCluster(tmp_path_factory.mktemp("galera"))
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def queues(cluster: GaleraCluster, server_redis_url: str) -> Iterator[list[delayq.Queue]]:
    """A Queue on each node, the table made afresh through the first; Redis emptied after."""
    node = cluster.nodes[0]
    node.execute(f"DROP DATABASE IF EXISTS {DATABASE}", f"CREATE DATABASE {DATABASE}")
    opened = [
        delayq.connect(
            Settings(database_url=cluster.url(each), redis_url=server_redis_url, handlers=(H,))
        )
        for each in cluster.nodes
    ]
    opened[0].init()
    yield opened
    for queue in opened:
        queue.close()
    client = redis.Redis.from_url(server_redis_url)
    client.flushdb()
    client.close()


def test_the_named_lock_is_a_row_write_on_a_galera_node(queues):
    assert mutexes.is_galera(queues[1].table)


def test_adds_through_every_node_at_once_all_succeed(cluster, queues):
    def adds(queue: delayq.Queue, thread: int) -> Callable[[], None]:
        def add() -> None:
            for n in range(150):
                queue.add(H, "record", {"n": n}, delay=3600, ext=f"t{thread}:{n}")
                queue.add_many(
                    [delayq.JobSpec(H, "record", {"n": n}, delay=3600, ext=f"m{thread}:{n}")] * 2
                )

        return add

    raised = at_once([adds(queue, k) for k, queue in enumerate(queues * 2)])

    assert raised == []
    ((rows,),) = run_query(cluster.nodes[2], "SELECT COUNT(*) FROM delay_queue")
    assert rows == 6 * 150 * 3


def test_replace_through_two_nodes_at_once_leaves_one_pending_job_per_key(cluster, queues):
    def replaces(queue: delayq.Queue, node: int) -> Callable[[], None]:
        def replace() -> None:
            for n in range(ROUNDS):
                for key in range(KEYS):
                    data = {"node": node, "n": n}
                    queue.add(H, "record", data, delay=3600, ext=f"key:{key}", replace=True)

        return replace

    raised = at_once([replaces(queues[0], 1), replaces(queues[1], 2)])

    assert raised == []
    pending = run_query(
        cluster.nodes[2],
        "SELECT ext_string, COUNT(*) FROM delay_queue WHERE status = 1 GROUP BY ext_string",
    )
    assert sorted(pending) == sorted((f"key:{key}", 1) for key in range(KEYS))


def test_retries_of_a_chain_through_two_nodes_at_once_leave_one_pending_attempt(cluster, queues):
    job_ids = [queues[0].add(H, "record", {}, delay=3600) for _ in range(KEYS)]
    for job_id in job_ids:  # finished: a retry adds an attempt, or moves the pending one
        queues[0].cancel(job_id)

    def retries(queue: delayq.Queue) -> Callable[[], None]:
        def retry() -> None:
            for _ in range(ROUNDS):
                for job_id in job_ids:
                    queue.retry(job_id, delay=3600)

        return retry

    raised = at_once([retries(queues[0]), retries(queues[1])])

    assert raised == []
    pending = run_query(
        cluster.nodes[2],
        "SELECT chain_id, COUNT(*) FROM delay_queue WHERE status = 1 GROUP BY chain_id",
    )
    assert sorted(pending) == [(job_id, 1) for job_id in job_ids]


def test_a_job_added_through_one_node_is_found_at_once_through_another(cluster, queues):
    # A node applies the others' commits after they return: a moment later on loopback (a
    # row changed through one node right after its insert through another was not there in
    # 83 of 3,000 tries), a second later while it applies a slow transaction (here an
    # UPDATE of a table with no key, which a node applies row by row, each a scan: 1.2 s).
    # A lease through it found no row, and the claimed job waited for the orphan sweep; a
    # cancel cancelled nothing. delayq's sessions on a Galera node wait for what the
    # cluster committed before they read or change rows.
    adder, other = queues[0], queues[1]
    node = cluster.nodes[0]
    slow = f"{DATABASE}.no_key"
    node.execute(f"CREATE TABLE {slow} (n INT NOT NULL, v INT NOT NULL DEFAULT 0)")
    node.execute(f"INSERT INTO {slow} (n) SELECT seq FROM {DATABASE}.seq_1_to_5000")
    not_found = []
    try:
        for n in range(2):
            node.execute(f"UPDATE {slow} SET v = v + 1")
            job_id = adder.add(H, "record", {"n": n}, delay=0)
            won = Leases(other.table).mark_running([job_id], "t", time.time() + 60, time.time())
            if [job.id for job in won] != [job_id]:
                not_found.append(("lease", job_id))
            node.execute(f"UPDATE {slow} SET v = v + 1")
            adder.add(H, "record", {"n": n}, delay=3600, ext=f"found:{n}")
            if other.cancel(ext=f"found:{n}") != 1:
                not_found.append(("cancel", n))
    finally:
        node.execute(f"DROP TABLE {slow}")

    assert not_found == []


def test_a_node_cut_off_from_the_others_is_an_outage_to_wait_out(cluster, queues):
    node = cluster.nodes[2]
    node.execute("SET GLOBAL wsrep_provider_options = 'gmcast.isolate=1'")
    try:
        wait_for(lambda: not node.is_synced(), 30, "node3 to leave the primary component")
        with pytest.raises(peewee.PeeweeException) as refused:
            queues[2].table.db.execute_sql("SELECT COUNT(*) FROM delay_queue")
    finally:
        node.execute("SET GLOBAL wsrep_provider_options = 'gmcast.isolate=0'")
        wait_for(node.is_synced, 60, "node3 to rejoin")

    # "WSREP has not yet prepared node for application use": not a failed statement.
    assert mysql_error_number(refused.value) == NODE_NOT_READY
    assert is_outage(refused.value)


def soak(entry: str) -> dict[str, str]:
    """The short Galera soak's counts, once it said OK."""
    need_galera(proxy=entry == "haproxy")
    command = [sys.executable, "-m", "tests.soaks.mysql_failover_soak", "--topology", "galera"]
    command += ["--entry", entry, "--jobs", "600", "--window", "14", "--fault-at", "5"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0 and summary.endswith(" OK"), summary + result.stderr[-3000:]
    return counts(summary)


@pytest.mark.parametrize("entry", ["haproxy", "spread"])
def test_a_galera_node_killed_mid_soak_loses_nothing_and_runs_nothing_twice_or_early(entry):
    found = soak(entry)

    assert int(found["produced"]) > 100, found
    assert (found["lost"], found["lost_adds"], found["run_twice"]) == ("0", "0", "0")
    assert (found["early"], found["misplaced"], found["held_not_run"]) == ("0", "0", "0")
    assert (found["producer_ids_not_run"], found["runner_crashes"]) == ("0", "0")
    # Every node holds the same commits: no run has a failover to tell of.
    assert (found["failover_lines"], found["doctor_failover"]) == ("0", "none"), found
