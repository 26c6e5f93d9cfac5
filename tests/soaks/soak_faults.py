"""The soak's faults: kill -9 a runner, FLUSHDB or restart Redis, KILL the runners' MariaDB
connections, stall MariaDB past the lease; and the count of handlers each could repeat."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pymysql

import delayq
from delayq.store.table.model import Job, Status
from delayq.worker.looping import SWEEP_EVERY
from tests.conftest import mysql_connect
from tests.support.servers import PrivateRedis

LEASE = 3  # seconds: short, so killed runners' jobs come back quickly
STALL = LEASE + 3  # seconds MariaDB stays locked: past the lease and a heartbeat


@dataclass
class Faults:
    kills: int = 0
    hit_kills: int = 0  # kills that hit a handler whose outcome was not yet recorded
    handlers_hit: int = 0  # such handlers, over every kill
    parent_kills: int = 0
    flushes: int = 0
    db_kills: int = 0
    stalls: int = 0
    stall_exposed: int = 0  # running jobs, not journaled, whose leases a stall let lapse
    exposed_ids: set[int] = field(default_factory=set)  # the row ids a kill or stall may repeat
    redis_restarts: int = 0
    last_kill: float = float("-inf")
    restarts: int = 0
    flush_pending: str = ""  # a Redis flush or restart waiting for a dead run's recovery
    rounds: int = 0
    deck: list[str] = field(default_factory=list)  # kinds still to come once each
    log: list[str] = field(default_factory=list)

    def note(self, line: str) -> None:
        self.log.append(f"{time.time():.3f} {line}")


@dataclass
class Runners:
    """The soak's `delayq run --loop` processes and how to start another."""

    processes: list[subprocess.Popen[bytes]]
    start: Callable[[], subprocess.Popen[bytes]]
    children: int  # --processes of each


def choose_fault(processes: int, private: PrivateRedis | None, faults: Faults) -> str:
    """Each kind of fault once, in random order, then any at random (kills twice as often)."""
    kinds = ["kill", "flush", "db_kill", "stall"]
    if processes > 1:
        kinds.append("kill_parent")
    if private is not None:
        kinds.append("redis_restart")
    if faults.flush_pending:
        return faults.flush_pending
    if faults.rounds == 0:
        # Redis faults first (the deck is dealt from its end): after a kill they would wait.
        redis_kinds = [kind for kind in kinds if kind in ("flush", "redis_restart")]
        others = [kind for kind in kinds if kind not in redis_kinds]
        faults.deck = random.sample(others, len(others)) + random.sample(
            redis_kinds, len(redis_kinds)
        )
    faults.rounds += 1
    if faults.deck:
        return faults.deck.pop()
    fault = random.choice([*kinds, "kill"])
    if fault == "kill_parent" and random.random() < 0.6:
        return "kill"
    return fault


def inject_one(
    fault: str,
    runners: Runners,
    faults: Faults,
    queue: delayq.Queue,
    database_url: str,
    private: PrivateRedis | None,
    log: Path,
) -> None:
    """Inject `fault`; a Redis flush or restart waits while a killed run's jobs await
    recovery (it would erase that run's journal: README, Guarantees), and no kill comes
    meanwhile."""
    if fault in ("flush", "redis_restart"):
        faults.flush_pending = fault if dead_run_unsettled(faults) else ""
        if faults.flush_pending:
            return
        if fault == "redis_restart" and private is not None:
            restart_redis(private, queue, faults)
        else:
            queue.index.client.flushdb()
            faults.flushes += 1
            faults.note("flushdb")
    elif fault == "kill":
        kill_a_runner(runners, faults, queue, log)
    elif fault == "kill_parent":
        # Its children get SIGTERM (PDEATHSIG) and stop gracefully: nothing runs twice.
        victim = random.randrange(len(runners.processes))
        faults.note(f"kill -9 parent {runners.processes[victim].pid}")
        runners.processes[victim].send_signal(signal.SIGKILL)
        runners.processes[victim].wait()
        runners.processes[victim] = runners.start()
        faults.parent_kills += 1
    elif fault == "db_kill":
        killed = kill_db_connections(database_url)
        faults.db_kills += killed
        faults.note(f"killed {killed} MariaDB connections")
    elif fault == "stall":
        stall_database(database_url, queue, faults)


