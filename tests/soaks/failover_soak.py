"""The failover soak (issue 22): N jobs over four queues, `delayq run --loop -c 8 -p 2` on two
"hosts" (two homes on this machine), a producer adding throughout, while the Redis under
them fails over again and again, on servers it starts from redis-server on 127.0.0.1 ports.

    python -m tests.soaks.failover_soak --topology sentinel      # 20 000 jobs
    python -m tests.soaks.failover_soak --topology cluster --jobs 300 --window 30

Sentinel (a primary, two replicas, three sentinels, down-after 1 s): SENTINEL FAILOVER,
kill -9 of the primary (started again as a replica), SIGSTOP of the primary past down-after
(then SIGCONT: it acknowledges what its clients sent meanwhile until it is demoted, and that
is rolled back). Cluster (three masters, a replica each): CLUSTER FAILOVER and kill -9 of the
master of one queue's keys. Checks as tests/soaks/soak.py does, from the handlers' own log: nothing
lost, no job run twice (nothing here kills a runner, so every second call is unexplained),
every id the producer got ran, no row for an add that failed, no runner exited, each queue
still moving at the end. For each failover, the time from the promotion (the first
+switch-master a sentinel published; the replica answering ROLE as a master) to the next job
any runner started, and to the next job of each runner process that was running jobs before
it: the p99 of the latter must be within the failure detection time (down-after,
cluster-node-timeout) + 3 s. Prints one summary line; exits 0 only when all of it holds.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import redis

import delayq
from delayq.config import Settings
from delayq.store.index.keys import schedule_key
from delayq.store.table.model import Job, Status
from tests.soaks import soak, soak_mix
from tests.soaks.soak import HANDLERS
from tests.support.clusters import NODE_TIMEOUT_MS, Cluster
from tests.support.sentinels import DOWN_AFTER_MS, SentinelGroup
from tests.support.waiting import wait_for

QUEUES = ("default", "mail", "billing", "reports")
HOSTS = ("host-a", "host-b")
KINDS = ["ok"] * 95 + ["fail_once"] * 3 + ["refuse"] * 2
BEFORE = 10.0  # seconds: a runner that began a job this long before a fault must begin another


@dataclass
class Failover:
    kind: str
    started_at: float
    promoted_at: float | None = None


class Topology(Protocol):
    url: str
    kinds: tuple[str, ...]
    detection: float  # seconds: how long a dead primary goes unnoticed

    def start(self) -> None: ...
    def inject(self, kind: str, queue: str) -> Failover: ...
    def stop(self) -> None: ...


class SentinelFaults:
    """A Sentinel group with two replicas, and its three faults. The promotion is the first
    +switch-master a sentinel announces."""

    kinds = ("sentinel-failover", "kill-9-primary", "sigstop-primary")
    detection = DOWN_AFTER_MS / 1000

    def __init__(self, workdir: Path) -> None:
        self.group = SentinelGroup(workdir, replicas=2)
        self.url = self.group.url
        self.switches: list[float] = []
        self.stopping = threading.Event()

    def start(self) -> None:
        self.group.start()
        for port in self.group.sentinel_ports:
            threading.Thread(target=self._listen, args=(port,), daemon=True).start()

    def _listen(self, port: int) -> None:
        pubsub = self.group.client(port).pubsub()
        pubsub.subscribe("+switch-master")
        while not self.stopping.is_set():
            with contextlib.suppress(redis.RedisError):
                message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
                if message is not None:
                    self.switches.append(time.time())

    def inject(self, kind: str, queue: str) -> Failover:
        failover = Failover(kind, time.time())
        old = self.group.primary_port()
        if kind == "sentinel-failover":
            self.group.fail_over()
        elif kind == "kill-9-primary":
            self.group.kill_primary()
            self.group.restart(old)
        else:
            process = self.group.processes[old]
            process.send_signal(signal.SIGSTOP)
            self.group.wait_for_new_primary(old)
            time.sleep(1.0)  # still stopped after the promotion, as a primary cut off is
            process.send_signal(signal.SIGCONT)
            self.group.wait_in_sync(old)
        failover.promoted_at = min(
            (at for at in self.switches if at > failover.started_at), default=None
        )
        return failover

    def stop(self) -> None:
        self.stopping.set()
        self.group.stop()


class ClusterFaults:
    """A 6-node Cluster and its two faults, each on the master of one queue's keys. The
    promotion is when its replica first answers ROLE as a master."""

    kinds = ("cluster-failover", "kill-9-master")
    detection = NODE_TIMEOUT_MS / 1000

    def __init__(self, workdir: Path) -> None:
        self.cluster = Cluster(workdir)
        self.url = self.cluster.url

    def start(self) -> None:
        self.cluster.start()

    def inject(self, kind: str, queue: str) -> Failover:
        failover = Failover(kind, time.time())
        old = self.cluster.master_of(schedule_key(queue))
        replica = self.cluster.client(self.cluster.replica_of(old))
        if kind == "cluster-failover":
            replica.execute_command("CLUSTER", "FAILOVER")
        else:
            self.cluster.kill_master_now(schedule_key(queue))
        wait_for(lambda: _is_master(replica), 30, f"the replica of node {old} to take over")
        failover.promoted_at = time.time()
        replica.close()
        if kind == "kill-9-master":
            self.cluster.restart(old)
        else:
            wait_for(self.cluster.settled, 30, "the cluster to settle after the failover")
        return failover

    def stop(self) -> None:
        self.cluster.stop()


def _is_master(client: redis.Redis) -> bool:
    with contextlib.suppress(redis.RedisError):
        return bool(client.execute_command("ROLE")[0] == b"master")
    return False


@dataclass
class Producer:
    """Adds one job about every 50 ms on a queue of its own, noting each id it got and each
    error it saw, until told to stop."""

    queue: delayq.Queue
    log: str
    first: int  # its jobs' n count up from here, after the initial ones
    got: dict[int, int] = field(default_factory=dict)  # n -> id
    errors: dict[int, str] = field(default_factory=dict)  # n -> message
    stopping: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        n = self.first
        while not self.stopping.wait(0.05):
            try:
                job_id = self.queue.add(
                    HANDLERS,
                    random.choice(["ok", "ok_async"]),
                    {"log": self.log, "n": n},
                    at=time.time() + random.uniform(0, 1),
                    ext=f"soak:{n}",
                    queue=random.choice(QUEUES),
                )
            except delayq.BackendUnavailable as exc:
                self.errors[n] = str(exc)
            else:
                self.got[n] = job_id
            n += 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    random.seed(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix=f"delayq-failover-{args.topology}-"))
    topology: Topology = (
        SentinelFaults(workdir) if args.topology == "sentinel" else ClusterFaults(workdir)
    )
    try:
        topology.start()
        args.redis_url = topology.url
        return soak_through_failovers(args, topology, workdir)
    finally:
        topology.stop()
        print(f"failover soak: servers', handlers' and runners' logs in {workdir}", file=sys.stderr)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.soaks.failover_soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--topology", choices=("sentinel", "cluster"), required=True)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--window", type=float, default=180.0, help="seconds the due times span")
    parser.add_argument("--every", type=float, default=12.0, help="seconds between failovers")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="give up after this")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--faults", default="", help="comma-separated kinds to inject, in turn (default: all)"
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get(
            "DELAYQ_TEST_MARIADB_URL", "mysql://root@127.0.0.1:3306/delayq_soak"
        ),
    )
    args = parser.parse_args(argv)
    # What tests.soaks.soak's runners are given, fixed here: -c 8 -p 2, half the handlers async.
    args.concurrency, args.processes, args.async_share = 8, 2, 0.5
    soak.parse_args(["--database-url", args.database_url])  # refuses a server elsewhere
    return args


def soak_through_failovers(args: argparse.Namespace, topology: Topology, workdir: Path) -> int:
    started = time.monotonic()
    log = workdir / "handlers.log"
    queue = soak.prepare(args)
    expected = enqueue(queue, args, str(log))
    producer = Producer(open_queue(args), str(log), first=args.jobs)
    runners = {host: start_runner(args, workdir / host) for host in HOSTS}
    threading.Thread(target=producer.run, daemon=True).start()
    try:
        failovers, restarts = fail_over_throughout(args, topology, runners, workdir)
        producer.stopping.set()
        restarts += drain(args, runners, workdir)
        queues, stuck = soak_mix.probe_queues(queue, str(log))
    finally:
        producer.stopping.set()
        for runner in runners.values():
            runner.send_signal(signal.SIGTERM)
        for runner in runners.values():
            runner.wait(timeout=60)
    expected.update(dict.fromkeys(producer.got, "ok"))
    result = soak.check(expected, log)
    recovery = recovery_times(failovers, log)
    crashes = sum(soak.runner_crashes(workdir / host / "runners.log") for host in HOSTS)
    unexplained = soak.unexplained_duplicates(log, set())
    unrun = producer_ids_not_run(producer, log)
    written = rows_for_errors(producer)
    target = topology.detection + 3
    report_producer_errors(producer)
    report_failovers(failovers, recovery)
    p50, p99 = percentiles(recovery.next_job)
    runner_p50, runner_p99 = percentiles(recovery.each_runner)
    ok = (
        result["lost"] == 0
        and result["duplicates"] == 0
        and unexplained == 0
        and unrun == 0
        and written == 0
        and crashes == 0
        and restarts == 0
        and stuck == 0
        and recovery.unmeasured == 0
        and runner_p99 <= target
    )
    kinds = Counter(failover.kind for failover in failovers)
    print(
        f"failover-soak: topology={args.topology} jobs={args.jobs} "
        f"produced={len(producer.got)} producer_errors={len(producer.errors)} "
        f"errors_written={written} producer_ids_not_run={unrun} failovers={len(failovers)} "
        + " ".join(f"{kind}={count}" for kind, count in sorted(kinds.items()))
        + f" lost={result['lost']} duplicates={result['duplicates']} "
        f"unexplained_duplicates={unexplained} retries_checked={result['retries']} "
        f"bad_retries={result['bad_retries']} runner_crashes={crashes} restarts={restarts} "
        f"queues={queues} stuck_queues={stuck} next_job_p50={p50:.2f}s "
        f"next_job_p99={p99:.2f}s each_runner_p50={runner_p50:.2f}s "
        f"each_runner_p99={runner_p99:.2f}s unmeasured={recovery.unmeasured} "
        f"target={target:.0f}s elapsed={time.monotonic() - started:.0f}s "
        f"{'OK' if ok else 'FAILED'}"
    )
    producer.queue.close()
    queue.close()
    return 0 if ok else 1


def fail_over_throughout(
    args: argparse.Namespace,
    topology: Topology,
    runners: dict[str, subprocess.Popen[bytes]],
    workdir: Path,
) -> tuple[list[Failover], int]:
    """A failover every `--every` seconds (after the last settled), the kinds in turn, each on
    the next queue's keys, while the window lasts; the failovers, and how many runners had
    to be started again."""
    kinds = args.faults.split(",") if args.faults else topology.kinds
    failovers: list[Failover] = []
    restarts = 0
    until = time.monotonic() + args.window
    while time.monotonic() + args.every <= until:
        time.sleep(args.every)
        restarts += restart_exited(args, runners, workdir)
        turn = len(failovers)
        failovers.append(topology.inject(kinds[turn % len(kinds)], QUEUES[turn % len(QUEUES)]))
    return failovers, restarts


def open_queue(args: argparse.Namespace) -> delayq.Queue:
    settings = Settings(
        database_url=args.database_url, redis_url=args.redis_url, handlers=(HANDLERS,)
    )
    return delayq.connect(settings)


def enqueue(queue: delayq.Queue, args: argparse.Namespace, log: str) -> dict[int, str]:
    """The initial jobs, due over the window from two seconds on, over the four queues, half
    of them `async def`; returns {n: kind}."""
    start = time.time() + 2
    expected: dict[int, str] = {}
    specs = []
    for n in range(args.jobs):
        expected[n] = kind = random.choice(KINDS)
        method = f"{kind}_async" if random.random() < args.async_share else kind
        at = start + random.uniform(0, args.window)
        data = {"log": log, "n": n}
        specs.append(
            delayq.JobSpec(HANDLERS, method, data, at=at, ext=f"soak:{n}", queue=QUEUES[n % 4])
        )
    for chunk in range(0, len(specs), 5000):
        queue.add_many(specs[chunk : chunk + 5000])
    return expected


def start_runner(args: argparse.Namespace, home: Path) -> subprocess.Popen[bytes]:
    """`delayq run --loop -c 8 -p 2` with its own home, as on a host of its own, with the
    default lease; its log lines go to runners.log there."""
    home.mkdir(exist_ok=True)
    env = soak.runner_env(args, home)
    del env["DELAYQ_LEASE"]
    return soak.start_runner(env)


def restart_exited(
    args: argparse.Namespace, runners: dict[str, subprocess.Popen[bytes]], workdir: Path
) -> int:
    """Start again a runner that exited (a failure of the soak); how many."""
    exited = [host for host, runner in runners.items() if runner.poll() is not None]
    for host in exited:
        print(f"failover soak: the runner of {host} exited", file=sys.stderr)
        runners[host] = start_runner(args, workdir / host)
    return len(exited)


def drain(
    args: argparse.Namespace, runners: dict[str, subprocess.Popen[bytes]], workdir: Path
) -> int:
    """Wait for every job (retries included) to finish; how many runners had to be
    started again meanwhile."""
    restarts = 0
    deadline = time.monotonic() + args.max_seconds
    while time.monotonic() < deadline and soak_mix.still_open() > 0:
        restarts += restart_exited(args, runners, workdir)
        time.sleep(1.0)
    return restarts


def starts(log: Path) -> list[tuple[float, int]]:
    """(time, pid) of every handler call, by the handlers' log, in time order."""
    calls = []
    for line in log.read_text().splitlines() if log.exists() else []:
        parts = line.split()
        if len(parts) == 6:
            calls.append((float(parts[5]), int(parts[3])))
    return sorted(calls)


