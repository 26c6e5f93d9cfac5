"""A private redis-server on a free 127.0.0.1 port, for tests and the soak that restart
Redis: killing it touches nobody else's data."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

import redis

from tests.waiting import wait_for


class PrivateRedis:
    """A redis-server on 127.0.0.1:`port` with no persistence, started and stopped at will."""

    def __init__(self, port: int, workdir: Path, *options: str) -> None:
        self.port = port
        self.workdir = workdir
        self.options = options  # more redis-server options, e.g. ("--rename-command", ...)
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
                "--save",
                "",
                "--appendonly",
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
