"""The MySQL failover soak, short, as CI runs it (tests/soaks/mysql_failover_soak.py): a MariaDB
primary and its replica of their own, three `delayq run --loop -c 8` runners and two
producers through one address that moves, the primary killed (or switched over) mid-soak.
Semi-synchronous: nothing lost, nothing run twice, nothing early, every id a producer got
run once. Asynchronous: what the failover took is lost (measured, not asserted), but nothing
runs early, no outcome lands on another job, and every row the new primary holds runs.
And a loop pointed at a read-only server (a replica) refuses to start."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import peewee
import pytest

from delayq.store.backend_errors import is_outage, is_read_only
from delayq.store.table.database import open_database
from tests.conftest import DELAYQ, IN_CI, ROOT
from tests.faults.test_soak import counts
from tests.support.mysql_servers import DATABASE, PASSWORD, USER, ReplicatedMariaDB, mariadbd
from tests.support.topologies import need_servers, open_queue, process_env

pytestmark = pytest.mark.slow


def need_mariadbd() -> None:
    """mariadbd lives in /usr/sbin, which a user's PATH may lack: looked for there too."""
    if not Path(mariadbd()).is_file():
        message = "mariadbd is not installed; bin/test installs mariadb-server"
        pytest.fail(message) if IN_CI else pytest.skip(message)


def soak(replication: str, fault: str) -> dict[str, str]:
    """The short soak's counts, once it said OK (with async replication, OK allows losses)."""
    need_servers("mariadb-install-db", "redis-server")
    need_mariadbd()
    command = [
        sys.executable,
        "-m",
        "tests.soaks.mysql_failover_soak",
        "--replication",
        replication,
    ]
    command += ["--fault", fault, "--jobs", "600", "--window", "14", "--fault-at", "5"]
    result = subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0 and summary.endswith(" OK"), summary + result.stderr[-3000:]
    return counts(summary)


@pytest.mark.parametrize("fault", ["kill-9", "switchover"])
def test_a_semi_synchronous_failover_loses_nothing_and_runs_nothing_twice_or_early(fault):
    found = soak("semisync", fault)

    assert int(found["produced"]) > 100, found
    assert (found["lost"], found["lost_adds"], found["run_twice"]) == ("0", "0", "0")
    assert (found["early"], found["misplaced"], found["held_not_run"]) == ("0", "0", "0")
    assert (found["producer_ids_not_run"], found["runner_crashes"]) == ("0", "0")
    # A claim whose lease the failing database refused goes back on the schedule at once,
    # not after the orphan sweep's 30 s.
    assert found["late"] == "0", found
    # One runner says the table is on another server, and that nothing is missing there.
    assert (found["failover_lines"], found["said_missing"]) == ("1", "0"), found
    assert found["doctor_failover"] == "ok", found


def test_an_asynchronous_failover_loses_what_it_took_but_runs_nothing_early_or_misplaced():
    found = soak("async", "kill-9")

    # The replica stalled 2 s before the kill: the adds of those 2 s are gone, and jobs whose
    # outcomes were rolled back run again; the soak exists to measure this.
    assert int(found["lost_adds"]) > 0 and int(found["run_twice"]) > 0, found
    assert (found["early"], found["misplaced"], found["held_not_run"]) == ("0", "0", "0")
    assert (found["producer_ids_not_run"], found["runner_crashes"]) == ("0", "0")
    # One runner says what the failover took, in one line, and doctor warns of it.
    assert found["failover_lines"] == "1" and int(found["said_missing"]) > 0, found
    assert found["doctor_failover"] == "warn", found


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[ReplicatedMariaDB]:
    need_servers("mariadb-install-db")
    need_mariadbd()
    group = ReplicatedMariaDB(tmp_path / "mariadb", semi_sync=False)
    try:
        group.start()
        yield group
    finally:
        group.stop()


@pytest.mark.parametrize("run", [["run", "--loop"], ["run"]], ids=["loop", "one-shot"])
def test_a_run_pointed_at_a_replica_exits_1_and_doctor_fails_saying_it_is_read_only(
    servers, redis_url, tmp_path, run
):
    queue = open_queue(redis_url, servers.url, tmp_path)  # delayq init on the primary
    queue.close()
    servers.wait_in_sync()
    replica_url = f"mysql://{USER}:{PASSWORD}@127.0.0.1:{servers.replica.port}/{DATABASE}"
    # What a loop meets mid-run when its primary turns read-only: an outage to wait out.
    db = open_database(replica_url)
    with pytest.raises(peewee.PeeweeException) as refused:
        db.execute_sql("DELETE FROM delay_queue")
    db.close()
    assert is_read_only(refused.value) and is_outage(refused.value)

    env = process_env(redis_url, replica_url, tmp_path)
    done = subprocess.run([*DELAYQ, *run], env=env, capture_output=True, timeout=60)

    doctor = subprocess.run([*DELAYQ, "doctor"], env=env, capture_output=True, timeout=60)

    assert doctor.returncode == 1
    lines = doctor.stdout.decode().splitlines()
    (database,) = [line for line in lines if line.split()[1:2] == ["database"]]
    assert database.startswith("FAIL") and database.endswith(
        "is read-only (a replica?); point the URL at the primary"
    )
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        "delayq: error: the database is read-only (a replica?); point the database URL at "
        "the primary, or at an address that follows it"
    ]
