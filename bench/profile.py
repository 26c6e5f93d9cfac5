"""`python -m bench.profile [--n 20000] [--concurrency 1] [--rate 250]`: where the time of one
job goes in dispatch's drain. Loads N due no-op jobs as workload 2 does and drains them twice
with one `delayq run` under py-spy (py-spy's own sampling; the process is not paused):

- with `--idle`, every thread at every sample, waiting or not: the main thread's share of
  samples in a step, times the drain's wall time over N, is that step's wall µs a job;
- with `--gil`, only the thread holding the GIL: a step's samples over the rate and N are the
  µs a job it kept every other thread of the process waiting (the bookkeeping thread's steps,
  marked as such, overlap the handlers' waits but not their Python).

A sample goes to the innermost frame that names a step (STEPS); samples of the main thread
outside the drain are the process's start, the pass's set-up and its exit.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import delayq

from . import env, handlers, loader
from .against import export

# (step, the functions of it, the file they are in), innermost match wins: a frame looks like
# "Class.function (delayq/worker/calls.py:123)".
STEPS: list[tuple[str, str, str]] = [
    ("the call (the handler's INCR)", "incr", "bench/handlers.py"),
    ("claim script (ZRANGEBYSCORE+ZREM in Lua)", "claim_due", "store/index/schedule.py"),
    ("guarded UPDATE leasing the batch", "mark_running", "store/table/leases.py"),
    ("claims noted (order, claimed set)", "leased", "store/index/parts.py"),
    ("missed and dropped checks", "_mark_missed|without_jobs_in_hand", "worker/claims.py"),
    ("journal write (one send)", "write_many", "store/index/journal.py"),
    ("group commit: table", "write_outcomes", "store/table/outcomes.py"),
    ("group commit: Redis (retries, journal, tallies)", "committed", "store/index/parts.py"),
    ("metrics and minutes (tallies)", "tally_of", "worker/group_commits.py"),
    ("waiting on the bookkeeper", "_collect|_hand_over", "worker/group_commits.py"),
    ("waiting on the bookkeeper", "take_upcoming", "worker/drains.py"),
    ("logging and the outcome's announcement", "announce", "worker/calls.py"),
    ("handler resolution (params, allowlist)", "_resolve", "worker/calls.py"),
    ("time limit (setitimer)", "arm|disarm", "worker/interrupts.py"),
    ("job context", "running|finished", "delayq/context.py"),
    ("job context", "_context_of", "worker/calls.py"),
    ("result text and escaping", "_short_result", "worker/calls.py"),
    ("result text and escaping", "storable", "store/table/model.py"),
    ("the outcome record", "_outcome|_failed", "worker/calls.py"),
    ("lease checks and the heartbeat's deadline", "hold_leases", "worker/drains.py"),
    ("fork check", "leave_if_forked", "worker/calls.py"),
    ("the drain's own loop", "_call_waiting|record|pump", "worker/drains.py"),
    ("the drain's own loop", "execute|_execute|_call", "worker/calls.py"),
    ("the drain's own loop", "add_many", "worker/group_commits.py"),
    ("hand-back and clean-up", "_hand_back_the_rest|_flush|close", "worker/drains.py"),
    ("pass start: recovery, orphans, index", "_sweep_and_drain", "worker/runner.py"),
]
FRAME = re.compile(r"^(.*) \((.*):(\d+)\)$")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--n", type=int, default=20000, help="due jobs to drain")
    parser.add_argument("--concurrency", type=int, default=1, help="delayq run -c")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples a second")
    parser.add_argument("--rev", help="profile this earlier commit's tree instead (bench.against)")
    parser.add_argument("--keep", help="also write py-spy's raw stacks to KEEP--idle.txt, ...")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env.check_loopback()
    env.ensure_database()
    env.compile_sources()
    tree = export(args.rev) if args.rev else env.ROOT
    wall, on_main = drain_sampled(args, "--idle", tree)
    _, holding = drain_sampled(args, "--gil", tree)
    print(report(args.n, args.rate, wall, on_main, holding))
    return 0


def drain_sampled(
    args: argparse.Namespace, mode: str, tree: Path
) -> tuple[float, collections.Counter[str]]:
    """One drain of n due no-op jobs under py-spy in `mode` (--idle: every thread at every
    sample, waiting or not; --gil: only the thread holding the GIL); its wall time and the
    samples per step (main thread's, or with --gil any thread's)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    python = sys.executable if tree == env.ROOT else str(tree / ".venv-bench" / "bin" / "python")
    with tempfile.NamedTemporaryFile(suffix=".txt") as raw, env.fresh_queue() as queue:
        now = time.time()
        loader.load("incr", [now - 10 + 10 * i / args.n for i in range(args.n)])
        command = [
            py_spy, "record", mode, "--threads", "--nonblocking", "--format", "raw",
            "--rate", str(args.rate), "--output", raw.name, "--",
            python, "-m", "delayq", "run", "-c", str(args.concurrency),
        ]  # fmt: skip
        child = env.child_env(PYTHONPATH=str(tree))
        started = time.perf_counter()
        subprocess.run(command, cwd=tree, env=child, check=True, capture_output=True)
        wall = time.perf_counter() - started
        succeeded = env.count_status(queue, delayq.Status.SUCCESS)
        counted = int(handlers.client().get(handlers.COUNTER_KEY) or 0)
        if succeeded != args.n or counted != args.n:
            raise SystemExit(f"bench.profile: {succeeded} success rows, counter {counted}")
        if args.keep:
            shutil.copy(raw.name, f"{args.keep}{mode}.txt")
        return wall, steps(Path(raw.name).read_text(), main_only=mode == "--idle")


