"""`python -m bench.peer_worker PEER drain N` / `PEER late N LIMIT` / `PEER io N LIMIT
THREADS`: one worker process of a peer. `drain` and `io` exit as soon as N jobs have run
(their wall time is the dispatch or io figure; `io` runs THREADS worker threads); `late`
exits when N jobs have run or LIMIT seconds have passed.

The process exits with os._exit once the work is done: a worker's own shutdown (huey joins
threads blocked in BRPOP for up to a second) is not part of the work being measured.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from . import peers

POLL = 0.05


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("drain", "late", "io", "aio"):
        print(
            "usage: python -m bench.peer_worker PEER drain N | PEER late N LIMIT"
            " | PEER io N LIMIT THREADS | arq aio N LIMIT MAX_JOBS",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=logging.WARNING)
    peer, mode, n = argv[0], argv[1], int(argv[2])
    limit = float(argv[3]) if mode in ("late", "io", "aio") else 900.0
    threads = int(argv[4]) if mode in ("io", "aio") else 1
    key = peers.LATENESS_KEY if mode == "late" else peers.COUNTER_KEY
    WORKERS[peer](n, limit, key, threads)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _huey(n: int, limit: float, key: str, threads: int) -> None:
    from huey.consumer import Consumer
    from huey.signals import SIGNAL_COMPLETE

    app = peers.huey_tasks()["app"]
    done = threading.Event()
    completed = [0]

    @app.signal(SIGNAL_COMPLETE)
    def _count(signal_name: str, task: object) -> None:
        completed[0] += 1
        if completed[0] >= n:
            done.set()

    consumer = Consumer(
        app,
        workers=threads,
        worker_type="thread",
        periodic=False,
        scheduler_interval=peers.HUEY_SCHEDULER_INTERVAL,
        check_worker_health=False,
    )
    consumer.start()
    done.wait(limit)


def _rq(n: int, limit: float, key: str, threads: int) -> None:
    from rq import Queue, SimpleWorker

    connection = peers.client("rq")
    worker = SimpleWorker([Queue(peers.RQ_QUEUE, connection=connection)], connection=connection)
    # SimpleWorker's job time limits own SIGALRM; stop it with SIGTERM (a warm shutdown).
    timer = threading.Timer(limit, os.kill, (os.getpid(), signal.SIGTERM))
    timer.daemon = True
    timer.start()
    worker.work(with_scheduler=True, max_jobs=n, logging_level="WARNING")


def _dramatiq(n: int, limit: float, key: str, threads: int) -> None:
    from dramatiq import Worker

    peers.dramatiq_sleep_actor()  # declares the io actor on the broker
    broker = peers.dramatiq_actor().broker
    worker = Worker(broker, worker_threads=threads, worker_timeout=peers.DRAMATIQ_WORKER_TIMEOUT_MS)
    worker.start()
    deadline = time.monotonic() + limit
    recorded = peers.client("dramatiq")
    while time.monotonic() < deadline and _done(recorded, key) < n:
        time.sleep(POLL)
    worker.stop(timeout=1000)


def _done(client: object, key: str) -> int:
    """Jobs done: the counter's value, or the length of the lateness list."""
    if key == peers.COUNTER_KEY:
        return int(client.get(key) or 0)  # type: ignore[attr-defined]
    return int(client.llen(key))  # type: ignore[attr-defined]


def _arq(n: int, limit: float, key: str, max_jobs: int) -> None:
    """Burst mode: the worker returns once the queue is empty."""
    from arq.worker import Worker

    worker = Worker(
        functions=[peers.arq_await_incr],
        redis_settings=peers.arq_settings(),
        burst=True,
        max_jobs=max_jobs,
        handle_signals=False,
        keep_result=0,
        poll_delay=0.01,
    )
    worker.run()


WORKERS = {"huey": _huey, "rq": _rq, "dramatiq": _dramatiq, "arq": _arq}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
