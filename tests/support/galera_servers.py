"""A Galera cluster of a test's own: three mariadbd with galera-4 on free 127.0.0.1 ports,
each with its own data directory, the first started with --wsrep-new-cluster and the others
joining it by an rsync state transfer; a node killed (kill -9) and started again, which
rejoins by IST. And HAProxy in front (tests/support/haproxy.py), as a DBA runs it: one writer node,
the other two `backup`, each node healthy only while it is Synced, so that the writer's
death, or its not being synced, moves new connections to a backup and cuts the old ones.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pymysql

from tests.support.haproxy import HAProxy
from tests.support.mysql_servers import DATABASE, PASSWORD, USER, MariaDB
from tests.support.servers import free_port
from tests.support.waiting import wait_for

PROVIDER = "/usr/lib/galera/libgalera_smm.so"
CLUSTER_NAME = "delayq_test"
SYNCED = "4"  # wsrep_local_state
JOIN_SECONDS = 120  # a state transfer on a busy machine
# A silent node is suspected after 3 s (Galera's default: 5 s) and dropped from the cluster
# after 6 s (15 s), when a node killed and started again can rejoin: timeouts a DBA sets on a
# LAN; on a loaded machine shorter ones partition the cluster for nothing.
EVICTION = "evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S;evs.install_timeout=PT6S"


class GaleraNode(MariaDB):
    """One mariadbd of the cluster: its client port, its group communication port, its IST
    port and the port its rsync daemon listens on while it receives a state transfer."""

    def __init__(self, workdir: Path, number: int) -> None:
        super().__init__(workdir, server_id=1)  # one server_id for the whole cluster
        self.user = run_user()
        self.number = number
        self.group_port, self.ist_port, self.sst_port = free_port(), free_port(), free_port()
        self.peers = ""  # gcomm://... every node's group port, set by the cluster
        self.bootstrap = False  # --wsrep-new-cluster: this node starts the cluster
        self.start_position: str | None = None  # where a killed node's InnoDB stopped

    def command(self) -> list[str]:
        provider_options = (
            f"gmcast.listen_addr=tcp://127.0.0.1:{self.group_port};"
            f"ist.recv_addr=127.0.0.1:{self.ist_port};gcache.size=32M;{EVICTION}"
        )
        command = [
            *self.own_files_and_port(),
            "--binlog-format=ROW",
            "--default-storage-engine=InnoDB",
            "--innodb-autoinc-lock-mode=2",  # Galera's requirement
            "--innodb-buffer-pool-size=64M",
            "--innodb-log-file-size=16M",  # what a state transfer copies
            # The cluster holds each commit on every node; a node's own log is for its restart.
            "--innodb-flush-log-at-trx-commit=2",
            "--wsrep-on=ON",
            f"--wsrep-provider={PROVIDER}",
            f"--wsrep-cluster-name={CLUSTER_NAME}",
            f"--wsrep-cluster-address={self.peers}",
            f"--wsrep-node-name=node{self.number}",
            f"--wsrep-node-address=127.0.0.1:{self.group_port}",
            f"--wsrep-node-incoming-address=127.0.0.1:{self.port}",
            f"--wsrep-provider-options={provider_options}",
            "--wsrep-sst-method=rsync",
            f"--wsrep-sst-receive-address=127.0.0.1:{self.sst_port}",
            "--wsrep-slave-threads=2",
            # delayq init creates triggers; a Galera node, as a server with binary logs, lets
            # a login without SUPER do so only when it trusts it to (what a DBA sets for it).
            "--log-bin-trust-function-creators=1",
        ]
        if self.bootstrap:
            command.append("--wsrep-new-cluster")
        if self.start_position is not None:
            command.append(f"--wsrep-start-position={self.start_position}")
        return command

    def status(self) -> dict[str, str]:
        rows = self.execute(
            "SHOW GLOBAL STATUS WHERE Variable_name IN "
            "('wsrep_local_state', 'wsrep_ready', 'wsrep_cluster_size')"
        )
        return {str(name).lower(): str(value) for name, value in rows}

    def is_synced(self) -> bool:
        """Whether the node answers, is Synced and takes statements (wsrep_ready)."""
        with contextlib.suppress(pymysql.MySQLError):
            found = self.status()
            return found.get("wsrep_local_state") == SYNCED and found.get("wsrep_ready") == "ON"
        return False

    def recover_position(self) -> None:
        """After a kill -9: the position InnoDB recovers to (mariadbd --wsrep-recover, what
        Debian's galera_recovery does before a start), so that the node asks the cluster for
        what it missed (IST) rather than for a whole copy."""
        log = self.workdir / "recover.log"
        log.unlink(missing_ok=True)
        self.start_position = None
        command = [*self.command(), "--wsrep-recover", f"--log-error={log}"]
        subprocess.run(command, capture_output=True, timeout=120, check=False, env=self.env())
        found = re.findall(
            r"WSREP: Recovered position: (\S+:-?\d+)", log.read_text(errors="replace")
        )
        self.start_position = found[-1] if found else None


def run_user() -> str:
    """Who the nodes run as: started by root, the `mysql` user, as Debian runs them. A node
    run as root would start its state transfer's rsync daemon as root, which rsync runs as
    `nobody`, and that cannot write the joiner's data directory."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    try:
        return pwd.getpwnam("mysql").pw_name
    except KeyError:
        return "nobody"


class GaleraCluster:
    """Three nodes; `url(node)` reaches delayq's database on one node, `proxy_url` through
    HAProxy (once `start_proxy` ran). The nodes live in a directory of their own under
    /tmp, which their user can reach (a test's temporary directories are its owner's
    alone); `stop` ends every server, keeps the nodes' error logs in `workdir` and removes
    the rest."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.home = Path(tempfile.mkdtemp(prefix="delayq-galera-", dir="/tmp"))
        user = pwd.getpwnam(run_user())
        os.chown(self.home, user.pw_uid, user.pw_gid)
        self.nodes = [GaleraNode(self.home / f"node{n}", n) for n in (1, 2, 3)]
        peers = ",".join(f"127.0.0.1:{node.group_port}" for node in self.nodes)
        for node in self.nodes:
            node.peers = f"gcomm://{peers}"
        self.proxy: HAProxy | None = None

    def start(self) -> None:
        for node in self.nodes:
            node.datadir.mkdir(parents=True)  # empty: a joiner's first state transfer fills it
            for path in (node.workdir, node.datadir):
                shutil.chown(path, node.user, node.user)
        first = self.nodes[0]
        first.install()
        first.bootstrap = True
        self.start_node(first)
        first.bootstrap = False  # started again later, it joins the others
        for node in self.nodes[1:]:
            self.start_node(node)
        wait_for(lambda: self.size() == 3, 30, "the cluster to count three nodes")
        first.execute(
            f"CREATE DATABASE {DATABASE}",
            f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'",
            f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'127.0.0.1'",
        )

    def start_node(self, node: GaleraNode) -> None:
        node.start()
        wait_for(node.is_synced, JOIN_SECONDS, f"node{node.number} to be Synced")

    def size(self) -> int:
        for node in self.nodes:
            if node.process is not None and node.is_synced():
                return int(node.status().get("wsrep_cluster_size", 0))
        return 0

    def kill(self, node: GaleraNode) -> None:
        node.kill()

    def restart(self, node: GaleraNode) -> None:
        """Start a killed node again: it recovers its position and rejoins by IST."""
        node.recover_position()
        self.start_node(node)

    def url(self, node: GaleraNode) -> str:
        return f"mysql://{USER}:{PASSWORD}@127.0.0.1:{node.port}/{DATABASE}"

    def start_proxy(self) -> str:
        """HAProxy in front, node 1 the writer; the URL through it."""
        self.proxy = HAProxy(self.workdir / "haproxy", self.nodes, _synced)
        self.proxy.start()
        return self.proxy.url

    def synced_node(self) -> GaleraNode:
        """A node that is up and Synced, to read the table from."""
        for node in self.nodes:
            if node.process is not None and node.is_synced():
                return node
        raise AssertionError("no node of the cluster is Synced")

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        for node in self.nodes:
            node.stop()
            for log in ("error.log", "recover.log"):
                with contextlib.suppress(OSError):
                    shutil.copy(node.workdir / log, self.workdir / f"node{node.number}-{log}")
        shutil.rmtree(self.home, ignore_errors=True)


def _synced(server: MariaDB) -> bool:
    """HAProxy's check of a node: up and Synced (what a clustercheck script answers)."""
    assert isinstance(server, GaleraNode)
    return server.process is not None and server.is_synced()
