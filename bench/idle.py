"""Workload 3, idle tick: `delayq run` when nothing is due, with no job pending and with a
large backlog due in the future. (a) the work inside the process: `Queue.run()` in-process;
(b) the whole process: `python -m delayq run`, against `python -c "import redis, peewee,
pymysql, typer"`, the floor any process using delayq's dependencies pays.

"No job pending" is a queue that has seen a job and drained it, so both states visit the
same registered queue. The two states are measured in alternating blocks under the same
machine load: the other state's table and sorted set are parked under other names, and a
swap is one RENAME TABLE and two RENAMEs, whatever their size.
"""

from __future__ import annotations

import time

import delayq

from . import env, loader
from .report import Result, Target, median, number, ratio, times
from .sizes import Sizes

BACKLOG_TARGET = 1.2
PROCESS_TARGET = 1.5
IMPORTS = env.python("-c", "import redis, peewee, pymysql, typer")
RUN = env.python("-m", "delayq", "run")
BLOCKS = 5  # alternations between the two states per repeat
PARKED_TABLE = "delay_queue_parked"
PARKED_KEY = "bench:parked_schedule"
SCHEDULE_KEY = "delay_queue_job"


def run(sizes: Sizes) -> Result:
    with env.fresh_queue() as queue:
        try:
            load_seconds = _prepare(queue, sizes.idle_pending)
            runs: dict[str, dict[str, list[float]]] = {"empty": {}, "backlog": {}}
            for attempt in range(sizes.repeat):
                env.log(f"idle {attempt + 1}/{sizes.repeat}: 0 and {sizes.idle_pending} pending")
                _measure(queue, sizes, runs)
        finally:
            queue.db.execute_sql(f"DROP TABLE IF EXISTS {PARKED_TABLE}")
    return _result(sizes, runs["empty"], runs["backlog"], load_seconds)


def _prepare(queue: delayq.Queue, count: int) -> float:
    """Park the empty state (a drained queue), then load the backlog as the active one;
    returns the seconds the load took."""
    queue.add(env.HANDLERS, "incr", None, delay=0)
    queue.run()
    queue.db.execute_sql(f"DROP TABLE IF EXISTS {PARKED_TABLE}")
    queue.db.execute_sql(f"CREATE TABLE {PARKED_TABLE} LIKE delay_queue")
    _swap(queue)
    env.log(f"idle: loading {count} future jobs")
    started = time.perf_counter()
    now = time.time()
    loader.load("incr", [now + 3600 + 86400 * i / count for i in range(count)])
    return time.perf_counter() - started


def _swap(queue: delayq.Queue) -> None:
    """Exchange the active state (table and sorted set) with the parked one."""
    queue.db.execute_sql(
        f"RENAME TABLE delay_queue TO delay_queue_swap, {PARKED_TABLE} TO delay_queue, "
        f"delay_queue_swap TO {PARKED_TABLE}"
    )
    client = queue.index.client
    active, parked = client.exists(SCHEDULE_KEY), client.exists(PARKED_KEY)
    if active:
        client.rename(SCHEDULE_KEY, "bench:swap")
    if parked:
        client.rename(PARKED_KEY, SCHEDULE_KEY)
    if active:
        client.rename("bench:swap", PARKED_KEY)


def _measure(queue: delayq.Queue, sizes: Sizes, runs: dict[str, dict[str, list[float]]]) -> None:
    """One repeat: BLOCKS alternations of both states; per state, the median seconds of its
    in-process calls, of its processes and of the import lines run between them, and the
    ratio of those two."""
    calls = max(1, sizes.idle_calls // BLOCKS)
    processes = max(1, sizes.idle_processes // BLOCKS)
    samples: dict[str, dict[str, list[float]]] = {
        state: {"in_process": [], "process": [], "imports": []} for state in runs
    }
    for _ in range(BLOCKS):
        for state in ("backlog", "empty"):  # the backlog is active first
            _sample(queue, calls, processes, samples[state])
            _swap(queue)
    for state, sample in samples.items():
        for key, values in sample.items():
            runs[state].setdefault(key, []).append(median(values))
        runs[state].setdefault("ratio", []).append(
            median(sample["process"]) / median(sample["imports"])
        )


def _sample(queue: delayq.Queue, calls: int, processes: int, into: dict[str, list[float]]) -> None:
    queue.run()  # the first call after a swap opens the renamed table: not timed
    for _ in range(calls):
        started = time.perf_counter()
        report = queue.run()
        into["in_process"].append(time.perf_counter() - started)
        if report.claimed:
            raise RuntimeError(f"idle run claimed {report.claimed} jobs")
    for _ in range(processes):
        into["imports"].append(_wall(IMPORTS))
        into["process"].append(_wall(RUN))


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
