"""Faults a run must survive, on real processes and real servers: kill -9 mid-batch, a job
that kills its own process, hung handlers, a long job beside a second run, SIGTERM, a
database connection killed mid-run, Redis losing its data, and hostile input."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from urllib.parse import urlparse

import pymysql
import pytest

from delayq import Status
from delayq.store.index.keys import schedule_key
from delayq.store.table.database import run_reconnecting
from delayq.store.table.model import Job
from tests.conftest import DELAYQ
from tests.sample_handlers.jobs import read_log
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"
F = "tests.sample_handlers.faults"
pytestmark = pytest.mark.slow


def start_run(env: dict[str, str], *args: str, **overrides: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*DELAYQ, "run", *args],
        env={**env, **overrides},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def run_cli(
    env: dict[str, str], *args: str, **overrides: str
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*DELAYQ, *args], env={**env, **overrides}, capture_output=True, timeout=60
    )


def wait_for_line(log: str, line: str, timeout: float = 15.0, partial: bool = False) -> None:
    """Until `line` is a line of the file `log` (with `partial`, part of one)."""

    def found() -> bool:
        lines = read_log(log)
        return any(line in each for each in lines) if partial else line in lines

    deadline = time.monotonic() + timeout
    while not found():
        assert time.monotonic() < deadline, f"{line!r} never appeared in {read_log(log)}"
        time.sleep(0.02)


def statuses() -> Counter[int]:
    return Counter(status for (status,) in Job.select(Job.status).tuples())


def wait_for_leases_to_lapse(queue, timeout: float = 30.0) -> None:
    """Until no RUNNING row's lease reaches past the index's clock: what the next run's
    recovery needs to take the jobs of a dead run back (a heartbeat may have renewed them
    before it died, so the rows say when, not the lease setting)."""

    def lapsed() -> bool:
        held = Job.select().where(
            Job.status == Status.RUNNING, Job.lease_until >= queue.index.clock.now()
        )
        return not held.exists()

    wait_for(lapsed, timeout, "the dead run's leases to lapse")


def start_logging_run(
    env: dict[str, str], stderr_path: os.PathLike[str], *args: str
) -> subprocess.Popen[bytes]:
    """`delayq run ARGS` with its stderr (its log) going to a file a test can poll."""
    with open(stderr_path, "wb") as stderr:
        return subprocess.Popen(
            [*DELAYQ, "run", *args], env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )


def test_kill_mid_batch_reruns_only_the_job_whose_handler_was_running(queue, cli_env, log):
    now = time.time()
    records = [
        queue.add(H, "record", {"log": log, "n": n}, at=now - 10 + n * 0.01) for n in range(20)
    ]
    slow = queue.add(H, "slow", {"log": log, "n": "slow", "seconds": 3}, at=now - 5)
    run = start_run(cli_env, DELAYQ_LEASE="2")
    wait_for_line(log, "start slow")
    run.send_signal(signal.SIGKILL)
    run.wait()

    # Each finished job's outcome is in the journal (written without waiting for Redis, it
    # may land just after the kill) or, if a group commit fell due first, in the table; its
    # row stays RUNNING until then. Only the slow job has neither.
    def in_table() -> set[int]:
        done = Job.select(Job.id).where(Job.id.in_(records), Job.status == Status.SUCCESS)
        return {job_id for (job_id,) in done.tuples()}

    def kept() -> set[int]:
        return set(queue.index.journal.journaled("default", records)) | in_table()

    wait_for(lambda: kept() == set(records), 10, "the 20 outcomes in the journal or table")
    running = Job.select().where(Job.status == Status.RUNNING).count()
    assert running == 21 - len(in_table())  # the journaled ones and the slow job
    assert queue.show(slow)["status"] == "running"

    wait_for_leases_to_lapse(queue)
    queue.add(H, "record", {"log": log, "n": "after"}, delay=0)
    finish = run_cli(cli_env, "run", DELAYQ_LEASE="2")
    assert finish.returncode == 0, finish.stderr
    # The 20 journaled outcomes were recorded, not re-run; only the slow job ran again.
    counts = Counter(read_log(log))
    assert all(counts[str(n)] == 1 for n in range(20)), counts
    assert (counts["start slow"], counts["done slow"], counts["after"]) == (2, 1, 1)
    assert Job.select().where(Job.status == Status.SUCCESS).count() == 22
    assert queue.show(slow)["status"] == "success"
    # Nothing of the dead run is left in the journal: no outcomes, no batch order.
    assert queue.index.client.hgetall("{delay_queue_job}:journal") == {}


def test_a_job_that_kills_its_process_fails_as_poison_after_three_deaths(queue, cli_env, log):
    job_id = queue.add(F, "die", {"log": log})
    survivor = queue.add(H, "record", {"log": log, "n": "survivor"}, delay=0.5)
    for _ in range(3):
        run_cli(cli_env, "run", DELAYQ_LEASE="2")
        wait_for_leases_to_lapse(queue)
    result = run_cli(cli_env, "run", DELAYQ_LEASE="2")

    assert result.returncode == 0, result.stderr
    view = queue.show(job_id)
    assert view["status"] == "failed"
    assert "died 3 times" in view["message"]
    assert read_log(log).count("die") == 3
    assert len(queue.history(job_id)) == 1  # not retried
    assert queue.show(survivor)["status"] == "success"


def test_a_hung_handler_fails_on_its_time_limit_and_is_retried(queue, log):
    job_id = queue.add(H, "slow", {"log": log, "n": 1, "seconds": 30}, timeout=0.5)
    after = queue.add(H, "record", {"log": log, "n": 2})

    started = time.monotonic()
    report = queue.run()

    assert time.monotonic() - started < 5
    view = queue.show(job_id)
    assert view["status"] == "failed"
    assert view["message"] == "JobTimeout: ran longer than its 0.5s time limit"
    assert [step["status"] for step in queue.history(job_id)] == ["failed", "pending"]
    assert queue.show(after)["status"] == "success"
    assert (report.failed, report.retried) == (1, 1)


def test_the_default_time_limit_comes_from_settings(make_queue, log):
    queue = make_queue(timeout=0.3)
    job_id = queue.add(H, "slow", {"log": log, "seconds": 10})

    queue.run()

    assert "0.3s time limit" in queue.show(job_id)["message"]


def test_a_job_longer_than_the_lease_is_not_taken_over_by_a_second_run(queue, cli_env, log):
    job_id = queue.add(H, "slow", {"log": log, "n": "long", "seconds": 6})
    first = start_run(cli_env, DELAYQ_LEASE="2")
    wait_for_line(log, "start long")
    # Second runs count once the lease taken before the handler started is over (the one read
    # now ends no sooner): from then on only the heartbeat keeps the job.
    first_lease_until = Job.get_by_id(job_id).lease_until
    wait_for(
        lambda: queue.index.clock.now() > first_lease_until,
        10,
        "the lease taken before the handler started to end",
    )
    assert Job.get_by_id(job_id).lease_until > queue.index.clock.now(), "no heartbeat renewed it"
    overlapping = 0  # second runs that began and ended while the handler still ran
    while "done long" not in read_log(log):
        second = run_cli(cli_env, "run", DELAYQ_LEASE="2")
        assert second.returncode == 0, second.stderr
        overlapping += "done long" not in read_log(log)
    assert first.wait(timeout=30) == 0

    assert overlapping >= 1, "no second run fell inside the handler's run; this proved nothing"
    assert read_log(log) == ["start long", "done long"]
    assert queue.show(job_id)["status"] == "success"


def test_a_handler_holding_the_gil_past_the_lease_is_taken_over_and_its_result_refused(
    queue, cli_env, log
):
    """What docs/guarantees.md says of it: the heartbeat cannot renew the lease while a C call
    holds the GIL, so the next run takes the job over and runs it again; the first run's
    late outcome is refused, and the takeover is charged as a lost lease."""
    job_id = queue.add(F, "hold_the_gil", {"log": log, "seconds": 6})
    first = start_run(cli_env, DELAYQ_LEASE="2")
    wait_for_line(log, "holding")
    wait_for_leases_to_lapse(queue)  # nothing renews it: the heartbeat waits for the GIL

    second = run_cli(cli_env, "run", DELAYQ_LEASE="2")

    assert second.returncode == 0, second.stderr
    assert first.wait(timeout=30) == 0
    assert b"lease had been taken over" in first.stderr.read(), "no refusal was logged"
    assert read_log(log) == ["holding", "again", "held"]
    assert (queue.show(job_id)["status"], queue.show(job_id)["message"]) == ("success", "ran again")
    assert Job.get_by_id(job_id).lost_leases == 1


def test_sigterm_finishes_the_current_job_and_hands_the_rest_back(queue, cli_env, log, tmp_path):
    gate = tmp_path / "gate"
    slow = queue.add(
        H, "gated", {"log": log, "n": "current", "gate": str(gate)}, at=time.time() - 10
    )
    rest = [queue.add(H, "record", {"log": log, "n": n}) for n in range(5)]
    run = start_run(cli_env)
    wait_for_line(log, "start current")
    run.send_signal(signal.SIGTERM)
    gate.touch()  # the signal is pending before the job can end: it lands during the job

    assert run.wait(timeout=15) == 128 + signal.SIGTERM
    assert read_log(log) == ["start current", "done current"]
    assert queue.show(slow)["status"] == "success"
    assert [queue.show(job_id)["status"] for job_id in rest] == ["pending"] * 5
    assert queue.index.schedule.size("default") == 5  # back at once, not after the lease
    assert run_cli(cli_env, "run").returncode == 0
    assert sorted(read_log(log)[2:]) == ["0", "1", "2", "3", "4"]


def test_a_second_signal_abandons_the_current_job_back_to_the_schedule(
    queue, cli_env, log, tmp_path
):
    slow = queue.add(H, "slow", {"log": log, "n": "current", "seconds": 30})
    stderr = tmp_path / "run.stderr"
    run = start_logging_run(cli_env, stderr)
    wait_for_line(log, "start current")
    run.send_signal(signal.SIGINT)
    # Two signals before the first is handled would count as one: wait for its log line.
    wait_for_line(stderr, "received SIGINT", partial=True)
    run.send_signal(signal.SIGINT)

    assert run.wait(timeout=15) == 128 + signal.SIGINT
    assert "Traceback" not in stderr.read_text()
    assert queue.show(slow)["status"] == "pending"
    assert queue.index.schedule.size("default") == 1


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)  # a MariaDB fault
def test_database_connections_killed_mid_run_are_reconnected(queue, cli_env, log, backend):
    killer = queue.add(F, "kill_db_connections", {"log": log, "url": backend["database_url"]})
    after = [queue.add(H, "record", {"log": log, "n": n}) for n in range(3)]

    result = run_cli(cli_env, "run")

    assert result.returncode == 0, result.stderr
    assert queue.show(killer)["status"] == "success"
    assert [queue.show(job_id)["status"] for job_id in after] == ["success"] * 3
    assert read_log(log)[1:] == ["0", "1", "2"]


def test_redis_flushed_while_a_job_runs_loses_and_duplicates_nothing(queue, cli_env, log):
    running = queue.add(H, "slow", {"log": log, "n": "inflight", "seconds": 1})
    later = queue.add(H, "record", {"log": log, "n": "later"}, delay=2)
    run = start_run(cli_env)
    wait_for_line(log, "start inflight")
    queue.index.client.flushdb()
    assert run.wait(timeout=15) == 0

    due = queue.show(later)["run_at"]
    wait_for(lambda: queue.index.clock.now() >= due, 10, "the later job to fall due")
    assert run_cli(cli_env, "run").returncode == 0
    assert read_log(log) == ["start inflight", "done inflight", "later"]
    assert queue.show(running)["status"] == "success"
    assert queue.show(later)["status"] == "success"


def test_reconcile_reports_what_it_reindexed_and_removed(queue, cli_env, log):
    kept = queue.add(H, "record", {"log": log}, delay=60)
    lost = queue.add(H, "record", {"log": log}, delay=60)
    cancelled = queue.add(H, "record", {"log": log}, delay=60)
    queue.index.schedule.remove("default", [lost])
    Job.update(status=Status.CANCELLED).where(Job.id == cancelled).execute()
    queue.index.client.zadd(schedule_key("default"), {"junk": 1.0})

    result = run_cli(cli_env, "reconcile")

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"default: re-indexed 1, removed 2\n"
    members = {m.decode() for m in queue.index.client.zrange(schedule_key("default"), 0, -1)}
    assert members == {str(kept), str(lost)}


def test_handlers_can_see_their_job_id_attempt_and_chain(queue, log):
    first = queue.add(F, "whoami", {"log": log, "fail": True}, ext="order:9", now=1000.0)
    queue.run(now=1000.0)
    retry_id = queue.history(first)[1]["id"]

    queue.run(now=2000.0)

    assert read_log(log) == [f"{first} 0 {first} order:9", f"{retry_id} 1 {first} order:9"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ext", "x" * 10_000], "ext is 10000 characters; the limit is 255"),
        (["--data", '"' + "x" * 70_000 + '"'], "the limit is 65535"),
        (["--ext", os.fsdecode(b"bad\xff")], "not valid UTF-8"),
    ],
)
def test_hostile_input_is_refused_with_one_line_and_nothing_written(queue, cli_env, args, message):
    result = run_cli(cli_env, "add", H, "record", *args)

    assert result.returncode == 2
    assert message in result.stderr.decode()
    assert len(result.stderr.splitlines()) == 1
    assert Job.select().count() == 0
    assert queue.index.schedule.size("default") == 0


def test_sql_metacharacters_in_ext_are_just_text(queue, cli_env, log):
    ext = "'; DROP TABLE delay_queue; -- \" \\ %"
    job_id = int(
        run_cli(
            cli_env,
            "add",
            H,
            "record",
            "--data",
            f'{{"log": "{log}"}}',
            "--ext",
            ext,
            "--delay",
            "60",
        ).stdout
    )

    assert queue.show(job_id)["ext"] == ext
    assert run_cli(cli_env, "cancel", "--ext", ext).stdout == b"1\n"
    assert Job.select().count() == 1


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)  # a MariaDB fault
def test_a_transaction_whose_connection_dies_is_run_again_on_a_new_one(queue, backend):
    parts = urlparse(backend["database_url"])
    killer = pymysql.connect(  # the same user: it may KILL its own sessions
        host=parts.hostname,
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        autocommit=True,
    )
    attempts = []

    def work() -> int:
        with queue.db.atomic():
            (connection_id,) = queue.db.execute_sql("SELECT CONNECTION_ID()").fetchone()
            attempts.append(connection_id)
            if len(attempts) == 1:
                killer.cursor().execute(f"KILL {int(connection_id)}")
            return Job.insert(params="{}", run_at=1.0).execute()

    job_id = run_reconnecting(queue.db, work)

    assert len(attempts) == 2 and attempts[0] != attempts[1]
    assert Job.select().where(Job.id == job_id).count() == 1
    assert Job.select().count() == 1  # the first try left nothing behind
    killer.close()


def test_a_run_whose_heartbeat_fell_behind_does_not_run_a_job_taken_over(make_queue, log):
    queue = make_queue(lease=2)
    now = time.time()
    victim = queue.add(H, "record", {"log": log, "n": "victim"}, at=now - 1)
    queue.add(
        "tests.sample_handlers.faults",
        "starve_heartbeat",
        {"log": log, "seconds": 2.5, "victim": victim},
        at=now - 2,
    )

    queue.run()

    assert read_log(log) == ["starved"]  # the victim was not run a second time by this run
    assert queue.show(victim)["status"] == "pending"
