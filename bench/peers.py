"""The peers: huey (RedisHuey, one worker thread), rq (its built-in scheduler, `enqueue_in`,
SimpleWorker) and dramatiq (Redis broker, tightest polling), each doing the benchmark's work
on its own Redis database with a job that INCRs a counter or records its lateness.

This module holds the jobs and the producer side; bench/peer_worker.py is the worker process.
Each peer is imported only when it is used, so one that is missing does not stop the others.
"""

from __future__ import annotations

import functools
import subprocess
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import redis

from . import env

COUNTER_KEY = "bench:count"
LATENESS_KEY = "bench:lateness"
RQ_QUEUE = "bench"
# dramatiq polls an idle queue with a jittered backoff capped at its worker timeout (default
# 1000 ms); its backoff floor is 5 ms, so 10 ms is the tightest setting that still backs off.
DRAMATIQ_WORKER_TIMEOUT_MS = 10
# huey's scheduler wakes at most once a second (scheduler_interval is clamped to 1..60 s).
HUEY_SCHEDULER_INTERVAL = 1
WORKER_STARTUP = 1.5  # seconds a worker process gets to boot before lateness jobs are added
IO_WAIT = 0.05


@functools.cache
def client(peer: str) -> redis.Redis:
    return redis.Redis.from_url(env.redis_url(peer))


# --- the jobs ---------------------------------------------------------------------------


def incr(peer: str) -> None:
    client(peer).incr(COUNTER_KEY)


def record_lateness(peer: str, due: float) -> None:
    started = time.time()
    client(peer).rpush(LATENESS_KEY, repr(started - due))


def rq_incr() -> None:
    incr("rq")


def rq_lateness(due: float) -> None:
    record_lateness("rq", due)


def huey_incr() -> None:
    incr("huey")


def huey_lateness(due: float) -> None:
    record_lateness("huey", due)


def sleep_incr(peer: str) -> None:
    """The io workload's job: wait 50 ms as on a remote call, then one INCR."""
    time.sleep(IO_WAIT)
    incr(peer)


def huey_sleep_incr() -> None:
    sleep_incr("huey")


@functools.cache
def huey_tasks() -> dict[str, Any]:
    """The RedisHuey instance ("app") and its two task wrappers, under fixed task names."""
    from huey import RedisHuey

    app = RedisHuey("delayq-bench", url=env.redis_url("huey"))
    return {
        "app": app,
        "incr": app.task(name="bench_incr")(huey_incr),
        "lateness": app.task(name="bench_lateness")(huey_lateness),
        "sleep_incr": app.task(name="bench_sleep_incr")(huey_sleep_incr),
    }


@functools.cache
def dramatiq_actor() -> Any:
    """The dramatiq Redis broker's lateness actor (the broker is `actor.broker`)."""
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=env.redis_url("dramatiq"))
    dramatiq.set_broker(broker)

    def bench_lateness(due: float) -> None:
        record_lateness("dramatiq", due)

    return dramatiq.actor(bench_lateness, broker=broker, max_retries=0)


@functools.cache
def dramatiq_sleep_actor() -> Any:
    """The io workload's dramatiq actor, on the same broker as the lateness one."""
    import dramatiq

    def bench_sleep_incr() -> None:
        sleep_incr("dramatiq")

    return dramatiq.actor(bench_sleep_incr, broker=dramatiq_actor().broker, max_retries=0)


# --- dispatch: N jobs already due, one worker process drains them -----------------------


def dispatch(peer: str, n: int, threads: int = 1) -> float:
    """Seconds of wall time one worker process of `peer` takes to run n already-due jobs;
    with `threads`, on that many worker threads (peer_worker's io mode)."""
    counter = env.flush(peer)
    due_at = SCHEDULE_DISPATCH[peer](n)
    time.sleep(max(0.0, due_at - time.time()))
    if threads == 1:
        return _drained(counter, peer, n, "drain", str(n))
    return _drained(counter, peer, n, "io", str(n), "900", str(threads))


def _drained(counter: redis.Redis, peer: str, n: int, *args: str) -> float:
    """Wall time of `python -m bench.peer_worker PEER ARGS`, once it has run all n jobs."""
    finished = env.run_process(env.python("-m", "bench.peer_worker", peer, *args), 900)
    env.require_ok(finished, f"{peer} worker")
    done = int(counter.get(COUNTER_KEY) or 0)
    if done != n:
        raise RuntimeError(f"{peer} ran {done} of {n} jobs")
    return finished.wall


