"""`python -m bench.peer_worker PEER drain N` / `PEER late N LIMIT`: one worker process of a
peer. `drain` exits as soon as N jobs have run (its wall time is the dispatch figure); `late`
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
    if len(argv) < 3 or argv[1] not in ("drain", "late"):
        print(
            "usage: python -m bench.peer_worker PEER drain N | PEER late N LIMIT", file=sys.stderr
        )
        return 2
    logging.basicConfig(level=logging.WARNING)
    peer, mode, n = argv[0], argv[1], int(argv[2])
    limit = float(argv[3]) if mode == "late" else 900.0
    key = peers.COUNTER_KEY if mode == "drain" else peers.LATENESS_KEY
    WORKERS[peer](n, limit, key)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _huey(n: int, limit: float, key: str) -> None:
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
        workers=1,
        worker_type="thread",
        periodic=False,
        scheduler_interval=peers.HUEY_SCHEDULER_INTERVAL,
        check_worker_health=False,
    )
    consumer.start()
    done.wait(limit)


def _rq(n: int, limit: float, key: str) -> None:
    from rq import Queue, SimpleWorker

    connection = peers.client("rq")
    worker = SimpleWorker([Queue(peers.RQ_QUEUE, connection=connection)], connection=connection)
    # SimpleWorker's job time limits own SIGALRM; stop it with SIGTERM (a warm shutdown).
    timer = threading.Timer(limit, os.kill, (os.getpid(), signal.SIGTERM))
    timer.daemon = True
    timer.start()
    worker.work(with_scheduler=True, max_jobs=n, logging_level="WARNING")


def _dramatiq(n: int, limit: float, key: str) -> None:
    from dramatiq import Worker

    broker = peers.dramatiq_actor().broker
    worker = Worker(broker, worker_threads=1, worker_timeout=peers.DRAMATIQ_WORKER_TIMEOUT_MS)
    worker.start()
    deadline = time.monotonic() + limit
    recorded = peers.client("dramatiq")
    while time.monotonic() < deadline and recorded.llen(key) < n:
        time.sleep(POLL)
    worker.stop(timeout=1000)


WORKERS = {"huey": _huey, "rq": _rq, "dramatiq": _dramatiq}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
