"""The soak's jobs beyond the plain mix: recurring series, debounced keys, hostile handlers
(and rows with params too deep, written by SQL as other code would), and the probe added to
each queue at the end; with the check of what each must have become."""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peewee import fn

import delayq
from delayq.store.index.keys import schedule_key
from delayq.store.table.model import Job, Status
from tests.conftest import mysql_connect

SOAK = "tests.sample_handlers.soak"
HOSTILE = "tests.sample_handlers.hostile"
PERIOD = 2.0  # seconds between a series' occurrences
DEEP = 150  # levels of nesting in the rows written by SQL: past the 100 delayq accepts
ESCAPED = "\\udcff"  # how a lone surrogate is stored
RAISES = ["KeyboardInterrupt", "SystemExit", "Unraisable", "GeneratorExit"]
PROBE_DEADLINE = 30.0  # seconds a fresh job may wait in a queue once the faults stop


@dataclass
class Extras:
    log: str
    series: int = 0
    versions: dict[int, int] = field(default_factory=dict)  # debounce key -> latest version
    hostile: dict[str, str] = field(default_factory=dict)  # ext -> kind
    debounce_doubles: int = 0  # keys seen with two pending jobs at once


def per_kind(jobs: int) -> int:
    return max(1, jobs // 1000)


def enqueue_extras(
    queue: delayq.Queue,
    jobs: int,
    start: float,
    window: float,
    async_share: float,
    url: str,
    log: str,
) -> Extras:
    extras = Extras(log=log, series=max(3, jobs // 1000))
    for n in range(extras.series):
        data = {"log": log, "n": n}
        queue.add(
            SOAK, "tick", data, at=start + n % 3, every=PERIOD, ext=f"series:{n}", queue="series"
        )
    for key in range(max(3, jobs // 1000)):
        extras.versions[key] = 0
        bounce(queue, extras, key, 0, start + random.uniform(0, window))
    enqueue_hostile(queue, extras, per_kind(jobs), start, window, async_share)
    write_deep_rows(queue, extras, per_kind(jobs), start, window, url)
    return extras


def bounce(queue: delayq.Queue, extras: Extras, key: int, version: int, at: float) -> None:
    """Replace key's pending job (or add one) with `version`, due at `at`. A replace that
    failed on a fault is made again with the same version: it is idempotent."""
    data = {"log": extras.log, "n": f"{key}.{version}"}
    for _ in range(20):
        try:
            queue.add(
                SOAK, "bounce", data, at=at, ext=f"debounce:{key}", queue="debounce", replace=True
            )
        except delayq.BackendUnavailable:
            time.sleep(0.5)
            continue
        extras.versions[key] = version
        return
    raise RuntimeError(f"could not replace debounce:{key}")


def bounce_some(queue: delayq.Queue, extras: Extras) -> None:
    """Move a few debounced keys a little later, and note any key with two pending jobs."""
    for key in random.sample(sorted(extras.versions), min(3, len(extras.versions))):
        bounce(queue, extras, key, extras.versions[key] + 1, time.time() + random.uniform(0.2, 3))
    doubled = (
        Job.select(Job.ext_string)
        .where(Job.status == Status.PENDING, Job.ext_string.startswith("debounce:"))
        .group_by(Job.ext_string)
        .having(fn.COUNT(Job.id) > 1)
    )
    extras.debounce_doubles += doubled.count()


def enqueue_hostile(
    queue: delayq.Queue, extras: Extras, each: int, start: float, window: float, async_share: float
) -> None:
    """Handlers that return lone surrogates, raise BaseExceptions or fork."""
    kinds: list[tuple[str, str, dict[str, Any]]] = [
        ("surrogate", "surrogate_result", {}),
        ("fork", "fork", {}),
    ] + [(f"raise:{name}", "raise_", {"raise": name}) for name in RAISES]
    for kind, method, data in kinds:
        for _ in range(each):
            ext = f"hostile:{len(extras.hostile)}:{kind}"
            plain_or_async = method
            if method != "surrogate_result" and random.random() < async_share:
                plain_or_async = f"{method.rstrip('_')}_async"
            at = start + random.uniform(0, window)
            queue.add(
                HOSTILE,
                plain_or_async,
                {"log": extras.log, **data},
                at=at,
                ext=ext,
                queue="hostile",
            )
            extras.hostile[ext] = kind


def write_deep_rows(
    queue: delayq.Queue, extras: Extras, each: int, start: float, window: float, url: str
) -> None:
    """Rows whose data nests deeper than delayq accepts, INSERTed and ZADDed by hand."""
    data: Any = {"log": extras.log, "n": "deep"}
    for _ in range(DEEP):
        data = [data]
    params = json.dumps({"class": SOAK, "method": "ok", "data": data})
    conn = mysql_connect(url)
    with conn.cursor() as cursor:
        for _ in range(each):
            ext = f"hostile:{len(extras.hostile)}:deep"
            at = start + random.uniform(0, window)
            cursor.execute(
                "INSERT INTO delay_queue (params, ext_string, run_at, queue)"
                " VALUES (%s, %s, %s, %s)",
                (params, ext, at, "hostile"),
            )
            queue.index.client.zadd(schedule_key("hostile"), {str(cursor.lastrowid): at})
            extras.hostile[ext] = "deep"
    conn.close()


def still_open() -> int:
    """Open rows that should finish: all but series (they recur) and the raising chains
    (they climb the ladder for hours); and any running row whose lease lapsed."""
    finishing = ~Job.ext_string.startswith("series:") & ~Job.ext_string.contains(":raise:")
    open_rows = Job.select().where(Job.status.in_([Status.PENDING, Status.RUNNING]) & finishing)
    lapsed = Job.select().where(Job.status == Status.RUNNING, Job.lease_until < time.time())
    return open_rows.count() + lapsed.count()


def probe_queues(queue: delayq.Queue, log: str) -> tuple[int, int]:
    """Add a fresh job to each queue; (queues, how many of them did not run it in time)."""
    names = sorted({row.queue for row in Job.select(Job.queue).distinct()})
    probes = {
        name: queue.add(SOAK, "probe", {"log": log, "n": name}, ext=f"probe:{name}", queue=name)
        for name in names
    }
    deadline = time.monotonic() + PROBE_DEADLINE
    waiting = set(probes.values())
    while waiting and time.monotonic() < deadline:
        time.sleep(0.2)
        done = Job.select(Job.id).where(Job.id.in_(waiting), Job.status == Status.SUCCESS)
        waiting -= {row.id for row in done}
    return len(names), len(waiting)


def executions(log: Path, kind: str) -> tuple[Counter[int], set[str]]:
    """Calls per row id of handler lines of `kind`, and the set of their `n`s."""
    calls: Counter[int] = Counter()
    seen = set()
    for line in log.read_text().splitlines() if log.exists() else []:
        parts = line.split()
        if len(parts) == 6 and parts[0] == kind:
            calls[int(parts[4])] += 1
            seen.add(parts[1])
    return calls, seen


def rows_by_ext(prefix: str) -> dict[str, list[Job]]:
    chains: dict[str, list[Job]] = defaultdict(list)
    for row in Job.select().where(Job.ext_string.startswith(prefix)).order_by(Job.id):
        chains[row.ext_string].append(row)
    return chains


def check_series(extras: Extras, log: Path) -> dict[str, int]:
    """Each series: exactly one pending next occurrence and none running, occurrences due
    whole periods apart, every finished occurrence run (by its handler's log)."""
    calls, _ = executions(log, "tick")
    chains = rows_by_ext("series:")
    ok = runs = lost = duplicates = 0
    for n in range(extras.series):
        rows = chains.get(f"series:{n}", [])
        statuses = Counter(row.status for row in rows)
        succeeded = [row for row in rows if row.status == Status.SUCCESS]
        runs += len(succeeded)
        lost += sum(calls[row.id] == 0 for row in succeeded)
        duplicates += sum(max(calls[row.id] - 1, 0) for row in rows)
        ok += (
            statuses[Status.PENDING] == 1
            and set(statuses) <= {Status.PENDING, Status.SUCCESS}
            and spaced_by_periods([row.run_at for row in rows])
            and all(calls[row.id] for row in succeeded)
        )
    return {"series_ok": ok, "series_runs": runs, "lost": lost, "duplicates": duplicates}


def spaced_by_periods(run_ats: list[float]) -> bool:
    """Occurrences in row order are due later each time, by whole periods."""
    gaps = [b - a for a, b in zip(run_ats, run_ats[1:], strict=False)]
    return all(
        gap >= PERIOD - 0.01 and abs(gap / PERIOD - round(gap / PERIOD)) < 0.01 for gap in gaps
    )


def check_debounce(extras: Extras, log: Path) -> dict[str, int]:
    """Each key: nothing left pending, every finished job run, and its latest version run."""
    calls, seen = executions(log, "bounce")
    chains = rows_by_ext("debounce:")
    ok = lost = duplicates = 0
    for key, version in extras.versions.items():
        rows = chains.get(f"debounce:{key}", [])
        duplicates += sum(max(calls[row.id] - 1, 0) for row in rows)
        ran_latest = f"{key}.{version}" in seen
        lost += not ran_latest
        ok += ran_latest and all(row.status == Status.SUCCESS and calls[row.id] for row in rows)
    return {"debounce_ok": ok, "lost": lost, "duplicates": duplicates}


def check_hostile(extras: Extras) -> int:
    """How many hostile jobs ended as their kind must: surrogates and forks succeeded (the
    surrogate escaped), BaseExceptions failed and climb the ladder, deep rows failed once."""
    chains = rows_by_ext("hostile:")
    return sum(settled(kind, chains.get(ext, [])) for ext, kind in extras.hostile.items())


def settled(kind: str, rows: list[Job]) -> bool:
    if not rows:
        return False
    first = rows[0]
    if kind == "surrogate":
        return (
            len(rows) == 1
            and first.status == Status.SUCCESS
            and first.message == f"wrote report-{ESCAPED}.csv"
        )
    if kind == "fork":
        return len(rows) == 1 and first.status == Status.SUCCESS and first.message == "parent"
    if kind == "deep":
        return (
            len(rows) == 1
            and first.status == Status.FAILED
            and first.message.startswith("bad params")
        )
    name = kind.split(":")[1]
    climbed = all(
        row.status == Status.FAILED
        and row.message.startswith(name)
        and after.retry_times == row.retry_times + 1
        for row, after in zip(rows, rows[1:], strict=False)
    )
    return climbed and len(rows) > 1 and rows[-1].status == Status.PENDING
