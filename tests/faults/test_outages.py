"""A looping run rides out a Redis restart or a database outage: it pauses with one log
line per try, backing off, and goes on when the server is back, with no traceback and no
job lost or run twice.

The Redis here is a private redis-server on a free port, so it can be killed and started
again without touching the shared one; MariaDB is reached through a TCP proxy the test cuts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import peewee
import pytest
import redis

import delayq
from delayq import Status
from delayq.config import Settings
from delayq.flow.settings import restore
from delayq.store.index.journal import Journal
from delayq.store.index.keys import queue_key
from delayq.store.table.database import RUN_REPLY_TIMEOUT
from delayq.store.table.leases import Leases
from delayq.store.table.outcomes import Outcome
from delayq.worker.bookkeeper import Bookkeeper
from delayq.worker.group_commits import OutcomeBuffer
from delayq.worker.looping import Outage
from tests.conftest import HANDLERS, IN_CI, mysql_connect
from tests.faults.test_processes import start
from tests.sample_handlers.jobs import read_log
from tests.support.servers import PrivateRedis, Proxy, free_port
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        message = "redis-server is not installed; bin/test installs it"
        pytest.fail(message) if IN_CI else pytest.skip(message)
    server = PrivateRedis(free_port(), tmp_path)
    server.start()
    yield server
    if server.process is not None:
        server.kill()


def queue_on(backend: dict[str, str], server: PrivateRedis, tmp_path: Path) -> delayq.Queue:
    """An initialised Queue on the backend's database and the private Redis."""
    settings = Settings(
        database_url=backend["database_url"],
        redis_url=server.url,
        handlers=HANDLERS,
        home=tmp_path / "home",
    )
    queue = delayq.connect(settings)
    queue.init()
    return queue


def test_a_loop_waits_out_a_redis_restart_and_goes_on(
    backend, private_redis, cli_env, log, tmp_path
):
    queue = queue_on(backend, private_redis, tmp_path)
    queue.add(H, "record", {"log": log, "n": "before"})
    env = {**cli_env, "DELAYQ_REDIS_URL": private_redis.url}
    runner = start(env, "run", "--loop", "--log-level", "warning")
    wait_for(lambda: read_log(log) == ["before"], 30, "the first job")

    private_redis.kill()  # the schedule is gone with it: no persistence
    private_redis.start()
    after = queue.add(H, "record", {"log": log, "n": "after"})
    wait_for(lambda: read_log(log) == ["before", "after"], 60, "the job added after the restart")

    runner.send_signal(signal.SIGTERM)
    _, stderr = runner.communicate(timeout=30)
    assert runner.returncode == 128 + signal.SIGTERM
    assert b"Traceback" not in stderr
    assert queue.show(after)["status"] == "success"
    queue.close()


def test_journal_writes_after_a_redis_restart_leave_no_replies_for_the_next_command(
    private_redis,
):
    # The journal's connection gets no replies; when Redis restarts under it, a write
    # fails, and the connection must not come back with replies on: their unread replies
    # answered the next run's claim (an int for a list) and crashed it.
    client = redis.Redis.from_url(private_redis.url)
    journal = Journal(client)
    journal.write("default", 1, "before")
    private_redis.kill()
    private_redis.start()
    with pytest.raises(redis.ConnectionError):  # a write on the dead socket, in a few tries
        for job_id in range(100, 110):
            journal.write("default", job_id, "lost")
    for job_id in range(2, 6):
        journal.write("default", job_id, "after")
    journal.close()

    assert client.ping() is True
    assert client.lrange("no-such-list", 0, -1) == []
    key = queue_key("default", "journal")
    assert client.hmget(key, ["2", "3", "4", "5"]) == [b"after"] * 4
    client.close()


