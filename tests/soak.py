"""The chaos soak: N jobs, M concurrent `delayq run --loop` runners, random faults, then a
check from the handlers' own log that nothing was lost and duplicates stayed within the kills.

    python -m tests.soak                      # N=20000, M=4, against MariaDB + Redis
    python -m tests.soak --jobs 300 --runners 3 --window 5
    python -m tests.soak --processes 2 --concurrency 8 --async-share 0.5

Faults, at random while the jobs fall due: kill -9 a runner (with --processes, one of its
children, or now and then the parent), FLUSHDB the Redis database, KILL the runners'
MariaDB connections; the job mix itself has failing, hanging and non-retryable handlers,
plain or `async def`. Only 127.0.0.1 is ever contacted. Each kill -9 stops its victim first
and counts the handlers it had begun whose outcome is neither committed nor journaled: the
only calls a kill may repeat. Prints one summary line and exits 0 when lost == 0,
duplicates <= those handlers, and every failure has its retry row per the ladder.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pymysql
import redis

import delayq
from delayq.config import DEFAULT_QUEUE, Settings
from delayq.store.table import Job, Status
from delayq.worker.looping import SWEEP_EVERY
from delayq.worker.retry import LADDER
from tests.conftest import mysql_connect

ROOT = Path(__file__).resolve().parent.parent
HANDLERS = "tests.sample_handlers.soak"
LEASE = 3  # seconds: short, so killed runners' jobs come back quickly
TIMEOUT = 1.0  # seconds: the hanging handler's time limit


@dataclass
class Faults:
    kills: int = 0
    hit_kills: int = 0  # kills that hit a handler whose outcome was not yet recorded
    handlers_hit: int = 0  # such handlers, over every kill
    parent_kills: int = 0
    flushes: int = 0
    db_kills: int = 0
    last_kill: float = float("-inf")
    restarts: int = 0
    flush_pending: bool = False
    log: list[str] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    random.seed(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="delayq-soak-"))
    log = workdir / "handlers.log"
    queue = prepare(args)
    started = time.monotonic()
    expected = enqueue(queue, args, str(log))
    env = runner_env(args, workdir)
    runners = [start_runner(env) for _ in range(args.runners)]
    faults = Faults()
    try:
        inject_faults(args, runners, env, faults, queue)
        drain(args, runners, env, faults)
    finally:
        for runner in runners:
            runner.send_signal(signal.SIGTERM)
        for runner in runners:
            runner.wait(timeout=60)
    (workdir / "faults.log").write_text("".join(line + "\n" for line in faults.log))
    print(f"soak: faults, handlers' and runners' logs in {workdir}", file=sys.stderr)
    result = check(queue, expected, log)
    elapsed = time.monotonic() - started
    # A kill -9 re-runs at most the calls it hit before their outcome was recorded.
    allowed = faults.handlers_hit
    ok = result["lost"] == 0 and result["duplicates"] <= allowed and result["bad_retries"] == 0
    print(
        f"soak: jobs={len(expected)} runners={args.runners} processes={args.processes} "
        f"concurrency={args.concurrency} async_share={args.async_share} "
        f"kills={faults.kills} hit_kills={faults.hit_kills} "
        f"handlers_hit={faults.handlers_hit} parent_kills={faults.parent_kills} "
        f"flushes={faults.flushes} db_kills={faults.db_kills} restarts={faults.restarts} "
        f"lost={result['lost']} duplicates={result['duplicates']} "
        f"retries_checked={result['retries']} bad_retries={result['bad_retries']} "
        f"elapsed={elapsed:.0f}s {'OK' if ok else 'FAILED'}"
    )
    queue.close()
    return 0 if ok else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--runners", type=int, default=4)
    parser.add_argument("--window", type=float, default=60.0, help="seconds the due times span")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="give up after this")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=1, help="jobs in flight in each runner")
    parser.add_argument("--processes", type=int, default=1, help="runner processes per runner")
    parser.add_argument(
        "--async-share", type=float, default=0.0, help="share of jobs with async def handlers"
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get(
            "DELAYQ_TEST_MARIADB_URL", "mysql://root@127.0.0.1:3306/delayq_soak"
        ),
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("DELAYQ_SOAK_REDIS_URL", "redis://127.0.0.1:6379/14")
    )
    args = parser.parse_args(argv)
    for url in (args.database_url, args.redis_url):
        if urlparse(url).hostname not in ("127.0.0.1", "localhost", "::1"):
            parser.error(f"the soak only talks to this machine, not {url}")
    return args


def prepare(args: argparse.Namespace) -> delayq.Queue:
    parts = urlparse(args.database_url)
    conn = mysql_connect(args.database_url.rsplit("/", 1)[0] + "/")  # the server, no database
    with conn.cursor() as cursor:
        name = parts.path.lstrip("/")
        cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
        cursor.execute(f"DROP TABLE IF EXISTS `{name}`.delay_queue")
    conn.close()
    redis.Redis.from_url(args.redis_url).flushdb()
    settings = Settings(
        database_url=args.database_url, redis_url=args.redis_url, handlers=(HANDLERS,)
    )
    queue = delayq.connect(settings)
    queue.init()
    Job.bind(queue.db)  # the soak reads rows through the unbound model, on this database
    return queue


def enqueue(queue: delayq.Queue, args: argparse.Namespace, log: str) -> dict[int, str]:
    """Add the job mix, due over the window starting in two seconds; returns {n: kind}."""
    kinds = ["ok"] * 90 + ["fail_once"] * 5 + ["hang_once"] * 3 + ["refuse"] * 2
    start = time.time() + 2
    expected: dict[int, str] = {}
    specs = []
    for n in range(args.jobs):
        kind = random.choice(kinds)
        expected[n] = kind
        method = f"{kind}_async" if random.random() < args.async_share else kind
        specs.append(
            delayq.JobSpec(
                HANDLERS,
                method,
                {"log": log, "n": n},
                at=start + random.uniform(0, args.window),
                ext=f"soak:{n}",
                timeout=TIMEOUT if kind == "hang_once" else None,
            )
        )
    for chunk in range(0, len(specs), 5000):
        queue.add_many(specs[chunk : chunk + 5000])
    return expected


def runner_env(args: argparse.Namespace, workdir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env.update(
        DELAYQ_DATABASE_URL=args.database_url,
        DELAYQ_REDIS_URL=args.redis_url,
        DELAYQ_HANDLERS=HANDLERS,
        DELAYQ_HOME=str(workdir),
        DELAYQ_LEASE=str(LEASE),
        SOAK_LOG=str(workdir / "handlers.log"),
        SOAK_CONCURRENCY=str(args.concurrency),
        SOAK_PROCESSES=str(args.processes),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    return env


def start_runner(env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "delayq", "run", "--loop"]
    command += ["--concurrency", env["SOAK_CONCURRENCY"], "--processes", env["SOAK_PROCESSES"]]
    # Their log lines (kills by a supervisor, recoveries) go to runners.log beside the
    # handlers' log, for reading after a failed soak.
    with open(Path(env["DELAYQ_HOME"]) / "runners.log", "ab") as runners_log:
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=runners_log)


def inject_faults(
    args: argparse.Namespace,
    runners: list[subprocess.Popen[bytes]],
    env: dict[str, str],
    faults: Faults,
    queue: delayq.Queue,
) -> None:
    """Random faults every 0.5-2 s until the last job has fallen due."""
    until = time.monotonic() + 2 + args.window
    while time.monotonic() < until:
        time.sleep(random.uniform(0.5, 2.0))
        restart_exited(runners, env, faults)
        fault = random.choice(["kill", "kill", "flush", "db_kill"])
        if fault == "kill" and args.processes > 1 and random.random() < 0.2:
            fault = "kill_parent"
        if fault == "flush" or faults.flush_pending:
            # Not while a killed run's jobs wait for recovery: a flush then would also erase
            # its journal, and its journaled jobs would run again - more duplicates than
            # kills (README, Guarantees). So a flush waits, and no kill comes meanwhile.
            faults.flush_pending = dead_run_unsettled(faults)
            if not faults.flush_pending:
                queue.index.client.flushdb()
                faults.flushes += 1
                faults.log.append(f"{time.time():.3f} flushdb")
        elif fault == "kill":
            kill_a_runner(args, runners, env, faults, queue, Path(env["SOAK_LOG"]))
        elif fault == "kill_parent":
            # Its children get SIGTERM (PDEATHSIG) and stop gracefully: nothing runs twice.
            victim = random.randrange(len(runners))
            faults.log.append(f"{time.time():.3f} kill -9 parent {runners[victim].pid}")
            runners[victim].send_signal(signal.SIGKILL)
            runners[victim].wait()
            runners[victim] = start_runner(env)
            faults.parent_kills += 1
        elif fault == "db_kill":
            faults.db_kills += kill_db_connections(args.database_url)


def kill_a_runner(
    args: argparse.Namespace,
    runners: list[subprocess.Popen[bytes]],
    env: dict[str, str],
    faults: Faults,
    queue: delayq.Queue,
    log: Path,
) -> None:
    """kill -9 a runner (with --processes, one of its children: the parent starts another),
    stopped first so that what it had begun can be counted."""
    position = random.randrange(len(runners))
    pids = children_of(runners[position].pid) if args.processes > 1 else [runners[position].pid]
    if not pids:
        return  # its children are being replaced
    pid = random.choice(pids)
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return
    time.sleep(0.1)  # journal writes it had sent reach Redis, as they would after the kill
    hit = handlers_in_flight(queue, pid, log)
    os.kill(pid, signal.SIGKILL)
    faults.log.append(f"{time.time():.3f} kill -9 {pid} hit {hit}")
    if args.processes == 1:
        runners[position].wait()
        runners[position] = start_runner(env)
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


def handlers_in_flight(queue: delayq.Queue, pid: int, log: Path) -> int:
    """Jobs the stopped process `pid` had begun (by the handlers' log) whose outcome is
    neither committed nor journaled: the ones killing it may run a second time."""
    begun = set()
    for line in log.read_text().splitlines() if log.exists() else []:
        parts = line.split()
        if len(parts) == 5 and int(parts[3]) == pid:
            begun.add(int(parts[4]))
    if not begun:
        return 0
    running = Job.select(Job.id).where(Job.id.in_(begun), Job.status == Status.RUNNING)
    ids = [row.id for row in running]
    return len(ids) - len(queue.index.journal.journaled(DEFAULT_QUEUE, ids))


def dead_run_unsettled(faults: Faults) -> bool:
    """Whether a killed run may still have jobs that no run has recovered: its leases lapse
    LEASE after its last heartbeat, and looping runs sweep every SWEEP_EVERY seconds."""
    if time.monotonic() - faults.last_kill < LEASE + SWEEP_EVERY + 2:
        return True
    lapsed = Job.select().where(Job.status == Status.RUNNING, Job.lease_until < time.time())
    return lapsed.count() > 0


def restart_exited(
    runners: list[subprocess.Popen[bytes]], env: dict[str, str], faults: Faults
) -> None:
    for position, runner in enumerate(runners):
        if runner.poll() is not None:  # e.g. exited 1 when its connection was killed
            runners[position] = start_runner(env)
            faults.restarts += 1


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


def drain(
    args: argparse.Namespace,
    runners: list[subprocess.Popen[bytes]],
    env: dict[str, str],
    faults: Faults,
) -> None:
    """Let the runners finish every chain (retries included) without further faults."""
    deadline = time.monotonic() + args.max_seconds
    while time.monotonic() < deadline:
        restart_exited(runners, env, faults)
        open_rows = Job.select().where(Job.status.in_([Status.PENDING, Status.RUNNING])).count()
        if open_rows == 0:
            return
        time.sleep(1.0)


def check(queue: delayq.Queue, expected: dict[int, str], log: Path) -> dict[str, int]:
    """Compare the handlers' log and the table with what each job should have done."""
    successes: Counter[int] = Counter()
    for line in log.read_text().splitlines() if log.exists() else []:
        kind, n = line.split()[:2]
        if kind == "ok":
            successes[int(n)] += 1
    rows_by_ext: dict[int, list[Job]] = defaultdict(list)
    for row in Job.select().order_by(Job.id):
        rows_by_ext[int(row.ext_string.split(":")[1])].append(row)
    lost = duplicates = retries = bad_retries = 0
    for n, kind in expected.items():
        chain = rows_by_ext[n]
        finished = chain and chain[-1].status in (Status.SUCCESS, Status.FAILED)
        if kind == "refuse":
            lost += 0 if finished and chain[-1].status == Status.FAILED else 1
            continue
        if not finished or chain[-1].status != Status.SUCCESS or successes[n] == 0:
            lost += 1
        duplicates += max(successes[n] - 1, 0)
        for failed, retry in zip(chain, chain[1:], strict=False):
            if failed.status != Status.FAILED:
                continue
            retries += 1
            step = LADDER[failed.retry_times]
            waited = retry.run_at - failed.modified.timestamp()
            # `modified` has whole seconds; the retry is due `step` after the failure.
            if (
                retry.retry_times != failed.retry_times + 1
                or not step - 1.5 <= waited <= step + 1.5
            ):
                bad_retries += 1
    return {"lost": lost, "duplicates": duplicates, "retries": retries, "bad_retries": bad_retries}


if __name__ == "__main__":
    sys.exit(main())
