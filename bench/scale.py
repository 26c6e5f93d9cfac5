"""Workload `scale` (only when asked for: `python -m bench --only scale --jobs N`): is delayq as
quick with N pending jobs and N finished rows as with an almost empty table? It starts a
MariaDB and a Redis of its own (bench/servers.py) in a directory under /var/tmp, measures
everything on a table of SMALL pending + SMALL finished rows, loads the big one (N pending
through `Queue.add_many`, timed; N finished by INSERT, not timed) and measures it all again
(bench/scale_measure.py, bench/scale_loss.py), then prints both side by side with the ratio
and the issue's targets.

`--keep DIR` keeps the servers' data in DIR; `--reuse DIR` starts them on it again and skips
the load, so the figures can be measured again after a change (add_many is then timed on a
sample of N/10 jobs added at depth and taken out again). The servers are stopped and a
temporary directory removed whatever happens (try/finally).

`--embedded`: the same on delayq's embedded default, SQLite and the embedded Redis, each table
in a home of its own (bench/scale_embedded.py).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import env, scale_embedded, scale_load, scale_loss, scale_measure, scale_report
from .report import Result
from .scale_measure import Site
from .servers import PrivateMariaDB, PrivateRedis
from .sizes import Sizes

SMALL = 1_000
JOBS, JOBS_QUICK = 10_000_000, 10_000  # the size, and --quick's
META = "scale.json"
LARGE_DB, SMALL_DB = "delayq_scale", "delayq_small"
LARGE_REDIS_DB, SMALL_REDIS_DB = 0, 1
POOL_STEP = 128 * 1024 * 1024
INDEX_BYTES_PER_ROW = 170  # delay_queue's indexes took 120-133 a row at N=1M: room to spare


@dataclass(frozen=True)
class Options:
    jobs: int  # with reuse: 0, or what the kept table must hold
    keep: Path | None = None
    reuse: Path | None = None
    buffer_pool: int | None = None  # bytes; None: sized from the jobs
    stream_seconds: float = 10.0
    embedded: bool = False  # SQLite and the embedded Redis instead of MariaDB and a Redis


def parse_size(text: str) -> int:
    """'4G', '512M', '1073741824' -> bytes."""
    match = re.fullmatch(r"(\d+)([KMG]?)B?", text.strip().upper())
    if not match:
        raise ValueError(f"{text!r} is not a size such as 512M or 4G")
    return int(match[1]) * 1024 ** " KMG".index(match[2] or " ")


def default_pool(jobs: int) -> int:
    """Room for the indexes of 2N rows but not for the table's data, in whole 128 MiB."""
    wanted = 2 * (jobs + SMALL) * INDEX_BYTES_PER_ROW
    return max(POOL_STEP, -(-wanted // POOL_STEP) * POOL_STEP)


@contextlib.contextmanager
def phase(name: str, started: float) -> Iterator[None]:
    env.log(f"scale: {name} ({time.monotonic() - started:.0f}s in)")
    began = time.monotonic()
    yield
    env.log(f"scale: {name} took {time.monotonic() - began:.1f}s")


def run(sizes: Sizes, options: Options | None = None) -> Result:
    options = options or Options(JOBS)
    workdir, meta = _workdir(options)
    jobs = int(meta["jobs"])
    pool = None if options.embedded else options.buffer_pool or default_pool(jobs)
    small, large = _sites(options, workdir, pool, sizes.repeat)
    servers = list(
        {id(server): server for site in (small, large) for server in site.servers}.values()
    )
    started = time.monotonic()
    figures: dict[str, Any] = {
        "jobs": jobs,
        "small": SMALL,
        "reused": options.reuse is not None,
        "data_dir": str(workdir),
        "kept": options.keep is not None or options.reuse is not None,
        "buffer_pool_bytes": pool,
    }
    try:
        with phase(f"starting {len(servers)} servers of its own", started):
            for server in servers:
                server.start()
        figures["server_pids"] = [server.pid for server in servers if server.pid]
        figures["servers"] = {_kind(small): small.mariadb.version(), "redis": _redis_version(small)}
        if options.embedded:
            figures["settings"] = scale_embedded.SETTINGS
        else:
            env.log(f"scale: in {workdir}, buffer pool {(pool or 0) / 2**20:.0f} MiB")
        doctor_full = None
        with phase(f"the almost empty table ({SMALL} + {SMALL} rows)", started):
            small_figures = _load_fresh(small, SMALL)
            doctor_full = scale_measure.offers_doctor_full(small)
            figures["empty"] = measure(small, options, doctor_full, started)
        with phase(f"the table at depth ({jobs:,} + {jobs:,} rows)", started):
            large_figures = _load_or_reuse(large, jobs, options, meta, workdir, started)
            figures["depth"] = measure(large, options, doctor_full, started)
        figures["empty"].update(small_figures)
        figures["depth"].update(large_figures)
        figures["unavailable"] = [] if doctor_full else ["doctor --full"]
    finally:
        with phase("stopping the servers", started):
            for server in reversed(servers):
                server.stop()
            if not figures["kept"]:
                shutil.rmtree(workdir, ignore_errors=True)
    figures["elapsed_s"] = round(time.monotonic() - started, 1)
    return scale_report.result(figures)


def _sites(options: Options, workdir: Path, pool: int | None, repeat: int) -> tuple[Site, Site]:
    """The almost empty table and the deep one."""
    if options.embedded:
        small = scale_embedded.site(workdir, SMALL_DB, repeat)
        return small, scale_embedded.site(workdir, LARGE_DB, repeat)
    mariadb, redis = PrivateMariaDB(workdir, pool or POOL_STEP), PrivateRedis(workdir)
    return (
        Site(mariadb, redis, SMALL_DB, SMALL_REDIS_DB, workdir, repeat),
        Site(mariadb, redis, LARGE_DB, LARGE_REDIS_DB, workdir, repeat),
    )


def _kind(site: Site) -> str:
    return "sqlite" if site.home is not None else "mariadb"


def _redis_version(site: Site) -> str:
    client = site.redis.client(site.redis_db)
    try:
        return str(client.info("server")["redis_version"])
    finally:
        client.close()


def _workdir(options: Options) -> tuple[Path, dict[str, Any]]:
    """The directory the servers keep their data in, and what it holds (scale.json)."""
    if options.reuse is not None:
        path = options.reuse.resolve()
        try:
            meta = json.loads((path / META).read_text())
        except FileNotFoundError:
            raise SystemExit(
                f"bench: {path} holds no loaded table ({META}); make one with --keep"
            ) from None
        if meta.get("embedded", False) != options.embedded:
            kind = "the embedded default" if meta.get("embedded") else "MariaDB"
            raise SystemExit(f"bench: {path} holds a table on {kind}; --embedded must match")
        if options.jobs and options.jobs != meta["jobs"]:
            env.log(f"scale: {path} holds {meta['jobs']:,} jobs; --jobs {options.jobs:,} ignored")
        return path, meta
    if options.keep is not None:
        path = options.keep.resolve()
        if path.exists() and any(path.iterdir()):
            raise SystemExit(f"bench: --keep {path} is not empty; --reuse it or name another")
        path.mkdir(parents=True, exist_ok=True)
    else:
        path = Path(tempfile.mkdtemp(prefix="delayq-scale-", dir="/var/tmp"))
    return path, {"jobs": options.jobs, "embedded": options.embedded}


def _load_fresh(site: Site, n: int) -> dict[str, Any]:
    """A new database with n pending jobs (add_many, timed) and n finished rows."""
    site.mariadb.create_database(site.database, fresh=True)
    site.redis.client(site.redis_db).flushdb()
    with site.queue() as queue:
        queue.init()
        memory = site.redis.used_memory()
        added = scale_load.add_pending(queue, n, seed=n)
        grown = site.redis.used_memory() - memory
        entries = scale_loss.schedule_entries(queue)
    env.log(
        f"scale: add_many {n:,} jobs at {added.rate():,.0f}/s, the last tenth at "
        f"{added.last_tenth_rate():,.0f}/s; Redis grew {grown / n:,.0f} bytes a job, "
        f"{entries:,} of them on the schedule (due within the horizon)"
    )
    scale_load.insert_finished(site.mariadb, site.database, n, seed=n + 1, oldest=60, newest=0)
    return {
        "add_many_jobs": n,
        "add_many_jobs_per_s": added.rate(),
        "add_many_last_tenth_jobs_per_s": added.last_tenth_rate(),
        "redis_bytes_per_job_loaded": grown / n,
        "redis_entries_loaded": entries,
        "redis_bytes_per_entry_loaded": grown / entries if entries else None,
    }


def _load_or_reuse(
    site: Site, jobs: int, options: Options, meta: dict[str, Any], workdir: Path, started: float
) -> dict[str, Any]:
    if options.reuse is None:
        with phase(f"loading {jobs:,} pending jobs and {jobs:,} finished rows", started):
            loaded = _load_fresh(site, jobs)
        meta.update(loaded=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        (workdir / META).write_text(json.dumps(meta, sort_keys=True) + "\n")
        return loaded
    with phase("re-indexing the kept table (Redis keeps nothing)", started):
        moved = scale_load.push_back_due(site.mariadb, site.database, within=6 * 3600)
        env.log(f"scale: {moved} pending jobs fell due since the load: moved 30 days on")
        site.redis.client(site.redis_db).flushdb()  # the embedded Redis kept its file
        with site.queue() as queue:
            queue.init()
    sample = max(scale_load.BATCH, jobs // 10)
    adding = phase(f"add_many of {sample:,} more jobs at depth (taken out again)", started)
    with adding, site.queue() as queue:
        added = scale_load.add_pending(queue, sample, seed=int(time.time()), keep_ids=True)
        scale_load.remove_added(queue, site.mariadb, site.database, added.ids)
    return {
        "add_many_jobs": sample,
        "add_many_jobs_per_s": added.rate(),
        "add_many_last_tenth_jobs_per_s": added.last_tenth_rate(),
        "redis_bytes_per_job_loaded": None,
    }


def measure(site: Site, options: Options, doctor_full: bool, started: float) -> dict[str, Any]:
    """Every figure of one table, in an order that leaves the next one a table as loaded. A
    step that fails is logged and named in `errors`, and the others still run: at 10M a
    run takes hours."""
    rows = scale_load.counts(site.mariadb, site.database)
    result: dict[str, Any] = {"rows": rows, "table": _table_sizes(site)}
    errors: dict[str, str] = result.setdefault("errors", {})
    env.log(f"scale: rows {rows}, {_sizes_text(result['table'])}")
    job_id = scale_load.middle_pending_id(site.mariadb, site.database)
    with step("commands", started, errors):
        result["command_s"] = scale_measure.commands(site, job_id, doctor_full, errors)
    with step("web pages", started, errors):
        result["web_s"] = scale_measure.web_pages(site, job_id)
    with step("reconcile", started, errors):
        result.update(scale_measure.reconcile(site, sum(rows.values())))
    with step("a steady stream of due jobs, then purge beside it", started, errors):
        result.update(scale_measure.stream_and_purge(site, options.stream_seconds))
    deleted = int(result.get("purge_deleted") or 0)
    with step(f"putting back the {deleted:,} rows purge deleted (not timed)", started, errors):
        scale_load.insert_finished(site.mariadb, site.database, deleted, 7, oldest=60, newest=31)
    with step("Redis loss", started, errors):
        result.update(scale_loss.redis_loss(site))
    return result


@contextlib.contextmanager
def step(name: str, started: float, errors: dict[str, str]) -> Iterator[None]:
    """`phase`, and a failure inside it logged with its traceback and kept in `errors`."""
    try:
        with phase(name, started):
            yield
    except Exception as exc:  # noqa: BLE001 - one failed measurement must not lose the rest
        traceback.print_exc()
        errors[name] = f"{type(exc).__name__}: {exc}"
        env.log(f"scale: {name} failed: {errors[name]}")


def _table_sizes(site: Site) -> dict[str, int]:
    if isinstance(site.mariadb, scale_embedded.SQLiteFiles):
        return site.mariadb.sizes(site.database)
    return scale_load.sizes(site.mariadb, site.database)


def _sizes_text(table: dict[str, int]) -> str:
    return (
        f"data {table['data_bytes'] / 2**20:,.0f} MiB, "
        f"indexes {table['index_bytes'] / 2**20:,.0f} MiB"
    )
