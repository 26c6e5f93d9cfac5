"""A Sentinel group of its own for a test: a primary, one replica (or more) and three
sentinels (down-after-milliseconds 1000), each a redis-server on a free 127.0.0.1 port, so
that it can be failed over, killed and stopped without touching anybody else's Redis."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from pathlib import Path

import redis

from tests.support.servers import answers, free_port
from tests.support.waiting import wait_for

SERVICE = "delayq"
DOWN_AFTER_MS = 1000


class SentinelGroup:
    """The servers of one group; `stop` ends every one still running."""

    def __init__(self, workdir: Path, replicas: int = 1) -> None:
        self.workdir = workdir
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        # Distinct: free_port can name a port twice, and two servers on one port would leave
        # one running, unknown to `processes` (which is keyed by port).
        ports: list[int] = []
        while len(ports) < 1 + replicas + 3:
            ports += [port] if (port := free_port()) not in ports else []
        self.data_ports, self.sentinel_ports = ports[: 1 + replicas], ports[1 + replicas :]

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def start(self) -> None:
        primary, *replicas = self.data_ports
        self._server(primary, [])
        for replica in replicas:
            self._server(replica, ["--replicaof", "127.0.0.1", str(primary)])
        for port in self.sentinel_ports:
            self._sentinel(port, primary)
        for replica in replicas:
            self.wait_in_sync(replica)
        wait_for(self._ready, 30, "the sentinels to know the replicas and each other")

    def wait_in_sync(self, replica: int) -> None:
        client = self.client(replica)
        wait_for(lambda: _in_sync(client), 30, f"the replica on port {replica} to sync")
        client.close()

    def _server(self, port: int, extra: list[str]) -> None:
        directory = self.workdir / str(port)
        directory.mkdir(exist_ok=True)  # a restart finds it
        command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(directory), *extra]
        command += ["--logfile", str(directory / "redis.log")]
        self.processes[port] = subprocess.Popen(command, stdout=subprocess.DEVNULL)

    def _sentinel(self, port: int, primary: int) -> None:
        config = self.workdir / f"sentinel-{port}.conf"
        config.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {self.workdir}\n"
            f"logfile {self.workdir / f'sentinel-{port}.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} 5000\n"
        )
        command = ["redis-server", str(config), "--sentinel"]
        self.processes[port] = subprocess.Popen(command, stdout=subprocess.DEVNULL)

    def _ready(self) -> bool:
        for port in self.sentinel_ports:
            client = self.client(port)
            try:
                master = client.sentinel_master(SERVICE)
                replicas = client.sentinel_slaves(SERVICE)
            except redis.RedisError:
                return False
            finally:
                client.close()
            healthy = {
                replica["port"]
                for replica in replicas
                if replica["master-link-status"] == "ok" and not replica["is_sdown"]
            }
            if master["num-other-sentinels"] < 2 or not set(self.data_ports[1:]) <= healthy:
                return False
        return True

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def primary_port(self) -> int:
        """The primary's port as the first sentinel names it."""
        client = self.client(self.sentinel_ports[0])
        try:
            return int(client.sentinel_get_master_addr_by_name(SERVICE)[1])
        finally:
            client.close()

    def fail_over(self) -> int:
        """SENTINEL FAILOVER, then wait until the old replica is a primary that every
        sentinel names, and the old primary has been turned into its replica; returns the
        new primary's port.

        Until the sentinels demote it, a few seconds after the promotion, the old primary
        still takes writes from the clients connected to it, and loses them when it
        resyncs as a replica: what that costs is a subject of its own, so the tests here
        wait it out and see only what a settled failover does.
        """
        old = self.primary_port()
        sentinel = self.client(self.sentinel_ports[0])
        sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)
        sentinel.close()
        new = self.wait_for_new_primary(old)
        self.wait_in_sync(old)
        return new

    def kill_primary(self) -> int:
        """kill -9 the primary, then wait for the sentinels to promote the replica."""
        return self.wait_for_new_primary(self.kill_primary_now())

    def kill_primary_now(self) -> int:
        """kill -9 the primary and return its port, without waiting for a promotion."""
        old = self.primary_port()
        process = self.processes.pop(old)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        return old

    def wait_for_new_primary(self, old: int) -> int:
        """The port of the replica promoted in place of `old`, once it says it is the
        primary and every sentinel names it."""
        named: list[int] = []

        def promoted() -> bool:
            with contextlib.suppress(redis.RedisError):
                named[:] = [self._named_by(port) for port in self.sentinel_ports]
                if len(set(named)) != 1 or named[0] == old:
                    return False
                client = self.client(named[0])
                with contextlib.closing(client):
                    return bool(client.info("replication")["role"] == "master")
            return False

        wait_for(promoted, 30, f"a replica to be promoted in place of port {old}")
        return named[0]

    def restart_primary(self, empty: bool = True) -> int:
        """kill -9 the primary and start it again at once on its port, as a primary, before
        the sentinels find it down; its port. Its replicas reconnect, find a new replication
        history and resync from it. `empty`: with nothing (nothing is saved, but a server
        that was a replica keeps the last snapshot its primary sent it, dump.rdb, and would
        load it: that file goes first); else with what its dump.rdb holds, if any."""
        old = self.kill_primary_now()
        if empty:
            (self.workdir / str(old) / "dump.rdb").unlink(missing_ok=True)
        self._server(old, [])
        client = self.client(old)
        with contextlib.closing(client):
            wait_for(lambda: answers(client), 10, f"the primary on port {old} to answer")
        return old

    def restart(self, port: int) -> None:
        """Start the server of `port` again (empty: nothing is saved), as a replica of the
        current primary, as the sentinels would make it; wait until it is in sync."""
        self._server(port, ["--replicaof", "127.0.0.1", str(self.primary_port())])
        self.wait_in_sync(port)

    def _named_by(self, sentinel_port: int) -> int:
        client = self.client(sentinel_port)
        try:
            return int(client.sentinel_get_master_addr_by_name(SERVICE)[1])
        finally:
            client.close()

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
        for process in self.processes.values():
            process.wait(10)
        self.processes.clear()


def _in_sync(replica: redis.Redis) -> bool:
    with contextlib.suppress(redis.RedisError):
        info = replica.info("replication")
        return info["role"] == "slave" and info.get("master_link_status") == "up"
    return False