@dataclass
class Recovery:
    """Seconds from each promotion to the next job any runner process started (next_job), and
    to the next each process started that had started one in the BEFORE seconds before the
    fault (each_runner, also by failover); unmeasured: promotions not seen and processes
    that never started another job."""

    next_job: list[float] = field(default_factory=list)
    each_runner: list[float] = field(default_factory=list)
    by_failover: list[list[float]] = field(default_factory=list)
    unmeasured: int = 0


def recovery_times(failovers: list[Failover], log: Path) -> Recovery:
    calls = starts(log)
    recovery = Recovery()
    for failover in failovers:
        promoted = failover.promoted_at
        if promoted is None:
            recovery.unmeasured += 1
            continue
        before = {
            pid for at, pid in calls if failover.started_at - BEFORE <= at < failover.started_at
        }
        after: dict[int, float] = {}
        for at, pid in calls:
            if at >= promoted and pid not in after:
                after[pid] = at - promoted
        recovery.next_job.append(min(after.values(), default=float("inf")))
        recovery.by_failover.append([after[pid] for pid in sorted(before & set(after))])
        recovery.each_runner += recovery.by_failover[-1]
        recovery.unmeasured += len(before - set(after))
    return recovery


def percentiles(values: list[float]) -> tuple[float, float]:
    """p50 and p99 (nearest rank) of `values`; zeros for none."""
    if not values:
        return 0.0, 0.0
    ordered = sorted(values)
    p50, p99 = (max(0, math.ceil(share * len(ordered)) - 1) for share in (0.5, 0.99))
    return ordered[p50], ordered[p99]


