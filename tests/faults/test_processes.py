"""The real `delayq` command in subprocesses, as cron starts it: concurrent runs, a run killed
mid-job, Redis losing its data, rows from a foreign producer, unreachable servers, and the
exact bytes and exit codes of the commands. Every test runs on both backends.

Jobs are added through the Python API with a `now` in the recent past, so they are due for
a subprocess that reads the real clock and inside its default one-day window.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest

from delayq import JobSpec, Queue, Status
from delayq.store.index.keys import schedule_key
from delayq.store.table.model import Job
from tests.conftest import DELAYQ, STARTED, mysql_connect
from tests.sample_handlers.jobs import read_log
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"
P = "tests.sample_handlers.procs"
ZSET = "delay_queue_job"
SECRET = "s3cret"
BAD_DATABASE_URL = f"mysql://user:{SECRET}@127.0.0.1:1/db"
BAD_REDIS_URL = f"redis://:{SECRET}@127.0.0.1:1/0"


def delayq(
    env: dict[str, str], *args: str, timeout: float = 60, **extra: str
) -> subprocess.CompletedProcess[bytes]:
    """Run `delayq ARGS` to completion; `extra` adds or replaces environment variables."""
    return subprocess.run(
        [*DELAYQ, *args],
        env={**env, **extra},
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def start(env: dict[str, str], *args: str, **extra: str) -> subprocess.Popen[bytes]:
    """`delayq ARGS` started in the background; killed at the end of the test if still up."""
    process = subprocess.Popen(
        [*DELAYQ, *args],
        env={**env, **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    STARTED.append(process)
    return process


def statuses() -> dict[int, int]:
    """{job id: status} of every row."""
    return {row.id: row.status for row in Job.select(Job.id, Job.status)}


def zset(queue: Queue, name: str = "default") -> dict[int, float]:
    """{job id: score} of a queue's schedule, read straight from Redis."""
    entries = queue.index.client.zrange(schedule_key(name), 0, -1, withscores=True)
    return {int(member): score for member, score in entries}


def stderr_lines(completed: subprocess.CompletedProcess[bytes]) -> list[bytes]:
    return completed.stderr.splitlines()


def specs(method: str, datas: Sequence[dict[str, Any]], **kwargs: Any) -> list[JobSpec]:
    return [JobSpec(H, method, data, **kwargs) for data in datas]


# --- concurrency and crashes -----------------------------------------------------------------


@pytest.mark.slow
def test_four_concurrent_runs_run_each_job_exactly_once_and_print_nothing(
    queue, cli_env, log, tmp_path
):
    count = 2000
    gate = tmp_path / "gate"
    ids = queue.add_many(
        [JobSpec(P, "record_pid", {"log": log, "n": n, "gate": str(gate)}) for n in range(count)],
        now=time.time() - 60,
    )

    runners = [start(cli_env, "run", DELAYQ_BATCH_SIZE="50") for _ in range(4)]
    # Each run holds its first job at the gate, so none can drain the queue before the
    # others have started: all four are running jobs at once when it opens.
    pids = {runner.pid for runner in runners}
    at_gate = tmp_path / "gate.waiting"  # where the handler notes the pids it holds back
    wait_for(lambda: {int(pid) for pid in read_log(at_gate)} == pids, 60, "every run at the gate")
    gate.touch()
    outputs = [runner.communicate(timeout=60) for runner in runners]

    assert [runner.returncode for runner in runners] == [0, 0, 0, 0]
    lines = [line.split() for line in read_log(log)]
    runs_per_job = Counter(int(n) for n, _ in lines)
    assert runs_per_job == Counter(range(count)), "some job ran twice or never"
    assert {int(pid) for _, pid in lines} == pids, "the runs did not all share the work"
    assert statuses() == dict.fromkeys(ids, Status.SUCCESS)
    assert zset(queue) == {}
    assert outputs == [(b"", b"")] * 4, "healthy runs print nothing for cron, even overlapping"


