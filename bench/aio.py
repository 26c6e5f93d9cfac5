"""Workload 7, aio: N due jobs that each await 50 ms (asyncio.sleep) and then INCR once,
drained by one process with 200 in flight: delayq `run --concurrency 200` on its event loop,
with the INCR's client kept by the handler module for the runner's life and, as a second
figure, opened and closed by each job; and arq (max_jobs 200, burst mode). The limit is
200 / 50 ms = 4000 jobs/s; each figure is shown against it and against arq, measured in the
same run."""

from __future__ import annotations

from . import dispatch, env, peers, startup
from .report import Result, Target, median, number, rates_against_limit, ratio, times
from .sizes import Sizes

WAIT = 0.05
IN_FLIGHT = 200
LIMIT_TARGET = 0.7
PEER_TARGET = 1.0
OWN_CLIENT = "delayq, a client a job"


def run(sizes: Sizes) -> Result:
    n = sizes.aio
    command = [*dispatch.RUN, "--concurrency", str(IN_FLIGHT)]
    walls: dict[str, list[float]] = {"delayq": [], OWN_CLIENT: [], "arq": []}
    errors: dict[str, str] = {}
    starts = startup.Starts(command)
    for attempt in range(sizes.repeat):
        env.log(f"aio {attempt + 1}/{sizes.repeat}: {n} due jobs awaiting {WAIT * 1000:g} ms")
        walls["delayq"].append(dispatch.drain(command, n, "await_incr").wall)
        walls[OWN_CLIENT].append(dispatch.drain(command, n, "await_incr_own_client").wall)
        starts.measure()
        if "arq" in errors:
            continue
        try:
            walls["arq"].append(peers.aio_arq(n, IN_FLIGHT))
        except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not fatal
            errors["arq"] = f"{type(exc).__name__}: {exc}"
            env.log(f"aio: arq failed: {errors['arq']}")
    rates = {name: n / median(values) for name, values in walls.items() if values}
    limit = IN_FLIGHT / WAIT
    floor, empty = starts.floor, starts.empty
    bare = startup.bare_loop_rate(n, IN_FLIGHT, sizes.repeat)
    ours, theirs = rates["delayq"], rates.get("arq")
    vs_arq = ratio(ours, theirs) if theirs else None
    shown = rates_against_limit(rates, limit, errors)
    line = (
        f"aio       N={n}, {IN_FLIGHT} in flight, {WAIT * 1000:g} ms each, limit "
        f"{number(limit)}/s: {shown} -> delayq {times(vs_arq)} arq; the job alone on one "
        f"bare event loop {number(bare)}/s ({times(ratio(bare, limit))} limit); "
        + startup.describe(floor, empty, n, median(walls["delayq"]), limit)
    )
    figures = {
        "n": n,
        "in_flight": IN_FLIGHT,
        "wait_s": WAIT,
        "limit_per_s": limit,
        "jobs_per_s": rates,
        "vs_limit": {name: ratio(rate, limit) for name, rate in rates.items()},
        "vs_arq": vs_arq,
        "wall_s": walls,
        "errors": errors,
        "bare_loop_per_s": bare,
        "start_floor_s": starts.floors,
        "empty_run_s": starts.empties,
        "without_start_per_s": startup.without_start(n, median(walls["delayq"]), empty),
    }
    targets = [
        Target("vs limit", ratio(ours, limit), ">=", LIMIT_TARGET),
        Target("vs arq", vs_arq, ">=", PEER_TARGET),
    ]
    return Result(line, figures, targets)
