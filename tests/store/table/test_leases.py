"""Lease takeovers are compare-and-sets on the table: a run that renewed its lease after a
recovering run saw it lapse keeps its job; a deadlocked write is run again."""

from __future__ import annotations

import logging
import threading
import time

import pymysql
import pytest

from delayq import Status
from delayq.flow.gate import HeldSlots
from delayq.store.table.database import run_reconnecting
from delayq.store.table.leases import Leases
from delayq.store.table.model import Job
from delayq.worker.heartbeat import Heartbeat, LeaseDeadline
from delayq.worker.recovery import recover_leases
from delayq.worker.retry import MAX_LOST_LEASES
from tests.conftest import mysql_connect
from tests.support.waiting import wait_for

H = "tests.sample_handlers.jobs"


def test_a_lease_renewed_after_it_was_seen_lapsed_is_not_taken_over(queue, log):
    job_id = queue.add(H, "record", {"log": log}, delay=0)
    now = time.time()
    [held] = Leases(queue.table).mark_running([job_id], "run-a", now - 1, now)  # already lapsed
    [lapsed] = Leases(queue.table).expired_leases("default", now, 10)
    assert lapsed.job.id == held.id

    Leases(queue.table).renew_leases(
        "run-a", now + 60
    )  # run A was only slow: its heartbeat got through

    assert not Leases(queue.table).reclaim(lapsed, now, was_running=True)
    row = Job.get_by_id(job_id)
    assert (row.status, row.lease_token, row.lost_leases) == (Status.RUNNING, "run-a", 0)


def test_a_lease_still_lapsed_is_taken_over(queue, log):
    job_id = queue.add(H, "record", {"log": log}, delay=0)
    now = time.time()
    Leases(queue.table).mark_running([job_id], "run-a", now - 1, now)
    [lapsed] = Leases(queue.table).expired_leases("default", now, 10)

    assert Leases(queue.table).reclaim(lapsed, now, was_running=True)
    row = Job.get_by_id(job_id)
    assert (row.status, row.lease_token, row.lost_leases) == (Status.PENDING, None, 1)


def test_a_late_renewal_cannot_pull_back_a_lease_renewed_after_it(queue, log):
    # A table locked for longer than the lease holds up the heartbeat's UPDATE, whose
    # deadline was reckoned before it, and the claim of a new job. Once the lock goes, the
    # main thread renews that job's lease and starts it; the heartbeat lands just after.
    job_id = queue.add(H, "record", {"log": log}, delay=0)
    now = time.time()
    Leases(queue.table).mark_running([job_id], "run-a", now - 3, now - 6)  # lapsed at once
    assert Leases(queue.table).still_held([job_id], "run-a", now + 60) == {job_id}

    Leases(queue.table).renew_leases("run-a", now - 2)  # the stale heartbeat
    assert Leases(queue.table).still_held([job_id], "run-a", now - 1) == {job_id}

    assert Leases(queue.table).expired_leases("default", now, 10) == []
    assert Job.get_by_id(job_id).lease_until == pytest.approx(now + 60)


