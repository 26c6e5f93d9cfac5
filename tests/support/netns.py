"""Hosts for a test: network namespaces that reach a private Redis and MariaDB across veth
pairs, and that the test cuts off from either with iptables inside the namespace.

Host n is the namespace `dq<pid>h<n>`, joined to the root namespace by a veth pair: its end
has 10.231.S.2/30 and the root end 10.231.S.1/30, where S differs between concurrent runs
(from the pid). A namespace has no other link and no route beyond its /30, so its traffic
cannot leave the machine. In the root namespace a redis-server of the test's own listens on
127.0.0.1 and every root end, and a TCP relay (tests/servers.Proxy, a thread in the test
process) on each root end forwards to MariaDB on 127.0.0.1:3306: MariaDB listens on
loopback only, and a relay needs neither NAT rules nor route_localnet in the root
namespace, which other processes share. `cut()` drops the host's packets to one or both in
its own OUTPUT chain, as a partition would; `restore()` deletes the rule. Everything is
torn down when the `with` block ends, however it ends.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from tests.support.servers import PrivateRedis, Proxy, free_port


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "iptables", "redis-server") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed; bin/test installs them"
    probe = f"dq{os.getpid()}probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], check=False)
    return None


def sh(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True)


@dataclass
class Host:
    name: str  # the namespace
    address: str  # its end of the veth
    root_address: str  # the root namespace's end, where Redis and the relay listen
    relay: Proxy | None = None
    cut_rules: list[list[str]] = field(default_factory=list)

    def command(self, *argv: str) -> list[str]:
        """`argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self, ports: list[int]) -> None:
        """Drop every packet this host sends to `ports` on the root end (all ports if
        empty): its connections hang, as across a partition, rather than being refused."""
        to = ["OUTPUT", "-d", self.root_address]
        rules = [[*to, "-p", "tcp", "--dport", str(port), "-j", "DROP"] for port in ports]
        for rule in rules or [[*to, "-j", "DROP"]]:
            sh(*self.command("iptables", "-A", *rule))
            self.cut_rules.append(rule)

    def restore(self) -> None:
        while self.cut_rules:
            sh(*self.command("iptables", "-D", *self.cut_rules.pop()))


class Hosts:
    """`count` hosts, a redis-server they all reach, and a relay to MariaDB on each."""

    def __init__(self, count: int, workdir: Path, mariadb: tuple[str, int]) -> None:
        self.workdir = workdir
        self.mariadb = mariadb
        base = os.getpid() % 80 * 3  # three /30s per run, in 10.231.0.0-10.231.239.255
        self.hosts = [
            Host(f"dq{os.getpid()}h{n}", f"10.231.{base + n}.2", f"10.231.{base + n}.1")
            for n in range(count)
        ]
        self.redis = PrivateRedis(
            free_port(), workdir, addresses=tuple(h.root_address for h in self.hosts)
        )
        self._stack = ExitStack()

    def __enter__(self) -> Hosts:
        try:
            for n, host in enumerate(self.hosts):
                self._make(host, f"dq{os.getpid()}r{n}")
            self.redis.start()
            self._stack.callback(lambda: self.redis.process is not None and self.redis.kill())
            for host in self.hosts:
                host.relay = Proxy(self.mariadb, host.root_address)
                self._stack.callback(host.relay.close)
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _make(self, host: Host, veth: str) -> None:
        """The namespace and its veth pair, each end up with its address; deleting the
        namespace deletes the pair."""
        sh("ip", "netns", "add", host.name)
        self._stack.callback(lambda: subprocess.run(["ip", "netns", "del", host.name], check=False))
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", host.name)
        # Deleting the namespace would delete the pair too, but only some time later.
        self._stack.callback(lambda: subprocess.run(["ip", "link", "del", veth], check=False))
        sh("ip", "addr", "add", f"{host.root_address}/30", "dev", veth)
        sh("ip", "link", "set", veth, "up")
        for argv in (
            ["ip", "addr", "add", f"{host.address}/30", "dev", "eth0"],
            ["ip", "link", "set", "eth0", "up"],
            ["ip", "link", "set", "lo", "up"],
        ):
            sh(*host.command(*argv))

    def redis_url(self, host: Host) -> str:
        return f"redis://{host.root_address}:{self.redis.port}/0"

    def database_url(self, host: Host, url: str) -> str:
        """`url` (a mysql:// URL of MariaDB on loopback) as `host` reaches it: via its relay."""
        assert host.relay is not None
        parts = urlsplit(url)
        credentials = parts.netloc.rpartition("@")[0]
        at = f"{credentials}@" if credentials else ""
        return parts._replace(netloc=f"{at}{host.root_address}:{host.relay.port}").geturl()


def cut_ports(hosts: Hosts, host: Host, what: str) -> list[int]:
    """The root end's ports a cut of `what` ("redis", "mysql", "both") drops; [] is all."""
    assert host.relay is not None
    return {"redis": [hosts.redis.port], "mysql": [host.relay.port], "both": []}[what]
