"""Runners on three hosts (network namespaces, tests/support/netns.py) share a MariaDB database
and a Redis. Mid-run one host is cut off from Redis only, a second from MySQL only, the third from
both, each while one of its handlers runs, for longer than a lease. While cut off a host
starts nothing it had not claimed before; the jobs it held are taken over after their
leases; once restored it claims again by itself, never having exited; nothing is lost, and
only a job whose handler was running at the cut may run twice (docs/guarantees.md).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import delayq
from delayq.config import Settings
from delayq.store.table.model import Job, Status
from delayq.worker.looping import SWEEP_EVERY
from tests.conftest import DELAYQ, HANDLERS, IN_CI, ROOT, STARTED, mysql_connect
from tests.sample_handlers.jobs import read_log
from tests.support import netns
from tests.support.servers import Proxy
from tests.support.waiting import wait_for

LEASE = 3  # seconds: short, so a cut-off host's jobs are taken over within seconds
MIN_CUT = LEASE + 3  # seconds a cut lasts at least
# A cut that leaves jobs in the host's hands lasts until they are taken over: the lease,
# then the next sweep of another runner, with room for a loaded machine.
TAKEOVER_WITHIN = LEASE + SWEEP_EVERY + 15
RECOVERY_WITHIN = 45  # seconds from the restore to the host's next start
JOBS = 240
WINDOW = 80.0  # seconds the due times span: past the three cuts and their recoveries
SECONDS = 0.4  # each handler's run
CUTS = ("redis", "mysql", "both")


@dataclass
class Cut:
    host: str
    what: str
    at: float  # epoch seconds, just before the rule went in
    running: set[int]  # n of the jobs whose handler the host was running at the cut
    held: dict[int, str] = field(default_factory=dict)  # row id: lease token, running then
    taken_over_at: float | None = None  # when no held row was left with its token
    restored_at: float = 0.0
    recovered_at: float | None = None  # the host's first start after the restore


def test_a_host_cut_off_claims_nothing_its_jobs_are_taken_over_and_it_recovers(
    mariadb_url: str, tmp_path: Path
) -> None:
    reason = netns.unavailable()
    if reason:
        pytest.fail(reason) if IN_CI else pytest.skip(reason)
    log = str(tmp_path / "handlers.log")
    ids, cuts, exits = run_with_cuts(mariadb_url, tmp_path, log)
    runs = starts(log)
    for cut in cuts:
        print(figures(cut, runs))
    print(lateness(ids, runs, since=cuts[0].at))

    assert exits == [None, None, None], "a runner exited"
    assert {row.id: row.status for row in Job.select()} == dict.fromkeys(ids, Status.SUCCESS)
    assert {n for n, _, _ in runs} == set(range(JOBS)), "a job never ran"
    for cut in cuts:
        during = {n for n, host, at in runs if host == cut.host and cut.at < at < cut.restored_at}
        assert {ids[n] for n in during} <= set(cut.held), f"{cut.what}: started while cut off"
        assert cut.recovered_at is not None
        if cut.what != "redis":  # cut off from MySQL, its leases lapse
            assert cut.taken_over_at is not None, f"{cut.what}: its jobs were not taken over"
    # Cut off from Redis only, a host still renews its leases: its running job is not exposed.
    exposed = set().union(*(cut.running for cut in cuts if cut.what != "redis"))
    twice = {n for n in range(JOBS) if sum(run[0] == n for run in runs) > 1}
    assert twice <= exposed, "a job ran twice that no cut caught running"


def run_with_cuts(
    mariadb_url: str, tmp_path: Path, log: str
) -> tuple[list[int], list[Cut], list[int | None]]:
    """Add the jobs, start a runner on each host, make the cuts, and wait for every job to
    finish; returns the jobs' ids, the cuts, and the runners' exit codes then."""
    database = urlsplit(mariadb_url)
    mariadb = (database.hostname or "127.0.0.1", database.port or 3306)
    with netns.Hosts(3, tmp_path, mariadb) as hosts:
        queue = prepare(mariadb_url, hosts.redis.url, tmp_path)
        ids = add_jobs(queue, log)
        runners = [start_runner(hosts, host, mariadb_url, tmp_path) for host in hosts.hosts]
        try:
            names = {host.name for host in hosts.hosts}
            wait_for(lambda: names <= {s[1] for s in starts(log)}, 60, "every host to run a job")
            pairs = zip(hosts.hosts, CUTS, strict=True)
            cuts = [cut_off(hosts, host, what, log) for host, what in pairs]
            wait_for(lambda: open_rows() == 0, WINDOW + 60, "every job to finish")
            return ids, cuts, [runner.poll() for runner in runners]
        finally:
            stop(runners)
            queue.close()


def prepare(database_url: str, redis_url: str, tmp_path: Path) -> delayq.Queue:
    conn = mysql_connect(database_url)
    with conn.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS delay_queue")
    conn.close()
    settings = Settings(
        database_url=database_url, redis_url=redis_url, handlers=HANDLERS, home=tmp_path / "home"
    )
    queue = delayq.connect(settings)
    queue.init()
    Job.bind(queue.db)
    return queue


def add_jobs(queue: delayq.Queue, log: str) -> list[int]:
    """JOBS jobs due evenly over the WINDOW, from two seconds on."""
    start = time.time() + 2
    return queue.add_many(
        delayq.JobSpec(
            "tests.sample_handlers.jobs",
            "timed",
            {"log": log, "n": n, "seconds": SECONDS},
            at=start + n * WINDOW / JOBS,
        )
        for n in range(JOBS)
    )


def start_runner(
    hosts: netns.Hosts, host: netns.Host, database_url: str, tmp_path: Path
) -> subprocess.Popen[bytes]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env.update(
        DELAYQ_DATABASE_URL=hosts.database_url(host, database_url),
        DELAYQ_REDIS_URL=hosts.redis_url(host),
        DELAYQ_HANDLERS=",".join(HANDLERS),
        DELAYQ_HOME=str(tmp_path / host.name),
        DELAYQ_LEASE=str(LEASE),
        DELAYQ_TEST_HOST=host.name,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    with open(tmp_path / f"{host.name}.log", "ab") as runner_log:
        process = subprocess.Popen(
            host.command(*DELAYQ, "run", "--loop"),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=runner_log,
        )
    STARTED.append(process)
    return process


def cut_off(hosts: netns.Hosts, host: netns.Host, what: str, log: str) -> Cut:
    """Cut `host` off from `what` while it runs a handler, for MIN_CUT seconds and until
    the rows it held are in other hands (cut off from MySQL: the rows it could not renew),
    then restore it and wait for its next start."""
    wait_for(lambda: bool(running_on(host.name, log)), 30, f"{host.name} to run a handler")
    at = time.time()
    host.cut(netns.cut_ports(hosts, host, what))
    cut = Cut(host.name, what, at, running_on(host.name, log, before=at))
    # What is running once the statements the host sent before the rule have been executed
    # is what the host held at the cut.
    assert host.relay is not None
    wait_for(lambda: relay_idle(host.relay), 10, f"{host.name}'s statements in flight to land")
    cut.held = running_rows()
    deadline = at + (TAKEOVER_WITHIN if what != "redis" else MIN_CUT)
    while time.time() < deadline:
        if cut.taken_over_at is None and not set(cut.held.items()) & set(running_rows().items()):
            cut.taken_over_at = time.time()
        if time.time() >= at + MIN_CUT and (what == "redis" or cut.taken_over_at):
            break
        time.sleep(0.1)
    host.restore()
    cut.restored_at = time.time()
    wait_for(
        lambda: any(h == host.name and t > cut.restored_at for _, h, t in starts(log)),
        RECOVERY_WITHIN,
        f"{host.name} to run a job again after the {what} cut",
    )
    cut.recovered_at = min(t for _, h, t in starts(log) if h == host.name and t > cut.restored_at)
    return cut


def starts(log: str) -> list[tuple[int, str, float]]:
    """(n, host, time) of every handler start in the log."""
    return [(int(n), host, float(at)) for n, host, at in _lines(log, "start")]


def running_on(host: str, log: str, before: float = float("inf")) -> set[int]:
    """n of the handlers `host` had started and not finished by `before`."""
    begun = {int(n) for n, h, at in _lines(log, "start") if h == host and float(at) < before}
    done = {int(n) for n, h, at in _lines(log, "done") if h == host and float(at) < before}
    return begun - done


def _lines(log: str, word: str) -> list[list[str]]:
    return [line.split()[1:] for line in read_log(log) if line.startswith(word + " ")]


def relay_idle(relay: Proxy) -> bool:
    """Whether no statement that came through `relay` is still being executed: each of its
    links' MariaDB sessions is asleep, waiting for the next one (a host cut off from MySQL
    sends none; the packets past the rule were relayed at once)."""
    ports = set()
    for server_side in relay.links[1::2]:
        with contextlib.suppress(OSError):  # a link closed since
            ports.add(str(server_side.getsockname()[1]))
    sessions = Job._meta.database.execute_sql(
        "SELECT HOST, COMMAND FROM information_schema.PROCESSLIST"
    ).fetchall()
    return all(command == "Sleep" for host, command in sessions if host.rpartition(":")[2] in ports)


def running_rows() -> dict[int, str]:
    query = Job.select(Job.id, Job.lease_token).where(Job.status == Status.RUNNING)
    return {row.id: row.lease_token for row in query}


def open_rows() -> int:
    return Job.select().where(Job.status.in_([Status.PENDING, Status.RUNNING])).count()


def stop(runners: list[subprocess.Popen[bytes]]) -> None:
    for runner in runners:
        if runner.poll() is None:
            runner.send_signal(signal.SIGTERM)
    for runner in runners:
        runner.wait(timeout=60)


def lateness(ids: list[int], runs: list[tuple[int, str, float]], since: float) -> str:
    """How late the jobs due from `since` on first started, for docs/deploying.md."""
    due = {row.id: row.run_at for row in Job.select(Job.id, Job.run_at)}
    first: dict[int, float] = {}
    for n, _, at in sorted(runs, key=lambda run: run[2]):
        first.setdefault(n, at)
    late = sorted(at - due[ids[n]] for n, at in first.items() if due[ids[n]] >= since)
    return f"jobs due from the first cut on: {len(late)}, started late by at most {late[-1]:.2f}s"


def figures(cut: Cut, runs: list[tuple[int, str, float]]) -> str:
    """One line for docs/deploying.md: how long the takeover and the recovery took."""
    taken = f"{cut.taken_over_at - cut.at:.1f}s" if cut.taken_over_at else "-"
    back = f"{cut.recovered_at - cut.restored_at:.1f}s" if cut.recovered_at else "-"
    again = sum(1 for n, _, _ in runs if n in cut.running) - len(cut.running)
    return (
        f"cut {cut.what}: host {cut.host} off {cut.restored_at - cut.at:.1f}s, "
        f"running {len(cut.running)} handlers, rows held then out of its hands after "
        f"{taken}, first start {back} after the restore, re-run {again}"
    )
