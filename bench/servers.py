"""A MariaDB and a Redis of the benchmark's own, for the scale workload: each started on a free
127.0.0.1 port from a directory the benchmark made, and stopped (SIGTERM, then SIGKILL) when it
is done, whatever happened. The shared servers on 3306 and 6379 are never touched.

The MariaDB data directory lives in `workdir/mariadb` and outlives the server if the caller
keeps `workdir` (bench/scale.py's `--keep`), so a later run starts the same data again
(`--reuse`). Redis keeps nothing: no RDB, no AOF.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pymysql
import redis

MARIADBD = ("mariadbd", "/usr/sbin/mariadbd")
START_TIMEOUT = 120.0  # a large buffer pool, or the dump of one to load, takes a while
STOP_TIMEOUT = 300.0  # InnoDB writes its dirty pages on a clean shutdown


def find_program(*names: str) -> str:
    """The first of `names` found on PATH (or as an absolute path), or a one-line error."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError(f"{names[0]} is not installed (looked for {', '.join(names)})")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)


class Server:
    """A server process of ours: started in a session of its own, so a Ctrl-C at the terminal
    reaches the benchmark, whose `finally` stops the server in order."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def spawn(self, args: list[str], log: Path) -> None:
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM, wait, SIGKILL if it will not go; nothing if it never started."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


class PrivateMariaDB(Server):
    """mariadbd on a data directory of its own: root without a password, on 127.0.0.1 only,
    no binary log, the given InnoDB buffer pool."""

    def __init__(self, workdir: Path, buffer_pool: int) -> None:
        super().__init__()
        self.workdir = workdir
        self.datadir = workdir / "mariadb"
        self.buffer_pool = buffer_pool
        self.port = 0

    def url(self, database: str) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{database}"

    def install(self) -> None:
        """A new, empty data directory (mariadb-install-db), unless one is there."""
        if (self.datadir / "mysql").is_dir():
            return
        self.datadir.mkdir(parents=True, exist_ok=True)
        with open(self.workdir / "mariadb-install.log", "wb") as out:
            subprocess.run(
                [
                    find_program("mariadb-install-db", "mysql_install_db"),
                    "--no-defaults",
                    "--auth-root-authentication-method=normal",
                    f"--datadir={self.datadir}",
                    "--user=root",
                    "--skip-test-db",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=300,
            )

    def start(self) -> None:
        self.install()
        self.port = free_port()
        self.spawn(
            [
                find_program(*MARIADBD),
                "--no-defaults",
                f"--datadir={self.datadir}",
                f"--socket={self.workdir / 'mariadb.sock'}",
                f"--pid-file={self.workdir / 'mariadb.pid'}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                "--user=root",
                f"--innodb-buffer-pool-size={self.buffer_pool}",
                # A production-sized redo log: the default 96 MiB checkpoints every few
                # seconds while millions of rows are written.
                "--innodb-log-file-size=1G",
                "--skip-log-bin",
                "--skip-name-resolve",
                "--max-connections=200",
            ],
            self.workdir / "mariadb.log",
        )
        wait_until(self._answers, START_TIMEOUT, f"the private MariaDB on port {self.port}")

    def _answers(self) -> bool:
        if not self.alive():
            raise RuntimeError(f"mariadbd exited; see {self.workdir / 'mariadb.log'}")
        try:
            self.connect("").close()
            return True
        except pymysql.err.OperationalError:
            return False

    def connect(self, database: str, **options: object) -> pymysql.Connection:
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user="root",
            password="",
            database=database or None,
            charset="utf8mb4",
            autocommit=True,
            **options,
        )

    def create_database(self, name: str, fresh: bool) -> None:
        """CREATE DATABASE `name` (dropped first if `fresh`)."""
        conn = self.connect("")
        try:
            with conn.cursor() as cursor:
                if fresh:
                    cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
                cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
        finally:
            conn.close()

    def version(self) -> str:
        conn = self.connect("")
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT VERSION()")
                return str(cursor.fetchone()[0])
        finally:
            conn.close()


class PrivateRedis(Server):
    """redis-server on 127.0.0.1 with no persistence at all."""

    def __init__(self, workdir: Path) -> None:
        super().__init__()
        self.workdir = workdir / "redis"
        self.port = 0

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self, db: int = 0) -> redis.Redis:
        return redis.Redis.from_url(self.url(db))

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.spawn(
            [
                find_program("redis-server"),
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
            ],
            self.workdir.parent / "redis.log",
        )
        client = self.client()
        wait_until(lambda: self._answers(client), START_TIMEOUT, f"Redis on port {self.port}")
        client.close()

    def _answers(self, client: redis.Redis) -> bool:
        if not self.alive():
            raise RuntimeError(f"redis-server exited; see {self.workdir.parent / 'redis.log'}")
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    def used_memory(self) -> int:
        client = self.client()
        try:
            return int(client.info("memory")["used_memory"])
        finally:
            client.close()


def peak_rss_kib(pid: int) -> int | None:
    """A live process's peak resident set (VmHWM), in KiB; None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def running_under(path: Path) -> list[int]:
    """Pids of processes whose command line names `path` (servers left behind, for tests)."""
    needle = str(path).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
