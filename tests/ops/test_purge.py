"""`delayq purge`: old finished rows go, in batches; pending and running rows never do, and
no retry chain is left ending in an earlier attempt."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from urllib.parse import urlsplit

import pytest

from delayq import BadInput
from delayq.ops import maintenance
from delayq.ops.maintenance import Pace, purge, purgeable_ids
from delayq.store.table.model import Job, Status, utc_stamp
from tests.cli.test_progress import on_a_terminal
from tests.conftest import DELAYQ, mysql_connect
from tests.support.invoke import invoke
from tests.support.servers import Proxy
from tests.support.waiting import wait_for

NOW = 1_800_000_000.0
DAY = 86400.0
H = "tests.sample_handlers.jobs"


def make_row(status: Status, age: float, **fields) -> int:
    """A row of `status` last changed `age` seconds before NOW."""
    when = utc_stamp(NOW - age)
    params = json.dumps({"class": H, "method": "echo", "data": None})
    row = Job.create(params=params, status=status, created=when, modified=when, **fields)
    return row.id


def surviving() -> list[int]:
    return [row.id for row in Job.select(Job.id).order_by(Job.id)]


def test_only_finished_rows_older_than_the_cutoff_are_deleted(queue):
    old = [make_row(status, 40 * DAY) for status in Status]
    young = [make_row(status, 10 * DAY) for status in Status]

    assert queue.purge(30 * DAY, now=NOW) == 4

    kept_old = [job_id for job_id, status in zip(old, Status, strict=True) if status < 10]
    assert surviving() == kept_old + young
    assert {Job.get_by_id(job_id).status for job_id in kept_old} == {
        Status.PENDING,
        Status.RUNNING,
    }


def test_status_list_narrows_what_goes(queue):
    success = make_row(Status.SUCCESS, 40 * DAY)
    failed = make_row(Status.FAILED, 40 * DAY)
    cancelled = make_row(Status.CANCELLED, 40 * DAY)

    deleted = queue.purge(30 * DAY, (Status.SUCCESS, Status.CANCELLED), now=NOW)

    assert deleted == 2
    assert surviving() == [failed]
    assert success not in surviving() and cancelled not in surviving()


@pytest.mark.parametrize("status", [Status.PENDING, Status.RUNNING])
def test_pending_or_running_is_refused(queue, status):
    make_row(status, 400 * DAY)

    with pytest.raises(BadInput, match="never deletes"):
        queue.purge(30 * DAY, (Status.SUCCESS, status), now=NOW)
    assert len(surviving()) == 1


def test_dry_run_counts_and_deletes_nothing(queue):
    for _ in range(3):
        make_row(Status.SUCCESS, 40 * DAY)

    assert queue.purge(30 * DAY, dry_run=True, now=NOW) == 3
    assert len(surviving()) == 3


def test_deletes_in_batches_in_id_order(queue):
    ids = [make_row(Status.SUCCESS, 40 * DAY) for _ in range(7)]
    make_row(Status.PENDING, 40 * DAY)

    batches = list(purgeable_ids(queue.table, [Status.SUCCESS], NOW - 30 * DAY, Pace(3, aim=0)))
    assert batches == [ids[:3], ids[3:6], ids[6:]]
    assert purge(queue.table, [Status.SUCCESS], NOW - 30 * DAY, Pace(3, aim=0)) == 7
    assert len(surviving()) == 1


def test_on_sqlite_each_batch_leaves_a_waiting_writer_time_to_take_the_lock(queue):
    pace = Pace.of(queue.table)

    quick = pace.pause_after(100, deleting=0.001, working=0.002)  # however short the batch

    if queue.table.mysql:  # row locks: a run's UPDATEs never wait on purge's DELETE
        assert quick == pytest.approx(0.002 * maintenance.SHARE)
    else:  # SQLite's busy handler polls for the lock up to 100 ms apart
        assert quick == maintenance.SQLITE_PAUSE > 0.1
        assert pace.pause_after(100, deleting=2.0, working=3.0) == 3.0 * maintenance.SHARE


def test_old_rows_go_by_modified_time_on_mariadb_and_by_id_on_sqlite(queue):
    ids = [make_row(Status.SUCCESS, (35 + n) * DAY) for n in range(6)]  # the last is oldest

    batches = list(purgeable_ids(queue.table, [Status.SUCCESS], NOW - 30 * DAY, Pace(2, aim=0)))

    if queue.table.mysql:  # windows of `modified` times, each a range of (status, modified)
        assert batches == [[job_id] for job_id in reversed(ids)]
    else:  # windows of ids: neighbours share the pages each DELETE writes to the WAL
        assert batches == [ids[0:2], ids[2:4], ids[4:6]]


def test_rows_of_every_age_and_status_go_across_windows_and_gaps(queue):
    ages = [900, 400, 399.5, 100, 60, 45, 31, 31, 30.5, 29, 5]  # days: gaps, and close ones
    rows = [
        (make_row(status, age * DAY + n), status, age)
        for n, age in enumerate(ages)
        for status in (Status.SUCCESS, Status.FAILED, Status.MISSED, Status.PENDING)
    ]
    expected = [job_id for job_id, status, age in rows if status != Status.PENDING and age > 30]

    counted: list[int] = []
    assert queue.purge(30 * DAY, now=NOW, counted=counted.append) == len(expected) == 27
    assert sum(counted) == 27
    assert surviving() == sorted({job_id for job_id, _, _ in rows} - set(expected))
    assert queue.purge(30 * DAY, now=NOW) == 0  # twice is safe


def test_a_second_holding_more_rows_than_a_window_takes_is_read_whole(queue, monkeypatch):
    monkeypatch.setattr(maintenance, "WINDOW_ROWS", 4)
    same_second = [make_row(Status.SUCCESS, 40 * DAY) for _ in range(9)]
    spread = [make_row(Status.SUCCESS, 40 * DAY + n * 600) for n in range(1, 10)]

    assert queue.purge(30 * DAY, now=NOW) == 18
    assert not set(surviving()) & set(same_second + spread)


def test_a_chain_is_kept_from_where_an_earlier_attempt_stays(queue):
    # first (failed, kept by --status success) <- second <- third (success): both later
    # attempts stay, however old; a chain of its own beside it goes whole.
    first = make_row(Status.FAILED, 50 * DAY)
    second = make_row(Status.SUCCESS, 49 * DAY, chain_id=first, retry_times=1)
    third = make_row(Status.SUCCESS, 48 * DAY, chain_id=first, retry_times=2)
    other = make_row(Status.SUCCESS, 47 * DAY)
    other_retry = make_row(Status.SUCCESS, 46 * DAY, chain_id=other, retry_times=1)

    assert queue.purge(30 * DAY, (Status.SUCCESS,), now=NOW) == 2
    assert surviving() == [first, second, third]
    assert other not in surviving() and other_retry not in surviving()
    assert queue.purge(30 * DAY, (Status.SUCCESS,), now=NOW) == 0


def test_a_young_earlier_attempt_keeps_its_old_later_one(queue):
    # modified moves when a row changes: an earlier attempt may have changed after a later one
    first = make_row(Status.FAILED, 10 * DAY)
    second = make_row(Status.FAILED, 40 * DAY, chain_id=first, retry_times=1)

    assert queue.purge(30 * DAY, now=NOW) == 0
    assert surviving() == [first, second]


def test_a_later_attempt_stays_while_an_earlier_one_of_its_chain_is_kept(queue):
    first = make_row(Status.FAILED, 45 * DAY)
    second = make_row(Status.SUCCESS, 44 * DAY, chain_id=first, retry_times=1)

    assert queue.purge(30 * DAY, (Status.SUCCESS,), now=NOW) == 0
    assert surviving() == [first, second]

    assert queue.purge(30 * DAY, now=NOW) == 2
    assert surviving() == []


def test_an_earlier_attempt_may_go_before_its_later_ones(queue):
    first = make_row(Status.FAILED, 45 * DAY)
    second = make_row(Status.FAILED, 5 * DAY, chain_id=first, retry_times=1)

    assert queue.purge(30 * DAY, now=NOW) == 1
    assert surviving() == [second]


def test_purge_command_prints_the_count(queue, cli_env, log):
    two_days_ago = time.time() - 2 * DAY
    queue.add(H, "record", {"log": log}, now=two_days_ago)
    queue.run(now=two_days_ago)
    queue.add(H, "record", {"log": log}, delay=60)

    dry = invoke(cli_env, "purge", "--older-than", "1d", "--dry-run")
    real = invoke(cli_env, "purge", "--older-than", "1d", "--status", "success")
    again = invoke(cli_env, "purge", "--older-than", "1d")

    assert (dry.exit_code, dry.stdout) == (0, "1\n")
    assert (real.exit_code, real.stdout) == (0, "1\n")
    assert (again.exit_code, again.stdout) == (0, "0\n")
    assert len(surviving()) == 1


def test_purge_command_refuses_pending_with_exit_2(queue, cli_env):
    result = invoke(cli_env, "purge", "--older-than", "30d", "--status", "pending")

    assert result.exit_code == 2
    assert "--status 'pending' is not allowed here" in result.stderr


def test_purge_on_a_terminal_shows_rows_deleted_and_the_rate(queue, cli_env):
    for _ in range(5):
        make_row(Status.SUCCESS, 40 * DAY + (NOW - time.time()))

    result = on_a_terminal(cli_env, "purge", "--older-than", "30d")

    assert result.returncode == 0, result.stdout
    assert "rows deleted" in result.stdout and "/s" in result.stdout
    assert result.stdout.endswith("5\n")
    assert surviving() == []


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_purge_without_a_terminal_prints_the_count_alone(queue, cli_env, dry_run):
    for _ in range(5):
        make_row(Status.SUCCESS, 40 * DAY + (NOW - time.time()))

    result = subprocess.run(
        [*DELAYQ, "purge", "--older-than", "30d", *dry_run],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert (result.returncode, result.stdout, result.stderr) == (0, "5\n", "")
    assert len(surviving()) == (5 if dry_run else 0)


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)  # a file has no server to lose
@pytest.mark.parametrize("fault", ["cut", "hold"])
def test_a_purge_that_loses_the_database_midway_exits_1_and_a_second_purge_ends_it(
    queue, backend, cli_env, fault
):
    # On MySQL purge deletes on two helper connections while it reads on its own: the
    # database going away under all three must end the command with one line, not hang it.
    # "cut": the links reset, new ones refused. "hold": across a partition a request is
    # acknowledged and its reply never comes; PyMySQL would wait for ever but for a read
    # timeout, which purge sets as a run does (RUN_REPLY_TIMEOUT; 2 s here, from the URL).
    old_rows(100_000, queue)
    parts = urlsplit(backend["database_url"])
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 3306))
    netloc = f"{parts.netloc.rpartition('@')[0]}@127.0.0.1:{proxy.port}"  # with its password
    through_proxy = parts._replace(netloc=netloc, query="read_timeout=2").geturl()
    env = {**cli_env, "DELAYQ_DATABASE_URL": through_proxy}
    purging = subprocess.Popen(
        [*DELAYQ, "purge", "--older-than", "30d"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: 0 < 100_000 - left() < 75_000, 60, "purge under way")
        (proxy.cut if fault == "cut" else proxy.hold)()
        out, err = purging.communicate(timeout=60)
    finally:
        purging.kill()
        proxy.close()

    assert purging.returncode == 1, (out, err)
    assert out == "" and len(err.splitlines()) == 1 and err.startswith("delayq: error:"), err
    assert 0 < left() < 100_000
    again = subprocess.run(
        [*DELAYQ, "purge", "--older-than", "30d"], env=cli_env, capture_output=True, timeout=60
    )
    assert (again.returncode, again.stderr) == (0, b"")
    assert left() == 0


def old_rows(count: int, queue) -> None:
    """`count` rows finished 40 days ago, written in one statement."""
    queue.db.execute_sql(
        f"INSERT INTO {Job._meta.table_name} (params, status, created, modified) "
        f"SELECT %s, %s, %s, %s FROM seq_1_to_{count}",
        ('{"class": "x", "method": "y", "data": null}', int(Status.SUCCESS))
        + (utc_stamp(time.time() - 40 * DAY),) * 2,
    )


def left() -> int:
    return Job.select().where(Job.status == Status.SUCCESS).count()


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)  # SQLite has no deadlocks
def test_a_delete_that_loses_a_deadlock_runs_again(queue, backend, mariadb_admin_url):
    # Another transaction holds the batch's last row, then asks for its first, which the
    # DELETE waiting on the last already holds: InnoDB rolls back the smaller transaction, the
    # DELETE (on a Galera node a certification conflict does the same). It must run again,
    # not end the purge with an error.
    ids = [make_row(Status.SUCCESS, 40 * DAY - n) for n in range(10)]
    other = mysql_connect(backend["database_url"])
    outcome: list[object] = []
    try:
        with other.cursor() as cursor:
            deadlocks_before = innodb_deadlocks(cursor)
            cursor.execute("CREATE TABLE purge_deadlock_weight (n INT PRIMARY KEY)")
            cursor.execute("BEGIN")
            # Weight, so that InnoDB picks the DELETE and not this transaction.
            cursor.execute("INSERT INTO purge_deadlock_weight SELECT seq FROM seq_1_to_20000")
            cursor.execute(
                f"SELECT id FROM {Job._meta.table_name} WHERE id = %s FOR UPDATE", (ids[-1],)
            )
            purging = threading.Thread(
                target=lambda: outcome.append(guarded(lambda: queue.purge(30 * DAY, now=NOW)))
            )
            purging.start()
            wait_for(lambda: lock_waits(mariadb_admin_url) == 1, 10, "the DELETE waiting")
            cursor.execute(
                f"SELECT id FROM {Job._meta.table_name} WHERE id = %s FOR UPDATE", (ids[0],)
            )
            cursor.execute("COMMIT")
            purging.join(timeout=30)
            assert innodb_deadlocks(cursor) > deadlocks_before  # (the server's, all tests')
    finally:
        with other.cursor() as cursor:
            cursor.execute("ROLLBACK")
            cursor.execute("DROP TABLE IF EXISTS purge_deadlock_weight")
        other.close()

    assert outcome == [10]
    assert surviving() == []


def guarded(work):
    try:
        return work()
    except Exception as exc:  # the test's assertion shows it
        return exc


def innodb_deadlocks(cursor) -> int:
    cursor.execute("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
    return int(cursor.fetchone()[1])


def lock_waits(admin_url: str) -> int:
    """Transactions waiting for a lock on this database, as the administrator sees them:
    INNODB_TRX takes the PROCESS privilege, which delayq's user has not."""
    # InnoDB refreshes INNODB_TRX only when nobody read it for 100 ms: polled faster, it
    # never changes.
    time.sleep(0.15)
    watcher = mysql_connect(admin_url)
    try:
        with watcher.cursor() as cursor:
            cursor.execute(  # this database's waits alone: other tests share the server
                "SELECT COUNT(*) FROM information_schema.INNODB_TRX AS trx"
                " JOIN information_schema.PROCESSLIST AS thread"
                " ON thread.ID = trx.trx_mysql_thread_id"
                " WHERE trx.trx_state = 'LOCK WAIT' AND thread.DB = DATABASE()"
            )
            return int(cursor.fetchone()[0])
    finally:
        watcher.close()
