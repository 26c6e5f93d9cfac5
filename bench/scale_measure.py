"""The scale workload's measurements on one table (a `Site`: a database and a Redis db on the
benchmark's own servers): every command as a whole `python -m delayq` process, the web pages,
reconcile, purge beside a running loop, the lateness of a steady stream, each with the
physical limit the issue compares it with where there is one (a Redis loss: scale_loss.py).

Jobs that report when they started are bench.handlers.record_start, which appends to a file:
nothing that FLUSHALL can take away.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pymysql.cursors

import delayq
from delayq.config import Settings

from . import env, handlers
from .report import median, percentile
from .scale_load import QUEUES
from .servers import PrivateMariaDB, PrivateRedis, Server, free_port, peak_rss_kib, wait_until

RECORD = (env.HANDLERS, "record_start")
LEAD = 1.0  # a streamed job is added this long before it is due
STREAM_RATE = 20.0  # jobs/s due while purge runs, and in the steady stream
WEB_PAGES = {"overview": "/", "failed search": "/jobs?status=failed", "job page": "/jobs/{id}"}


@dataclass
class Site:
    """One table of the benchmark's servers and how to reach it; with a `home`, the
    embedded default's (bench/scale_embedded.py), whose servers give no URL."""

    mariadb: PrivateMariaDB
    redis: PrivateRedis
    database: str
    redis_db: int
    workdir: Path
    repeat: int
    home: Path | None = None

    @property
    def servers(self) -> tuple[Server, ...]:
        return (self.mariadb, self.redis)

    def settings(self) -> Settings:
        return Settings(
            database_url=self.mariadb.url(self.database),
            redis_url=self.redis.url(self.redis_db),
            handlers=(env.HANDLERS,),
            home=self.home or Settings.home,
        ).validate()

    def queue(self) -> delayq.Queue:
        return delayq.connect(self.settings())

    def child_env(self, record: Path | None = None, **extra: str) -> dict[str, str]:
        variables = dict(extra, DELAYQ_DATABASE_URL=self.mariadb.url(self.database) or "")
        if record is not None:
            variables[handlers.RECORD_FILE] = str(record)
        found = env.child_env(self.redis.url(self.redis_db), **variables)
        if self.home is not None:  # the embedded default: a home, and no URL at all
            del found["DELAYQ_DATABASE_URL"], found["DELAYQ_REDIS_URL"]
            found["DELAYQ_HOME"] = str(self.home)
        return found

    def record_file(self, name: str) -> Path:
        path = self.workdir / f"{self.database}-{name}.records"
        path.unlink(missing_ok=True)
        return path

    def delayq(self, *args: str) -> list[str]:
        return env.python("-m", "delayq", *args)


def timed(site: Site, args: list[str], timeout: float = 600.0) -> tuple[float, str]:
    """Wall seconds of one `python -m delayq ARGS` to its exit, and its stdout; an error if
    it exits non-zero (doctor's 1 for a FAIL line is a result, not an error)."""
    started = time.perf_counter()
    done = subprocess.run(
        site.delayq(*args),
        cwd=env.ROOT,
        env=site.child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0 and not (args[0] == "doctor" and done.returncode == 1):
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"delayq {' '.join(args)} exited {done.returncode}: {tail}")
    return wall, done.stdout


def commands(
    site: Site, job_id: int, doctor_full: bool, errors: dict[str, str]
) -> dict[str, float | None]:
    """Median wall seconds of each read-only command (and run with nothing due, and one add),
    the repeats interleaved so that a burst of load falls on every command alike; a command
    that fails or times out is None, and why in `errors`."""
    named = {
        "status": ["status"],
        "status --json": ["status", "--json"],
        "list": ["list"],
        "list --status failed": ["list", "--status", "failed"],
        "peek": ["peek"],
        "show": ["show", str(job_id)],
        "metrics": ["metrics"],
        "doctor": ["doctor"],
        "run (nothing due)": ["run"],
        "add": ["add", env.HANDLERS, "incr", "--delay", "20d", "--queue", "mail"],
    }
    if doctor_full:
        named["doctor --full"] = ["doctor", "--full"]
    walls: dict[str, list[float]] = {name: [] for name in named}
    for _ in range(site.repeat):
        for name, args in named.items():
            if name in errors:
                continue
            try:
                walls[name].append(timed(site, args)[0])
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"
                env.log(f"scale: delayq {name} failed: {errors[name]}")
    result: dict[str, float | None] = {
        name: None if name in errors else median(spent) for name, spent in walls.items()
    }
    result.setdefault("doctor --full", None)
    return result


def offers_doctor_full(site: Site) -> bool:
    return "--full" in timed(site, ["doctor", "--help"])[1]


def web_pages(site: Site, job_id: int) -> dict[str, float]:
    """`delayq web` as a process; median seconds of GETs of each page after one warm-up."""
    port = free_port()
    web = subprocess.Popen(
        site.delayq("web", "--port", str(port)),
        cwd=env.ROOT,
        env=site.child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(base, web), 60, "delayq web to answer")
        result = {}
        for name, path in WEB_PAGES.items():
            url = base + path.format(id=job_id)
            _get(url)
            spent = []
            for _ in range(site.repeat):
                started = time.perf_counter()
                _get(url)
                spent.append(time.perf_counter() - started)
            result[name] = median(spent)
        return result
    finally:
        stop(web)


