"""The derived-state soak: what users run, while the Redis beside the table loses what it
holds again and again. Long-lived producers add throughout to eight named queues, three
`delayq run --loop -c 4` runners serve them, and every 20-40 s the Redis under them is
flushed, restarted empty or failed over; nothing may be lost, run twice or early, and every
due job must start within the bound the docs give for its queue.

    python -m tests.soaks.derived_soak                  # the default horizon (1 h), 10 minutes
    python -m tests.soaks.derived_soak --horizon 10m --window 900
    python -m tests.soaks.derived_soak --window 90 --every 15:25     # short, as CI runs it

Options: --window S (the span of the near jobs' due times: the producers add until 120 s,
or half the window if shorter, before its end, each near job due 1 s to that after its add;
faults go on until it ends, then the soak drains, probes each queue and checks), --horizon D
(DELAYQ_HORIZON of producers and runners, 1h by default), --every MIN:MAX (seconds between
faults, 20:40), --faults K,... (kinds to draw from), --runners N (3), --concurrency N (4),
--seed N, --max-seconds S (the longest the drain may take, 300), --stale-age S (the age of
the snapshot `restart-stale` restarts from, 30), --database-url URL (default:
DELAYQ_TEST_MARIADB_URL's server, database `delayq_dsoak`; the soak drops and creates it, so
its name must contain `dsoak`).

Redis is a Sentinel group the soak starts on free 127.0.0.1 ports (tests/support/sentinels.py: a
primary, two replicas, three sentinels, down-after 1 s, no persistence), reached by runners
and producers through its redis+sentinel:// URL. The faults (tests/soaks/derived_faults.py), each
kind once in random order, then drawn at random:
- `flushall`: FLUSHALL on the primary; the replicas apply it too: all derived state gone.
- `restart-empty`: kill -9 the primary and start it again at once on its port with nothing
  (no persistence; the snapshot a former replica keeps from its last full sync is deleted
  first, or it would load it), before the sentinels find it down (down-after 1 s), so no
  failover: its replicas reconnect, find a new replication id, resync in full and are
  emptied too. Had the sentinels promoted a replica meanwhile, the fault's line says so.
- `sentinel-failover`: SENTINEL FAILOVER; the old primary takes its clients' writes until it
  is demoted, and loses them as it resyncs.
- `restart-stale`, drawn only when --faults names it: BGSAVE on the primary, then
  --stale-age s on kill -9 it and start it again from that snapshot, as a Redis that saves
  snapshots now and then comes back from a crash: it holds entries, claims and grants that
  old.
After each fault the soak waits until both replicas are in sync with the primary.

Producers (tests/soaks/derived_producers.py): eight long-lived threads, one per queue, adding
from one delayq.Queue each (or a PyMySQL connection, or SQL and a Sentinel client), 8 % of
most queues' jobs due the horizon plus 1-5 minutes ahead (walked onto the schedule when the
horizon reaches them), the others 1-120 s ahead. The `rated` queue is limited to 5 starts a
second before the soak starts. Handlers log their start and end (tests/sample_handlers/derived.py).

Checks (tests/soaks/derived_checks.py, which states each bound and where in the docs it comes
from): every row an add returned, committed or INSERTed exists; every row due more than the
base bound before the end succeeded and its handler ran exactly once (no runner is killed, so
any second call is unexplained); none started before its due time (tolerance 10 ms: one host's
clock, logged to the millisecond); no job of a rolled-back transaction, no add that raised,
no replaced-away version ran or has a row; every start within its bound. Prints lateness
p50/p99/max per kind of queue, the faults, and one summary line (with the most starts of
`rated` in a second and the longest it started nothing while a job of it due waited); exits
0 only when every check holds, no runner exited and no producer died.
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
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from peewee import fn

import delayq
from delayq.base.durations import parse_duration
from delayq.config import Settings
from delayq.store.table.model import Job, Status
from tests.conftest import mysql_connect
from tests.soaks import derived_checks
from tests.soaks.derived_faults import KINDS, STALE, Fault, describe, inject
from tests.soaks.derived_producers import HANDLER, NEAR, QUEUES, RATE, Ledger, Plan, Producers
from tests.soaks.soak import runner_crashes
from tests.support.sentinels import SentinelGroup

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    random.seed(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="delayq-dsoak-"))
    group = SentinelGroup(workdir, replicas=2)
    try:
        group.start()
        return soak(args, group, workdir)
    finally:
        group.stop()
        print(f"derived soak: servers', handlers' and runners' logs in {workdir}", file=sys.stderr)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.soaks.derived_soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--window", type=float, default=600.0, help="seconds jobs fall due")
    parser.add_argument("--horizon", default="1h", help="DELAYQ_HORIZON (1h, 10m, ...)")
    parser.add_argument("--every", default="20:40", help="MIN:MAX seconds between faults")
    parser.add_argument("--faults", default=",".join(KINDS), help="kinds to draw from")
    parser.add_argument("--runners", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-seconds", type=float, default=300.0, help="the drain's limit")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stale-age", type=float, default=30.0, help="restart-stale's snapshot")
    server = os.environ.get("DELAYQ_TEST_MARIADB_URL", "mysql://root@127.0.0.1:3306/delayq_test")
    parser.add_argument("--database-url", default=server.rsplit("/", 1)[0] + "/delayq_dsoak")
    args = parser.parse_args(argv)
    parts = urlparse(args.database_url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        parser.error(f"the soak only talks to this machine, not {args.database_url}")
    if "dsoak" not in parts.path:
        parser.error("the soak drops its database: give one whose name contains 'dsoak'")
    args.horizon_seconds = parse_duration(args.horizon, "--horizon")
    low, high = (float(part) for part in args.every.split(":"))
    args.gaps = (low, high)
    args.kinds = [kind for kind in args.faults.split(",") if kind]
    if not set(args.kinds) <= {*KINDS, STALE}:
        parser.error(f"--faults takes {', '.join([*KINDS, STALE])}")
    return args


def soak(args: argparse.Namespace, group: SentinelGroup, workdir: Path) -> int:
    started = time.monotonic()
    log = workdir / "handlers.log"
    settings = Settings(
        database_url=args.database_url,
        redis_url=group.url,
        handlers=(HANDLER[0],),
        horizon=args.horizon_seconds,
    )
    queue = prepare(args, settings)
    near = min(NEAR, args.window / 2)
    plan = Plan(time.time() + args.window, near, args.horizon_seconds, str(log))
    ledger = Ledger()
    sentinels = [("127.0.0.1", port) for port in group.sentinel_ports]
    producers = Producers(plan, ledger, settings, args.database_url, sentinels)
    runners = Runners(args, group.url, workdir)
    runners.start()
    producers.start()
    try:
        faults = inject_faults(args, group, plan, runners)
        producers.stop()
        drained = drain(args, plan, runners)
        stuck_probes = probe(queue, plan)
    finally:
        producers.stop()
        runners.stop()
    result = derived_checks.check(log, ledger, plan.far, time.time())
    report(result, faults, ledger, workdir)
    dead = [error for error in ledger.errors if " died:" in error]
    crashes = runners.crashes()
    ok = result.ok and not (runners.exits or crashes or dead or stuck_probes) and drained
    outcome = (
        f"producers_died={len(dead)} runner_exits={len(runners.exits)} runner_crashes={crashes} "
        f"drained={int(drained)} stuck_probes={stuck_probes}"
    )
    print(summary(args, plan, faults, ledger, result, outcome, time.monotonic() - started, ok))
    queue.close()
    return 0 if ok else 1


def summary(
    args: argparse.Namespace,
    plan: Plan,
    faults: list[Fault],
    ledger: Ledger,
    result: derived_checks.Result,
    outcome: str,
    elapsed: float,
    ok: bool,
) -> str:
    """The one line the soak ends with: its figures, its checks and OK or FAILED."""
    kinds = Counter(fault.kind for fault in faults)
    late = []
    for kind, values in sorted(result.lateness.items()):
        _, p99, most = derived_checks.percentiles(values)
        late.append(f"{kind}_p99={p99:.1f}s/max={most:.1f}s")
    return (
        f"derived-soak: horizon={args.horizon_seconds:.0f}s window={args.window:.0f}s "
        f"jobs={Job.select().count()} checked={result.checked} beyond={result.beyond} "
        f"far={len(plan.far)} far_ran={len(result.lateness.get('far', []))} "
        f"faults={len(faults)} "
        + " ".join(f"{kind}={kinds[kind]}" for kind in (*KINDS, STALE))
        + f" lost={len(result.lost)} twice={len(result.twice)} early={len(result.early)} "
        f"too_late={len(result.too_late)} bad={len(result.bad)} "
        f"rolled_back={len(ledger.rolled_back)} replaces={len(ledger.replaces)} "
        f"failed_adds={len(ledger.failed)} "
        f"zadds_failed={ledger.zadds_failed} producer_errors={sum(ledger.errors.values())} "
        f"rated_most_in_1s={result.rate_most} rated_longest_pause={result.rate_pause:.1f}s "
        f"{outcome} {' '.join(late)} "
        f"elapsed={elapsed:.0f}s {'OK' if ok else 'FAILED'}"
    )


def prepare(args: argparse.Namespace, settings: Settings) -> delayq.Queue:
    """A fresh database, the table, the `rated` queue's limit and the application's table of
    orders the `txn` producer writes beside its jobs."""
    name = urlparse(args.database_url).path.lstrip("/")
    conn = mysql_connect(args.database_url.rsplit("/", 1)[0] + "/")
    with conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cursor.execute(f"CREATE DATABASE `{name}`")
        cursor.execute(
            f"CREATE TABLE `{name}`.dsoak_orders (id INT AUTO_INCREMENT PRIMARY KEY, note TEXT)"
        )
    conn.close()
    queue = delayq.connect(settings)
    queue.init()
    queue.limit("rated", rate=f"{RATE}/s")
    Job.bind(queue.db)  # the soak reads rows through the unbound model, on this database
    return queue


@dataclass
class Runners:
    """The soak's `delayq run --loop -c N` processes, each with a home of its own as on a host
    of its own (its log lines in runners.log there); `exits` notes each that exited."""

    args: argparse.Namespace
    url: str
    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    exits: list[str] = field(default_factory=list)

    def start(self) -> None:
        self.processes = [self._start(n) for n in range(self.args.runners)]

    def _start(self, n: int) -> subprocess.Popen[bytes]:
        home = self.home(n)
        home.mkdir(exist_ok=True)
        env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
        env.update(
            DELAYQ_DATABASE_URL=self.args.database_url,
            DELAYQ_REDIS_URL=self.url,
            DELAYQ_HANDLERS=HANDLER[0],
            DELAYQ_HOME=str(home),
            DELAYQ_HORIZON=self.args.horizon,
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        )
        command = [sys.executable, "-m", "delayq", "run", "--loop"]
        command += ["-c", str(self.args.concurrency)]
        with open(home / "runners.log", "ab") as runners_log:
            return subprocess.Popen(
                command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=runners_log
            )

    def home(self, n: int) -> Path:
        return self.workdir / f"runner-{n}"

    def restart_exited(self) -> None:
        """Start again a runner that exited: the soak's failure, noted in `exits`."""
        for n, runner in enumerate(self.processes):
            if runner.poll() is not None:
                self.exits.append(
                    f"runner-{n} (pid {runner.pid}) exited {runner.returncode} at {time.time():.3f}"
                )
                print(f"derived soak: {self.exits[-1]}", file=sys.stderr)
                self.processes[n] = self._start(n)

    def crashes(self) -> int:
        return sum(runner_crashes(self.home(n) / "runners.log") for n in range(self.args.runners))

    def stop(self) -> None:
        for runner in self.processes:
            if runner.poll() is None:
                runner.send_signal(signal.SIGTERM)
        for runner in self.processes:
            try:
                runner.wait(timeout=60)
            except subprocess.TimeoutExpired:
                runner.kill()
                runner.wait()