def test_a_renewal_pushes_a_lease_out(queue, log):
    job_id = queue.add(H, "record", {"log": log}, delay=0)
    now = time.time()
    Leases(queue.table).mark_running([job_id], "run-a", now + 5, now)

    Leases(queue.table).renew_leases("run-a", now + 30)
    assert Job.get_by_id(job_id).lease_until == pytest.approx(now + 30)
    Leases(queue.table).still_held([job_id], "run-a", now + 40)
    assert Job.get_by_id(job_id).lease_until == pytest.approx(now + 40)


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_a_transaction_chosen_as_deadlock_victim_is_run_again(queue, backend):
    first, second, *filler = [Job.insert(params="{}", run_at=1.0).execute() for _ in range(52)]
    rival_db = mysql_connect(backend["database_url"])
    attempts = []
    we_hold_first = threading.Event()

    def rival() -> None:
        # Heavier than ours (51 rows) and waiting first: InnoDB rolls ours back.
        with rival_db.cursor() as cursor:
            cursor.execute("BEGIN")
            ids = ",".join(str(job_id) for job_id in [second, *filler])
            cursor.execute(
                "UPDATE delay_queue FORCE INDEX (PRIMARY) SET retry_times = 7 "
                f"WHERE id IN ({ids})"  # those rows only, not every row a scan passes
            )
            rival_holds_second.set()
            we_hold_first.wait(5)
            # Blocks on our lock on `first` until InnoDB rolls our transaction back.
            cursor.execute("UPDATE delay_queue SET retry_times = 7 WHERE id = %s", (first,))
            rival_db.commit()

    def work() -> None:
        attempts.append(1)
        with queue.db.atomic():
            Job.update(retry_times=5).where(Job.id == first).execute()
            if len(attempts) == 1:
                we_hold_first.set()
                # Once the rival waits for `first`, our next write closes the cycle.
                wait_for(rival_waits_for_first, 15, "the rival to wait for our lock")
            Job.update(retry_times=5).where(Job.id == second).execute()

    def rival_waits_for_first() -> bool:
        # The rival's connection is on our user, whose threads the process list shows.
        (waiting,) = queue.db.execute_sql(
            "SELECT COUNT(*) FROM information_schema.processlist WHERE id = %s "
            "AND info LIKE 'UPDATE delay_queue SET retry_times = 7 WHERE id = %%'",
            (rival_db.thread_id(),),
        ).fetchone()
        return bool(waiting)

    rival_holds_second = threading.Event()
    thread = threading.Thread(target=rival)
    thread.start()
    rival_holds_second.wait(5)
    run_reconnecting(queue.db, work)
    thread.join()
    rival_db.close()

    assert len(attempts) == 2  # the deadlock victim was run again, after the rival committed
    assert [Job.get_by_id(job_id).retry_times for job_id in (first, second)] == [5, 5]
    assert Job.get_by_id(filler[0]).retry_times == 7


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
@pytest.mark.parametrize("write", ["check", "hand back"])
def test_a_lease_check_or_hand_back_chosen_as_deadlock_victim_is_run_again(queue, backend, write):
    # After a stall the run checks its leases before the next job (or hands jobs back)
    # while other runs renew theirs and take lapsed ones over: a deadlock there stopped
    # the runner (exit 1).
    first, second, *filler = [Job.insert(params="{}", run_at=1.0).execute() for _ in range(52)]
    now = time.time()
    Leases(queue.table).mark_running([first, second], "run-a", now + 60, now)
    ours = queue.db.connection().thread_id()
    rival_db = mysql_connect(backend["database_url"])
    rival_holds_second = threading.Event()

    def rival() -> None:
        # Heavier than ours (51 rows): InnoDB rolls our statement back, not this.
        with rival_db.cursor() as cursor:
            cursor.execute("BEGIN")
            ids = ",".join(str(job_id) for job_id in [second, *filler])
            cursor.execute(
                f"UPDATE delay_queue FORCE INDEX (PRIMARY) SET retry_times = 7 WHERE id IN ({ids})"
            )
            rival_holds_second.set()
            wait_for(lambda: waits_on_a_lock(cursor, ours), 15, "our check to wait for second")
            # Our check holds `first` and waits for `second`: this closes the cycle.
            cursor.execute("UPDATE delay_queue SET retry_times = 7 WHERE id = %s", (first,))
            rival_db.commit()

    thread = threading.Thread(target=rival)
    thread.start()
    rival_holds_second.wait(5)
    if write == "check":
        held = Leases(queue.table).still_held([first, second], "run-a", now + 120)
    else:
        released = Leases(queue.table).release([first, second], "run-a", now)
    thread.join()
    rival_db.close()

    if write == "check":
        assert held == {first, second}
        assert [Job.get_by_id(job_id).lease_until for job_id in (first, second)] == [now + 120] * 2
    else:
        assert sorted(job_id for job_id, _ in released) == [first, second]
        assert [Job.get_by_id(job_id).status for job_id in (first, second)] == [Status.PENDING] * 2
    assert Job.get_by_id(first).retry_times == 7  # the rival's write went through


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
@pytest.mark.parametrize("lost_before", [0, MAX_LOST_LEASES - 1], ids=["requeued", "poisoned"])
def test_a_takeover_that_waited_too_long_on_a_lock_is_run_again(
    queue, backend, caplog, lost_before
):
    # When a locked table lets go, recovering runs meet every held-up run's heartbeat and
    # claim at once: a takeover that lost to them stopped the runner (exit 1).
    caplog.set_level(logging.INFO, logger="delayq")
    job_id = Job.insert(params="{}", run_at=1.0, lost_leases=lost_before).execute()
    now = time.time()
    Leases(queue.table).mark_running([job_id], "run-a", now - 1, now - 10)  # its run died
    queue.db.execute_sql("SET SESSION innodb_lock_wait_timeout = 1")
    rival_db = mysql_connect(backend["database_url"])
    rival_holds_it = threading.Event()

    def rival() -> None:
        with rival_db.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT id FROM delay_queue WHERE id = %s FOR UPDATE", (job_id,))
            rival_holds_it.set()
            wait_for(lambda: "lock conflict" in caplog.text, 15, "our takeover to time out")
            rival_db.commit()

    thread = threading.Thread(target=rival)
    thread.start()
    rival_holds_it.wait(5)
    try:
        recovered = recover_leases(queue.table, queue.index, "default", now, {})
    finally:
        thread.join()
        rival_db.close()
        queue.db.execute_sql("SET SESSION innodb_lock_wait_timeout = DEFAULT")

    row = Job.get_by_id(job_id)
    if lost_before:
        assert (recovered.poisoned, row.status) == (1, Status.FAILED)
    else:
        assert (recovered.requeued, row.status, row.lost_leases) == (1, Status.PENDING, 1)


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_a_heartbeat_held_up_by_a_locked_table_beats_again_at_once(queue, backend, log):
    # Its deadline was reckoned before the table was locked: written after, it may be past
    # already, and the jobs still running then wait for the next beat, a third of a lease
    # on, with their leases lapsed and open to any recovering run.
    job_id = queue.add(H, "record", {"log": log}, delay=0)
    now = time.time()
    Leases(queue.table).mark_running([job_id], "run-a", now + 3, now)
    heartbeat = Heartbeat(queue.table, queue.index, 3.0)
    ours = queue.db.connection().thread_id()  # the beat below runs on this thread
    locker = mysql_connect(backend["database_url"])
    locked = threading.Event()
    unlocked_at: list[float] = []

    def lock_past_a_third_of_the_lease() -> None:
        with locker.cursor() as cursor:
            cursor.execute("LOCK TABLES delay_queue WRITE")
            locked.set()
            wait_for(lambda: waited_ms(cursor, ours) >= 1000, 15, "the beat to wait 1 s")
            unlocked_at.append(time.time())
            cursor.execute("UNLOCK TABLES")

    thread = threading.Thread(target=lock_past_a_third_of_the_lease)
    thread.start()
    locked.wait(5)
    with heartbeat.watching("run-a", time.time, LeaseDeadline(3.0), HeldSlots()):
        heartbeat._beat()  # on this thread: the heartbeat's own was never started
    thread.join()
    locker.close()

    assert Job.get_by_id(job_id).lease_until >= unlocked_at[0] + 3.0


