"""Workload 3, idle tick: `delayq run` when nothing is due, with no job pending and with a
large backlog due in the future. (a) the work inside the process: `Queue.run()` in-process;
(b) the whole process: `python -m delayq run`, against `python -c "import redis, peewee,
pymysql, typer"`, the floor any process using delayq's dependencies pays.

"No job pending" is a queue that has seen a job and drained it, so both states visit the
same registered queue.
"""

from __future__ import annotations

import time

from . import env, loader
from .report import Result, Target, median, number, ratio, times
from .sizes import Sizes

BACKLOG_TARGET = 1.2
PROCESS_TARGET = 1.5
IMPORTS = env.python("-c", "import redis, peewee, pymysql, typer")
RUN = env.python("-m", "delayq", "run")


def run(sizes: Sizes) -> Result:
    with env.fresh_queue() as queue:
        queue.add(env.HANDLERS, "incr", None, delay=0)
        queue.run()
        empty = _measure(queue, sizes, "0 pending")
        env.log(f"idle: loading {sizes.idle_pending} future jobs")
        started = time.perf_counter()
        now = time.time()
        count = sizes.idle_pending
        loader.load("incr", [now + 3600 + 86400 * i / count for i in range(count)])
        load_seconds = time.perf_counter() - started
        backlog = _measure(queue, sizes, f"{count} pending")
    return _result(sizes, empty, backlog, load_seconds)


def _measure(queue: object, sizes: Sizes, state: str) -> dict[str, list[float]]:
    """Per repeat: median seconds of the in-process calls, the processes and the imports,
    and the ratio of those two medians (the processes and imports run interleaved)."""
    runs: dict[str, list[float]] = {"in_process": [], "process": [], "imports": [], "ratio": []}
    for attempt in range(sizes.repeat):
        env.log(f"idle {attempt + 1}/{sizes.repeat}: {state}")
        calls = []
        for _ in range(sizes.idle_calls + 3):
            started = time.perf_counter()
            report = queue.run()  # type: ignore[attr-defined]
            calls.append(time.perf_counter() - started)
            if report.claimed:
                raise RuntimeError(f"idle run claimed {report.claimed} jobs")
        runs["in_process"].append(median(calls[3:]))  # the first calls warm up
        processes, imports = [], []
        for _ in range(sizes.idle_processes):
            imports.append(_wall(IMPORTS))
            processes.append(_wall(RUN))
        runs["process"].append(median(processes))
        runs["imports"].append(median(imports))
        runs["ratio"].append(median(processes) / median(imports))
    return runs


def _wall(command: list[str]) -> float:
    finished = env.run_process(command, 60)
    env.require_ok(finished, " ".join(command[1:3]))
    return finished.wall


def _result(
    sizes: Sizes, empty: dict[str, list[float]], backlog: dict[str, list[float]], load: float
) -> Result:
    ms = {
        f"{key}_{state}_ms": median(runs[key]) * 1000
        for state, runs in (("empty", empty), ("backlog", backlog))
        for key in ("in_process", "process", "imports")
    }
    in_process = ratio(ms["in_process_backlog_ms"], ms["in_process_empty_ms"])
    process = ratio(ms["process_backlog_ms"], ms["process_empty_ms"])
    imports = median(empty["imports"] + backlog["imports"]) * 1000
    vs_imports = median(empty["ratio"])
    vs_imports_backlog = median(backlog["ratio"])
    figures = {
        "pending": sizes.idle_pending,
        **ms,
        "imports_ms": imports,
        "in_process_backlog_vs_empty": in_process,
        "process_backlog_vs_empty": process,
        "process_empty_vs_imports": vs_imports,
        "process_backlog_vs_imports": vs_imports_backlog,
        "backlog_load_jobs_per_s": sizes.idle_pending / load,
        "runs_s": {"empty": empty, "backlog": backlog},
    }
    n = sizes.idle_pending
    line = (
        f"idle      Queue.run(): 0 pending {number(ms['in_process_empty_ms'])} ms, {n} pending "
        f"{number(ms['in_process_backlog_ms'])} ms -> {times(in_process)}; "
        f"`delayq run` process: 0 pending {number(ms['process_empty_ms'])} ms, {n} pending "
        f"{number(ms['process_backlog_ms'])} ms ({times(process)}); imports alone "
        f"{number(ms['imports_empty_ms'])} / {number(ms['imports_backlog_ms'])} ms -> "
        f"process/imports {times(vs_imports)} / {times(vs_imports_backlog)}"
    )
    targets = [
        Target("in-process backlog/empty", in_process, "<=", BACKLOG_TARGET),
        Target("process/imports (0 pending)", vs_imports, "<=", PROCESS_TARGET),
        Target("process/imports (backlog)", vs_imports_backlog, "<=", PROCESS_TARGET),
    ]
    return Result(line, figures, targets)
