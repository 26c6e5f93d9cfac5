"""Workload 4, memory: peak RSS of one fresh `delayq run` process draining a large backlog of
due jobs against one draining a small one. Flat means it streams in batches and never holds
the backlog. The RSS is the run's own (os.wait4 in bench/rss.py), read once it has exited."""

from __future__ import annotations

import tempfile

from . import dispatch, env
from .report import Result, Target, median, number, ratio, times
from .sizes import Sizes

TARGET = 1.3


def run(sizes: Sizes) -> Result:
    peaks: dict[int, list[int]] = {sizes.memory_small: [], sizes.memory_large: []}
    for attempt in range(sizes.repeat):
        for n in peaks:
            env.log(f"memory {attempt + 1}/{sizes.repeat}: {n} due jobs")
            peaks[n].append(peak_rss_kib(n))
    small = median(peaks[sizes.memory_small]) / 1024
    large = median(peaks[sizes.memory_large]) / 1024
    growth = ratio(large, small)
    figures = {
        "small_jobs": sizes.memory_small,
        "large_jobs": sizes.memory_large,
        "small_peak_mib": small,
        "large_peak_mib": large,
        "large_vs_small": growth,
        "runs_kib": {str(n): values for n, values in peaks.items()},
    }
    line = (
        f"memory    peak RSS of one `delayq run`: {sizes.memory_small} due jobs "
        f"{number(small)} MiB, {sizes.memory_large} due jobs {number(large)} MiB -> "
        f"{times(growth)}"
    )
    return Result(line, figures, [Target("large/small", growth, "<=", TARGET)])


def peak_rss_kib(n: int) -> int:
    """Peak RSS in KiB of a fresh `delayq run` draining n due jobs (all checked), spawned
    through bench/rss.py so that it is the run's own peak, not the benchmark's."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as out:
        dispatch.drain(env.python("-m", "bench.rss", out.name, *dispatch.RUN), n)
        return int(out.read())