def steps(raw: str, main_only: bool) -> collections.Counter[str]:
    """Samples per step; those of threads other than the main one marked as such."""
    found: collections.Counter[str] = collections.Counter()
    # py-spy names a thread once Python has; before that (the imports) only by its id.
    main_ids = {line.split(":")[0] for line in raw.splitlines() if ": MainThread;" in line}
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        thread, *frames = stack.split(";")
        is_main = thread.split(":")[0] in main_ids
        if main_only and not is_main:
            continue
        step = step_of(frames)
        if step is None:
            draining = any(re.search(r"\.(pump|_commit) \(", frame) for frame in frames)
            step = "other" if draining else "process start, pass set-up and exit"
        prefix = "" if is_main or main_only else "[bookkeeper] "
        found[prefix + step] += int(count)
    return found


def report(
    n: int,
    rate: int,
    wall: float,
    on_main: collections.Counter[str],
    holding: collections.Counter[str],
) -> str:
    """Per step: the main thread's wall µs per job (its share of the drain's wall time), and
    the µs per job some thread of the step held the GIL (samples / rate / n)."""
    total = sum(on_main.values()) or 1
    lines = [
        f"{n} jobs drained in {wall:.2f} s ({n / wall:,.0f} jobs/s under the profiler), start "
        f"included; µs per job: wall = main thread's share x wall / n, GIL = held by the step",
        f"{'step':56} {'wall':>7} {'GIL':>7}",
    ]
    for step in sorted(on_main.keys() | holding.keys(), key=lambda s: -on_main.get(s, 0)):
        shown_wall = on_main.get(step, 0) / total * wall / n * 1e6
        shown_gil = holding.get(step, 0) / rate / n * 1e6
        lines.append(f"{step:56} {shown_wall:7.1f} {shown_gil:7.1f}")
    lines.append(
        f"{'total':56} {wall / n * 1e6:7.1f} {sum(holding.values()) / rate / n * 1e6:7.1f}"
    )
    return "\n".join(lines)


def step_of(frames: list[str]) -> str | None:
    for frame in reversed(frames):
        parsed = FRAME.match(frame)
        if parsed is None:
            continue
        function, path = parsed.group(1).rpartition(".")[2], parsed.group(2)
        for step, functions, where in STEPS:
            if path.endswith(where) and re.fullmatch(functions, function):
                return step
    return None


if __name__ == "__main__":
    sys.exit(main())