def test_a_loop_that_cannot_reach_redis_at_start_exits_1_with_one_line(cli_env, tmp_path):
    env = {**cli_env, "DELAYQ_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    runner = start(env, "run", "--loop")
    _, stderr = runner.communicate(timeout=60)
    assert runner.returncode == 1
    (line,) = stderr.decode().splitlines()
    assert line.startswith("delayq: error: ")


def test_processes_that_cannot_reach_redis_exit_1_with_one_line_before_any_child(cli_env, tmp_path):
    env = {**cli_env, "DELAYQ_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    log_file = tmp_path / "run.log"
    runner = start(env, "run", "--loop", "--processes", "2", "--log-file", str(log_file))
    _, stderr = runner.communicate(timeout=60)
    assert runner.returncode == 1
    (line,) = stderr.decode().splitlines()
    assert line.startswith("delayq: error: Redis error: ")
    assert "runner process" not in (log_file.read_text() if log_file.exists() else "")


def children_of(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children]


def test_a_child_started_again_while_redis_is_down_waits_for_it_instead_of_dying(
    backend, private_redis, cli_env, log, tmp_path
):
    # Before, such a child exited 1 at its start, was started again, and so on, until the
    # parent counted too many deaths and gave up on the whole run.
    env = {**cli_env, "DELAYQ_REDIS_URL": private_redis.url}
    queue = queue_on(backend, private_redis, tmp_path)
    log_file = tmp_path / "run.log"
    runner = start(
        env, "run", "--loop", "--processes", "2", "--log-file", str(log_file), "--log-json"
    )
    queue.add(H, "record", {"log": log, "n": "first"})
    wait_for(lambda: read_log(log) == ["first"], 30, "a first pass that worked")
    private_redis.kill()
    first_children = children_of(runner.pid)
    assert len(first_children) == 2
    os.kill(first_children[0], signal.SIGKILL)
    started_again = lambda: [  # noqa: E731
        child for child in children_of(runner.pid) if child not in first_children
    ]
    wait_for(lambda: started_again(), 30, "a child started in the dead one's place")
    new_child = started_again()[0]
    # Long enough for a child that dies at its start to die many times over.
    wait_for(lambda: away_lines(log_file, new_child) >= 3, 30, "the new child waiting")
    assert runner.poll() is None

    private_redis.start()
    job_id = queue.add(H, "record", {"log": log, "n": "back"})
    wait_for(lambda: read_log(log) == ["first", "back"], 60, "the job added once Redis is back")
    runner.send_signal(signal.SIGTERM)
    _, stderr = runner.communicate(timeout=30)
    assert runner.returncode == 128 + signal.SIGTERM
    assert stderr == b""
    died = [entry["message"] for entry in log_entries(log_file) if "died" in entry["message"]]
    assert died == [f"runner process {first_children[0]} died (exit -9); starting another"]
    assert queue.show(job_id)["status"] == "success"
    queue.close()


def log_entries(log_file: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in read_log(log_file)]


def away_lines(log_file: Path, pid: int) -> int:
    """How many "a server is away" lines process `pid` logged."""
    return sum(
        entry["pid"] == pid and entry["message"].startswith("a server is away")
        for entry in log_entries(log_file)
    )


def test_a_loop_pauses_while_redis_is_down_and_backs_off(
    backend, private_redis, cli_env, log, tmp_path
):
    env = {**cli_env, "DELAYQ_REDIS_URL": private_redis.url}
    queue = queue_on(backend, private_redis, tmp_path)
    log_file = tmp_path / "run.log"
    runner = start(env, "run", "--loop", "--log-file", str(log_file))
    queue.add(H, "record", {"log": log, "n": "first"})
    wait_for(lambda: read_log(log) == ["first"], 30, "a first pass that worked")
    private_redis.kill()

    away = lambda: [x for x in read_log(log_file) if "a server is away" in x]  # noqa: E731
    wait_for(lambda: len(away()) >= 3, 30, "three failed tries logged")
    assert runner.poll() is None, "the loop must stay up while Redis is down"
    pauses = [float(line.rsplit("next try in ", 1)[1].rstrip("s")) for line in away()[:3]]
    assert pauses == [0.5, 1.0, 2.0]

    private_redis.start()
    job_id = queue.add(H, "record", {"log": log, "n": "back"})
    wait_for(lambda: read_log(log) == ["first", "back"], 60, "the job added once Redis is back")
    wait_for(lambda: any("servers are back" in x for x in read_log(log_file)), 10, "back line")
    runner.send_signal(signal.SIGTERM)
    _, stderr = runner.communicate(timeout=30)
    assert runner.returncode == 128 + signal.SIGTERM
    assert stderr == b""
    assert queue.show(job_id)["status"] == "success"
    queue.close()


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)  # a file has no server to lose
@pytest.mark.parametrize("fault", ["cut", "hold"])
def test_a_loop_waits_out_a_database_outage_and_goes_on(
    queue, backend, cli_env, log, tmp_path, fault
):
    # "cut": the links are reset and new ones refused, as a restart does. "hold": a request
    # is acknowledged and its reply never comes, as across a partition; PyMySQL would wait
    # for ever but for the run's read timeout (RUN_REPLY_TIMEOUT; 2 s here, from the URL).
    parts = urlsplit(backend["database_url"])
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 3306))
    netloc = f"{parts.netloc.rpartition('@')[0]}@127.0.0.1:{proxy.port}"  # with its password
    through_proxy = parts._replace(netloc=netloc, query="read_timeout=2").geturl()
    log_file = tmp_path / "run.log"
    env = {**cli_env, "DELAYQ_DATABASE_URL": through_proxy}
    runner = start(env, "run", "--loop", "--log-file", str(log_file))
    queue.add(H, "record", {"log": log, "n": "before"})
    wait_for(lambda: read_log(log) == ["before"], 30, "the first job")

    (proxy.cut if fault == "cut" else proxy.hold)()
    job_id = queue.add(H, "record", {"log": log, "n": "during"})  # straight to MariaDB
    away = lambda: [x for x in read_log(log_file) if "a server is away" in x]  # noqa: E731
    wait_for(lambda: len(away()) >= 2, 30, "failed tries logged")
    assert runner.poll() is None, "the loop must stay up while the database is away"
    (proxy.restore if fault == "cut" else proxy.release)()
    wait_for(lambda: read_log(log) == ["before", "during"], 90, "the job added during the outage")

    runner.send_signal(signal.SIGTERM)
    _, stderr = runner.communicate(timeout=30)
    proxy.close()
    assert runner.returncode == 128 + signal.SIGTERM
    assert stderr == b""
    assert queue.show(job_id)["status"] == "success"


