"""Workload 1, enqueue: N jobs due in an hour through the Python API, one `q.add` at a time
and in one `q.add_many`, against the baseline's one INSERT plus one ZADD per job."""

from __future__ import annotations

import time

import redis

import delayq

from . import baseline, env
from .report import Result, Target, median, number, ratio, times
from .sizes import Sizes

DELAY = 3600.0
BULK_TARGET = 50_000  # jobs/s


def run(sizes: Sizes) -> Result:
    n = sizes.enqueue
    rates: dict[str, list[float]] = {"add": [], "add_many": [], "baseline": []}
    errors: dict[str, str] = {}
    for attempt in range(sizes.repeat):
        env.log(f"enqueue {attempt + 1}/{sizes.repeat}: {n} jobs")
        rates["add"].append(n / _one_at_a_time(n))
        try:
            rates["add_many"].append(n / _bulk(n))
        except Exception as exc:  # noqa: BLE001 - a broken bulk path is a finding, not a crash
            errors["add_many"] = f"{type(exc).__name__}: {exc}"
            env.log(f"enqueue: q.add_many failed: {errors['add_many']}")
        rates["baseline"].append(n / _baseline(n))
    add, base = median(rates["add"]), median(rates["baseline"])
    bulk = median(rates["add_many"]) if rates["add_many"] else None
    figures = {
        "n": n,
        "add_jobs_per_s": add,
        "add_many_jobs_per_s": bulk,
        "baseline_jobs_per_s": base,
        "add_vs_baseline": ratio(add, base),
        "add_many_vs_baseline": ratio(bulk, base),
        "runs": rates,
        "errors": errors,
    }
    line = (
        f"enqueue   N={n}: delayq add {number(add)}/s, add_many "
        f"{errors.get('add_many', 'failed') if bulk is None else number(bulk) + '/s'}; "
        f"baseline (INSERT+ZADD per job) {number(base)}/s -> add {times(ratio(add, base))}, "
        f"add_many {times(ratio(bulk, base))}"
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
