"""How many of the machine's cores a measured run kept busy: the whole machine's CPU time
(Linux's /proc/stat) over the run's wall time, the run itself, Redis and MariaDB together.
Beside `--processes` figures it tells whether more processes still had cores to use."""

from __future__ import annotations

import os

# Fields of /proc/stat's "cpu" line, in clock ticks: user nice system idle iowait irq
# softirq steal ...; busy is everything but idle, iowait and steal (the hypervisor's).
BUSY_FIELDS = (0, 1, 2, 5, 6)


def busy_ticks() -> int | None:
    """Clock ticks all cores have spent busy since boot; None off Linux."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    return sum(int(fields[1 + index]) for index in BUSY_FIELDS)


def busy_cores(before: int | None, after: int | None, wall: float) -> float | None:
    """How many cores the machine kept busy on average between two `busy_ticks()` readings
    `wall` seconds apart."""
    if before is None or after is None or wall <= 0:
        return None
    return (after - before) / os.sysconf("SC_CLK_TCK") / wall