def kill_a_runner(runners: Runners, faults: Faults, queue: delayq.Queue, log: Path) -> None:
    """kill -9 a runner (with --processes, one of its children: the parent starts another),
    stopped first so that what it had begun can be counted."""
    position = random.randrange(len(runners.processes))
    parent = runners.processes[position].pid
    pids = children_of(parent) if runners.children > 1 else [parent]
    if not pids:
        return  # its children are being replaced
    pid = random.choice(pids)
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return
    time.sleep(0.1)  # journal writes it had sent reach Redis, as they would after the kill
    exposed = not_journaled(queue, running_among(begun_by(log, pid)))
    faults.exposed_ids.update(exposed)
    hit = len(exposed)
    os.kill(pid, signal.SIGKILL)
    faults.note(f"kill -9 {pid} hit {hit}")
    if runners.children == 1:
        runners.processes[position].wait()
        runners.processes[position] = runners.start()
    faults.kills += 1
    faults.hit_kills += hit > 0
    faults.handlers_hit += hit
    faults.last_kill = time.monotonic()


def children_of(parent: int) -> list[int]:
    """The pids of `parent`'s live children, read from /proc."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[1]) == parent and fields[0] not in ("Z", "X"):
            pids.append(int(stat.parent.name))
    return pids


def begun_by(log: Path, pid: int) -> set[int]:
    """Row ids whose handler process `pid` began, by the handlers' log."""
    begun = set()
    for line in log.read_text().splitlines() if log.exists() else []:
        parts = line.split()
        if len(parts) == 6 and int(parts[3]) == pid:
            begun.add(int(parts[4]))
    return begun


def running_among(ids: Iterable[int]) -> dict[int, str]:
    """{id: queue} of those rows still running."""
    ids = list(ids)
    if not ids:
        return {}
    rows = Job.select(Job.id, Job.queue).where(Job.id.in_(ids), Job.status == Status.RUNNING)
    return {row.id: row.queue for row in rows}


def not_journaled(queue: delayq.Queue, running: dict[int, str]) -> list[int]:
    """Those of `running` with no journaled outcome: a second run would call them again."""
    by_queue: dict[str, list[int]] = defaultdict(list)
    for job_id, name in running.items():
        by_queue[name].append(job_id)
    left = []
    for name, ids in by_queue.items():
        journaled = queue.index.journal.journaled(name, ids)
        left += [job_id for job_id in ids if job_id not in journaled]
    return left


def dead_run_unsettled(faults: Faults) -> bool:
    """Whether a killed run may still have jobs that no run has recovered: its leases lapse
    LEASE after its last heartbeat, and looping runs sweep every SWEEP_EVERY seconds."""
    if time.monotonic() - faults.last_kill < LEASE + SWEEP_EVERY + 2:
        return True
    lapsed = Job.select().where(Job.status == Status.RUNNING, Job.lease_until < time.time())
    return lapsed.count() > 0


def restart_redis(private: PrivateRedis, queue: delayq.Queue, faults: Faults) -> None:
    """kill -9 the private redis-server and start it again, empty (no persistence)."""
    private.kill()
    private.start()
    for client in (queue.index.client, queue.index.journal.client):
        client.connection_pool.disconnect()  # the soak's own links died with it
    faults.redis_restarts += 1
    faults.note("redis restart")


def stall_database(url: str, queue: delayq.Queue, faults: Faults) -> None:
    """LOCK TABLES delay_queue WRITE on a connection of our own for STALL seconds: every
    runner's statement on the table waits, heartbeats too, so running leases lapse. A run
    stalled past its lease can lose its job to another run and so repeat its handler
    (README, Guarantees): those jobs, running and not journaled at the release, are counted."""
    conn = mysql_connect(url)
    with conn.cursor() as cursor:
        cursor.execute("LOCK TABLES delay_queue WRITE")
        faults.note("lock tables")
        time.sleep(STALL)
        cursor.execute(
            "SELECT id, queue FROM delay_queue WHERE status = %s", (int(Status.RUNNING),)
        )
        running = {int(job_id): name for job_id, name in cursor.fetchall()}
        exposed = not_journaled(queue, running)
        cursor.execute("UNLOCK TABLES")
    conn.close()
    faults.stalls += 1
    faults.stall_exposed += len(exposed)
    faults.exposed_ids.update(exposed)
    faults.note(f"unlock tables, {len(exposed)} running jobs exposed")


def kill_db_connections(url: str) -> int:
    name = urlparse(url).path.lstrip("/")
    conn = mysql_connect(url)
    killed = 0
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM information_schema.processlist WHERE db = %s AND id <> CONNECTION_ID()",
            (name,),
        )
        for (connection_id,) in cursor.fetchall():
            try:
                cursor.execute(f"KILL {int(connection_id)}")
                killed += 1
            except pymysql.MySQLError:
                pass  # it ended on its own meanwhile
    conn.close()
    return killed


def restart_exited(runners: Runners, faults: Faults) -> None:
    """Start another in place of a runner that exited by itself (a --processes parent
    whose children keep dying exits 1), and count it."""
    for position, runner in enumerate(runners.processes):
        if runner.poll() is not None:
            faults.note(f"runner {runner.pid} exited {runner.returncode}")
            runners.processes[position] = runners.start()
            faults.restarts += 1
