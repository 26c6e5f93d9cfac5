"""Workload 6, io: N due jobs that each wait on I/O (sleep 50 ms, then one INCR), drained by
one process with 16 jobs in flight: delayq `run --concurrency 16`, huey (16 worker
threads), dramatiq (16 worker threads, 1 process). The limit is what 16 jobs in flight can do
at all, 16 / 50 ms = 320 jobs/s; each figure is shown against it and against the best peer, all
measured in the same run."""

from __future__ import annotations

from . import dispatch, env, peers, startup
from .report import Result, Target, median, number, rates_against_limit, ratio, times
from .sizes import Sizes

SLEEP = 0.05  # bench.handlers.sleep_incr and the peers' sleep_incr jobs wait this long
IN_FLIGHT = 16
LIMIT_TARGET = 0.9
PEER_TARGET = 1.05
PEERS = ("huey", "dramatiq")


def run(sizes: Sizes) -> Result:
    n = sizes.io
    command = [*dispatch.RUN, "--concurrency", str(IN_FLIGHT)]
    walls: dict[str, list[float]] = {"delayq": []}
    errors: dict[str, str] = {}
    starts = startup.Starts(command)
    for attempt in range(sizes.repeat):
        env.log(f"io {attempt + 1}/{sizes.repeat}: {n} due jobs of {SLEEP * 1000:g} ms")
        walls["delayq"].append(dispatch.drain(command, n, "sleep_incr").wall)
        starts.measure()
        for peer in PEERS:
            if peer in errors:
                continue
            try:
                walls.setdefault(peer, []).append(peers.io(peer, n, IN_FLIGHT))
            except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not fatal
                errors[peer] = f"{type(exc).__name__}: {exc}"
                env.log(f"io: {peer} failed: {errors[peer]}")
    rates = {name: n / median(values) for name, values in walls.items() if values}
    return _result(n, rates, walls, errors, starts)


def _result(
    n: int,
    rates: dict[str, float],
    walls: dict[str, list[float]],
    errors: dict[str, str],
    starts: startup.Starts,
) -> Result:
    limit = IN_FLIGHT / SLEEP
    ours = rates["delayq"]
    peer_rates = {name: rate for name, rate in rates.items() if name != "delayq"}
    best = max(peer_rates, key=lambda name: peer_rates[name]) if peer_rates else None
    vs_peer = ratio(ours, peer_rates[best]) if best else None
    figures = {
        "n": n,
        "in_flight": IN_FLIGHT,
        "sleep_s": SLEEP,
        "limit_per_s": limit,
        "jobs_per_s": rates,
        "vs_limit": {name: ratio(rate, limit) for name, rate in rates.items()},
        "best_peer": best,
        "vs_best_peer": vs_peer,
        "wall_s": walls,
        "errors": errors,
        "start_floor_s": starts.floors,
        "empty_run_s": starts.empties,
        "without_start_per_s": startup.without_start(n, median(walls["delayq"]), starts.empty),
    }
    shown = rates_against_limit(rates, limit, errors)
    line = (
        f"io        N={n}, {IN_FLIGHT} in flight, {SLEEP * 1000:g} ms each, limit "
        f"{number(limit)}/s: {shown} -> delayq {times(vs_peer)} the best peer "
        f"({best or 'none'}); "
        + startup.describe(starts.floor, starts.empty, n, median(walls["delayq"]), limit)
    )
    targets = [
        Target("vs limit", ratio(ours, limit), ">=", LIMIT_TARGET),
        Target("vs best peer", vs_peer, ">=", PEER_TARGET),
    ]
    return Result(line, figures, targets)