def waited_ms(cursor: pymysql.cursors.Cursor, connection_id: int) -> float:
    """How long connection `connection_id` has been running its UPDATE, in ms (0: none)."""
    cursor.execute(
        "SELECT TIME_MS FROM information_schema.processlist WHERE id = %s AND info LIKE 'UPDATE%%'",
        (connection_id,),
    )
    row = cursor.fetchone()
    return float(row[0]) if row else 0.0


def waits_on_a_lock(cursor: pymysql.cursors.Cursor, connection_id: int) -> bool:
    cursor.execute(
        "SELECT COUNT(*) FROM information_schema.processlist WHERE id = %s "
        "AND info LIKE 'UPDATE%%'",
        (connection_id,),
    )
    (count,) = cursor.fetchone()
    return bool(count)


def test_a_row_the_run_already_holds_is_not_won_again(queue, log):
    # A rebuild that read the row while it was pending can put it back on the schedule after
    # the run leased it; the run's next claim then meets it again and must not take it.
    first, second = (queue.add(H, "record", {"log": log}, delay=0) for _ in range(2))
    now = time.time()
    Leases(queue.table).mark_running([first], "run-a", now + 60, now)

    won = Leases(queue.table).mark_running([first, second], "run-a", now + 60, now)

    assert [job.id for job in won] == [second]
    assert Job.get_by_id(first).lease_token == "run-a"