def inject_faults(
    args: argparse.Namespace, group: SentinelGroup, plan: Plan, runners: Runners
) -> list[Fault]:
    """A fault every MIN-MAX s until the last near job is due: each kind once in random
    order, then drawn at random."""
    deck = random.sample(args.kinds, len(args.kinds))
    faults: list[Fault] = []
    while True:
        next_at = time.time() + random.uniform(*args.gaps)
        while time.time() < min(next_at, plan.end):
            runners.restart_exited()
            time.sleep(0.5)
        if time.time() >= plan.end:
            return faults
        kind = deck.pop() if deck else random.choice(args.kinds)
        faults.append(inject(group, kind, args.stale_age))
        print(f"derived soak: {describe(faults[-1])}", file=sys.stderr)


def drain(args: argparse.Namespace, plan: Plan, runners: Runners) -> bool:
    """Wait until every job due by the window's end has finished; whether they did in time."""
    deadline = time.monotonic() + args.max_seconds
    while time.monotonic() < deadline:
        runners.restart_exited()
        open_rows = Job.select().where(
            Job.status.in_([Status.PENDING, Status.RUNNING]), Job.run_at <= plan.end
        )
        if open_rows.count() == 0:
            return True
        time.sleep(1.0)
    return False


def probe(queue: delayq.Queue, plan: Plan) -> int:
    """A fresh job on each queue, due now; how many did not succeed within the base bound."""
    ids = {
        queue.add(*HANDLER, plan.data(f"probe:{name}"), ext=f"probe:{name}", queue=name)
        for name in QUEUES
    }
    deadline = time.monotonic() + derived_checks.BASE
    while ids and time.monotonic() < deadline:
        time.sleep(0.5)
        done = Job.select(Job.id).where(Job.id.in_(ids), Job.status == Status.SUCCESS)
        ids -= {row.id for row in done}
    return len(ids)


