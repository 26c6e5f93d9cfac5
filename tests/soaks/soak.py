"""The chaos soak: N jobs, M concurrent `delayq run --loop` runners, random faults, then a
check from the handlers' own log that nothing was lost and duplicates stayed within the kills.

    python -m tests.soaks.soak                      # N=20000, M=4, against MariaDB + Redis
    python -m tests.soaks.soak --jobs 300 --runners 3 --window 5
    python -m tests.soaks.soak --processes 2 --concurrency 8 --async-share 0.5 --redis-restarts

Faults, at random while the jobs fall due: kill -9 a runner (with --processes, one of its
children, or now and then the parent), FLUSHDB the Redis database, KILL the runners'
MariaDB connections, lock the table (LOCK TABLES ... WRITE) for longer than the lease, and
with --redis-restarts kill -9 and restart a private redis-server. The job mix has failing,
hanging and non-retryable handlers, plain or `async def`, recurring series, debounced keys
moved again and again, and hostile handlers (lone surrogates, BaseExceptions, forks, rows
with params nested too deep). Only 127.0.0.1 is ever contacted. Each kill -9 stops its victim
first and counts the handlers it had begun whose outcome is neither committed nor
journaled, and each stall the running jobs not journaled when it ends: the only calls that
may be repeated. At the end a fresh job in each queue must run within 30 s. Prints one
summary line and exits 0 only when nothing was lost, duplicates stayed within that bound,
every retry, series, debounced key and hostile job is as it must be, and no runner exited.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import urlparse

import delayq
from delayq.config import Settings
from delayq.store.table.model import Job, Status
from delayq.worker.retry import LADDER
from tests.conftest import mysql_connect
from tests.soaks import soak_mix
from tests.soaks.soak_faults import LEASE, Faults, Runners, choose_fault, inject_one, restart_exited
from tests.support.servers import PrivateRedis, free_port

ROOT = Path(__file__).resolve().parents[2]
HANDLERS = "tests.sample_handlers.soak"
TIMEOUT = 1.0  # seconds: the hanging handler's time limit


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    random.seed(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="delayq-soak-"))
    private = start_private_redis(args, workdir)
    log = workdir / "handlers.log"
    queue = prepare(args)
    started = time.monotonic()
    expected, start = enqueue(queue, args, str(log))
    extras = soak_mix.enqueue_extras(
        queue, args.jobs, start, args.window, args.async_share, args.database_url, str(log)
    )
    env = runner_env(args, workdir)
    runners = Runners([], lambda: start_runner(env), args.processes)
    runners.processes = [runners.start() for _ in range(args.runners)]
    faults = Faults()
    try:
        inject_faults(args, runners, faults, queue, private, extras)
        drain(args, runners, faults)
        queues, stuck = soak_mix.probe_queues(queue, str(log))
    finally:
        stop(runners)
        if private is not None and private.process is not None:
            private.kill()
    (workdir / "faults.log").write_text("".join(line + "\n" for line in faults.log))
    print(f"soak: faults, handlers' and runners' logs in {workdir}", file=sys.stderr)
    result = check(expected, log)
    series = soak_mix.check_series(extras, log)
    debounce = soak_mix.check_debounce(extras, log)
    hostile_ok = soak_mix.check_hostile(extras)
    lost = result["lost"] + series["lost"] + debounce["lost"]
    duplicates = result["duplicates"] + series["duplicates"] + debounce["duplicates"]
    crashes = runner_crashes(workdir / "runners.log")
    unexplained = unexplained_duplicates(log, faults.exposed_ids)
    # A kill -9 re-runs at most the calls it hit before their outcome was recorded; a stall
    # past the lease at most the jobs running, unjournaled, when it ended.
    allowed = faults.handlers_hit + faults.stall_exposed
    ok = (
        lost == 0
        and duplicates <= allowed
        and unexplained == 0
        and result["bad_retries"] == 0
        and series["series_ok"] == extras.series
        and debounce["debounce_ok"] == len(extras.versions)
        and extras.debounce_doubles == 0
        and hostile_ok == len(extras.hostile)
        and stuck == 0
        and crashes == 0
    )
    print(
        f"soak: jobs={len(expected)} runners={args.runners} processes={args.processes} "
        f"concurrency={args.concurrency} async_share={args.async_share} "
        f"kills={faults.kills} hit_kills={faults.hit_kills} "
        f"handlers_hit={faults.handlers_hit} parent_kills={faults.parent_kills} "
        f"flushes={faults.flushes} db_kills={faults.db_kills} stalls={faults.stalls} "
        f"stall_exposed={faults.stall_exposed} redis_restarts={faults.redis_restarts} "
        f"restarts={faults.restarts} runner_crashes={crashes} lost={lost} "
        f"duplicates={duplicates} unexplained_duplicates={unexplained} "
        f"retries_checked={result['retries']} bad_retries={result['bad_retries']} "
        f"series={extras.series} series_ok={series['series_ok']} "
        f"series_runs={series['series_runs']} debounced={len(extras.versions)} "
        f"debounce_ok={debounce['debounce_ok']} debounce_doubles={extras.debounce_doubles} "
        f"hostile={len(extras.hostile)} hostile_ok={hostile_ok} "
        f"queues={queues} stuck_queues={stuck} "
        f"elapsed={time.monotonic() - started:.0f}s {'OK' if ok else 'FAILED'}"
    )
    queue.close()
    return 0 if ok else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.soaks.soak", description=__doc__.split("\n")[0]
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
    parser.add_argument(
        "--redis-restarts",
        action="store_true",
        help="run a private redis-server on a free port (instead of --redis-url) and restart it",
    )
    args = parser.parse_args(argv)
    for url in (args.database_url, args.redis_url):
        if urlparse(url).hostname not in ("127.0.0.1", "localhost", "::1"):
            parser.error(f"the soak only talks to this machine, not {url}")
    return args


def start_private_redis(args: argparse.Namespace, workdir: Path) -> PrivateRedis | None:
    """With --redis-restarts, a redis-server of the soak's own, which it may kill."""
    if not args.redis_restarts:
        return None
    private = PrivateRedis(free_port(), workdir)
    private.start()
    args.redis_url = private.url
    return private


