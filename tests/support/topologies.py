"""What the tests of delayq on a Redis of several servers (a Sentinel group, a Cluster) share:
a queue and a `delayq` environment on the servers' URL, jobs that log their name, and a
looping run carried through a failover."""

from __future__ import annotations

import html
import os
import re
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import delayq
from delayq.config import Settings
from delayq.store.index.keys import schedule_key
from tests.conftest import DELAYQ, HANDLERS, IN_CI, ROOT, _drop_table
from tests.faults.test_processes import start
from tests.sample_handlers.jobs import read_log
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"


def need_servers(*programs: str) -> None:
    """Skip the test where a program that starts the servers is missing; fail it in CI."""
    missing = [program for program in programs if shutil.which(program) is None]
    if missing:
        message = f"{' and '.join(missing)} not installed; bin/test installs them"
        pytest.fail(message) if IN_CI else pytest.skip(message)


@pytest.fixture
def database_url(mariadb_url: str) -> Iterator[str]:
    _drop_table(mariadb_url)
    yield mariadb_url
    _drop_table(mariadb_url)


def process_env(redis_url: str, database_url: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a `delayq` process on `redis_url` and the test database."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env.update(
        DELAYQ_DATABASE_URL=database_url,
        DELAYQ_REDIS_URL=redis_url,
        DELAYQ_HANDLERS=",".join(HANDLERS),
        DELAYQ_HOME=str(tmp_path / "home"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    return env


def open_queue(
    redis_url: str, database_url: str, tmp_path: Path, init: bool = True
) -> delayq.Queue:
    """A Queue on these servers with the suite's settings, `init` run unless not `init`."""
    settings = Settings(
        database_url=database_url,
        redis_url=redis_url,
        handlers=HANDLERS,
        home=tmp_path / "home",
    )
    queue = delayq.connect(settings)
    if init:
        queue.init()
    return queue


def add(
    queue: delayq.Queue, log: str, *names: str, on: str = "default", delay: str | None = None
) -> list[int]:
    """Jobs that write their name to `log`, one a name, on queue `on`."""
    return [
        queue.add(H, "record", {"log": log, "n": name}, delay=delay, queue=on) for name in names
    ]


# What the first run on a new primary says (worker/failovers.py), when no run has since.
NEW_SERVER = "Redis is not the server the schedule was last seen on (a failover?)"


def run_once(env: dict[str, str], *args: str, after_a_failover: bool = False) -> None:
    """One `delayq run`, which must end well and say nothing, but (`after_a_failover`) that
    it found the new primary."""
    done = subprocess.run([*DELAYQ, "run", *args], env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    said = done.stderr.decode().splitlines()
    assert said == [line for line in said if after_a_failover and NEW_SERVER in line], said


def stop(loop: subprocess.Popen[bytes]) -> None:
    """SIGTERM a looping run; it must end as told, without a traceback."""
    loop.send_signal(signal.SIGTERM)
    _, stderr = loop.communicate(timeout=60)
    assert loop.returncode == 128 + signal.SIGTERM, stderr.decode()
    assert b"Traceback" not in stderr


def assert_each_ran_once(queue: delayq.Queue, log: str, names: dict[int, str]) -> None:
    assert Counter(read_log(log)) == Counter(names.values())
    assert {queue.show(job_id)["status"] for job_id in names} == {"success"}


def run_through_a_failover(
    queue: delayq.Queue,
    env: dict[str, str],
    log: str,
    concurrency: str,
    replicated: Callable[[], int],
    fail_over: Callable[[], object],
) -> None:
    """A looping run that was up before the failover, and one started after it, run every
    job once: those added before, one due during it, and those added after."""
    before = add(queue, log, "before")
    due_later = add(queue, log, "due-later-1", "due-later-2", delay="2s")
    loop = start(env, "run", "--loop", "--concurrency", concurrency, "--log-level", "warning")
    wait_for(lambda: "before" in read_log(log), 60, "the job added before the failover")
    # Nothing a failover may roll back: the replica has every write so far.
    assert replicated() == 1

    fail_over()
    after = add(queue, log, "after-1", "after-2")
    expected = ["before", "due-later-1", "due-later-2", "after-1", "after-2"]
    wait_for(lambda: sorted(read_log(log)) == sorted(expected), 60, "the loop to run them all")
    stop(loop)
    later = add(queue, log, "started-after")
    run_once(env, after_a_failover=True)  # the loop may have stopped before it swept again

    names = dict(zip(before + due_later + after + later, [*expected, "started-after"], strict=True))
    assert_each_ran_once(queue, log, names)


def status_doctor_and_the_web_page_show_the_topology(
    queue: delayq.Queue, env: dict[str, str], tmp_path: Path, scheme: str, topology: str
) -> None:
    """status and doctor work on the URL read from the config file, doctor's topology line
    starts with `topology`, and the web page shows the same in its one line (a replica's
    lag may have moved by a second between the two)."""
    config = tmp_path / "delayq.toml"
    config.write_text(f'redis_url = "{env["DELAYQ_REDIS_URL"]}"\n')
    env = {key: value for key, value in env.items() if key != "DELAYQ_REDIS_URL"}
    env["DELAYQ_CONFIG"] = str(config)

    status = subprocess.run([*DELAYQ, "status"], env=env, capture_output=True, timeout=60)
    doctor = subprocess.run([*DELAYQ, "doctor"], env=env, capture_output=True, timeout=60)

    assert status.returncode == 0, status.stderr.decode()
    assert doctor.returncode == 0, doctor.stdout.decode() + doctor.stderr.decode()
    assert f"{scheme}://127.0.0.1:" in doctor.stdout.decode()
    (shown,) = [line for line in doctor.stdout.decode().splitlines() if " topology " in line]
    assert shown.split(None, 2)[0] == "ok" and shown.split(None, 2)[2].startswith(topology), shown
    named = ", named by the sentinels" if scheme == "redis+sentinel" else ""
    lag = re.compile(r"\(lag \d+s\)")
    expected = lag.sub("(lag)", f"Redis: {shown.split(None, 2)[2]}{named}")
    assert lag.sub("(lag)", web_topology_line(queue)) == expected


def web_topology_line(queue: delayq.Queue) -> str:
    """The web page's one line about the Redis servers, as its reader sees it."""
    from starlette.testclient import TestClient  # the web extra

    from delayq.web import create_app

    page = TestClient(create_app(queue)).get("/").text
    (line,) = re.findall(r'<p id="topology">(.*?)</p>', page)
    return html.unescape(line)


def a_rolled_back_add_is_put_back_at_once(
    queue: delayq.Queue,
    env: dict[str, str],
    log: str,
    ports: tuple[int, int],
    kill_primary: Callable[[], int],
    new_primary: Callable[[int], int],
) -> None:
    """Jobs added while the replica (the second of `ports`) cannot sync from the primary
    (the first) are gone from the schedule the replica takes over with once the primary is
    killed; the next run puts them back, and runs the due one then, not an orphan sweep's
    grace later."""
    run_once(env)  # a run notes which Redis the index is on
    primary, replica = (redis.Redis(port=port, socket_timeout=5) for port in ports)
    # A wrong password for the primary, then its replication link cut: the replica cannot
    # come back, and what the primary takes now it never has.
    replica.config_set("masterauth", "not-the-primary-password")
    primary.execute_command("CLIENT", "KILL", "TYPE", "replica")
    wait_for(lambda: replica.info("replication")["master_link_status"] == "down", 10, "the cut")
    due = add(queue, log, "rolled-back-due")
    later = add(queue, log, "rolled-back-later", delay="30m")  # within the horizon
    new = redis.Redis(port=new_primary(kill_primary()), socket_timeout=5)
    members = [str(job_id) for job_id in due + later]
    assert new.zmscore(schedule_key("default"), members) == [None, None]  # rolled back

    done = subprocess.run([*DELAYQ, "run"], env=env, capture_output=True, timeout=120)

    assert done.returncode == 0, done.stderr.decode()
    warnings = done.stderr.decode().splitlines()
    # The run finds the new server and puts the two jobs back; or, where the new master lacks
    # the index-complete marker too (seen once in CI, on a Cluster), it rebuilds the schedule
    # from the table, which puts them back as well.
    if len(warnings) == 1:
        assert "Redis had no schedule index; rebuilt 2 entries from the table" in warnings[0]
    else:
        assert len(warnings) == 2, warnings
        assert f"queue default: {NEW_SERVER}" in warnings[0]
        assert "queue default: put back 2 jobs a failover took off the schedule" in warnings[1]
    assert read_log(log) == ["rolled-back-due"]
    assert new.zscore(schedule_key("default"), str(later[0])) is not None
    assert_each_ran_once(queue, log, dict(zip(due, ["rolled-back-due"], strict=True)))
    for client in (primary, replica, new):
        client.close()
