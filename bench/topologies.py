"""Workload `topologies` (only when asked for: it starts servers of its own): dispatch and
lateness through a plain redis:// server, a Sentinel-managed primary (one replica, three
sentinels) and a 6-node Cluster, each a redis-server on a loopback port that this workload
starts with the tests' own starters and stops at the end.

Dispatch is workload 2's drain of N due no-op jobs: plain against Sentinel on the default
queue, and plain against the Cluster with the jobs dealt over four queues, which lie on
all three masters; lateness is workload 5's on each of the three. The rounds alternate and
take turns going first, as the machine is noisy, and each ratio is the median of the rounds'
own (with the same ratio of the run's CPU seconds beside it, which a busy machine inflates
less than wall time). The job's INCR goes to the benchmark's own Redis database every time,
so the figures differ only by the way delayq talks to Redis.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from delayq.store.index.keys import schedule_key
from tests.support.clusters import Cluster
from tests.support.sentinels import SentinelGroup
from tests.support.servers import PrivateRedis, free_port

from . import dispatch, env, lateness
from .compared import Rounds, early_or_missed, lateness_words, paired, turns
from .compared import figures as compared_figures
from .report import Result, Target, number, times
from .sizes import Sizes

QUEUES = ("q1", "q2", "q3", "q4")  # their slots lie on each of a new cluster's 3 masters
RATIO_TARGET = 0.9
# Each pair of dispatch rounds: the plain server and the topology it is compared with.
PAIRS = {"sentinel": ("default",), "cluster": QUEUES}


@contextlib.contextmanager
def started() -> Iterator[tuple[dict[str, str], Cluster]]:
    """The three topologies' URLs while their servers run, and the cluster itself."""
    with tempfile.TemporaryDirectory(prefix="delayq-bench-topologies-") as workdir:
        plain = PrivateRedis(free_port(), Path(workdir))
        group, cluster = SentinelGroup(Path(workdir)), Cluster(Path(workdir))
        try:
            env.log("topologies: starting a redis-server, a Sentinel group and a Cluster")
            plain.start()
            group.start()
            cluster.start()
            yield {"plain": plain.url, "sentinel": group.url, "cluster": cluster.url}, cluster
        finally:
            cluster.stop()
            group.stop()
            if plain.process is not None:
                plain.kill()


def run(sizes: Sizes) -> Result:
    n = sizes.dispatch
    rounds = Rounds()
    with started() as (urls, cluster):
        masters = len({cluster.master_of(schedule_key(queue)) for queue in QUEUES})
        for attempt in range(sizes.repeat):
            env.log(f"topologies {attempt + 1}/{sizes.repeat}: dispatch of {n} due jobs")
            for topology, queues in PAIRS.items():
                for name in turns(attempt, [topology, "plain"]):
                    drained = dispatch.drain(dispatch.RUN, n, url=urls[name], queues=queues)
                    rounds.drained(f"{name} {len(queues)}", drained.wall, drained.cpu_s)
            env.log(f"topologies {attempt + 1}/{sizes.repeat}: lateness")
            for name in turns(attempt, list(urls)):
                recorded = lateness._delayq(
                    sizes.lateness_jobs, sizes.lateness_spread, sizes.lateness_for, url=urls[name]
                )
                rounds.streamed(name, lateness.summarize(recorded, sizes.lateness_jobs))
    return _result(n, rounds, masters)


def _paired(values: dict[str, list[float]], topology: str) -> float:
    queues = len(PAIRS[topology])
    return paired(values, f"plain {queues}", f"{topology} {queues}")


def _result(n: int, rounds: Rounds, masters: int) -> Result:
    rates = rounds.rates(n)
    ratios = {topology: _paired(rounds.walls, topology) for topology in PAIRS}
    cpu_ratios = {topology: _paired(rounds.cpus, topology) for topology in PAIRS}
    late = {name: lateness.combine(runs) for name, runs in rounds.late.items()}
    shown = [
        f"plain {number(rates[f'plain {len(queues)}'])}/s, {topology} "
        f"{number(rates[f'{topology} {len(queues)}'])}/s ({times(ratios[topology])}; "
        f"CPU of the run {times(cpu_ratios[topology])})"
        for topology, queues in PAIRS.items()
    ]
    line = (
        f"topologies N={n}: dispatch, one queue: {shown[0]}; {len(QUEUES)} queues on "
        f"{masters} masters: {shown[1]}; {lateness_words(late)}"
    )
    figures = {
        "queues": list(QUEUES),
        "masters_holding_them": masters,
        **compared_figures(n, rounds, ratios, cpu_ratios, late),
    }
    targets = [
        Target("sentinel vs plain", ratios["sentinel"], ">=", RATIO_TARGET),
        Target("cluster vs plain", ratios["cluster"], ">=", RATIO_TARGET),
        Target("sentinel p99 ms", late["sentinel"]["p99_ms"], "<=", lateness.P99_TARGET_MS),
        Target("cluster p99 ms", late["cluster"]["p99_ms"], "<=", lateness.P99_TARGET_MS),
        Target("early or missed", early_or_missed(late), "<=", 0),
    ]
    return Result(line, figures, targets)
