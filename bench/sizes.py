"""How much work each workload does: the issue's sizes, and small ones for `--quick`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    enqueue: int  # jobs added, one at a time and in bulk
    dispatch: int  # due jobs drained by one process
    idle_pending: int  # future jobs waiting while a run finds nothing due
    idle_calls: int  # in-process Queue.run() calls per repeat
    idle_processes: int  # `delayq run` processes (and import lines) per repeat
    memory_small: int  # due jobs drained while peak RSS is measured...
    memory_large: int  # ...and the backlog it is compared with
    lateness_jobs: int  # jobs due evenly over...
    lateness_spread: float  # ...this many seconds
    lateness_for: float  # how long `delayq run --loop --for` stays up
    lateness_peers: tuple[str, ...]
    io: int  # due jobs that each wait 50 ms, drained with 16 in flight
    aio: int  # due jobs that each await 50 ms, drained with 200 in flight
    load_jobs: int  # jobs of 50 ms due at 80 % of 16 in flight, while a --loop run is up
    flow: int  # due jobs drained under each kind of flow control
    dispatch_peers: tuple[str, ...] = ("huey", "rq")
    repeat: int = 3


FULL = Sizes(
    enqueue=20_000,
    dispatch=20_000,
    idle_pending=1_000_000,
    idle_calls=50,
    idle_processes=20,
    memory_small=2_000,
    memory_large=200_000,
    lateness_jobs=2_000,
    lateness_spread=20.0,
    lateness_for=30.0,
    lateness_peers=("dramatiq", "huey", "rq"),
    io=1_000,
    aio=5_000,
    load_jobs=3_840,
    flow=5_000,
)

QUICK = Sizes(
    enqueue=1_000,
    dispatch=1_000,
    idle_pending=10_000,
    idle_calls=10,
    idle_processes=5,
    memory_small=500,
    memory_large=5_000,
    lateness_jobs=100,
    lateness_spread=2.0,
    lateness_for=6.0,
    lateness_peers=("dramatiq",),
    io=200,
    aio=1_000,
    load_jobs=512,
    flow=500,
    dispatch_peers=("huey",),
    repeat=1,
)