BOUNDED = {
    "run": lambda queue: queue.run(),
    "purge": lambda queue: queue.purge("30d"),
    "reconcile": lambda queue: queue.reconcile(),
}


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
@pytest.mark.parametrize("command", sorted(BOUNDED))
def test_a_run_purge_and_reconcile_bound_their_wait_for_a_database_reply_unless_the_url_does(
    queue, backend, make_queue, command
):
    timeouts = ("read_timeout", "write_timeout")
    assert not set(timeouts) & set(queue.db.connect_params)  # `init` may take longer
    BOUNDED[command](queue)
    assert [queue.db.connect_params[key] for key in timeouts] == [RUN_REPLY_TIMEOUT] * 2
    own = make_queue(database_url=backend["database_url"] + "?read_timeout=7")
    BOUNDED[command](own)
    assert [own.db.connect_params[key] for key in timeouts] == [7, RUN_REPLY_TIMEOUT]


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_the_heartbeat_renews_leases_while_redis_is_away_and_its_clock_reading_due(
    backend, private_redis, log, tmp_path
):
    # A host cut off from Redis only still reaches the table: its running job must keep
    # its lease, also when the clock's once-a-minute reading of Redis falls due meanwhile.
    proxy = Proxy(("127.0.0.1", private_redis.port))
    settings = Settings(
        database_url=backend["database_url"],
        redis_url=f"redis://127.0.0.1:{proxy.port}/0",
        handlers=HANDLERS,
        home=tmp_path / "home",
        lease=3.0,
    )
    queue = delayq.connect(settings)
    queue.init()
    gate = tmp_path / "gate"
    job_id = queue.add(H, "gated", {"log": log, "n": 1, "gate": str(gate), "seconds": 60})
    run = threading.Thread(target=queue.run)
    run.start()
    wait_for(lambda: read_log(log) == ["start 1"], 30, "the job to start")

    queue.index.clock._checked = float("-inf")  # a reading falls due, as once a minute
    proxy.hold()
    held_until = lease_until(backend["database_url"], job_id)
    wait_for(
        lambda: lease_until(backend["database_url"], job_id) > held_until + 3,
        10,
        "the lease renewed while Redis is away",
    )
    proxy.release()
    gate.touch()
    run.join(60)
    proxy.close()
    assert queue.show(job_id)["status"] == "success"
    queue.close()