@pytest.mark.slow
def test_job_of_a_killed_run_is_taken_over_after_its_lease_and_its_batch_completes(
    queue, cli_env, log
):
    now = time.time()
    slow_id = queue.add(H, "slow", {"log": log, "n": 0, "seconds": 1.5}, now=now - 120)
    rest = queue.add_many(
        specs("record", [{"log": log, "n": n} for n in range(1, 5)]), now=now - 60
    )

    runner = start(cli_env, "run", DELAYQ_LEASE="2")
    wait_for(lambda: read_log(log) == ["start 0"], 20, "the slow job to start")
    os.kill(runner.pid, signal.SIGKILL)
    runner.communicate(timeout=10)

    assert runner.returncode == -signal.SIGKILL
    assert read_log(log) == ["start 0"]
    held = list(Job.select().order_by(Job.id))
    assert [row.status for row in held] == [Status.RUNNING] * 5, "the whole batch was claimed"
    assert len({row.lease_token for row in held}) == 1
    assert zset(queue) == {}
    lease_until = max(row.lease_until for row in held)
    wait_for(lambda: queue.index.clock.now() > lease_until, 30, "the killed run's leases to lapse")

    completed = delayq(cli_env, "run", DELAYQ_LEASE="2")

    assert completed.returncode == 0
    assert completed.stdout == b""
    warnings = stderr_lines(completed)
    assert len(warnings) == 5 and all(b"lease lapsed" in line for line in warnings), warnings
    assert Counter(read_log(log)) == Counter(
        {"start 0": 2, "done 0": 1, "1": 1, "2": 1, "3": 1, "4": 1}
    )
    assert statuses() == dict.fromkeys([slow_id, *rest], Status.SUCCESS)
    assert Job.get_by_id(slow_id).lost_leases == 1
    assert zset(queue) == {}


# --- Redis losing the schedule ---------------------------------------------------------------


def test_run_after_flushdb_rebuilds_the_schedule_from_the_table(queue, cli_env, log):
    now = time.time()
    due = queue.add_many(specs("record", [{"log": log, "n": n} for n in range(5)]), now=now - 60)
    due += queue.add_many(specs("record", [{"log": log, "n": "mail"}], queue="mail"), now=now - 60)
    future = queue.add_many(
        specs("record", [{"log": log, "n": f"later {n}"} for n in range(3)], delay=3600), now=now
    )
    future_mail = queue.add(H, "record", {"log": log, "n": "later mail"}, queue="mail", delay=7200)
    queue.index.client.flushdb()

    completed = delayq(cli_env, "run")

    assert (completed.returncode, completed.stdout) == (0, b"")
    assert len(stderr_lines(completed)) == 1
    assert b"rebuilt 9 entries from the table" in completed.stderr  # those due within the hour
    assert Counter(read_log(log)) == Counter(["0", "1", "2", "3", "4", "mail"])
    rows = {row.id: row for row in Job.select()}
    assert {job_id: rows[job_id].status for job_id in due} == dict.fromkeys(due, Status.SUCCESS)
    assert zset(queue) == {job_id: rows[job_id].run_at for job_id in future}
    assert zset(queue) == {job_id: pytest.approx(now + 3600) for job_id in future}
    assert zset(queue, "mail") == {}  # due in two hours: beyond the horizon, the table's alone
    assert rows[future_mail].status == Status.PENDING

    again = delayq(cli_env, "run")

    assert (again.returncode, again.stdout, again.stderr) == (0, b"", b"")
    assert len(read_log(log)) == 6
    due_at = rows[future_mail].run_at
    assert queue.run(now=due_at - 1, queues=["mail"]).succeeded == 0
    assert queue.run(now=due_at, queues=["mail"]).succeeded == 1
    assert read_log(log)[-1] == "later mail"


# --- a foreign producer ----------------------------------------------------------------------