def producer_ids_not_run(producer: Producer, log: Path) -> int:
    """Ids the producer was given whose row did not succeed or whose handler never ran."""
    ran = {
        int(line.split()[4])
        for line in (log.read_text().splitlines() if log.exists() else [])
        if line.startswith("ok ")
    }
    ids = list(producer.got.values())
    succeeded = (
        {row.id for row in Job.select(Job.id).where(Job.id.in_(ids), Job.status == Status.SUCCESS)}
        if ids
        else set()
    )
    return sum(job_id not in ran or job_id not in succeeded for job_id in ids)


def rows_for_errors(producer: Producer) -> int:
    """Rows written for adds that raised: there must be none."""
    exts = [f"soak:{n}" for n in producer.errors]
    return Job.select().where(Job.ext_string.in_(exts)).count() if exts else 0


def report_producer_errors(producer: Producer) -> None:
    for message, count in Counter(producer.errors.values()).most_common():
        print(f"failover soak: the producer saw {count}x: {message}", file=sys.stderr)


def report_failovers(failovers: list[Failover], recovery: Recovery) -> None:
    for failover, each in zip(failovers, recovery.by_failover, strict=False):
        promoted = failover.promoted_at or 0.0
        print(
            f"failover soak: {failover.kind} at {failover.started_at:.3f}, promoted "
            f"{promoted - failover.started_at:.2f}s later; each runner's next job after "
            + " ".join(f"{seconds:.2f}s" for seconds in each),
            file=sys.stderr,
        )


if __name__ == "__main__":
    sys.exit(main())
