"""Clients a handler module keeps between jobs: under `delayq run --loop` an async handler's
redis.asyncio client and httpx.AsyncClient serve every job of every pass on the runner's one
event loop, and a function registered with `delayq.on_shutdown` closes them cleanly when the
runner ends. And the examples of docs/jobs.md's "Holding clients", taken from the page as
written, run under real runners against real servers.

Runners are the installed console script in subprocesses, on MariaDB and the tests' Redis;
the handlers' HTTP service is a small counting server on 127.0.0.1 in this process.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis

from delayq import JobSpec, Queue, Status
from tests.conftest import ROOT, STARTED, mysql_connect
from tests.sample_handlers.jobs import read_log
from tests.support.waiting import wait_for

K = "tests.sample_handlers.kept_clients"
CLIENT_NAME = "delayq-test-kept-client"  # kept_clients.CLIENT_NAME, not imported: see there
COUNTER = "kept:calls"
DELAYQ = str(Path(sys.executable).parent / "delayq")  # the installed console script
# What a client left open, or used on a closed loop, prints on the way out (with
# PYTHONWARNINGS=always, which the runners get); compared without case: redis-py's
# connections say "unclosed Connection".
DIRTY = ("event loop is closed", "unclosed", "resourcewarning", "task was destroyed")
WAVES, WAVE_SIZE, WAVE_GAP = 20, 10, 0.5
PASS_MARGIN = 0.05  # seconds: a wave finished this long before the next is due ended its pass

# One backend: the subprocess runners are what is tested here, and each test takes seconds.
ON_MARIADB = pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
pytestmark = pytest.mark.slow


class CountingServer(ThreadingHTTPServer):
    """Answers every GET and POST with 200 "ok", keeping connections alive (HTTP/1.1), and
    counts the requests and the connections it was opened."""

    daemon_threads = True
    # A wave's 10 connections at once overflow the default backlog of 5: a dropped SYN is
    # sent again a second later, and that wave's pass runs into the next wave's.
    request_queue_size = 64

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.lock = threading.Lock()
        self.requests = 0
        self.connections = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle's algorithm the second waits for
    # the client's delayed ACK, 40 ms a request, longer than a wave may take.
    disable_nagle_algorithm = True
    server: CountingServer

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer()

    def _answer(self) -> None:
        with self.server.lock:
            self.server.requests += 1
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[CountingServer]:
    server = CountingServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def redis_client(backend: dict[str, str]) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(backend["redis_url"])
    yield client
    client.close()


@pytest.fixture
def shutdown_log(tmp_path: Path) -> Path:
    return tmp_path / "shutdown.log"


@pytest.fixture
def kept_env(
    cli_env: dict[str, str], backend: dict[str, str], http_server: CountingServer, shutdown_log
) -> dict[str, str]:
    """A runner's environment: this module's handlers only (imported as the run starts, so
    their on_shutdown is registered), warnings shown, the KEPT_* servers."""
    return dict(
        cli_env,
        DELAYQ_HANDLERS=K,
        PYTHONWARNINGS="always",
        KEPT_REDIS_URL=backend["redis_url"],
        KEPT_HTTP_URL=http_server.url,
        KEPT_SHUTDOWN_LOG=str(shutdown_log),
    )


def start(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """`delayq ARGS` in the background; killed at the end of the test if still up."""
    process = subprocess.Popen(
        [DELAYQ, *args], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    STARTED.append(process)
    return process


def run(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([DELAYQ, *args], env=env, cwd=cwd, capture_output=True, timeout=120)


def statuses(queue: Queue) -> Counter[int]:
    model = queue.table.model
    return Counter(row.status for row in model.select(model.status))


def finished(queue: Queue) -> int:
    """How many attempts have succeeded or failed (a failed one's retry is a row of its own)."""
    counts = statuses(queue)
    return counts[Status.SUCCESS] + counts[Status.FAILED]


def assert_clean(stderr: bytes) -> None:
    text = stderr.decode(errors="replace")
    found = [word for word in DIRTY if word in text.lower()]
    assert not found, f"stderr says {found}:\n{text}"


def named_clients(client: redis.Redis) -> int:
    return sum(1 for entry in client.client_list() if entry.get("name") == CLIENT_NAME)


def passes_seen(calls: list[list[str]], due: list[float]) -> int:
    """How many waves ran in passes of their own: started once due, the wave before all
    finished by then (with a margin for the pass's last claim, which found nothing due). A
    pass ends when nothing is due, and the loop sleeps until the next wave is."""
    started: dict[int, list[float]] = {}
    ended: dict[int, list[float]] = {}
    for wave, _, start_at, end_at, _, _ in calls:
        started.setdefault(int(wave), []).append(float(start_at))
        ended.setdefault(int(wave), []).append(float(end_at))
    apart = 0
    for wave in sorted(started):
        on_time = min(started[wave]) >= due[wave] - 0.05  # the runner reads Redis's clock
        before = ended.get(wave - 1, [float("-inf")])
        apart += on_time and max(before) + PASS_MARGIN < due[wave]
    return apart


# --- the acceptance test: 200 jobs, 20 passes, one loop ----------------------------------------


@ON_MARIADB
@pytest.mark.parametrize("concurrency", [1, 50])
def test_kept_async_clients_serve_200_jobs_over_20_passes_without_a_failure(
    queue, kept_env, http_server, redis_client, shutdown_log, tmp_path, concurrency
):
    calls, ready = tmp_path / "calls.log", tmp_path / "ready.log"
    runner = start(kept_env, "run", "--loop", "--concurrency", str(concurrency))
    queue.add(K, "ready", {"log": str(ready)}, check=False)
    wait_for(lambda: read_log(ready) or runner.poll() is not None, 60, "the runner to start")
    assert runner.poll() is None, runner.communicate()[1]

    first = time.time() + 1.0  # after the add_many below has returned
    due = [first + WAVE_GAP * wave for wave in range(WAVES)]
    specs = [
        JobSpec(K, "call", {"log": str(calls), "wave": wave, "n": wave * WAVE_SIZE + n}, at=at)
        for wave, at in enumerate(due)
        for n in range(WAVE_SIZE)
    ]
    queue.add_many(specs, check=False)
    jobs = WAVES * WAVE_SIZE
    wait_for(lambda: finished(queue) >= jobs + 1, 60, "every job to succeed or fail")
    runner.send_signal(signal.SIGTERM)
    _, stderr = runner.communicate(timeout=60)

    assert runner.returncode == 128 + signal.SIGTERM, stderr
    assert_clean(stderr)
    assert statuses(queue) == Counter({Status.SUCCESS: jobs + 1}), "a failure or a retry row"
    model = queue.table.model
    assert model.select().where(model.retry_times > 0).count() == 0
    assert http_server.requests == jobs
    assert redis_client.get(COUNTER) == str(jobs).encode()
    lines = [line.split() for line in read_log(calls)]
    assert sorted(int(n) for _, n, *_ in lines) == list(range(jobs)), "a job ran twice or never"
    assert passes_seen(lines, due) == WAVES
    # One process, one event loop for every pass, and the HTTP connections kept between them:
    # fewer than the passes (httpx closes one idle for 5 s, so a few are opened again).
    assert len({(pid, loop) for *_, pid, loop in lines}) == 1
    assert http_server.connections < WAVES
    assert read_log(shutdown_log) == ["closed; named clients left 0"]


# --- closed cleanly at exit --------------------------------------------------------------------


@ON_MARIADB
@pytest.mark.parametrize(
    "args", [("run", "--loop", "--for", "3s"), ("run",)], ids=["loop-for-3s", "one-shot"]
)
def test_a_kept_async_client_is_closed_by_on_shutdown_when_the_runner_ends(
    queue, kept_env, http_server, redis_client, shutdown_log, tmp_path, args
):
    calls = str(tmp_path / "calls.log")
    data = [{"log": calls, "wave": 0, "n": n} for n in range(5)]
    queue.add_many([JobSpec(K, "call", each) for each in data], now=time.time() - 1, check=False)

    result = run(kept_env, *args)

    assert result.returncode == 0, result.stderr
    assert statuses(queue) == Counter({Status.SUCCESS: 5})
    assert (http_server.requests, redis_client.get(COUNTER)) == (5, b"5")
    # on_shutdown ran once, and the server had let go of the named connection before it
    # returned; nothing of it is left once the process is gone either.
    assert read_log(shutdown_log) == ["closed; named clients left 0"]
    assert named_clients(redis_client) == 0
    assert_clean(result.stderr)


# --- docs/jobs.md's examples, as written -------------------------------------------------------

SECTION = re.search(
    r"^## Holding clients\n(.*?)(?=^## |\Z)", (ROOT / "docs" / "jobs.md").read_text(), re.S | re.M
)
# Each example is a module the reader saves, named on its first line: `# sms.py`.
EXAMPLES = {
    match.group(2): match.group(1)
    for match in re.finditer(
        r"```python\n(# (\w+\.py)\n.*?)```", SECTION.group(1) if SECTION else "", re.S
    )
}


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """An application's directory holding every example module, as the page names them."""
    directory = tmp_path / "app"
    directory.mkdir()
    for name, text in EXAMPLES.items():
        (directory / name).write_text(text)
    return directory


def app_env(backend: dict[str, str], home: Path, handlers: str, **extra: str) -> dict[str, str]:
    """A runner's environment in the application's directory: no PYTHONPATH, the handler
    module found in the working directory, as delayq finds an application's."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("DELAYQ_") and key != "PYTHONPATH"
    }
    env.update(
        DELAYQ_DATABASE_URL=backend["database_url"],
        DELAYQ_REDIS_URL=backend["redis_url"],
        DELAYQ_HANDLERS=handlers,
        DELAYQ_HOME=str(home),
        PYTHONWARNINGS="always",
        **extra,
    )
    return env


def two_waves(class_path: str, method: str, datas: list[Any]) -> list[JobSpec]:
    """Half the jobs due now, half a second later: two passes of a loop at least."""
    now = time.time()
    return [
        JobSpec(class_path, method, data, at=now - 1 if n % 2 else now + 1)
        for n, data in enumerate(datas)
    ]


def test_the_page_has_its_examples():
    assert set(EXAMPLES) == {"sms.py", "geocode.py", "settings.py", "accounts.py", "visits.py"}


@ON_MARIADB
def test_the_plain_handlers_example_keeps_its_clients_in_each_process(
    queue, backend, app, tmp_path, http_server, redis_client
):
    env = app_env(
        backend,
        tmp_path / "home",
        "sms",
        SMS_API=http_server.url,
        COUNTERS_URL=backend["redis_url"],
    )
    datas = [{"to": f"+49151000{n:03}", "text": "your parcel is here"} for n in range(40)]
    queue.add_many(two_waves("sms", "send", datas), check=False)

    result = run(
        env, "run", "--processes", "2", "--concurrency", "4", "--loop", "--for", "3s", cwd=app
    )

    assert result.returncode == 0, result.stderr
    assert statuses(queue) == Counter({Status.SUCCESS: 40})
    assert (http_server.requests, redis_client.get("sms:sent")) == (40, b"40")
    assert http_server.connections <= 2 * 4  # each process's pool, kept between jobs
    assert_clean(result.stderr)


@ON_MARIADB
def test_the_async_handlers_example_keeps_its_clients_and_closes_them(
    queue, backend, app, tmp_path, http_server, redis_client
):
    env = app_env(
        backend,
        tmp_path / "home",
        "geocode",
        MAPS_API=http_server.url,
        PLACES_URL=backend["redis_url"],
    )
    datas = [{"address": f"{n} Main Street"} for n in range(20)]
    queue.add_many(two_waves("geocode", "locate", datas), check=False)

    result = run(env, "run", "--concurrency", "10", "--loop", "--for", "3s", cwd=app)

    assert result.returncode == 0, result.stderr
    assert statuses(queue) == Counter({Status.SUCCESS: 20})
    assert http_server.requests == 20
    assert redis_client.mget([f"place:{n} Main Street" for n in range(20)]) == [b"ok"] * 20
    assert http_server.connections <= 10
    assert_clean(result.stderr)


@ON_MARIADB
def test_the_django_example_runs_its_jobs_in_a_loop(queue, backend, app, tmp_path):
    env = app_env(backend, tmp_path / "home", "accounts")
    users = [f"user{n}" for n in range(10)]
    setup = (
        "import accounts\n"
        "from django.core.management import call_command\n"
        "from django.contrib.auth.models import User\n"
        "call_command('migrate', verbosity=0)\n"
        f"User.objects.bulk_create(User(username=name) for name in {users!r})\n"
    )
    made = subprocess.run([sys.executable, "-c", setup], cwd=app, env=env, capture_output=True)
    assert made.returncode == 0, made.stderr
    ids = queue.add_many(
        two_waves("accounts", "deactivate", [{"username": u} for u in users]), check=False
    )

    result = run(env, "run", "--loop", "--for", "3s", cwd=app)

    assert result.returncode == 0, result.stderr
    assert [queue.show(job_id)["message"] for job_id in ids] == ["1"] * 10  # one user each
    with sqlite3.connect(app / "shop.sqlite3") as shop:
        active = shop.execute("SELECT username, is_active FROM auth_user ORDER BY id").fetchall()
    assert active == [(name, 0) for name in users]
    assert_clean(result.stderr)


@pytest.fixture
def pages(backend: dict[str, str]) -> Iterator[str]:
    """A `pages` table beside delayq's, holding page 7 with no visits; its SQLAlchemy URL."""
    conn = mysql_connect(backend["database_url"])
    with conn.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS pages")
        cursor.execute("CREATE TABLE pages (id INT PRIMARY KEY, visits INT NOT NULL)")
        cursor.execute("INSERT INTO pages VALUES (7, 0)")
    yield backend["database_url"].replace("mysql://", "mysql+pymysql://", 1)
    with conn.cursor() as cursor:
        cursor.execute("DROP TABLE pages")
    conn.close()


@ON_MARIADB
def test_the_sqlalchemy_example_counts_every_job_once(queue, backend, app, tmp_path, pages):
    env = app_env(backend, tmp_path / "home", "visits", SHOP_DATABASE_URL=pages)
    queue.add_many(two_waves("visits", "count", [{"id": 7}] * 30), check=False)

    result = run(env, "run", "--concurrency", "8", "--loop", "--for", "3s", cwd=app)

    assert result.returncode == 0, result.stderr
    assert statuses(queue) == Counter({Status.SUCCESS: 30})
    conn = mysql_connect(backend["database_url"])
    with conn.cursor() as cursor:
        cursor.execute("SELECT visits FROM pages WHERE id = 7")
        assert cursor.fetchone() == (30,)
    conn.close()
    assert_clean(result.stderr)
