"""`delayq listen` as a process, on a private redis-server of its own for the timers (the
delayq index stays on the backend's Redis), fed by producers written as the seed systems
write theirs: redis-cli, a PHP script (seed 000's SETEX, phpredis) and a Node script (seed
003's `SET key EX`, ioredis). Jobs are run in the test by `Queue.run`; rows say what ran.

Under CI=true a missing php or node (or their Redis clients) fails; elsewhere it skips.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import delayq
from delayq.bridges.keyspace import Match
from delayq.store.table.model import Job, Status
from tests.conftest import DELAYQ, IN_CI, ROOT, STARTED
from tests.store.table.test_php_producer import php_or_fail_in_ci
from tests.support.servers import PrivateRedis, answers, free_port
from tests.support.waiting import wait_for

FIRE = "tests.sample_handlers.timers.Timers.fire"
NODE_DIR = ROOT / "tests" / "node"
COUNTDOWN = "PTCountdown=tests.sample_handlers.timers.Countdown"


def required(program: str, install: str) -> str:
    path = shutil.which(program)
    if path is None:
        message = f"{program} is not installed ({install})"
        pytest.fail(message, pytrace=False) if IN_CI else pytest.skip(message)
    assert path is not None
    return path


@pytest.fixture
def timers(tmp_path: Path) -> Iterator[PrivateRedis]:
    """The timers' own Redis: a private redis-server on a free port."""
    required("redis-server", "bin/test installs it")
    server = PrivateRedis(free_port(), tmp_path)
    server.start()
    yield server
    if server.process is not None:
        server.kill()


