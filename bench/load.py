"""Workload 8, load: lateness with the pool mostly busy. Jobs that each wait 50 ms fall
due evenly at 80 % of what 16 in flight can do (256 jobs/s) while `delayq run --loop
--concurrency 16` is up; each records (start - due) first. A job due while all 16 are
busy should start as soon as one frees, not after a whole batch: p50, p99 and max in ms.
"""

from __future__ import annotations

from . import lateness
from .report import Result, Target, number
from .sizes import Sizes

IN_FLIGHT = 16
WAIT = 0.05
USE = 0.8
P99_TARGET_MS = 100.0  # a few jobs' wait behind a full pool


def run(sizes: Sizes) -> Result:
    n = sizes.load_jobs
    rate = USE * IN_FLIGHT / WAIT
    spread = n / rate
    runs = []
    for attempt in range(sizes.repeat):
        lateness.env.log(f"load {attempt + 1}/{sizes.repeat}: {n} jobs at {rate:g}/s")
        # Up until the last job is due and has run: the head start, the spread, and slack.
        duration = lateness.env.lead_for(n) + spread + 5
        recorded = lateness._delayq(
            n, spread, duration, "sleep_record_lateness", ["--concurrency", str(IN_FLIGHT)]
        )
        runs.append(lateness.summarize(recorded, n))
    ours = lateness.combine(runs)
    line = (
        f"load      N={n} at {number(rate)}/s (80% of {IN_FLIGHT} x {WAIT * 1000:g} ms): "
        f"delayq p50 {number(ours['p50_ms'])} ms, p99 {number(ours['p99_ms'])} ms, max "
        f"{number(ours['max_ms'])} ms, early {ours['early']:.0f}, missed {ours['missing']:.0f}"
    )
    figures = {"n": n, "rate_per_s": rate, "in_flight": IN_FLIGHT, "delayq": ours, "runs": runs}
    targets = [
        Target("p99 ms", ours["p99_ms"], "<=", P99_TARGET_MS),
        Target("early or missed", ours["early"] + ours["missing"], "<=", 0),
    ]
    return Result(line, figures, targets)
