"""A Redis Cluster of its own for a test: three masters and a replica each, every node a
redis-server on a free 127.0.0.1 port (cluster-node-timeout 1000 ms), put together with
`redis-cli --cluster create`, so that it can be failed over and killed without touching
anybody else's Redis."""

from __future__ import annotations

import contextlib
import random
import signal
import socket
import subprocess
from pathlib import Path

import redis

from tests.support.waiting import wait_for

NODE_TIMEOUT_MS = 1000


def unused_ports(count: int) -> list[int]:
    """`count` different ports free now, below Linux's ephemeral range (32768 and up), where
    no outgoing connection takes one between this choice and the server's bind."""
    chosen: list[int] = []
    for port in random.sample(range(20000, 32000), 200):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        chosen.append(port)
        if len(chosen) == count:
            return chosen
    raise RuntimeError(f"found only {len(chosen)} free ports of {count}")


class Cluster:
    """The nodes of one cluster; `stop` ends every one still running."""

    def __init__(self, workdir: Path, masters: int = 3) -> None:
        self.workdir = workdir
        ports = unused_ports(4 * masters)
        self.ports = ports[: 2 * masters]
        # The cluster bus listens on port + 10000 unless told otherwise: past 65535 for a
        # high port.
        self.bus_ports = dict(zip(self.ports, ports[2 * masters :], strict=True))
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """Two of the nodes as seeds: delayq learns the rest from them."""
        return f"redis+cluster://127.0.0.1:{self.ports[0]},127.0.0.1:{self.ports[1]}"

    def start(self) -> None:
        for port in self.ports:
            self._node(port)
        for port in self.ports:
            wait_for(lambda port=port: self._answers(port), 20, f"node {port} to start")
        nodes = [f"127.0.0.1:{port}" for port in self.ports]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *nodes, "--cluster-replicas", "1"]
            + ["--cluster-yes"],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=60,
        )
        wait_for(self.settled, 30, "every node to see the cluster whole, replicas in sync")

    def _node(self, port: int) -> None:
        directory = self.workdir / str(port)
        directory.mkdir(exist_ok=True)  # a restart finds it, and nodes.conf in it
        command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1"]
        command += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        command += ["--cluster-port", str(self.bus_ports[port])]
        command += ["--cluster-node-timeout", str(NODE_TIMEOUT_MS)]
        command += ["--save", "", "--appendonly", "no", "--dir", str(directory)]
        command += ["--logfile", str(directory / "redis.log")]
        self.processes[port] = subprocess.Popen(command, stdout=subprocess.DEVNULL)

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def _answers(self, port: int) -> bool:
        client = self.client(port)
        with contextlib.suppress(redis.RedisError), contextlib.closing(client):
            return bool(client.ping())
        return False

    def settled(self) -> bool:
        for port in self.processes:
            client = self.client(port)
            with contextlib.suppress(redis.RedisError), contextlib.closing(client):
                if client.cluster("info")["cluster_state"] != "ok":
                    return False
                info = client.info("replication")
                if info["role"] == "slave" and info.get("master_link_status") != "up":
                    return False
                continue
            return False
        return True

    def master_of(self, key: str) -> int:
        """The port of the master that holds `key`'s slot now."""
        port = next(iter(self.processes))
        client = self.client(port)
        with contextlib.closing(client):
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return int(master[1])
        raise AssertionError(f"no master holds slot {slot}")

    def replica_of(self, master: int) -> int:
        for port in self.processes:
            client = self.client(port)
            with contextlib.suppress(redis.RedisError), contextlib.closing(client):
                info = client.info("replication")
                if info["role"] == "slave" and int(info["master_port"]) == master:
                    return port
        raise AssertionError(f"no replica of {master}")

    def fail_over(self, key: str) -> int:
        """CLUSTER FAILOVER on the replica of the master holding `key`; returns the port of
        the new master once every node agrees."""
        old = self.master_of(key)
        new = self.replica_of(old)
        client = self.client(new)
        with contextlib.closing(client):
            client.execute_command("CLUSTER", "FAILOVER")
        wait_for(lambda: self.master_of(key) == new, 30, f"node {new} to take over {key!r}")
        wait_for(self.settled, 30, "the cluster to settle after the failover")
        return new

    def kill_master_of(self, key: str) -> int:
        """kill -9 the master holding `key`; returns its replica's port once it took over."""
        return self.wait_for_new_master(key, self.kill_master_now(key))

    def kill_master_now(self, key: str) -> int:
        """kill -9 the master holding `key` and return its port, without waiting."""
        old = self.master_of(key)
        process = self.processes.pop(old)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        return old

    def wait_for_new_master(self, key: str, old: int) -> int:
        """The port of the master holding `key` once it is not `old`."""

        def moved() -> bool:
            with contextlib.suppress(redis.RedisError, AssertionError):
                return self.master_of(key) != old
            return False

        wait_for(moved, 30, f"a replica to take over {key!r} from node {old}")
        return self.master_of(key)

    def restart(self, port: int) -> None:
        """Start the node of `port` again: with its nodes.conf it rejoins the cluster, as a
        replica of the master that took its slots. Waits until the cluster has settled."""
        self._node(port)
        wait_for(self.settled, 60, f"node {port} to rejoin the cluster")

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
        for process in self.processes.values():
            process.wait(10)
        self.processes.clear()
