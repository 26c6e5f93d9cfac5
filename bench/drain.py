"""`python -m bench.drain [REV ...] [--n 20000] [--rounds 3] [--variant "-c 8" ...]`: dispatch's
drain alone, one `delayq run` of N due no-op jobs (each INCRs Redis once), for this checkout and
each REV (exported with a virtualenv of its own, as bench.against does), alternated round by
round so that every tree meets the same load. Each tree creates its own table (`delayq init`);
the jobs are loaded as workload 2 loads them.

Per tree and variant (extra `delayq run` arguments; the default runs it bare) it prints the
median jobs/s, the runner's CPU µs a job (its own rusage, children included: what a busy
machine inflates least), Redis's (INFO's used_cpu) and MariaDB's (from /proc, when the server
runs here), each with its ratio to the first REV (or to this checkout when no REV is given),
and the machine's busy cores meanwhile. The servers' figures count whatever else they serve
meanwhile: on private servers (BENCH_REDIS_URL, BENCH_DATABASE_URL) they are the drain's own.
No peers: a regression between two commits shows in a few minutes.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from . import env, handlers, loader
from .against import export
from .baseline import connect_mysql

THIS = "this checkout"


class Unsupported(Exception):
    """An earlier tree's `delayq run` does not know a variant's options."""


@dataclass
class Drained:
    rate: float  # jobs/s, from spawn to exit
    cpu_us: float  # the runner's user + system CPU a job
    redis_us: float  # the Redis server's CPU a job
    database_us: float  # the MariaDB server's, when it runs here (0.0 where it cannot be read)
    busy_cores: float = 0.0  # the whole machine's, on average during the drain


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.drain", description=__doc__)
    parser.add_argument("revs", nargs="*", metavar="REV", help="earlier commits to compare")
    parser.add_argument("--n", type=int, default=20000, help="due jobs a drain (default 20000)")
    parser.add_argument("--rounds", type=int, default=3, help="drains of each (default 3)")
    parser.add_argument(
        "--variant",
        action="append",
        help='`delayq run` arguments to measure as well, e.g. "-c 8" or "-p 2" (repeatable)',
    )
    args = parser.parse_args(argv)
    if args.n < 1 or args.rounds < 1:
        parser.error("--n and --rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env.check_loopback()
    env.ensure_database()
    env.compile_sources()
    trees = {rev: export(rev) for rev in args.revs}
    trees[THIS] = env.ROOT
    variants = [""] + (args.variant or [])
    runs = [(name, variant) for name in trees for variant in variants]
    found: dict[tuple[str, str], list[Drained]] = {run: [] for run in runs}
    for round_number in range(args.rounds):
        for name, variant in list(runs if round_number % 2 == 0 else reversed(runs)):
            try:
                drained = drain(trees[name], variant, args.n)
            except Unsupported as exc:
                env.log(f"{name} {variant}: not measured, {exc}")
                runs.remove((name, variant))
                del found[name, variant]
                continue
            found[name, variant].append(drained)
            env.log(
                f"round {round_number + 1}/{args.rounds} {name} {variant or '(bare)'}: "
                f"{drained.rate:,.0f} jobs/s, CPU {drained.cpu_us:.1f} µs a job"
            )
    print(table(found, next(iter(trees))))
    return 0


def drain(tree: Path, variant: str, n: int) -> Drained:
    """One `delayq run` of `tree` draining n due no-op jobs, checked: n ran."""
    python = sys.executable if tree == env.ROOT else str(tree / ".venv-bench" / "bin" / "python")
    child = env.child_env(PYTHONPATH=str(tree))
    db = connect_mysql(env.DATABASE_URL)
    try:
        with db.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS delay_queue")  # each tree makes its own
    finally:
        db.close()
    server = env.flush("delayq")
    init = [python, "-m", "delayq", "init"]
    subprocess.run(init, cwd=tree, env=child, check=True, capture_output=True)
    now = time.time()
    loader.load("incr", [now - 10 + 10 * i / n for i in range(n)])
    redis_before, database_before = redis_cpu(server), database_cpu()
    command = [python, "-m", "delayq", "run", "--max-seconds", "600", *shlex.split(variant)]
    finished = env.run_process(command, 900.0, child, cwd=tree)
    if finished.returncode == 2 and "No such option" in finished.stderr:
        raise Unsupported(f"its `delayq run` has no {variant!r}")
    env.require_ok(finished, f"{tree}: {shlex.join(command)}")
    redis_used, database_used = redis_cpu(server) - redis_before, database_cpu() - database_before
    counted = int(handlers.client().get(handlers.COUNTER_KEY) or 0)
    if counted != n:
        raise RuntimeError(f"{tree} {variant}: the counter is at {counted}, not {n}")
    per_job = [used / n * 1e6 for used in (finished.cpu_s, redis_used, database_used)]
    return Drained(n / finished.wall, *per_job, busy_cores=finished.busy_cores or 0.0)


def database_cpu() -> float:
    """CPU seconds the MariaDB server has used, read from /proc by the pid file it names;
    0.0 where that cannot be read (a server in a container, another user's)."""
    db = connect_mysql(env.DATABASE_URL)
    try:
        with db.cursor() as cursor:
            cursor.execute("SELECT @@pid_file")
            pid_file = str(cursor.fetchone()[0])
        pid = Path(pid_file).read_text().strip()
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (OSError, ValueError):
        return 0.0
    finally:
        db.close()
    # utime and stime, the 14th and 15th fields (the 12th and 13th after the name)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def table(found: dict[tuple[str, str], list[Drained]], base: str) -> str:
    def median(name: str, variant: str, field: str) -> float:
        return statistics.median(getattr(one, field) for one in found[name, variant])

    lines = [
        f"{'tree':16} {'run':8} {'jobs/s':>8} {'ratio':>6} {'CPU µs/job':>11} {'ratio':>6} "
        f"{'Redis µs/job':>12} {'ratio':>6} {'MariaDB µs/job':>14} {'ratio':>6} {'vs bare':>7} "
        f"{'cores busy':>10}"
    ]
    for name, variant in found:
        cells = [f"{name[:16]:16} {variant or 'bare':8}"]
        for field, width, shown in (
            ("rate", 8, ",.0f"),
            ("cpu_us", 11, ".1f"),
            ("redis_us", 12, ".1f"),
            ("database_us", 14, ".1f"),
        ):
            value = median(name, variant, field)
            against = median(base, variant, field) if (base, variant) in found else 0.0
            ratio = f"{value / against:6.3f}" if against else f"{'-':>6}"
            cells.append(f"{value:{width}{shown}} {ratio}")
        # A variant's jobs/s against the same tree's bare run: -c 8 no slower than -c 1?
        cells.append(f"{median(name, variant, 'rate') / median(name, '', 'rate'):7.3f}")
        cells.append(f"{median(name, variant, 'busy_cores'):10.2f}")
        lines.append(" ".join(cells))
    lines.append(f"medians over the rounds; ratios against {base} in the same run, per variant")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
