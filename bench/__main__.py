"""`python -m bench [--quick] [--repeat 3] [--only WORKLOAD]`: delayq's benchmark against
MariaDB + Redis on 127.0.0.1. One human line of figures per workload on stdout, then one JSON
line with every figure, ratio and target; progress goes to stderr. Exits 0 once the figures
are printed, whether or not the targets hold (the JSON says which), 1 if a workload crashed.

`--only scale --jobs N [--keep DIR | --reuse DIR] [--buffer-pool SIZE]`: the same figures
on N pending + N finished rows as on an almost empty table, on servers of its own
(bench/scale.py); with `--embedded`, on delayq's embedded default (SQLite and its own Redis).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import redis

import delayq

from . import (
    aio,
    databases,
    dispatch,
    enqueue,
    env,
    flow,
    idle,
    io,
    lateness,
    load,
    memory,
    scale,
    topologies,
)
from .report import Result
from .sizes import FULL, QUICK, Sizes

WORKLOADS: dict[str, Callable[[Sizes], Result]] = {
    "enqueue": enqueue.run,
    "dispatch": dispatch.run,
    "idle": idle.run,
    "memory": memory.run,
    "lateness": lateness.run,
    "io": io.run,
    "aio": aio.run,
    "load": load.run,
    "topologies": topologies.run,
    "databases": databases.run,
    "scale": scale.run,  # given its Options by _workload
    "flow": flow.run,
}
# Run when no --only names them; `topologies` starts ten servers of its own, `databases`
# five, `scale` loads millions of rows into two of its own, and `flow` measures only flow
# control's own cost, so only on request.
DEFAULT = [name for name in WORKLOADS if name not in ("topologies", "databases", "scale", "flow")]
# Workloads that use no shared server at all: alone, nothing on 3306 or 6379 is touched.
OWN_SERVERS = {"scale"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small N: a smoke test (< 1 min)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="runs per figure, medians reported (default 3; 1 with --quick)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(WORKLOADS),
        help=(
            "run just this workload (repeatable); topologies, databases, scale and flow "
            "run only when named"
        ),
    )
    _scale_options(parser.add_argument_group("scale (with --only scale)"))
    args = parser.parse_args(argv)
    if args.repeat is not None and args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.keep and args.reuse:
        parser.error("--keep and --reuse exclude each other: --reuse keeps its directory")
    if args.embedded and args.buffer_pool:
        parser.error("--buffer-pool sizes MariaDB's buffer pool; --embedded uses SQLite")
    try:
        args.buffer_pool = args.buffer_pool and scale.parse_size(args.buffer_pool)
    except ValueError as exc:
        parser.error(f"--buffer-pool: {exc}")
    return args


def _scale_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--jobs",
        type=int,
        default=None,
        help=f"N pending jobs and N finished rows (default {scale.JOBS:,}; "
        f"{scale.JOBS_QUICK:,} with --quick)",
    )
    group.add_argument(
        "--embedded",
        action="store_true",
        help="SQLite and the embedded Redis, as delayq's default starts them, not MariaDB",
    )
    group.add_argument(
        "--keep", type=Path, metavar="DIR", help="keep the servers' data in DIR (new or empty)"
    )
    group.add_argument(
        "--reuse", type=Path, metavar="DIR", help="measure again on the data --keep left in DIR"
    )
    group.add_argument(
        "--buffer-pool",
        metavar="SIZE",
        help="InnoDB buffer pool, e.g. 4G (default: room for the indexes, not the data)",
    )
    group.add_argument(
        "--stream-seconds",
        type=float,
        default=None,
        help="how long the steady stream of due jobs lasts (default 10; 3 with --quick)",
    )


def _workload(name: str, args: argparse.Namespace) -> Callable[[Sizes], Result]:
    if name != "scale":
        return WORKLOADS[name]
    options = scale.Options(
        jobs=args.jobs or (0 if args.reuse else scale.JOBS_QUICK if args.quick else scale.JOBS),
        keep=args.keep,
        reuse=args.reuse,
        buffer_pool=args.buffer_pool or None,
        stream_seconds=args.stream_seconds or (3.0 if args.quick else 10.0),
        embedded=args.embedded,
    )
    return functools.partial(scale.run, options=options)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.repeat is not None:
        sizes = dataclasses.replace(sizes, repeat=args.repeat)
    selected = args.only or DEFAULT
    shared = not set(selected) <= OWN_SERVERS
    env.check_loopback()
    if shared:
        env.ensure_database()
    env.compile_sources()
    started = time.monotonic()
    results: dict[str, Any] = {}
    failed = False
    for name in selected:
        try:
            result = _workload(name, args)(sizes)
        except Exception as exc:  # noqa: BLE001 - report it and go on to the next workload
            traceback.print_exc()
            print(f"{name:<9} failed: {type(exc).__name__}: {exc}", flush=True)
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            failed = True
            continue
        print(result.human(), flush=True)
        results[name] = {
            "figures": result.figures,
            "targets": {t.name: t.as_json() for t in result.targets},
        }
    summary = _summary(args, sizes, results, time.monotonic() - started, shared)
    if shared:
        env.clean()
    print(json.dumps(summary, sort_keys=True))
    return 1 if failed else 0


def _summary(
    args: argparse.Namespace,
    sizes: Sizes,
    results: dict[str, Any],
    elapsed: float,
    shared: bool,
) -> dict[str, Any]:
    targets = [
        target["ok"] for result in results.values() for target in result.get("targets", {}).values()
    ]
    return {
        "bench": "delayq",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(shared),
        "quick": args.quick,
        "repeat": sizes.repeat,
        "sizes": dataclasses.asdict(sizes),
        "elapsed_s": round(elapsed, 1),
        "workloads": results,
        "targets_met": sum(targets),
        "targets_total": len(targets),
    }


def _machine(shared: bool) -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),  # at the end: other users of a shared machine
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    for package in ("delayq", "huey", "rq", "dramatiq", "arq", "redis", "peewee", "PyMySQL"):
        try:
            info[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            info[package] = None
    if not shared:  # the workloads name the servers of their own
        return info
    try:
        info["redis_server"] = redis.Redis.from_url(env.redis_url("delayq")).info("server")[
            "redis_version"
        ]
        with delayq.connect(env.settings()) as queue:
            info["mariadb_server"] = queue.db.execute_sql("SELECT VERSION()").fetchone()[0]
    except Exception as exc:  # noqa: BLE001 - versions are a nicety
        info["versions_error"] = str(exc)
    return info


if __name__ == "__main__":
    sys.exit(main())
