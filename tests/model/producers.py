"""The ways in that are more than a `Queue.add` call: another producer's INSERT and ZADD
(docs/producers.md), the `delayq add` command, an add inside the caller's transaction, and
two count corrections at once."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

import pymysql

import delayq
from delayq import JobSpec
from delayq.config import DEFAULT_QUEUE
from delayq.store.index.keys import QUEUES_KEY, schedule_key
from delayq.store.table.counts import COUNTS_TABLE
from tests.conftest import DELAYQ, ROOT
from tests.model.world import HANDLER, HANDLERS, HORIZON, World
from tests.support.callers import open_transaction

# How long two corrections are held at their writes, at most, before they are let go; how
# long a held replace's row may take to be written, and the other replace to return.
HOLD = 5.0
REPLACE_HOLD = 1.0
# Sessions waiting for a row lock (InnoDB refreshes its list at most every 100 ms) or for a
# GET_LOCK held by another session.
WAITING = (
    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock' OR ID IN "
    "(SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT')"
)
# On SQLite there is no list of lock waits to watch, nor on MariaDB for a user without the
# PROCESS privilege: the corrections, or the second replace, get this long to reach their
# writes (each reads a few rows first).
SQLITE_HOLD = 0.25
UNSEEN_HOLD = 0.5


def add_foreign(world: World, queue: str, run_at: float, zadd: bool) -> int:
    """Another producer's job: the row (as docs/producers.md writes it), then, unless its
    Redis failed it, the entry; the queue's name in the registry "once" (each time here)."""
    params = json.dumps({"class": HANDLER, "method": "record", "data": {"log": world.log}})
    job_id = int(
        world.execute(
            "INSERT INTO delay_queue (params, ext_string, run_at, queue) VALUES (%s, %s, %s, %s)",
            (params, "", run_at, queue),
        )
    )
    if queue != DEFAULT_QUEUE:
        world.redis.sadd(QUEUES_KEY, queue)
    if zadd:
        world.redis.zadd(schedule_key(queue), {str(job_id): run_at})
    return job_id


