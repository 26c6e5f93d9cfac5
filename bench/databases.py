"""Workload `databases` (only when asked for: it starts servers of its own): dispatch and
lateness with the table on
- `plain`: one MariaDB, reached on its port;
- `haproxy`: the same server through HAProxy (tests/support/haproxy.py), the proxy's own cost;
- `async`: a primary replicating asynchronously to one replica;
- `semisync`: a semi-synchronous one (rpl_semi_sync_master_enabled, AFTER_SYNC: a commit
  returns once the replica has it);
- `galera`: a three-node Galera cluster through HAProxy to its one writer node, as deployed
  (against `haproxy`, what the cluster's certification and replication cost);
each a mariadbd (with galera-4 for the cluster) on loopback ports that this workload starts
with the tests' own starters and stops at the end, all with innodb_flush_log_at_trx_commit=1
and, but for the cluster, binary logs with sync_binlog=1, as production primaries run.

Dispatch is workload 2's drain of N due no-op jobs; lateness is workload 5's. The rounds
alternate and take turns going first, as the machine is noisy, and each ratio is the median
of the rounds' own against `plain` (with the same ratio of the run's CPU seconds beside it).
Redis is the benchmark's own database every time, so the figures differ only by the way to
the table: what a commit that waits for a replica or a cluster costs a run, and how much of
it the run's group commits hide (a batch of outcomes is one commit, one wait)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.galera_servers import GaleraCluster
from tests.support.haproxy import HAProxy
from tests.support.mysql_servers import DATABASE, PASSWORD, USER, MariaDB, ReplicatedMariaDB

from . import dispatch, env, lateness
from .compared import Rounds, early_or_missed, figures, lateness_words, paired, turns
from .report import Result, Target, number, times
from .sizes import Sizes

PLAIN = "plain"
COMPARED = ("haproxy", "async", "semisync", "galera")
RATIO_TARGET = 0.5  # each way's dispatch against the plain server's


@contextlib.contextmanager
def started() -> Iterator[dict[str, str]]:
    """Each way's database URL while its servers run."""
    with tempfile.TemporaryDirectory(prefix="delayq-bench-databases-") as workdir:
        plain = MariaDB(Path(workdir) / "plain", 1)
        proxy = HAProxy(Path(workdir) / "haproxy", [plain])
        pairs = {
            "async": ReplicatedMariaDB(Path(workdir) / "async", semi_sync=False),
            "semisync": ReplicatedMariaDB(Path(workdir) / "semisync", semi_sync=True),
        }
        cluster = GaleraCluster(Path(workdir) / "galera")
        try:
            env.log("databases: starting a MariaDB, two primaries with a replica each, a cluster")
            plain.install()
            plain.start()
            plain.execute(
                f"CREATE DATABASE {DATABASE}",
                f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'",
                f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'127.0.0.1'",
            )
            proxy.start()
            urls = {PLAIN: _url(plain), "haproxy": proxy.url}
            for name, pair in pairs.items():
                pair.start()
                urls[name] = _url(pair.primary)
            cluster.start()
            urls["galera"] = cluster.start_proxy()
            yield urls
        finally:
            cluster.stop()
            for pair in pairs.values():
                pair.stop()
            proxy.stop()
            plain.stop()


def _url(server: MariaDB) -> str:
    return f"mysql://{USER}:{PASSWORD}@127.0.0.1:{server.port}/{DATABASE}"


def run(sizes: Sizes) -> Result:
    n = sizes.dispatch
    rounds = Rounds()
    with started() as urls:
        for attempt in range(sizes.repeat):
            env.log(f"databases {attempt + 1}/{sizes.repeat}: dispatch of {n} due jobs")
            for name in turns(attempt, list(urls)):
                drained = dispatch.drain(dispatch.RUN, n, database=urls[name])
                rounds.drained(name, drained.wall, drained.cpu_s)
            env.log(f"databases {attempt + 1}/{sizes.repeat}: lateness")
            for name in turns(attempt, list(urls)):
                recorded = lateness._delayq(
                    sizes.lateness_jobs,
                    sizes.lateness_spread,
                    sizes.lateness_for,
                    database=urls[name],
                )
                rounds.streamed(name, lateness.summarize(recorded, sizes.lateness_jobs))
    return _result(n, rounds)


def _result(n: int, rounds: Rounds) -> Result:
    rates = rounds.rates(n)
    ratios = {topology: paired(rounds.walls, PLAIN, topology) for topology in COMPARED}
    cpu_ratios = {topology: paired(rounds.cpus, PLAIN, topology) for topology in COMPARED}
    late = {name: lateness.combine(runs) for name, runs in rounds.late.items()}
    shown = ", ".join(
        f"{topology} {number(rates[topology])}/s ({times(ratios[topology])}; CPU of the run "
        f"{times(cpu_ratios[topology])})"
        for topology in COMPARED
    )
    line = (
        f"databases N={n}: dispatch plain {number(rates[PLAIN])}/s, {shown}; {lateness_words(late)}"
    )
    targets = [
        *(Target(f"{t} vs plain", ratios[t], ">=", RATIO_TARGET) for t in COMPARED),
        *(Target(f"{t} p99 ms", late[t]["p99_ms"], "<=", lateness.P99_TARGET_MS) for t in late),
        Target("early or missed", early_or_missed(late), "<=", 0),
    ]
    return Result(line, figures(n, rounds, ratios, cpu_ratios, late), targets)