def foreign_insert(
    database_url: str, params: dict[str, Any], created: datetime, run_at: float | None = None
) -> int:
    """INSERT a job the way a non-delayq producer would: only the seed columns (and run_at
    if given), with plain SQL on the backend's own driver."""
    columns = ["params", "ext_string", "retry_times", "status", "created", "modified"]
    stamp = created.strftime("%Y-%m-%d %H:%M:%S")
    values: list[Any] = [json.dumps(params), "", 0, int(Status.PENDING), stamp, stamp]
    if run_at is not None:
        columns.append("run_at")
        values.append(run_at)
    if database_url.startswith("sqlite:"):
        return _sqlite_insert(database_url.removeprefix("sqlite:///"), columns, values)
    return _mysql_insert(database_url, columns, values)


def _sqlite_insert(path: str, columns: list[str], values: list[Any]) -> int:
    sql = f"INSERT INTO delay_queue ({', '.join(columns)}) VALUES ({', '.join('?' * len(values))})"
    conn = sqlite3.connect(path, timeout=30)
    try:
        with conn:
            row_id = conn.execute(sql, values).lastrowid
    finally:
        conn.close()
    assert row_id is not None
    return row_id


def _mysql_insert(url: str, columns: list[str], values: list[Any]) -> int:
    placeholders = ", ".join(["%s"] * len(values))
    conn = mysql_connect(url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO delay_queue ({', '.join(columns)}) VALUES ({placeholders})", values
            )
            return cursor.lastrowid
    finally:
        conn.close()


def foreign_jobs(backend: dict[str, str], queue: Queue, log: str) -> dict[int, str]:
    """Three foreign jobs, {id: the line its handler logs}: run_at NULL plus ZADD; run_at set
    plus ZADD; run_at NULL, created two minutes ago, and never ZADDed (an orphan)."""
    now = time.time()
    url = backend["database_url"]
    bare = foreign_insert(url, _record(log, "bare"), datetime.fromtimestamp(now))
    timed = foreign_insert(url, _record(log, "timed"), datetime.fromtimestamp(now), now - 5)
    orphan = foreign_insert(url, _record(log, "orphan"), datetime.fromtimestamp(now - 120))
    queue.index.client.zadd(ZSET, {str(bare): now - 1, str(timed): now - 5})
    return {bare: "bare", timed: "timed", orphan: "orphan"}


def _record(log: str, n: str) -> dict[str, Any]:
    return {"class": H, "method": "record", "data": {"log": log, "n": n}}


def test_rows_and_zadd_of_a_foreign_producer_are_run(queue, backend, cli_env, log):
    own = queue.add(H, "record", {"log": log, "n": "own"}, now=time.time() - 60)
    foreign = foreign_jobs(backend, queue, log)

    completed = delayq(cli_env, "run")

    assert (completed.returncode, completed.stdout) == (0, b"")
    assert Counter(read_log(log)) == Counter(["own", "bare", "timed", "orphan"])
    assert statuses() == dict.fromkeys([own, *foreign], Status.SUCCESS)
    assert {job_id: Job.get_by_id(job_id).message for job_id in foreign} == {
        job_id: f"recorded {n}" for job_id, n in foreign.items()
    }
    assert zset(queue) == {}


def test_foreign_producer_alone_after_delayq_init_is_run(queue, backend, cli_env, log):
    # A deployment where delayq only runs jobs: `delayq init` once, then another program
    # (the PHP app the table came from) INSERTs rows and ZADDs delay_queue_job.
    queue.index.client.flushdb()
    initialised = delayq(cli_env, "init")
    assert (initialised.returncode, initialised.stderr) == (0, b"")
    foreign = foreign_jobs(backend, queue, log)

    completed = delayq(cli_env, "run")

    assert (completed.returncode, completed.stdout) == (0, b"")
    assert Counter(read_log(log)) == Counter(["bare", "timed", "orphan"])
    assert statuses() == dict.fromkeys(foreign, Status.SUCCESS)
    assert zset(queue) == {}


