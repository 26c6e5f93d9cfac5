"""The MySQL topologies the failover soak (tests/soaks/mysql_failover_soak.py) runs on, each
with its fault: a primary and its replica behind one address that moves (semi-synchronous or
asynchronous), or a Galera cluster of three nodes, reached through HAProxy's one writer or
with runners and producers spread over the nodes. Each says where runner or producer k
connects, makes its fault, and reads the table from a server that holds it afterwards."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Protocol

from tests.soaks.failover_soak import Failover
from tests.support.galera_servers import GaleraCluster, GaleraNode
from tests.support.mysql_servers import DATABASE, MariaDB, ReplicatedMariaDB

PROMOTION_DELAY = 1.0  # seconds from a primary's death to its replica's promotion
LAG = 2.0  # seconds the asynchronous replica is behind when the primary dies
RESTART_DELAY = 2.0  # seconds from a Galera node's death to its start again


class Topology(Protocol):
    name: str
    # One runner's line saying the table is on another server: a promoted replica is
    # another server, another node of a Galera cluster holds the same commits.
    failover_lines: int
    may_lose: bool  # an asynchronous replica lacks the primary's last commits

    def start(self) -> None: ...
    def url(self, k: int) -> str: ...
    def fail_over(self, fault: str) -> Failover: ...
    def query(self, sql: str) -> list[tuple[object, ...]]: ...
    def counters(self) -> dict[str, int]: ...
    def stop(self) -> None: ...


class PrimaryReplica:
    """A primary and its replica through one address (tests/support/mysql_servers.py). kill-9: the
    primary is killed, the replica promoted 1 s later and the address moved to it;
    switchover: the primary turns read-only, the replica catches up and is promoted, the
    address moves, the old primary stops. With async replication the replica's link stalls
    2 s before the kill, so it lacks what the primary committed in those 2 s."""

    failover_lines = 1

    def __init__(self, workdir: Path, replication: str) -> None:
        self.name = replication
        self.may_lose = replication == "async"
        self.servers = ReplicatedMariaDB(workdir, semi_sync=replication == "semisync")

    def start(self) -> None:
        self.servers.start()

    def url(self, k: int) -> str:
        return self.servers.url

    def fail_over(self, fault: str) -> Failover:
        servers = self.servers
        failover = Failover(f"{self.name}-{fault}", time.time())
        if fault == "switchover":
            servers.switch_over()
            servers.promote()
            failover.promoted_at = time.time()
            servers.primary.stop()
            return failover
        if self.may_lose:
            servers.lag()
            time.sleep(LAG)
            failover.started_at = time.time()
        servers.kill_primary()
        time.sleep(PROMOTION_DELAY)
        servers.promote()
        failover.promoted_at = time.time()
        return failover

    def query(self, sql: str) -> list[tuple[object, ...]]:
        return run_query(self.servers.replica, sql)

    def counters(self) -> dict[str, int]:
        return {}

    def stop(self) -> None:
        self.servers.stop()


class Galera:
    """Three Galera nodes (tests/support/galera_servers.py). Entry `haproxy`: every runner and
    producer through HAProxy, node 1 the writer, and the writer is killed; `spread`:
    runner and producer k on node k mod 3 directly, and node 1 is killed. The killed node
    starts again 2 s later and rejoins. There is nothing to promote: the measurement of how
    soon each runner starts a job again runs from the kill."""

    failover_lines = 0
    may_lose = False

    def __init__(self, workdir: Path, entry: str) -> None:
        self.name = f"galera-{entry}"
        self.entry = entry
        self.cluster = GaleraCluster(workdir)
        self.proxy_url = ""

    def start(self) -> None:
        self.cluster.start()
        if self.entry == "haproxy":
            self.proxy_url = self.cluster.start_proxy()

    def url(self, k: int) -> str:
        if self.entry == "haproxy":
            return self.proxy_url
        return self.cluster.url(self.cluster.nodes[k % len(self.cluster.nodes)])

    def fail_over(self, fault: str) -> Failover:
        victim: GaleraNode = self.cluster.nodes[0]
        failover = Failover(f"{self.name}-{fault}", time.time())
        self.cluster.kill(victim)
        failover.promoted_at = failover.started_at
        time.sleep(RESTART_DELAY)
        self.cluster.restart(victim)
        return failover

    def query(self, sql: str) -> list[tuple[object, ...]]:
        return run_query(self.cluster.synced_node(), sql)

    def counters(self) -> dict[str, int]:
        """Transactions the nodes rolled back as certification conflicts: their own that
        failed certification, and local ones aborted by another node's write (node 1's
        since its restart)."""
        found = {"cert_failures": 0, "bf_aborts": 0}
        for node in self.cluster.nodes:
            rows = node.execute(
                "SHOW GLOBAL STATUS WHERE Variable_name IN "
                "('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')"
            )
            for name, value in rows:
                found["cert_failures" if "cert" in str(name) else "bf_aborts"] += int(str(value))
        return found

    def stop(self) -> None:
        self.cluster.stop()


def choose(args: argparse.Namespace, workdir: Path) -> Topology:
    if args.topology == "galera":
        return Galera(workdir, args.entry)
    return PrimaryReplica(workdir, args.topology)


def run_query(server: MariaDB, sql: str) -> list[tuple[object, ...]]:
    """The rows of `sql` on delayq's database on `server`, as root."""
    conn = server.connect()
    try:
        conn.select_db(DATABASE)
        with conn.cursor() as cursor:
            cursor.execute(sql)
            return list(cursor.fetchall())
    finally:
        conn.close()