def prepare(args: argparse.Namespace) -> delayq.Queue:
    parts = urlparse(args.database_url)
    conn = mysql_connect(args.database_url.rsplit("/", 1)[0] + "/")  # the server, no database
    with conn.cursor() as cursor:
        name = parts.path.lstrip("/")
        cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
        cursor.execute(f"DROP TABLE IF EXISTS `{name}`.delay_queue")
    conn.close()
    settings = Settings(
        database_url=args.database_url,
        redis_url=args.redis_url,
        handlers=(HANDLERS, soak_mix.HOSTILE),
    )
    queue = delayq.connect(settings)
    queue.index.client.flushdb()  # on a Cluster, every master's
    queue.init()
    Job.bind(queue.db)  # the soak reads rows through the unbound model, on this database
    return queue


def enqueue(
    queue: delayq.Queue, args: argparse.Namespace, log: str
) -> tuple[dict[int, str], float]:
    """Add the job mix, due over the window starting in two seconds; returns {n: kind} and
    the window's start."""
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
    return expected, start


def runner_env(args: argparse.Namespace, workdir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env.update(
        DELAYQ_DATABASE_URL=args.database_url,
        DELAYQ_REDIS_URL=args.redis_url,
        DELAYQ_HANDLERS=f"{HANDLERS},{soak_mix.HOSTILE}",
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
    runners: Runners,
    faults: Faults,
    queue: delayq.Queue,
    private: PrivateRedis | None,
    extras: soak_mix.Extras,
) -> None:
    """Random faults every 0.5-2 s until the last job has fallen due; debounced keys are
    moved between them."""
    until = time.monotonic() + 2 + args.window
    log = Path(extras.log)
    while time.monotonic() < until:
        time.sleep(random.uniform(0.5, 2.0))
        restart_exited(runners, faults)
        fault = choose_fault(args.processes, private, faults)
        inject_one(fault, runners, faults, queue, args.database_url, private, log)
        soak_mix.bounce_some(queue, extras)


def drain(args: argparse.Namespace, runners: Runners, faults: Faults) -> None:
    """Let the runners finish every chain (retries included) without further faults."""
    deadline = time.monotonic() + args.max_seconds
    while time.monotonic() < deadline:
        restart_exited(runners, faults)
        if soak_mix.still_open() == 0:
            return
        time.sleep(1.0)


def stop(runners: Runners) -> None:
    for runner in runners.processes:
        runner.send_signal(signal.SIGTERM)
    for runner in runners.processes:
        runner.wait(timeout=60)


def unexplained_duplicates(log: Path, exposed_ids: set[int]) -> int:
    """Second calls of a row (by its handler's log) that no kill or stall had exposed: a
    run that did not die, and was not stalled, ran a job that had already run."""
    calls: Counter[int] = Counter()
    for line in log.read_text().splitlines() if log.exists() else []:
        parts = line.split()
        if len(parts) == 6 and parts[0] in ("ok", "refused", "tick", "bounce", "probe"):
            calls[int(parts[4])] += 1
    return sum(count - 1 for job_id, count in calls.items() if job_id not in exposed_ids)


def runner_crashes(runners_log: Path) -> int:
    """Runners that stopped for a reason other than the soak's kill -9 or a documented exit
    (`_documented_exit`: the hanging jobs leave all threads stuck; a Redis restart can meet
    a runner starting): a traceback, any other error line, a child dying with another
    code, or killed silent."""
    text = runners_log.read_text(errors="replace") if runners_log.exists() else ""
    errors = re.findall(r"^delayq: error: (.*)$", text, re.MULTILINE)
    codes = re.findall(r"runner process \d+ died \(exit (-?\d+)\)", text)
    return (
        text.count("Traceback (most recent call last)")
        + sum(not _documented_exit(error) for error in errors)
        + sum(code not in ("-9", "1") for code in codes)
        + text.count("made no progress")
    )


def _documented_exit(error: str) -> bool:
    """A runner's own exit the README documents: all its handler threads stuck, or, for a
    runner that starts while a restarted Redis is not yet back, that server unreachable at
    start (exit 1; its parent or cron starts another)."""
    return "handler threads are stuck" in error or (
        error.startswith("Redis error:") and "Connection refused" in error
    )


def check(expected: dict[int, str], log: Path) -> dict[str, int]:
    """Compare the handlers' log and the table with what each job of the plain mix should
    have done."""
    successes: Counter[int] = Counter()
    for line in log.read_text().splitlines() if log.exists() else []:
        parts = line.split()
        if len(parts) == 6 and parts[0] == "ok":
            successes[int(parts[1])] += 1
    rows_by_ext: dict[int, list[Job]] = defaultdict(list)
    for row in Job.select().where(Job.ext_string.startswith("soak:")).order_by(Job.id):
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