def add_through_cli(world: World, queue: str, at: float, ext: str, lock: str | None) -> int:
    """`delayq add ... --at` in a process of its own (`--replace` with an ext)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env.update(
        DELAYQ_DATABASE_URL=world.database_url,
        DELAYQ_REDIS_URL=world.servers.redis_url,
        DELAYQ_HANDLERS=",".join(HANDLERS),
        DELAYQ_HORIZON=f"{HORIZON:.0f}s",
        DELAYQ_HOME=str(world.tmp / "home"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    moment = datetime.fromtimestamp(at, tz=timezone.utc).isoformat()
    argv = [*DELAYQ, "add", HANDLER, "record", "--data", json.dumps({"log": world.log})]
    argv += ["--at", moment, "--queue", queue]
    argv += ["--ext", ext, "--replace"] if ext else []
    argv += ["--lock", lock] if lock else []
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"delayq add exited {done.returncode}: {done.stderr}"
    return int(done.stdout)


def add_in_transaction(
    queue: delayq.Queue, world: World, specs: Sequence[JobSpec], now: float, commit: bool
) -> None:
    """`add_many(..., using=)` on the application's own DB-API connection, then its commit
    or rollback."""
    transaction = open_transaction("dbapi", world.database_url)
    try:
        queue.add_many(specs, now=now, using=transaction.using)
        (transaction.commit if commit else transaction.rollback)()
    finally:
        transaction.close()


def correct_at_once(
    world: World, hosts: Sequence[delayq.Queue], kinds: Sequence[str], now: float
) -> None:
    """Count corrections (`reconcile` or `init`) on two hosts at once, with the widest
    overlap two can have: a third session holds the counts' rows, so that each reads the
    table and the counts before either writes, then lets both go (where no counts are kept,
    they only start together). Errors are raised here."""
    holder = world.connect()
    cursor = holder.cursor()
    if not world.mysql:
        cursor.execute("BEGIN IMMEDIATE")
    elif world.has_table(COUNTS_TABLE):
        cursor.execute(f"SELECT * FROM {COUNTS_TABLE} FOR UPDATE")
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_correct, args=(host, kind, now, errors))
        for host, kind in zip(hosts, kinds, strict=True)
    ]
    try:
        for thread in threads:
            thread.start()
        _wait_until_held(world, threads)
    finally:
        holder.rollback()
        holder.close()
        for thread in threads:
            thread.join(60)
    if errors:
        raise errors[0]


def _correct(host: delayq.Queue, kind: str, now: float, errors: list[BaseException]) -> None:
    try:
        if kind == "init":
            host.init(now=now)
        else:
            host.reconcile()
    except BaseException as exc:  # noqa: BLE001 - handed to the step, which raises it
        errors.append(exc)
    finally:
        host.db.close()  # this thread's connection


def _wait_until_held(world: World, threads: Sequence[threading.Thread]) -> None:
    """Until every correction still running waits (on the held rows, or on a lock a fixed
    version may take around its correction), or for HOLD."""
    if not world.mysql:
        time.sleep(SQLITE_HOLD)
        return
    _wait_for_waiters(world, lambda: sum(thread.is_alive() for thread in threads), HOLD)


def _wait_for_waiters(world: World, wanted: Callable[[], int], timeout: float) -> None:
    """Until at least `wanted()` MariaDB sessions wait for a lock (a row's or GET_LOCK's),
    or `wanted()` is 0, or `timeout` passes."""
    watcher = world.connect()
    try:
        cursor = watcher.cursor()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (count := wanted()):
            try:
                cursor.execute(WAITING)
            except pymysql.MySQLError:  # a user without PROCESS sees no other session's waits
                time.sleep(UNSEEN_HOLD)
                return
            if cursor.fetchone()[0] >= count:
                return
            watcher.commit()
            time.sleep(0.05)
    finally:
        watcher.close()


def replace_at_once(
    world: World,
    queues: tuple[delayq.Queue, delayq.Queue],
    queue: str,
    ext: str,
    due: tuple[float, float],
    now: float,
) -> None:
    """Two `replace=True` adds of one key at once, through two Queues, the first of which
    reaches Redis through the held proxy: its Redis writes wait until the second add has
    returned (or, if the second waits for the first, as it does while the first holds the
    key's lock, REPLACE_HOLD), so that the two meet in the widest overlap they can have."""
    assert world.proxy is not None
    errors: list[BaseException] = []

    def replace(host: delayq.Queue, at: float) -> None:
        try:
            host.add(HANDLER, "record", {"log": world.log}, at=at, queue=queue, ext=ext,
                     replace=True, now=now)  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - handed to the step, which raises it
            errors.append(exc)
        finally:
            host.db.close()  # this thread's connection

    first = threading.Thread(target=replace, args=(queues[0], due[0]))
    second = threading.Thread(target=replace, args=(queues[1], due[1]))
    world.proxy.hold()
    try:
        first.start()
        _wait_for_pending(world, queue, ext, due[0])
        second.start()
        if world.mysql:
            _wait_for_waiters(world, lambda: int(second.is_alive()), REPLACE_HOLD)
        else:
            second.join(REPLACE_HOLD)
    finally:
        world.proxy.release()
        first.join(60)
        if second.ident is not None:
            second.join(60)
    if errors:
        raise errors[0]


def _wait_for_pending(world: World, queue: str, ext: str, at: float) -> None:
    """Until the table holds a pending row of `queue` and `ext` due at `at`, or for
    REPLACE_HOLD (a replace that writes its entry before it commits never shows one)."""
    conn = world.connect()
    try:
        cursor = conn.cursor()
        deadline = time.monotonic() + REPLACE_HOLD
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT COUNT(*) FROM delay_queue WHERE queue = %s AND ext_string = %s "
                "AND status = 1 AND ABS(run_at - %s) < 0.001",
                (queue, ext, at),
            )
            if cursor.fetchone()[0]:
                return
            conn.commit()  # a fresh snapshot for the next look
            time.sleep(0.01)
    finally:
        conn.close()