def _schedule_huey(n: int) -> float:
    """n tasks through the public API with a 1 s delay; the worker starts once they are due
    (it then runs each at once: huey only parks a task on its schedule while it is early)."""
    task = huey_tasks()["incr"]
    for _ in range(n):
        task.schedule(delay=1)
    return time.time() + 1.05


def _schedule_rq(n: int) -> float:
    """n jobs on rq's ScheduledJobRegistry through `enqueue_in`; its scheduler moves them."""
    from rq import Queue

    queue = Queue(RQ_QUEUE, connection=client("rq"))
    for _ in range(n):
        queue.enqueue_in(timedelta(seconds=1), "bench.peers.rq_incr")
    return time.time() + 2.0  # rq's schedule has whole-second scores


SCHEDULE_DISPATCH = {"huey": _schedule_huey, "rq": _schedule_rq}


# --- io: N jobs that each wait 50 ms, one worker process with `threads` threads ----------


def io(peer: str, n: int, threads: int) -> float:
    """Seconds of wall time one worker process of `peer` with `threads` threads takes to run
    n already-due jobs that each wait 50 ms."""
    counter = env.flush(peer)
    due_at = SCHEDULE_IO[peer](n)
    time.sleep(max(0.0, due_at - time.time()))
    return _drained(counter, peer, n, "io", str(n), "900", str(threads))


def _io_huey(n: int) -> float:
    task = huey_tasks()["sleep_incr"]
    for _ in range(n):
        task.schedule(delay=1)
    return time.time() + 1.05


def _io_dramatiq(n: int) -> float:
    """Sent without a delay: already due when the worker starts."""
    actor = dramatiq_sleep_actor()
    for _ in range(n):
        actor.send()
    return time.time()


SCHEDULE_IO = {"huey": _io_huey, "dramatiq": _io_dramatiq}


# --- aio: N jobs that each await 50 ms, one arq worker with max_jobs in flight ----------


async def arq_await_incr(ctx: dict[str, Any]) -> None:
    """The aio workload's arq job: await 50 ms, then one INCR."""
    import asyncio

    await asyncio.sleep(IO_WAIT)
    await ctx["redis"].incr(COUNTER_KEY)


def aio_arq(n: int, max_jobs: int) -> float:
    """Seconds of wall time one arq worker in burst mode takes to run n due jobs."""
    import asyncio

    from arq import create_pool

    counter = env.flush("arq")

    async def enqueue() -> None:
        pool = await create_pool(arq_settings())
        for _ in range(n):
            await pool.enqueue_job("arq_await_incr")
        await pool.aclose()

    asyncio.run(enqueue())
    return _drained(counter, "arq", n, "aio", str(n), "900", str(max_jobs))


def arq_settings() -> Any:
    from arq.connections import RedisSettings

    return RedisSettings.from_dsn(env.redis_url("arq"))


# --- lateness: N jobs due evenly over a spread, a worker started before the first -------


def lateness(peer: str, n: int, spread: float, limit: float) -> list[float]:
    """(start - due) in seconds of each of n jobs due evenly over `spread` seconds that ran
    within `limit` seconds of the worker's start."""
    recorded = env.flush(peer)
    worker = subprocess.Popen(
        env.python("-m", "bench.peer_worker", peer, "late", str(n), str(limit)),
        cwd=env.ROOT,
        env=env.child_env(),
        stdout=subprocess.DEVNULL,
    )
    try:
        time.sleep(WORKER_STARTUP)
        SCHEDULE_LATENESS[peer](env.due_times(n, spread, env.lead_for(n)))
        worker.wait(timeout=limit + 60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    if worker.returncode != 0:
        raise RuntimeError(f"{peer} worker exited {worker.returncode}")
    return [float(value) for value in recorded.lrange(LATENESS_KEY, 0, -1)]


def _late_huey(dues: list[float]) -> None:
    task = huey_tasks()["lateness"]
    for due in dues:
        task.schedule(args=(due,), eta=datetime.fromtimestamp(due, timezone.utc))


def _late_rq(dues: list[float]) -> None:
    from rq import Queue

    queue = Queue(RQ_QUEUE, connection=client("rq"))
    for due in dues:
        queue.enqueue_at(datetime.fromtimestamp(due, timezone.utc), "bench.peers.rq_lateness", due)


def _late_dramatiq(dues: list[float]) -> None:
    from dramatiq.common import current_millis

    actor = dramatiq_actor()
    for due in dues:
        # dues are whole milliseconds, and the eta dramatiq computes is never before them
        actor.send_with_options(args=(due,), delay=max(0, round(due * 1000) - current_millis()))


SCHEDULE_LATENESS = {"huey": _late_huey, "rq": _late_rq, "dramatiq": _late_dramatiq}
