"""`python -m bench [--quick] [--repeat 3] [--only WORKLOAD]`: delayq's benchmark against
MariaDB + Redis on 127.0.0.1. One human line of figures per workload on stdout, then one JSON
line with every figure, ratio and target; progress goes to stderr. Exits 0 once the figures
are printed, whether or not the targets hold (the JSON says which), 1 if a workload crashed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

import redis

import delayq

from . import aio, dispatch, enqueue, env, idle, io, lateness, load, memory, topologies
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
}
# Run when no --only names them; `topologies` starts ten servers of its own, so only on request.
DEFAULT = [name for name in WORKLOADS if name != "topologies"]


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
        help="run just this workload (repeatable); topologies runs only when named",
    )
    args = parser.parse_args(argv)
    if args.repeat is not None and args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.repeat is not None:
        sizes = dataclasses.replace(sizes, repeat=args.repeat)
    env.check_loopback()
    env.ensure_database()
    env.compile_sources()
    started = time.monotonic()
    results: dict[str, Any] = {}
    failed = False
    for name in args.only or DEFAULT:
        try:
            result = WORKLOADS[name](sizes)
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
    summary = _summary(args, sizes, results, time.monotonic() - started)
    env.clean()
    print(json.dumps(summary, sort_keys=True))
    return 1 if failed else 0


def _summary(
    args: argparse.Namespace, sizes: Sizes, results: dict[str, Any], elapsed: float
) -> dict[str, Any]:
    targets = [
        target["ok"] for result in results.values() for target in result.get("targets", {}).values()
    ]
    return {
        "bench": "delayq",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(),
        "quick": args.quick,
        "repeat": sizes.repeat,
        "sizes": dataclasses.asdict(sizes),
        "elapsed_s": round(elapsed, 1),
        "workloads": results,
        "targets_met": sum(targets),
        "targets_total": len(targets),
    }


def _machine() -> dict[str, Any]:
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
