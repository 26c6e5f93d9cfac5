"""Where the benchmark runs and how it runs things: the servers on 127.0.0.1, the one MariaDB
database and the Redis db numbers it may touch, resetting them, opening a delayq Queue, and
timing a subprocess (wall time and peak RSS).

Other people share these servers: only FLUSHDB on our own db numbers, never FLUSHALL, and
only the `delay_queue` table of our own database is truncated.
"""

from __future__ import annotations

import compileall
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import redis

import delayq
from delayq.config import Settings

from . import cores

ROOT = Path(__file__).resolve().parent.parent
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "mysql://root@127.0.0.1:3306/delayq_bench")
REDIS_BASE_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379").rstrip("/")
# One Redis database per system, so no system sees another's keys.
REDIS_DBS = {"delayq": 10, "huey": 9, "rq": 8, "dramatiq": 7, "arq": 6}
HANDLERS = "bench.handlers"


def redis_url(system: str) -> str:
    return f"{REDIS_BASE_URL}/{REDIS_DBS[system]}"


def compile_sources() -> None:
    """Write delayq's and bench's bytecode caches once, as `pip install` does for a package,
    so that no timed process compiles them (PYTHONDONTWRITEBYTECODE may be set here)."""
    for package in ("delayq", "bench"):
        compileall.compile_dir(ROOT / package, quiet=1)


def ensure_database() -> None:
    """Create the benchmark's MariaDB database if it is missing (nothing else is created)."""
    from .baseline import connect_mysql

    name = urlsplit(DATABASE_URL).path.lstrip("/")
    conn = connect_mysql(DATABASE_URL.rsplit("/", 1)[0] + "/")  # the server, no database
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
    finally:
        conn.close()


def check_loopback() -> None:
    """Refuse to send benchmark traffic anywhere but this machine."""
    for url in (DATABASE_URL, REDIS_BASE_URL):
        host = urlsplit(url).hostname or ""
        if host not in LOOPBACK:
            raise SystemExit(f"bench: {url!r} is not on 127.0.0.1; the benchmark only runs locally")


def flush(system: str) -> redis.Redis:
    """FLUSHDB the system's own Redis database (never any other) and return a client."""
    client = redis.Redis.from_url(redis_url(system))
    client.flushdb()
    return client


def settings(url: str | None = None, database: str | None = None) -> Settings:
    """delayq's settings for the benchmark, built directly: no DELAYQ_* variable or file.
    `url`: a Redis of the benchmark's own making (topologies.py) instead of its database;
    `database`: a MySQL server of its own making (databases.py) instead of DATABASE_URL."""
    return Settings(
        database_url=database or DATABASE_URL,
        redis_url=url or redis_url("delayq"),
        handlers=(HANDLERS,),
    ).validate()


def fresh_queue(url: str | None = None, database: str | None = None) -> delayq.Queue:
    """A delayq Queue on an empty table and an empty, complete index (on `url`, a server the
    benchmark started, emptied whole; the table on `database` if given)."""
    queue = delayq.connect(settings(url, database))
    queue.init()
    queue.db.execute_sql("TRUNCATE TABLE delay_queue")
    flush("delayq")  # the handlers' counter and lateness list, whatever `url` is
    if url:
        queue.index.client.flushdb()
    queue.init()  # marks the (empty) index complete, as after `delayq init`
    return queue


def clean() -> None:
    """Leave nothing behind: an empty table and our Redis databases flushed."""
    with fresh_queue():
        pass
    for system in REDIS_DBS:
        flush(system)


def count_status(queue: delayq.Queue, status: delayq.Status) -> int:
    cursor = queue.db.execute_sql(
        "SELECT COUNT(*) FROM delay_queue WHERE status = %s", (int(status),)
    )
    return int(cursor.fetchone()[0])


def child_env(url: str | None = None, database: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a benchmark subprocess: delayq configured only by the variables
    set here (none inherited; Redis at `url` and the table on `database` if given), bench
    importable, DELAYQ_BATCH_SIZE left at its default."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    # Use and keep bytecode caches, as an installed package does (pip compiles on install);
    # without them every process would compile delayq from source.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        DELAYQ_DATABASE_URL=database or DATABASE_URL,
        DELAYQ_REDIS_URL=url or redis_url("delayq"),
        DELAYQ_HANDLERS=HANDLERS,
        DELAYQ_HOME=tempfile.gettempdir() + "/delayq-bench-home",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    env.update(extra)
    return env


@dataclass(frozen=True)
class Finished:
    wall: float  # seconds from spawn to exit
    max_rss_kib: int  # the child's peak resident set
    returncode: int
    stderr: str
    busy_cores: float | None = None  # the whole machine's, on average meanwhile (cores.py)
    cpu_s: float = 0.0  # the child's own user + system time: what a busy machine inflates least


def run_process(
    args: list[str], timeout: float, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> Finished:
    """Run a command to completion; its own rusage (os.wait4), not that of every child."""
    with tempfile.TemporaryFile() as err:
        ticks = cores.busy_ticks()
        started = time.perf_counter()
        proc = subprocess.Popen(
            args, cwd=cwd, env=env or child_env(), stdout=subprocess.DEVNULL, stderr=err
        )
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        wall = time.perf_counter() - started
        busy = cores.busy_cores(ticks, cores.busy_ticks(), wall)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    cpu = usage.ru_utime + usage.ru_stime
    return Finished(wall, usage.ru_maxrss, proc.returncode, text, busy, cpu)


def python(*args: str) -> list[str]:
    """A command line running this interpreter (the venv's)."""
    return [sys.executable, *args]


def require_ok(finished: Finished, what: str) -> None:
    if finished.returncode != 0:
        tail = " | ".join(finished.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"{what} exited {finished.returncode}: {tail}")


def log(message: str) -> None:
    """Progress on stderr; stdout carries only the figure lines and the JSON line."""
    print(f"bench: {message}", file=sys.stderr, flush=True)


def lead_for(n: int) -> float:
    """Seconds from now to the first due time: room to add n jobs one by one before it."""
    return 1.0 + 0.002 * n


def due_times(n: int, spread: float, lead: float) -> list[float]:
    """n due times evenly over `spread` seconds from `lead` seconds from now, each a whole
    millisecond (so every system is handed exactly the same instant)."""
    start = time.time() + lead
    return [math.ceil((start + spread * i / n) * 1000) / 1000 for i in range(n)]