def report(
    result: derived_checks.Result, faults: list[Fault], ledger: Ledger, workdir: Path
) -> None:
    """Faults, failures, producers' errors and lateness per kind, on stderr and in files."""
    (workdir / "faults.log").write_text("".join(describe(fault) + "\n" for fault in faults))
    for title, lines in (
        ("lost", result.lost),
        ("run twice", result.twice),
        ("early", result.early),
        ("too late", result.too_late),
        ("bad", result.bad),
    ):
        for line in lines[:50]:
            print(f"derived soak: {title}: {line}", file=sys.stderr)
    per_queue = Job.select(Job.queue, fn.COUNT(Job.id).alias("rows")).group_by(Job.queue)
    print(
        "derived soak: rows per queue: "
        + ", ".join(f"{row.queue} {row.rows}" for row in per_queue.order_by(Job.queue)),
        file=sys.stderr,
    )
    for message, count in ledger.errors.most_common(20):
        print(f"derived soak: producer error {count}x: {message}", file=sys.stderr)
    for kind, values in sorted(result.lateness.items()):
        p50, p99, most = derived_checks.percentiles(values)
        print(
            f"derived soak: lateness {kind}: {len(values)} jobs, p50 {p50:.2f}s p99 {p99:.2f}s "
            f"max {most:.2f}s, {result.noted_late[kind]} over {derived_checks.NOTED_LATE:.0f}s",
            file=sys.stderr,
        )


if __name__ == "__main__":
    sys.exit(main())
