"""Workload `flow`: what a job start costs under flow control. One `delayq run --loop
--concurrency 16 --queue flow` process drains N due no-op jobs (each INCRs Redis once) of a
queue with no limit, with `--rate 1000/s`, with `--concurrency 16`, and with every job
holding one of N/10 per-key locks (10 jobs a lock, due 1 ms apart). Per mode: jobs a second
from the runner's spawn to the last job's success, and Redis commands a job (the server's
count, less the handlers' own INCR). Targets: one runner reaches a 1,000/s rate (at least
0.9 of it: a grant counts the period plus 0.1 s), and a concurrency limit as wide as the
runner's pool costs it at most 10 % of its pace. The modes alternate in each repeat, so the
machine's load meets them all alike. No peers: none of them runs a limit in its own worker
that this could set beside (dramatiq's limiters are called from the handler, arq has none).
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time

import delayq

from . import env, handlers
from .report import Result, Target, median, number, ratio
from .sizes import Sizes

RATE = 1000  # starts a second
SLOTS = 16  # the runner's pool, and the concurrency limit
JOBS_PER_LOCK = 10
MODES = ("none", "rate", "concurrency", "locks")
QUEUE = "flow"


def run(sizes: Sizes) -> Result:
    n = sizes.flow
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    commands: dict[str, list[float]] = {mode: [] for mode in MODES}
    for attempt in range(sizes.repeat):
        for mode in MODES if attempt % 2 == 0 else tuple(reversed(MODES)):
            env.log(f"flow {attempt + 1}/{sizes.repeat}: {n} jobs, {mode}")
            with env.fresh_queue() as queue:
                _load(queue, mode, n)
                jobs_per_s, per_job = _drain(queue, mode, n)
            rates[mode].append(jobs_per_s)
            commands[mode].append(per_job)
    medians = {mode: (median(rates[mode]), median(commands[mode])) for mode in MODES}
    return _result(n, medians)


def _load(queue: delayq.Queue, mode: str, n: int) -> None:
    """n jobs due now in the queue, limited as `mode` says (a lock's jobs due 1 ms apart)."""
    queue.db.execute_sql("DELETE FROM delay_queue_settings")  # no earlier limit
    queue.db.execute_sql("DELETE FROM delay_queue_locks")
    queue.index.flow.forget([QUEUE])
    if mode == "rate":
        queue.limit(QUEUE, rate=f"{RATE}/s")
    elif mode == "concurrency":
        queue.limit(QUEUE, concurrency=SLOTS)
    now = time.time()
    queue.add_many(
        [
            delayq.JobSpec(
                env.HANDLERS,
                "incr",
                None,
                at=now - 10 + (i % JOBS_PER_LOCK) * 0.001 + i * 1e-6,
                queue=QUEUE,
                lock=f"key:{i // JOBS_PER_LOCK}" if mode == "locks" else None,
            )
            for i in range(n)
        ]
    )


def _drain(queue: delayq.Queue, mode: str, n: int) -> tuple[float, float]:
    """One runner draining the n due jobs: (jobs/s, Redis commands a job)."""
    counter = handlers.client()
    server = queue.index.client
    before = int(server.info("stats")["total_commands_processed"])
    command = env.python("-m", "delayq", "run", "--loop", "-c", str(SLOTS), "--queue", QUEUE)
    with tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        runner = subprocess.Popen(command, cwd=env.ROOT, env=env.child_env(), stderr=errors)
        polls = 0
        try:
            while int(counter.get(handlers.COUNTER_KEY) or 0) < n:
                polls += 1
                if runner.poll() is not None:
                    errors.seek(0)
                    raise RuntimeError(f"flow {mode}: the runner exited: {errors.read()[-500:]!r}")
                if time.perf_counter() - started > 600:
                    raise RuntimeError(f"flow {mode}: not drained in 600 s")
                time.sleep(0.005)
            elapsed = time.perf_counter() - started
            # Less the polling above (its GETs and the INFO) and the handlers' own INCRs.
            used = int(server.info("stats")["total_commands_processed"]) - before - polls - 2 - n
        finally:
            runner.send_signal(signal.SIGTERM)
            runner.wait(60)
    return n / elapsed, max(0.0, used) / n


def _result(n: int, found: dict[str, tuple[float, float]]) -> Result:
    rate = {mode: found[mode][0] for mode in MODES}
    commands = {mode: found[mode][1] for mode in MODES}
    reached = ratio(rate["rate"], RATE)
    slotted = ratio(rate["concurrency"], rate["none"])
    figures = {
        "jobs": n,
        **{f"{mode}_jobs_per_s": rate[mode] for mode in MODES},
        **{f"{mode}_redis_commands_per_job": commands[mode] for mode in MODES},
        "rate_vs_limit": reached,
        "concurrency_vs_none": slotted,
        "locks_vs_none": ratio(rate["locks"], rate["none"]),
    }
    line = "flow      " + "; ".join(
        f"{mode} {number(rate[mode])} jobs/s, {commands[mode]:.2f} Redis calls a job"
        for mode in MODES
    )
    line += f" -> rate {number(reached or 0)}× its limit, concurrency {number(slotted or 0)}× none"
    targets = [
        Target(f"one runner at --rate {RATE}/s / the limit", reached, ">=", 0.9),
        Target(f"--concurrency {SLOTS} / no limit", slotted, ">=", 0.9),
    ]
    return Result(line, figures, targets)