def lease_until(database_url: str, job_id: int) -> float:
    conn = mysql_connect(database_url)
    with conn.cursor() as cursor:
        cursor.execute("SELECT lease_until FROM delay_queue WHERE id = %s", (job_id,))
        (until,) = cursor.fetchone()
    conn.close()
    return float(until)


@pytest.mark.parametrize("concurrency", ["1", "4"])
def test_a_job_that_finishes_while_redis_is_away_runs_once(
    backend, private_redis, cli_env, log, tmp_path, concurrency
):
    queue = queue_on(backend, private_redis, tmp_path)
    job_id = queue.add(H, "slow", {"log": log, "n": "away", "seconds": 2})
    env = {**cli_env, "DELAYQ_REDIS_URL": private_redis.url, "DELAYQ_LEASE": "2"}
    runner = start(env, "run", "--loop", "--concurrency", concurrency)
    wait_for(lambda: read_log(log) == ["start away"], 30, "the job to start")
    private_redis.kill()
    wait_for(lambda: read_log(log) == ["start away", "done away"], 30, "the job to finish")
    private_redis.start()
    wait_for(lambda: queue.show(job_id)["status"] == "success", 60, "its outcome recorded")
    Job = queue.table.model
    wait_for(
        lambda: (Job.get_by_id(job_id).lease_until or 0) < time.time(),
        30,
        "the job's lease to be past its end",
    )
    # A probe: a job held by a run that died, its lease lapsed. Once the runner has swept it
    # back and run it, a sweep has passed over the queue after our job's lease ended, and a
    # claim after that sweep: had either put our job back, it would have run again by then.
    probe = queue.add(H, "record", {"log": log, "n": "probe"}, delay=3600)
    now = time.time()
    assert Leases(queue.table).mark_running([probe], "a-run-that-died", now - 1, now)
    wait_for(lambda: "probe" in read_log(log), 30, "a sweep to recover the probe and run it")

    runner.send_signal(signal.SIGTERM)
    _, stderr = runner.communicate(timeout=30)
    queue.close()
    assert read_log(log) == ["start away", "done away", "probe"], stderr.decode()


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_a_lock_conflict_that_escaped_a_pass_is_waited_out_like_an_outage(queue, backend, caplog):
    # A pass whose statement lost to other runs' locks more often than it retries: the loop
    # pauses and runs the next pass, as after an outage, instead of ending the runner.
    job_id = queue.add(H, "record", {}, delay=0)
    holder = mysql_connect(backend["database_url"])
    with holder.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("SELECT id FROM delay_queue WHERE id = %s FOR UPDATE", (job_id,))
        queue.db.execute_sql("SET SESSION innodb_lock_wait_timeout = 1")
        try:
            with pytest.raises(peewee.OperationalError) as timed_out:
                queue.db.execute_sql(
                    "UPDATE delay_queue SET retry_times = 1 WHERE id = %s", (job_id,)
                )
        finally:
            queue.db.execute_sql("SET SESSION innodb_lock_wait_timeout = DEFAULT")
    holder.close()
    outage = Outage(None, None, slack=0.0)

    outage.wait_out(timed_out.value, remaining=0.0)

    assert "the database is busy (" in caplog.text
    with pytest.raises(peewee.ProgrammingError):  # a wrong statement is no outage
        try:
            queue.db.execute_sql("SELEC 1")
        except peewee.ProgrammingError as exc:
            outage.wait_out(exc, remaining=0.0)


