"""`python -m bench.threads [--n 20000] [--rounds 2] [--threads 8]`: what running quick jobs on
many threads costs, for delayq and for a peer, against the bare floor. N due no-op jobs (each
INCRs Redis once) are drained by:

- delayq: one `delayq run`, bare and with `--concurrency THREADS` (as bench.drain runs it);
- huey: one consumer with one worker thread, and with THREADS;
- bare threads: no runner at all, 1 and THREADS Python threads taking the same INCRs from one
  shared list on one connection pool: the floor of any design that makes these calls on that
  many threads at once.

Each is measured 1 and THREADS alternated, round by round; the table gives the medians and
THREADS against 1 for each. Under CPython the threads take turns on one interpreter lock, and
a call this short overlaps nothing worth the turns: every line comes out below 1.0, and
delayq's ratio is to be read against the other two, not against 1.0.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from . import env, handlers, peers
from .drain import drain


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.threads", description=__doc__)
    parser.add_argument("--n", type=int, default=20000, help="due jobs a drain (default 20000)")
    parser.add_argument("--rounds", type=int, default=2, help="drains of each (default 2)")
    parser.add_argument("--threads", type=int, default=8, help="threads to compare with 1")
    args = parser.parse_args(argv)
    if args.n < 1 or args.rounds < 1 or args.threads < 2:
        parser.error("--n and --rounds must be at least 1, --threads at least 2")
    return args


def delayq_rate(n: int, threads: int) -> float:
    variant = "" if threads == 1 else f"--concurrency {threads}"
    return drain(env.ROOT, variant, n).rate


def huey_rate(n: int, threads: int) -> float:
    return n / peers.dispatch("huey", n, threads)


def bare_rate(n: int, threads: int) -> float:
    """n INCRs made by `threads` threads taking them from one list, as fast as they go."""
    client = handlers.client()
    client.delete(handlers.COUNTER_KEY)
    remaining = iter(range(n))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if next(remaining, None) is None:
                    return
            client.incr(handlers.COUNTER_KEY)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - started
    counted = int(client.get(handlers.COUNTER_KEY) or 0)
    if counted != n:
        raise RuntimeError(f"bare threads: the counter is at {counted}, not {n}")
    return n / wall


RUNNERS = {"delayq": delayq_rate, "huey": huey_rate, "bare threads": bare_rate}


def table(found: dict[tuple[str, int], list[float]], threads: int) -> str:
    lines = [f"{'runner':14} {'1 thread':>10} {f'{threads} threads':>11} {'ratio':>6}"]
    for runner in RUNNERS:
        one = statistics.median(found[runner, 1])
        many = statistics.median(found[runner, threads])
        lines.append(f"{runner:14} {one:>10,.0f} {many:>11,.0f} {many / one:>6.3f}")
    lines.append("jobs/s, medians over the rounds; ratio: the many threads against one")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env.check_loopback()
    env.ensure_database()
    env.compile_sources()
    runs = [(runner, count) for runner in RUNNERS for count in (1, args.threads)]
    found: dict[tuple[str, int], list[float]] = {run: [] for run in runs}
    for round_number in range(args.rounds):
        for runner, count in runs if round_number % 2 == 0 else reversed(runs):
            rate = RUNNERS[runner](args.n, count)
            found[runner, count].append(rate)
            env.log(f"round {round_number + 1}/{args.rounds} {runner} x{count}: {rate:,.0f} jobs/s")
    print(table(found, args.threads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
