"""Workload 1, enqueue: N jobs due in ten minutes through the Python API, one `q.add` at a time,
in one `q.add_many` and by 100 asyncio tasks each awaiting `aq.add` in turn, against the
baseline's one INSERT plus one ZADD per job."""

from __future__ import annotations

import asyncio
import time

import redis

import delayq

from . import baseline, env
from .report import Result, Target, median, number, ratio, times
from .sizes import Sizes

# Due within the shipped horizon (an hour), so that every add writes its schedule entry, as
# the baseline's INSERT + ZADD does: a job due beyond it is written to the table alone.
DELAY = 600.0
BULK_TARGET = 50_000  # jobs/s
TASKS = 100  # asyncio tasks adding at once, as a busy web application's handlers


def run(sizes: Sizes) -> Result:
    n = sizes.enqueue
    rates: dict[str, list[float]] = {"add": [], "add_many": [], "async_add": [], "baseline": []}
    errors: dict[str, str] = {}
    for attempt in range(sizes.repeat):
        env.log(f"enqueue {attempt + 1}/{sizes.repeat}: {n} jobs")
        rates["add"].append(n / _one_at_a_time(n))
        try:
            rates["add_many"].append(n / _bulk(n))
        except Exception as exc:  # noqa: BLE001 - a broken bulk path is a finding, not a crash
            errors["add_many"] = f"{type(exc).__name__}: {exc}"
            env.log(f"enqueue: q.add_many failed: {errors['add_many']}")
        rates["async_add"].append(n / _from_asyncio(n))
        rates["baseline"].append(n / _baseline(n))
    add, base = median(rates["add"]), median(rates["baseline"])
    async_add = median(rates["async_add"])
    bulk = median(rates["add_many"]) if rates["add_many"] else None
    figures = {
        "n": n,
        "add_jobs_per_s": add,
        "add_many_jobs_per_s": bulk,
        "baseline_jobs_per_s": base,
        "add_vs_baseline": ratio(add, base),
        "add_many_vs_baseline": ratio(bulk, base),
        "async_add_jobs_per_s": async_add,
        "async_add_vs_add": ratio(async_add, add),
        "runs": rates,
        "errors": errors,
    }
    line = (
        f"enqueue   N={n}: delayq add {number(add)}/s, add_many "
        f"{errors.get('add_many', 'failed') if bulk is None else number(bulk) + '/s'}; "
        f"baseline (INSERT+ZADD per job) {number(base)}/s -> add {times(ratio(add, base))}, "
        f"add_many {times(ratio(bulk, base))}; async add from {TASKS} tasks "
        f"{number(async_add)}/s -> {times(ratio(async_add, add))} add"
    )
    return Result(line, figures, [Target("bulk jobs/s", bulk, ">=", BULK_TARGET)])


def _one_at_a_time(n: int) -> float:
    with env.fresh_queue() as queue:
        started = time.perf_counter()
        for _ in range(n):
            queue.add(env.HANDLERS, "incr", None, delay=DELAY)
        elapsed = time.perf_counter() - started
        _check_pending(queue, n)
    return elapsed


def _bulk(n: int) -> float:
    with env.fresh_queue() as queue:
        specs = [delayq.JobSpec(env.HANDLERS, "incr", None, delay=DELAY) for _ in range(n)]
        started = time.perf_counter()
        queue.add_many(specs)
        elapsed = time.perf_counter() - started
        _check_pending(queue, n)
    return elapsed


def _from_asyncio(n: int) -> float:
    with env.fresh_queue() as queue:
        elapsed = asyncio.run(_add_from_tasks(n))
        _check_pending(queue, n)
    return elapsed


async def _add_from_tasks(n: int) -> float:
    async with delayq.connect_async(env.settings()) as aq:
        await aq.reach()  # one thread connects before the clock starts, the rest at their first add

        async def task(first: int) -> None:
            for _ in range(first, n, TASKS):
                await aq.add(env.HANDLERS, "incr", None, delay=DELAY)

        started = time.perf_counter()
        await asyncio.gather(*(task(first) for first in range(TASKS)))
        return time.perf_counter() - started


def _baseline(n: int) -> float:
    with env.fresh_queue() as queue:
        db = baseline.connect_mysql(env.DATABASE_URL)
        client = redis.Redis.from_url(env.redis_url("delayq"))
        started = time.perf_counter()
        for _ in range(n):
            baseline.add(db, client, env.HANDLERS, "incr", time.time() + DELAY)
        elapsed = time.perf_counter() - started
        db.close()
        _check_pending(queue, n)
    return elapsed


def _check_pending(queue: delayq.Queue, n: int) -> None:
    rows = env.count_status(queue, delayq.Status.PENDING)
    indexed = queue.index.schedule.size("default")
    if rows != n or indexed != n:
        raise RuntimeError(
            f"enqueue wrote {rows} pending rows and {indexed} index entries, not {n}"
        )