def test_outcomes_stuck_behind_a_failed_commit_are_written_to_the_table_alone(
    backend, private_redis, tmp_path
):
    # Redis dies while two group commits wait on the bookkeeping thread: each writes its
    # table half, then fails on Redis. The next outcome cannot be journaled, and the flush
    # at the end of the pass waits on the oldest failed commit and raises before handing
    # it over: its job would stay running, its journal gone with Redis, and run again
    # once its lease lapsed. `salvage` writes it to the table without Redis.
    queue = queue_on(backend, private_redis, tmp_path)
    ids = [queue.add(H, "record", {"n": n}, delay=0) for n in range(3)]
    now = time.time()
    jobs = Leases(queue.table).mark_running(ids, "run-a", now + 60, now)
    bookkeeper = Bookkeeper(queue.table)
    buffer = OutcomeBuffer(queue.table, queue.index, "default", "run-a")
    buffer.write_on(bookkeeper, notes_starts=True)
    go_on = threading.Event()
    bookkeeper.submit(go_on.wait, 30)  # the two commits queue up behind this
    for job in jobs[:2]:
        buffer.add_many(
            [Outcome(job=job, status=Status.SUCCESS, message="ok", next_in=None, finished_at=now)],
            more_coming=False,
        )
    private_redis.kill()
    for _ in range(2):  # the first write into a dead server's socket may still go out
        with contextlib.suppress(redis.ConnectionError):
            queue.index.journal.write_many("default", [(0, "probe")])
    go_on.set()
    with pytest.raises(redis.ConnectionError):
        buffer.add_many(
            [
                Outcome(
                    job=jobs[2], status=Status.SUCCESS, message="ok", next_in=None, finished_at=now
                )
            ],
            more_coming=True,
        )
    with pytest.raises(redis.ConnectionError):
        buffer.flush()

    written = buffer.salvage()
    bookkeeper.close()

    assert written.succeeded == 1  # the one not in the table yet; the commits wrote theirs
    assert [queue.show(job_id)["status"] for job_id in ids] == ["success"] * 3
    queue.close()


def test_what_a_failed_pass_held_comes_back_at_the_next_pass_not_when_its_lease_lapses(queue, log):
    # A pass broken by a failover between leasing a batch and noting it in Redis leaves rows
    # RUNNING under its token for a lease (a minute); the loop ends those leases once a pass
    # reaches the table again, and that pass's sweep recovers them.
    now = time.time()
    job_id = queue.add(H, "record", {"log": log, "n": "held"}, now=now - 1)
    restore(queue.table, queue.index.flow, ["default"])  # as a run does before it claims
    assert queue.index.schedule.claim_due("default", now, 10) == [(str(job_id), now - 1)]
    Leases(queue.table).mark_running([job_id], "failed-pass", now + 3600, now)
    queue.run(now=now + 1)
    assert read_log(log) == []  # the lease holds it

    outage = Outage(None, None, slack=0.0)
    outage.held.append("failed-pass")
    assert outage.let_go(queue.table, lambda: now + 2) is True
    queue.run(now=now + 3)

    assert read_log(log) == ["held"]
    assert queue.show(job_id)["status"] == "success"
    assert (outage.held, outage.let_go(queue.table, lambda: now + 4)) == ([], False)


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_an_outcome_the_table_cannot_take_is_journaled_not_run_again(backend, make_queue, log):
    # The last outcome of a batch goes straight to the table, unjournaled. With the database
    # away that write and `salvage` fail; journaled then, the recovery of its lease (early,
    # once the loop reaches the table again) records it instead of running the job again.
    parts = urlsplit(backend["database_url"])
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 3306))
    netloc = f"{parts.netloc.rpartition('@')[0]}@127.0.0.1:{proxy.port}"  # with its password
    queue = make_queue(database_url=parts._replace(netloc=netloc, query="read_timeout=2").geturl())
    job_id = queue.add(H, "record", {"log": log, "n": 1}, delay=0)
    now = time.time()
    (job,) = Leases(queue.table).mark_running([job_id], "run-a", now + 60, now)
    buffer = OutcomeBuffer(queue.table, queue.index, "default", "run-a")
    outcome = Outcome(job=job, status=Status.SUCCESS, message="ok", next_in=None, finished_at=now)

    proxy.cut()
    with pytest.raises(peewee.PeeweeException):
        buffer.add_many([outcome], more_coming=False)
    with pytest.raises(peewee.PeeweeException):
        buffer.salvage()
    proxy.restore()
    other = make_queue()
    assert Leases(other.table).lapse(["run-a"], now + 1) == 1
    other.run(now=now + 2)

    assert read_log(log) == []
    assert (other.show(job_id)["status"], other.show(job_id)["message"]) == ("success", "ok")
    proxy.close()
