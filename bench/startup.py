"""What the io and aio figures spend before and after the jobs: every system here is timed
from the spawn of its worker process to its exit, so its start counts against the limit.

The floor is the least any Python worker on Redis pays (the interpreter and `import
redis`, which huey, dramatiq and arq import too); the empty run is a whole `delayq run` with
nothing due. A run's rate without its own start, n / (wall - empty run), shows how near
the limit its pool keeps once started."""

from __future__ import annotations

import asyncio
import time

from . import env, handlers
from .report import median, number, ratio, times


class Starts:
    """The two starts, measured once per repeat beside the figure they explain (the machine's
    phase moves them as much as it moves the figure)."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.floors: list[float] = []
        self.empties: list[float] = []

    def measure(self) -> None:
        floor = env.run_process(env.python("-c", "import redis"), 60)
        env.require_ok(floor, "python -c 'import redis'")
        with env.fresh_queue():
            empty = env.run_process(self.command, 60)
        env.require_ok(empty, " ".join(self.command[1:4]))
        self.floors.append(floor.wall)
        self.empties.append(empty.wall)

    @property
    def floor(self) -> float:
        """Seconds from spawn to exit of `python -c "import redis"`, median."""
        return median(self.floors)

    @property
    def empty(self) -> float:
        """Seconds from spawn to exit of the `delayq run` with nothing due, median."""
        return median(self.empties)


def without_start(n: int, wall: float, empty: float) -> float | None:
    """Jobs/s of a run once started: n over its wall time less a run with nothing due."""
    return n / (wall - empty) if wall > empty else None


def describe(floor: float, empty: float, n: int, wall: float, limit: float) -> str:
    """One clause for a figure line: the starts, and delayq's rate without its own."""
    rate = without_start(n, wall, empty)
    return (
        f"process start: python + import redis {floor:.2f}s, delayq run with nothing due "
        f"{empty:.2f}s; without its start delayq {number(rate)}/s "
        f"({times(ratio(rate, limit))} limit)"
    )


def bare_loop_rate(n: int, in_flight: int, repeat: int) -> float:
    """Jobs/s of the aio job itself, n calls with `in_flight` at once on one bare event loop
    in this process: no claims, no table, no process start. What one loop can do at all."""
    walls = []
    for _ in range(repeat):
        handlers.client().delete(handlers.COUNTER_KEY)
        walls.append(asyncio.run(_bare(n, in_flight)))
        counted = int(handlers.client().get(handlers.COUNTER_KEY) or 0)
        if counted != n:
            raise RuntimeError(f"bare loop: counter {counted}, not {n}")
    return n / median(walls)


async def _bare(n: int, in_flight: int) -> float:
    handlers.reset_async_client()  # a client is bound to the loop that opened it
    room = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with room:
            await handlers.await_incr({})

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    wall = time.perf_counter() - started
    await handlers.async_client().aclose()
    handlers.reset_async_client()
    return wall