def _answers(base: str, web: subprocess.Popen[bytes]) -> bool:
    if web.poll() is not None:
        raise RuntimeError(f"delayq web exited {web.returncode}")
    try:
        _get(base + "/static/does-not-matter")
    except urllib.error.HTTPError:
        return True  # it answered
    except OSError:
        return False
    return True


def _get(url: str) -> None:
    with urllib.request.urlopen(url, timeout=600) as answer:  # noqa: S310 - loopback only
        answer.read()


def reconcile(site: Site, rows: int) -> dict[str, float]:
    """`delayq reconcile` once; and the bare read of every pending row, streamed by an
    unbuffered cursor: what a comparison of the whole table could not beat."""
    wall, out = timed(site, ["reconcile", "--json"], timeout=7200)
    conn = site.mariadb.connect(site.database, cursorclass=pymysql.cursors.SSCursor)
    read = 0
    try:
        with conn.cursor() as cursor:
            started = time.perf_counter()
            cursor.execute("SELECT id, queue, run_at FROM delay_queue WHERE status = 1")
            while chunk := cursor.fetchmany(10_000):
                read += len(chunk)
            spent = time.perf_counter() - started
    finally:
        conn.close()
    return {
        "reconcile_s": wall,
        # The table's rows over the time: reconcile compares only those due within each
        # queue's horizon, the rest wait in the table alone.
        "reconcile_rows_per_s": rows / wall,
        "reconcile_rows_compared": json.loads(out)["rows"],
        "bare_select_rows": read,
        "bare_select_rows_per_s": read / spent,
    }


@contextlib.contextmanager
def runner(site: Site, record: Path, *options: str, **extra: str) -> Iterator[subprocess.Popen]:
    """A `delayq run --loop` while the block runs, stopped with SIGTERM after it."""
    proc = subprocess.Popen(
        site.delayq("run", "--loop", *options),
        cwd=env.ROOT,
        env=site.child_env(record, **extra),
    )
    try:
        yield proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def records(path: Path) -> list[tuple[int, float, float, int]]:
    """(pid, started, due, id) of every job that ran, from bench.handlers.record_start."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        pid, started, due, job_id = line.split()
        rows.append((int(pid), float(started), float(due), int(job_id)))
    return rows


def wait_quietly(condition: Callable[[], bool], timeout: float) -> bool:
    try:
        wait_until(condition, timeout, "the jobs to run")
        return True
    except RuntimeError as exc:
        env.log(f"scale: {exc}")
        return False


def mib(kib: int | None) -> float | None:
    return None if kib is None else kib / 1024


class Stream:
    """Jobs due every 1/STREAM_RATE s from `first_due` on, each added LEAD s before it is due
    by a thread of its own, until `end` is set and passed."""

    def __init__(self, site: Site, first_due: float) -> None:
        self.site = site
        self.first_due = first_due
        self.end: float | None = None
        self.added = 0
        self.thread = threading.Thread(target=self._feed, name="bench-stream", daemon=True)
        self.thread.start()

    def _feed(self) -> None:
        with self.site.queue() as queue:
            while True:
                due = self.first_due + self.added / STREAM_RATE
                if self.end is not None and due > self.end:
                    return
                time.sleep(max(0.0, due - LEAD - time.time()))
                queue.add(*RECORD, None, at=due, queue=QUEUES[self.added % len(QUEUES)])
                self.added += 1

    def finish(self, end: float) -> int:
        self.end = end
        self.thread.join(timeout=LEAD + 30)
        return self.added


def lateness(ran: list[tuple[int, float, float, int]], since: float, until: float) -> list[float]:
    return [started - due for _, started, due, _ in ran if since <= due <= until]


def stream_and_purge(site: Site, seconds: float) -> dict[str, float | None]:
    """One `run --loop`: a steady stream of due jobs for `seconds` (lateness p50/p99), then
    `purge --older-than 30d` while jobs keep falling due (rows/s and their lateness p99)."""
    record = site.record_file("stream")
    result: dict[str, float | None] = {}
    with runner(site, record) as loop, site.queue() as queue:
        queue.add(*RECORD, None)  # the runner is up once this one has run
        wait_until(lambda: len(records(record)) >= 1, 120, "the loop's first job")
        start = time.time() + LEAD + 0.5
        fed = Stream(site, start).finish(start + seconds)
        wait_quietly(lambda: len(records(record)) >= 1 + fed, 60)
        late = lateness(records(record), start, start + seconds)
        result["stream_jobs"] = len(late)
        result["lateness_p50_s"] = percentile(late, 0.5) if late else None
        result["lateness_p99_s"] = percentile(late, 0.99) if late else None
        result.update(_purge(site, record, loop))
    return result


def _purge(site: Site, record: Path, loop: subprocess.Popen) -> dict[str, float | None]:
    before = len(records(record))
    began = time.time() + LEAD + 0.5
    stream = Stream(site, began)
    time.sleep(max(0.0, began - time.time()))
    wall, out = timed(site, ["purge", "--older-than", "30d"], timeout=7200)
    fed = stream.finish(time.time())
    wait_quietly(lambda: len(records(record)) >= before + fed, 60)
    late = lateness(records(record), began, began + wall)
    deleted = int(out.split()[0]) if out.split() else 0
    return {
        "purge_deleted": deleted,
        "purge_s": wall,
        "purge_rows_per_s": deleted / wall,
        "purge_lateness_p99_s": percentile(late, 0.99) if late else None,
        "purge_lateness_jobs": len(late),
        "loop_runner_peak_rss_mib": mib(peak_rss_kib(loop.pid)),
    }
