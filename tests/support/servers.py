"""A private redis-server on a free 127.0.0.1 port, for tests and the soak that restart
Redis: killing it touches nobody else's data; and a TCP forwarder a test can cut, hold or
move to another server."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import threading
from pathlib import Path

import redis

from tests.support.waiting import wait_for


class PrivateRedis:
    """A redis-server on 127.0.0.1:`port` (and the other `addresses`) with no persistence,
    started and stopped at will."""

    def __init__(
        self, port: int, workdir: Path, *options: str, addresses: tuple[str, ...] = ()
    ) -> None:
        self.port = port
        self.workdir = workdir
        self.options = options  # more redis-server options, e.g. ("--rename-command", ...)
        self.addresses = addresses
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                *self.addresses,
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",  # the other addresses are a test's own namespaces
                "no",
                "--dir",
                str(self.workdir),
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        wait_for(lambda: answers(client), 10, "the private Redis to answer")
        client.close()

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None


def answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Proxy:
    """A TCP forwarder from a free port on `address` to `target` (MariaDB, say): `cut()` drops
    every link and refuses new ones, as a server restart does to its clients; `restore()`
    lets them in. `hold()` keeps the links open but passes nothing on until `release()`, as
    a partition that came after a request was acknowledged: its reply never comes."""

    def __init__(self, target: tuple[str, int], address: str = "127.0.0.1") -> None:
        self.target = target
        self.listener = socket.create_server((address, 0))
        self.port = int(self.listener.getsockname()[1])
        self.links: list[socket.socket] = []
        self.open = threading.Event()
        self.open.set()
        self.flowing = threading.Event()
        self.flowing.set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.open.is_set():
                client.close()
                continue
            try:
                server = socket.create_connection(self.target)
            except OSError:  # the target is down: the client sees its link drop
                client.close()
                continue
            self.links += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(
                    target=_pump, args=(source, sink, self.flowing), daemon=True
                ).start()

    def cut(self) -> None:
        self.open.clear()
        for link in self.links:
            with contextlib.suppress(OSError):
                link.shutdown(socket.SHUT_RDWR)
        self.links.clear()

    def restore(self) -> None:
        self.open.set()

    def move(self, target: tuple[str, int]) -> None:
        """Send new links to `target`, dropping those to the old one: an address that moves
        on a failover, as a proxy or a DNS name with a short TTL does."""
        self.cut()
        self.target = target
        self.restore()

    def hold(self) -> None:
        self.flowing.clear()

    def release(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.cut()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (Linux)
        self.listener.close()


def _pump(source: socket.socket, sink: socket.socket, flowing: threading.Event) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            flowing.wait()
            sink.sendall(data)
    for link in (source, sink):
        with contextlib.suppress(OSError):
            link.shutdown(socket.SHUT_RDWR)
