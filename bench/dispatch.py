"""Workload 2, dispatch: N jobs already due; one process drains them, timed from spawn to
exit. delayq is one `delayq run` (default DELAYQ_BATCH_SIZE); the baseline is one
`python -m bench.baseline drain`; the peers are one huey / rq worker process each. Every
outcome is checked: N success rows and the counter at N."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import delayq

from . import env, handlers, loader, peers
from .report import Result, Target, median, number, ratio, times
from .sizes import Sizes

BASELINE_TARGET = 6.0
PEER_TARGET = 3.0
TIMEOUT = 900.0
RUN = env.python("-m", "delayq", "run", "--max-seconds", "600")
TWO_PROCESSES = [*RUN, "--processes", "2"]
# Two processes per core, beside --processes 2: whether more processes would get more out of
# this machine, whose cores Redis and MariaDB share (if not, two processes are at its limit).
MANY = max(4, 2 * (os.cpu_count() or 1))
MANY_PROCESSES = [*RUN, "--processes", str(MANY)]
PROCESSES_TARGET = 1.6


def run(sizes: Sizes) -> Result:
    n = sizes.dispatch
    walls: dict[str, list[float]] = {"delayq": [], "baseline": []}
    busy: dict[str, list[float]] = {}
    errors: dict[str, str] = {}
    mine = (("delayq", RUN), ("delayq -p 2", TWO_PROCESSES), (f"delayq -p {MANY}", MANY_PROCESSES))
    for attempt in range(sizes.repeat):
        env.log(f"dispatch {attempt + 1}/{sizes.repeat}: {n} due jobs")
        for name, command in mine:
            finished = drain(command, n)
            walls.setdefault(name, []).append(finished.wall)
            if finished.busy_cores is not None:
                busy.setdefault(name, []).append(finished.busy_cores)
        walls["baseline"].append(drain(env.python("-m", "bench.baseline", "drain"), n).wall)
        for peer in sizes.dispatch_peers:
            if peer in errors:
                continue
            try:
                walls.setdefault(peer, []).append(peers.dispatch(peer, n))
            except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not fatal
                errors[peer] = f"{type(exc).__name__}: {exc}"
                env.log(f"dispatch: {peer} failed: {errors[peer]}")
    rates = {name: n / median(values) for name, values in walls.items() if values}
    return _result(n, rates, walls, errors, handler_alone(n, sizes.repeat), busy)


def handler_alone(n: int, repeat: int) -> float:
    """Jobs/s of the no-op job itself, called n times in a loop in this process: the ceiling
    for anything that runs one job at a time, since each is one Redis round trip."""
    client = handlers.client()
    client.delete(handlers.COUNTER_KEY)
    walls = []
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(n):
            handlers.incr(None)
        walls.append(time.perf_counter() - started)
    client.delete(handlers.COUNTER_KEY)
    return n / median(walls)


def drain(
    command: list[str],
    n: int,
    method: str = "incr",
    url: str | None = None,
    queues: Sequence[str] = ("default",),
    database: str | None = None,
) -> env.Finished:
    """`command` draining n due jobs of bench.handlers.<method> (each INCRs the counter once),
    timed (wall time, peak RSS), after checking every one ran. On Redis at `url` or a MySQL
    server at `database` (servers the benchmark started), the jobs are dealt over `queues`
    by q.add_many, which puts each queue's keys where that Redis wants them; otherwise
    loader.py writes them."""
    with env.fresh_queue(url, database) as queue:
        now = time.time()
        due = [now - 10 + 10 * i / n for i in range(n)]
        if url or database:
            queue.add_many(
                delayq.JobSpec(env.HANDLERS, method, at=at, queue=queues[i % len(queues)])
                for i, at in enumerate(due)
            )
        else:
            loader.load(method, due)
        finished = env.run_process(command, TIMEOUT, env.child_env(url, database))
        env.require_ok(finished, " ".join(command[1:4]))
        succeeded = env.count_status(queue, delayq.Status.SUCCESS)
        counted = int(handlers.client().get(handlers.COUNTER_KEY) or 0)
    if succeeded != n or counted != n:
        raise RuntimeError(f"{command[1:4]}: {succeeded} success rows, counter {counted}, not {n}")
    return finished


def _result(
    n: int,
    rates: dict[str, float],
    walls: dict[str, list[float]],
    errors: dict[str, str],
    ceiling: float,
    busy: dict[str, list[float]],
) -> Result:
    ours, base = rates["delayq"], rates["baseline"]
    two = ratio(rates["delayq -p 2"], ours)
    many = ratio(rates[f"delayq -p {MANY}"], ours)
    mine = ("delayq", "delayq -p 2", f"delayq -p {MANY}", "baseline")
    peer_rates = {name: rate for name, rate in rates.items() if name not in mine}
    fastest = max(peer_rates, key=lambda name: peer_rates[name]) if peer_rates else None
    vs_peer = ratio(ours, peer_rates[fastest]) if fastest else None
    figures = {
        "n": n,
        "jobs_per_s": rates,
        "vs_baseline": ratio(ours, base),
        "fastest_peer": fastest,
        "vs_fastest_peer": vs_peer,
        "wall_s": walls,
        "errors": errors,
        "handler_alone_per_s": ceiling,
        "vs_handler_alone": ratio(ours, ceiling),
        # The most any one-job-at-a-time runner could reach against the baseline here.
        "handler_alone_vs_baseline": ratio(ceiling, base),
        "two_processes_vs_one": two,
        f"{MANY}_processes_vs_one": many,
        "machine_cores_busy": {name: median(values) for name, values in busy.items()},
    }
    shown = ", ".join(f"{name} {number(rate)}/s" for name, rate in rates.items())
    failed = "".join(f"; {name} failed ({why})" for name, why in errors.items())
    line = (
        f"dispatch  N={n}: {shown}{failed} -> {times(ratio(ours, base))} baseline, "
        f"{times(vs_peer)} fastest peer ({fastest or 'none'}); the job alone in a loop "
        f"{number(ceiling)}/s (delayq at {times(ratio(ours, ceiling))} of it; that ceiling is "
        f"{times(ratio(ceiling, base))} baseline); --processes 2 {times(two)} one process, "
        f"--processes {MANY} {times(many)}"
    )
    if busy:
        cores = ", ".join(f"{name} {median(values):.2f}" for name, values in busy.items())
        line += f"; cores busy of {os.cpu_count()}: {cores}"
    targets = [
        Target("vs baseline", ratio(ours, base), ">=", BASELINE_TARGET),
        Target("vs fastest peer", vs_peer, ">=", PEER_TARGET),
        Target("2 processes vs 1", two, ">=", PROCESSES_TARGET),
    ]
    return Result(line, figures, targets)
