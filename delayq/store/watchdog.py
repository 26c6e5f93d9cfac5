"""The embedded Redis server's keeper: a small process that starts redis-server as its child
and stops it when its home is gone or nobody has used it for the idle limit.

It runs as a script (`python -I watchdog.py HOME SOCKET IDLE -- SERVER ARGS...`) importing
only the standard library and redis, so it costs little while the server lives; embedded.py
decides where the server lives and how it starts. The server dies with its keeper
(PR_SET_PDEATHSIG), so a keeper killed by SIGKILL leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import redis

PR_SET_PDEATHSIG = 1  # prctl(2)
# How often the keeper looks, or a quarter of a shorter idle limit (kept to within a quarter).
POLL_EVERY = 1.0
STOP_WAIT = 30.0  # how long a SIGTERMed server may take to write its append-only file


def stop_with_parent() -> None:
    """In a child, before exec: SIGTERM it when its parent dies, even by kill -9, so nothing
    it runs is left behind without its supervisor (Linux; elsewhere a no-op)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def identity(path: Path) -> tuple[int, int] | None:
    """The directory's (device, inode), or None once it is gone: a home deleted and made
    anew at the same path is another home."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino)


class Usage:
    """Whether anyone but the keeper has used the server since the last look: a client
    connected now, or a connection made in between (a cron run that came and went)."""

    def __init__(self, sock: Path) -> None:
        self.client = redis.Redis(unix_socket_path=str(sock), socket_timeout=5)
        self.connections_seen = -1

    def used_since_last_look(self) -> bool:
        try:
            info = self.client.info()
        except (redis.RedisError, OSError):
            return True  # starting up, loading its file, or busy: not idle
        connections = int(info["total_connections_received"])
        used = int(info["connected_clients"]) > 1 or connections != self.connections_seen
        self.connections_seen = connections
        return used


def keep(server: subprocess.Popen[bytes], home: Path, sock: Path, idle_limit: float) -> str:
    """Watch the server until it must stop; the reason, or '' if it ended by itself."""
    home_id = identity(home)
    usage = Usage(sock)
    used_at = time.monotonic()
    poll = min(POLL_EVERY, idle_limit / 4)
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=poll)
            return ""
        if identity(home) != home_id or not sock.exists():
            return f"its home {home} or socket {sock} is gone"
        if usage.used_since_last_look():
            used_at = time.monotonic()
        elif time.monotonic() - used_at >= idle_limit and _stop_if_still_idle(server, home, usage):
            return f"nobody used it for {idle_limit:g}s"


@contextlib.contextmanager
def starters_lock(home: Path) -> Iterator[bool]:
    """Hold the lock a command takes to start a server in `home` (embedded.py), as the keeper
    does to stop one or to remove its socket directory; False, holding nothing, if the home
    went away: nobody can start a server there any more."""
    try:
        lock_fd = os.open(home / "redis.lock", os.O_CREAT | os.O_WRONLY, 0o600)
    except OSError:
        yield False
        return
    with open(lock_fd, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield True


def _stop_if_still_idle(server: subprocess.Popen[bytes], home: Path, usage: Usage) -> bool:
    """Under the starters' lock, look once more and stop the server if still unused: a
    command that found it answering took the lock too, and its ping counts as a use."""
    with starters_lock(home) as held:
        if held and usage.used_since_last_look():
            return False
        _stop(server)
        return True


def _stop(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM: redis-server's own shutdown, which writes out the append-only file."""
    server.terminate()  # a no-op once the server has exited (Popen polls first)
    try:
        server.wait(timeout=STOP_WAIT)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def main(argv: list[str]) -> int:
    home, sock, idle_limit = Path(argv[0]), Path(argv[1]), float(argv[2])
    server_args = argv[argv.index("--") + 1 :]
    server = subprocess.Popen(server_args, stdin=subprocess.DEVNULL, preexec_fn=stop_with_parent)
    # SIGTERM to the keeper (a shutdown, `kill`) is passed on; the server's exit ends the watch.
    signal.signal(signal.SIGTERM, lambda *_: server.terminate())
    if reason := keep(server, home, sock, idle_limit):
        print(f"delayq: stopping the embedded Redis server: {reason}", file=sys.stderr)
        _stop(server)
    if sock.parent != home:
        _remove_socket_directory(home, sock.parent)
    return server.returncode or 0


def _remove_socket_directory(home: Path, directory: Path) -> None:
    """Remove a deep home's private socket directory once it is empty, under the starters'
    lock: a command starting a new server makes it under that lock, and the new server's
    socket in it keeps it from being removed afterwards."""
    with starters_lock(home), contextlib.suppress(OSError):
        directory.rmdir()  # fails if not empty: a newer server's socket is in it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