# --- unreachable servers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "overrides"),
    [
        pytest.param(["run"], {"DELAYQ_DATABASE_URL": BAD_DATABASE_URL}, id="run-database"),
        pytest.param(["run"], {"DELAYQ_REDIS_URL": BAD_REDIS_URL}, id="run-redis"),
        pytest.param(
            ["add", H, "record", "--data", '{"n": 2}'],
            {"DELAYQ_DATABASE_URL": BAD_DATABASE_URL},
            id="add-database",
        ),
    ],
)
def test_unreachable_server_is_one_line_on_stderr_exit_1_and_no_password(
    queue, cli_env, log, args, overrides
):
    job_id = queue.add(H, "record", {"log": log, "n": 1}, now=time.time() - 60)

    completed = delayq(cli_env, *args, **overrides)

    assert completed.returncode == 1
    assert completed.stdout == b""
    assert len(stderr_lines(completed)) == 1, completed.stderr
    assert completed.stderr.startswith(b"delayq: error: ")
    assert b"Traceback" not in completed.stderr
    assert SECRET.encode() not in completed.stdout + completed.stderr
    assert read_log(log) == []
    assert statuses() == {job_id: Status.PENDING}
    assert list(zset(queue)) == [job_id]


def test_add_with_redis_down_exits_1_writes_nothing_and_hides_the_password(queue, cli_env, log):
    completed = delayq(
        cli_env,
        "add",
        H,
        "record",
        "--data",
        json.dumps({"log": log}),
        DELAYQ_REDIS_URL=BAD_REDIS_URL,
    )

    # add reads Redis's clock first, so an unreachable Redis stops it before the INSERT.
    assert completed.returncode == 1
    assert completed.stdout == b""
    assert len(stderr_lines(completed)) == 1, completed.stderr
    assert b"Redis error" in completed.stderr
    assert SECRET.encode() not in completed.stdout + completed.stderr
    assert statuses() == {}


# --- output for cron -------------------------------------------------------------------------


def add_mixed(queue: Queue, log: str) -> tuple[list[int], list[int]]:
    """Three jobs that succeed and two that fail, all due a minute ago."""
    now = time.time() - 60
    good = queue.add_many(specs("record", [{"log": log, "n": n} for n in range(3)]), now=now)
    bad = queue.add_many(specs("fail", [{"log": log, "n": n} for n in (3, 4)]), now=now)
    return good, bad


def test_run_prints_nothing_and_exits_0_when_some_jobs_fail(queue, cli_env, log):
    good, bad = add_mixed(queue, log)

    completed = delayq(cli_env, "run")

    assert (completed.returncode, completed.stdout, completed.stderr) == (0, b"", b"")
    assert Counter(read_log(log)) == Counter(["0", "1", "2", "fail 3", "fail 4"])
    rows = statuses()
    assert {job_id: rows.pop(job_id) for job_id in good} == dict.fromkeys(good, Status.SUCCESS)
    assert {job_id: rows.pop(job_id) for job_id in bad} == dict.fromkeys(bad, Status.FAILED)
    assert list(rows.values()) == [Status.PENDING, Status.PENDING], "one retry per failure"
    assert set(zset(queue)) == set(rows)


def test_verbose_run_prints_one_line_per_job_and_a_summary(queue, cli_env, log):
    good, bad = add_mixed(queue, log)

    completed = delayq(cli_env, "run", "-v")

    assert (completed.returncode, completed.stderr) == (0, b"")
    lines = completed.stdout.decode().splitlines()
    assert len(lines) == 6
    expected = [
        *(
            _job_line(job_id, "record", "success", f" recorded {n}")
            for n, job_id in enumerate(good)
        ),
        *(
            _job_line(job_id, "fail", "failed", f" ValueError: boom {n} (will retry)")
            for n, job_id in zip((3, 4), bad, strict=True)
        ),
    ]
    for line, pattern in zip(lines[:5], expected, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)
    assert re.fullmatch(
        r"ran 5 jobs: 3 succeeded, 2 failed \(2 retried\), 0 missed, 0 dropped, "
        r"0 recovered, 0 re-indexed; \d+\.\d\ds wall, \d+\.\d\ds busy",
        lines[5],
    ), lines[5]