def cli(server: PrivateRedis, *args: str) -> str:
    """redis-cli against the timers' Redis, as an operator or a shell script would."""
    done = subprocess.run(
        ["redis-cli", "-p", str(server.port), *args], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Listener:
    """A `delayq listen` process; its stdout in a file, read as it grows."""

    def __init__(self, env: dict[str, str], tmp_path: Path, *args: str) -> None:
        self.out = tmp_path / f"listen-{time.monotonic_ns()}.out"
        self.err = self.out.with_suffix(".err")
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen(
                [*DELAYQ, "listen", *args], env=env, stdout=out, stderr=err
            )
        STARTED.append(self.process)  # killed at the end of the test if still up

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines()

    def wait_listening(self, times: int = 1) -> None:
        wait_for(lambda: len(self.lines()) >= times, 60, f"`delayq listen` to listen ({times})")

    def wait_exit(self) -> int:
        return self.process.wait(timeout=120)


@pytest.fixture
def listen(cli_env: dict[str, str], tmp_path: Path) -> Callable[..., Listener]:
    def factory(*args: str, env: dict[str, str] | None = None) -> Listener:
        return Listener({**cli_env, **(env or {})}, tmp_path, *args)

    return factory


def rows(key: str) -> list[Job]:
    return list(Job.select().where(Job.ext_string == key).order_by(Job.id))


def pending_at(key: str) -> float | None:
    found = [row.run_at for row in rows(key) if row.status == Status.PENDING]
    return found[0] if len(found) == 1 else None


def wait_pending_near(key: str, due: float) -> None:
    """Until the key's one pending job is due within a few seconds of `due` (the TTLs the
    tests set differ by minutes; a loaded machine takes seconds between a SET and its check)."""
    wait_for(
        lambda: (at := pending_at(key)) is not None and abs(at - due) < 5.0,
        30,
        f"{key}'s job due at {due:.0f}",
    )


def statuses(key: str) -> list[int]:
    return [row.status for row in rows(key)]


def test_each_way_a_key_gets_a_ttl_adds_or_moves_its_one_job_and_del_cancels(
    queue: delayq.Queue, timers: PrivateRedis, listen
):
    listener = listen("--from", timers.url, "--match", f"timer:*={FIRE}")
    listener.wait_listening()
    now = time.time()

    cli(timers, "SETEX", "timer:setex", "600", "")
    cli(timers, "SET", "timer:px", "1", "PX", "700000")
    cli(timers, "SET", "timer:expire", "1")
    cli(timers, "EXPIRE", "timer:expire", "800")
    cli(timers, "SET", "timer:expireat", "1")
    cli(timers, "EXPIREAT", "timer:expireat", str(int(now) + 900))
    cli(timers, "SET", "timer:reset", "1", "EX", "600")
    cli(timers, "SET", "other:key", "1", "EX", "600")  # matches no --match: no job

    wait_pending_near("timer:setex", now + 600)
    wait_pending_near("timer:px", now + 700)
    wait_pending_near("timer:expire", now + 800)
    wait_pending_near("timer:expireat", int(now) + 900)
    wait_pending_near("timer:reset", now + 600)

    cli(timers, "PEXPIRE", "timer:expire", "1000000")  # moved, not a second job
    wait_pending_near("timer:expire", now + 1000)
    assert statuses("timer:expire") == [Status.PENDING]
    cli(timers, "DEL", "timer:setex")
    cli(timers, "UNLINK", "timer:px")
    cli(timers, "PERSIST", "timer:expireat")  # no longer expires
    cli(timers, "SET", "timer:reset", "2")  # nor does a key set again without a TTL
    wait_for(lambda: statuses("timer:setex") == [Status.CANCELLED], 30, "DEL to cancel")
    wait_for(lambda: statuses("timer:px") == [Status.CANCELLED], 30, "UNLINK to cancel")
    wait_for(lambda: statuses("timer:expireat") == [Status.CANCELLED], 30, "PERSIST to cancel")
    wait_for(lambda: statuses("timer:reset") == [Status.CANCELLED], 30, "SET to cancel")
    assert rows("other:key") == []

    report = queue.run(now=now + 1001)
    assert report.succeeded == 1
    assert [(row.status, row.message) for row in rows("timer:expire")] == [
        (Status.SUCCESS, "fired timer:expire ['expire']")
    ]


def test_keys_are_adopted_on_start_and_their_jobs_survive_a_restart_and_a_flush(
    queue: delayq.Queue, timers: PrivateRedis, listen
):
    cli(timers, "SET", "send_message-42-sms", "1", "EX", "600")
    set_at = time.time()
    listener = listen("--from", timers.url, "--match", f"send_message-*-*={FIRE}")
    listener.wait_listening()
    assert listener.lines() == [f"delayq listen: adopted 1 timer(s) from {timers.url}; listening"]
    wait_pending_near("send_message-42-sms", set_at + 600)

    timers.kill()  # no persistence: every timer in it is gone
    timers.start()
    listener.wait_listening(2)
    assert listener.lines()[1].startswith("delayq listen: adopted 0 timer(s)")
    assert "E" in cli(timers, "CONFIG", "GET", "notify-keyspace-events").split()[1]
    cli(timers, "SET", "send_message-7-mail", "1", "EX", "300")
    wait_pending_near("send_message-7-mail", time.time() + 300)
    cli(timers, "FLUSHALL")

    report = queue.run(now=time.time() + 601)
    assert report.succeeded == 2
    assert [row.message for row in rows("send_message-42-sms")] == [
        "fired send_message-42-sms ['42', 'sms']"
    ]
    assert statuses("send_message-7-mail") == [Status.SUCCESS]


def test_a_second_start_leaves_the_jobs_of_unchanged_keys_as_they_are(
    queue: delayq.Queue, timers: PrivateRedis, listen
):
    cli(timers, "SET", "t-1", "1", "EX", "600")
    first = listen("--from", timers.url, "--match", f"t-*={FIRE}")
    first.wait_listening()
    wait_for(lambda: pending_at("t-1") is not None, 30, "t-1 adopted")
    first.process.kill()
    before = [(row.id, row.run_at, row.modified) for row in rows("t-1")]
    cli(timers, "SET", "t-2", "1", "EX", "600")  # set while no bridge listened

    listen("--from", timers.url, "--match", f"t-*={FIRE}").wait_listening()

    assert [(row.id, row.run_at, row.modified) for row in rows("t-1")] == before
    assert statuses("t-2") == [Status.PENDING]


def test_a_job_that_ran_at_its_keys_ttl_does_not_run_again_when_the_key_expires(
    queue: delayq.Queue, timers: PrivateRedis, listen
):
    listener = listen("--from", timers.url, "--match", f"t-*={FIRE}")
    listener.wait_listening()
    cli(timers, "SET", "t-1", "1", "PX", "1500")
    wait_for(lambda: pending_at("t-1") is not None, 30, "t-1 adopted")
    assert queue.run(now=time.time() + 2).succeeded == 1  # before Redis deletes the key

    wait_for(lambda: cli(timers, "EXISTS", "t-1") == "0", 30, "t-1 to expire")
    cli(timers, "SET", "t-2", "1", "EX", "600")  # its event follows t-1's expired
    wait_for(lambda: pending_at("t-2") is not None, 30, "t-2 adopted")
    assert statuses("t-1") == [Status.SUCCESS]


def test_an_expired_key_that_had_no_job_runs_now(queue: delayq.Queue, timers: PrivateRedis, listen):
    listener = listen("--from", timers.url, "--match", f"t-*={FIRE}")
    listener.wait_listening()
    listener.process.send_signal(signal.SIGSTOP)  # its events wait; the key is gone before
    try:
        cli(timers, "SET", "t-late", "1", "PX", "100")
        wait_for(lambda: cli(timers, "EXISTS", "t-late") == "0", 30, "t-late to expire")
    finally:
        listener.process.send_signal(signal.SIGCONT)
    wait_for(lambda: pending_at("t-late") is not None, 30, "t-late's job")
    assert abs((pending_at("t-late") or 0) - time.time()) < 30

    assert queue.run().succeeded == 1
    assert statuses("t-late") == [Status.SUCCESS]


def test_it_adds_the_flags_it_needs_to_the_setting_and_keeps_the_others(
    queue: delayq.Queue, timers: PrivateRedis, listen
):
    cli(timers, "CONFIG", "SET", "notify-keyspace-events", "Kl")
    listen("--from", timers.url, "--match", f"t-*={FIRE}").wait_listening()

    flags = cli(timers, "CONFIG", "GET", "notify-keyspace-events").split()[1]
    assert set(flags) == set("KlEg$x")


def test_where_config_is_refused_it_exits_2_naming_the_setting(
    queue: delayq.Queue, tmp_path: Path, listen
):
    server = PrivateRedis(free_port(), tmp_path, "--rename-command", "CONFIG", "")
    server.start()
    try:
        listener = listen("--from", server.url, "--match", f"t-*={FIRE}")
        assert listener.wait_exit() == 2
    finally:
        server.kill()
    lines = listener.err.read_text().splitlines()
    assert len(lines) == 1 and "notify-keyspace-events" in lines[0], lines
    assert listener.lines() == []


def test_it_exits_1_once_its_redis_stays_unreachable(
    queue: delayq.Queue, timers: PrivateRedis, listen
):
    listener = listen("--from", timers.url, "--match", f"t-*={FIRE}", "--retry-for", "3s")
    listener.wait_listening()
    timers.kill()

    assert listener.wait_exit() == 1
    warning, error = listener.err.read_text().splitlines()  # one warning an outage
    assert "WARNING the timers' Redis" in warning and "reconnecting for up to 3s" in warning
    assert error.startswith(f"delayq: error: the timers' Redis at {timers.url} has not answered")


def test_the_password_in_from_is_never_shown(queue: delayq.Queue, tmp_path: Path, listen):
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir",
         str(tmp_path), "--requirepass", "right-pw"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        client = redis.Redis(port=port, password="right-pw")
        wait_for(lambda: answers(client), 10, "the Redis with a password to answer")
        url = f"redis://:wrong-pw-31337@127.0.0.1:{port}/0"
        listener = listen("--from", url, "--match", f"t-*={FIRE}", "--retry-for", "1s")
        assert listener.wait_exit() == 1
    finally:
        process.kill()
        process.wait(10)
    shown = listener.out.read_text() + listener.err.read_text()
    assert "wrong-pw-31337" not in shown and "redis://:***@127.0.0.1" in shown, shown
    assert "invalid username-password pair" in shown


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--match", "t-*"], "must be GLOB=module.Class.method"),
        (["--match", "t-*=os.path.join"], "does not allow 'os.path'"),
        (["--match", "t-*=tests.sample_handlers.timers.Timers.nothing"], "nothing"),
        (["--retry-for", "soon"], "--retry-for"),
        (["--queue", "no queue"], "queue name 'no queue'"),
        (["--from", "http://127.0.0.1/0"], "--from 'http://127.0.0.1/0': use redis://"),
        (["--from", "redis://127.0.0.1:6379/abc"], "--from 'redis://127.0.0.1:6379/abc': the"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(queue, timers, cli_env, args, said):
    command = [*DELAYQ, "listen", "--from", timers.url, "--match", f"t-*={FIRE}", *args]
    done = subprocess.run(command, env=cli_env, capture_output=True, text=True, timeout=60)

    assert done.returncode == 2, done
    assert done.stderr.startswith("delayq: error: ") and said in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stdout == "" and Job.select().count() == 0


def test_seed_000_timers_a_php_producer_sets_with_setex_run_as_jobs(
    queue: delayq.Queue, timers: PrivateRedis, listen
):
    php = php_or_fail_in_ci()
    where = json.dumps({"host": "127.0.0.1", "port": timers.port, "db": 0})

    def producer(*args: str) -> None:
        done = subprocess.run(
            [php, str(ROOT / "tests" / "php" / "timers.php"), where, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr

    listener = listen("--from", timers.url, env={"DELAYQ_PHP_CLASSES": COUNTDOWN})
    listener.wait_listening()
    producer("set", "PTCountdown", "countdown", "3600", "218", "7")
    producer("set", "PTCountdown", "countdown", "3600", "219")
    producer("set", "os", "system", "3600", "ls")  # no handler the allowlist admits
    wait_pending_near("PTCountdown@countdown@218@7", time.time() + 3600)
    wait_pending_near("PTCountdown@countdown@219", time.time() + 3600)
    producer("del", "PTCountdown", "countdown", "219")
    wait_for(lambda: statuses("PTCountdown@countdown@219") == [Status.CANCELLED], 30, "the cancel")

    assert queue.run(now=time.time() + 3601).succeeded == 1
    assert [row.message for row in rows("PTCountdown@countdown@218@7")] == [
        "countdown ['218', '7']"
    ]
    assert rows("os@system@ls") == []
    assert "os@system@ls" in listener.err.read_text()


def node_or_fail_in_ci() -> str:
    node = required("node", "apt-get install nodejs npm")
    if not (NODE_DIR / "node_modules" / "ioredis").is_dir():
        message = "tests/node has no node_modules (bin/test runs `npm ci` there)"
        pytest.fail(message, pytrace=False) if IN_CI else pytest.skip(message)
    return node


def test_seed_003_timers_a_node_producer_sets_with_set_ex_run_as_jobs(
    queue: delayq.Queue, timers: PrivateRedis, listen
):
    node = node_or_fail_in_ci()

    def producer(*args: str) -> None:
        done = subprocess.run(
            [node, str(NODE_DIR / "timers.js"), timers.url, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr

    listener = listen("--from", timers.url, "--match", f"send_message-*-*={FIRE}")
    listener.wait_listening()
    producer("set", "send_message-42-sms", "86400")
    producer("set", "send_message-43-mail", "86400")
    wait_pending_near("send_message-42-sms", time.time() + 86400)
    producer("set", "send_message-42-sms", "7200")  # re-armed sooner: moved
    wait_pending_near("send_message-42-sms", time.time() + 7200)
    wait_pending_near("send_message-43-mail", time.time() + 86400)
    producer("del", "send_message-43-mail")
    wait_for(lambda: statuses("send_message-43-mail") == [Status.CANCELLED], 30, "the cancel")

    assert queue.run(now=time.time() + 7201).succeeded == 1
    assert [row.message for row in rows("send_message-42-sms")] == [
        "fired send_message-42-sms ['42', 'sms']"
    ]
    assert redis.Redis.from_url(timers.url).exists("send_message-42-sms") == 1


@pytest.mark.parametrize(
    ("glob", "key", "args"),
    [
        ("send_message-*-*", "send_message-42-sms", ["42", "sms"]),
        ("send_message-*-*", "send_message-42-sms-x", ["42", "sms-x"]),
        ("order:?:*", "order:7:refund", ["refund"]),
        ("order:[0-9]*", "order:7x", ["x"]),
        ("order:[^0-9]*", "order:7x", None),
        ("a\\*b*", "a*bc", ["c"]),
        ("a\\*b*", "axbc", None),
        ("t-*", "T-1", None),
    ],
)
def test_a_match_passes_what_each_star_matched_as_redis_globs_read(glob, key, args):
    call = Match.parse(f"{glob}={FIRE}").call(key)

    assert (call and call.data) == (args and {"key": key, "args": args})