def _job_line(job_id: int, method: str, status: str, tail: str) -> str:
    return rf"{job_id} {re.escape(H)}\.{method} attempt 0 {status} \d+\.\dms{re.escape(tail)}"


# --- exact bytes and exit codes --------------------------------------------------------------


def test_add_prints_the_new_id_and_a_newline(queue, cli_env, log):
    data = {"log": log, "n": "é"}

    completed = delayq(
        cli_env, "add", H, "record", "--data", json.dumps(data), "--delay", "30m", "--ext", "o:1"
    )

    (job_id,) = statuses()
    assert (completed.returncode, completed.stdout, completed.stderr) == (
        0,
        f"{job_id}\n".encode(),
        b"",
    )
    view = queue.show(job_id)
    assert (view["status"], view["data"], view["ext"]) == ("pending", data, "o:1")
    assert zset(queue) == {job_id: view["run_at"]}  # due within the horizon
    assert view["run_at"] == pytest.approx(time.time() + 1800, abs=30)


def test_cancel_by_ext_prints_the_count(queue, cli_env, log):
    now = time.time()
    doomed = queue.add_many(specs("record", [{"log": log}] * 2, delay=600, ext="K"), now=now)
    kept = queue.add(H, "record", {"log": log}, delay=600, ext="L", now=now)

    first = delayq(cli_env, "cancel", "--ext", "K")
    second = delayq(cli_env, "cancel", "--ext", "K")

    assert (first.returncode, first.stdout, first.stderr) == (0, b"2\n", b"")
    assert (second.returncode, second.stdout, second.stderr) == (0, b"0\n", b"")
    assert statuses() == {**dict.fromkeys(doomed, Status.CANCELLED), kept: Status.PENDING}
    assert list(zset(queue)) == [kept]


def test_retry_prints_the_new_id(queue, cli_env, log):
    now = time.time()
    job_id = queue.add(H, "fail_for_good", {"log": log, "n": 1}, now=now)
    queue.run(now=now)

    completed = delayq(cli_env, "retry", str(job_id))

    (new_id,) = set(statuses()) - {job_id}
    assert (completed.returncode, completed.stdout, completed.stderr) == (
        0,
        f"{new_id}\n".encode(),
        b"",
    )
    assert statuses() == {job_id: Status.FAILED, new_id: Status.PENDING}
    assert [step["id"] for step in queue.history(new_id)] == [job_id, new_id]
    assert list(zset(queue)) == [new_id]


def test_show_of_an_unknown_id_exits_1_with_one_line(queue, cli_env):
    completed = delayq(cli_env, "show", "999999")

    assert (completed.returncode, completed.stdout, completed.stderr) == (
        1,
        b"",
        b"delayq: error: no job with id 999999\n",
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param([H, "record", "--data", "{nope"], b"--data is not valid JSON", id="data"),
        pytest.param(["os", "system", "--data", '"true"'], b"DELAYQ_HANDLERS", id="handler"),
        pytest.param([H, "record", "--delay", "soon"], b"is not a duration", id="delay"),
    ],
)
def test_bad_add_exits_2_with_one_line_and_writes_nothing(queue, cli_env, args, expected):
    completed = delayq(cli_env, "add", *args)

    assert (completed.returncode, completed.stdout) == (2, b"")
    assert len(stderr_lines(completed)) == 1, completed.stderr
    assert completed.stderr.startswith(b"delayq: error: ")
    assert expected in completed.stderr
    assert Job.select().count() == 0
    assert queue.index.client.zcard(ZSET) == 0
