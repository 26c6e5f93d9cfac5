"""`delayq doctor`: the checks an operator would otherwise make by hand — settings, database
and Redis reachability and versions, the table against the model, the handler allowlist,
Redis's topology, eviction policy and persistence, the index marker, how table and index
agree — each an ok / warn / FAIL line saying what to fix. What grows with the table is
sampled unless `--full` (sampling.py), and the line says so. It only reads (the database
through store/table/inspection.py); cli/setup.py connects, prints the lines and turns a FAIL
into exit 1."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from ..base.durations import format_delta, format_instant
from ..config import Settings, redact_url
from ..errors import BadInput, ConfigError
from ..flow.limits import format_rate
from ..store.backend_errors import one_line
from ..store.index import INDEXED_KEY, Index, Server, servers
from ..store.producers import queues_in_use
from ..store.table import (
    ANY_DATABASE_ERROR,
    DATABASE_ERRORS,
    TABLE_NAME,
    Counts,
    DatabaseServer,
    Inspection,
    Locks,
    QueueFlow,
    QueueSettings,
    Schema,
    Table,
)
from ..worker.allowlist import EMPTY_ALLOWLIST, check_entry
from ..worker.handlers import import_prefix
from ..worker.recovery import ORPHAN_GRACE
from .sampling import SAMPLE, Members, Scope, stray_members, unscheduled_rows

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"  # skip: not made, the line says why
DATABASE_CHECKS = ("database", "columns", "index", "counts")
REDIS_CHECKS = ("redis", "topology", "eviction", "disk", "schedule", "members")
CONSISTENCY_CHECKS = ("orphans", "journal", "flow")
MIN_REDIS = (6, 2)  # ZMSCORE, which the runner's orphan sweep uses


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    level: str
    name: str
    detail: str


def verdict(passed: bool, name: str, good: str, bad: str, level: str = WARN) -> Check:
    """An ok line saying `good` if `passed`, else a `level` line saying `bad`."""
    return Check(OK, name, good) if passed else Check(level, name, bad)


def skipped(names: tuple[str, ...], reason: str) -> list[Check]:
    """A line for each of the checks `names` that was not made, saying why."""
    return [Check(SKIP, name, f"not checked: {reason}") for name in names]


def settings_check(settings: Settings) -> Check:
    return Check(
        OK,
        "config",
        f"lease {format_delta(settings.lease)}, batch {settings.batch_size}, "
        f"since {format_delta(settings.since)}, max-seconds {format_delta(settings.max_seconds)}",
    )


def handler_checks(prefixes: tuple[str, ...]) -> list[Check]:
    """One line per DELAYQ_HANDLERS entry: may it be one, and does it import here? An empty
    allowlist, which `run` refuses, is one FAIL line."""
    if not prefixes:
        return [Check(FAIL, "handlers", EMPTY_ALLOWLIST)]
    checks = []
    for prefix in prefixes:
        try:
            check_entry(prefix)  # before importing: a refused entry runs none of its code
            import_prefix(prefix)
        except ConfigError as exc:
            checks.append(Check(FAIL, "handlers", str(exc)))
        except BadInput as exc:
            checks.append(Check(FAIL, "handlers", f"DELAYQ_HANDLERS entry {prefix!r}: {exc}"))
        else:
            checks.append(Check(OK, "handlers", f"{prefix} imports"))
    return checks


def database_checks(table: Table, url: str | None) -> list[Check]:
    """Reachability and version, then the table's columns and SQL indexes against the model."""
    where = redact_url(url)
    inspection = Inspection(table)
    try:
        server = inspection.server()
        version = _version_words(server)
        reached = Check(OK, "database", f"{version} at {where}")
        if server.read_only:  # a replica's URL: every run would fail to write
            detail = f"{version} at {where} is read-only (a replica?); point the URL at the primary"
            reached = Check(FAIL, "database", detail)
        if not inspection.has_table():
            missing = Check(FAIL, "table", "delay_queue does not exist; run `delayq init`")
            return [reached, missing, *skipped(DATABASE_CHECKS[1:], "delay_queue does not exist")]
        return [reached, *_table_checks(inspection)]
    except DATABASE_ERRORS as exc:
        failed = Check(FAIL, "database", f"{where} cannot be used: {one_line(exc, url)}")
        return [failed, *skipped(DATABASE_CHECKS[1:], "the database cannot be used")]


def _version_words(server: DatabaseServer) -> str:
    if not server.mysql:
        return f"SQLite {server.version}"
    return server.version if "mariadb" in server.version.lower() else f"MySQL {server.version}"


def _table_checks(inspection: Inspection) -> list[Check]:
    table = TABLE_NAME
    expected, missing = inspection.columns()
    if missing:
        fix = "add them as schema.sql defines"
        checks = [Check(FAIL, "columns", f"{table} lacks {', '.join(missing)}; {fix}")]
    elif problems := Schema(inspection.table).column_problems():
        checks = [Check(FAIL, "columns", f"{table}: {'; '.join(problems)}; run `delayq init`")]
    else:
        checks = [Check(OK, "columns", f"all {len(expected)} columns of the model are present")]
    for columns, present in inspection.indexes():
        listed = ", ".join(columns)
        create = f"CREATE INDEX job_{'_'.join(columns)} ON {table} ({listed})"
        missed = f"({listed}) is missing, so queries scan the table; {create}"
        checks.append(verdict(present, "index", f"({listed})", missed))
    return [*checks, counts_check(inspection.table)]


def counts_check(table: Table) -> Check:
    """Which way pending counts are kept: by triggers, or read from the SQL index at each look
    (a warn: exact, but slower at millions of rows), with what would let `init` make them."""
    by_triggers, words = Counts(table).keeping()
    return Check(OK if by_triggers else WARN, "counts", words)


def redis_checks(index: Index, settings: Settings, scope: Scope | None = None) -> list[Check]:
    """Reachability and version, the topology, eviction policy and persistence of each
    server written to, whether the index is complete and its members are job ids."""
    where = redact_url(settings.redis_url)
    try:
        found = servers(index.client)
        complete = index.registry.is_complete()
        scope = scope or Scope()
        queues = index.registry.known_queues()
        members = {queue: stray_members(index, queue, scope) for queue in queues}
    except redis.RedisError as exc:
        detail = one_line(exc, settings.redis_url)
        failed = Check(FAIL, "redis", f"{where} cannot be used: {detail}")
        return [failed, *skipped(REDIS_CHECKS[1:], "Redis cannot be used")]
    versions = sorted({server.version for server in found})
    try:
        too_old = any(
            tuple(int(part) for part in version.split(".")[:2]) < MIN_REDIS for version in versions
        )
    except ValueError:
        too_old = False
    running = f"Redis {', '.join(versions)} at {where}"
    evicting = sorted({server.eviction for server in found} - {"noeviction"})
    kept = sorted({server.persistence or "not known (CONFIG is refused)" for server in found})
    return [
        verdict(not too_old, "redis", running, f"{running}; delayq needs 6.2 or later", FAIL),
        _topology_check(found, where),
        verdict(
            not evicting,
            "eviction",
            "maxmemory-policy is noeviction",
            f"maxmemory-policy is {', '.join(evicting)}: an evicting Redis silently drops "
            "schedule entries (the table keeps the jobs, but they run late); set "
            "maxmemory-policy noeviction",
        ),
        verdict(
            "none" not in kept,
            "disk",
            f"Redis keeps the schedule on disk: {', '.join(kept)}",
            "Redis keeps nothing on disk: a restart empties the schedule and the next run "
            "rebuilds it from the table, jobs waiting meanwhile; turn on appendonly (or save)",
        ),
        verdict(
            complete,
            "schedule",
            f"{INDEXED_KEY} is set: the schedule is complete",
            f"{INDEXED_KEY} is missing; the next run (or `delayq init`) "
            "rebuilds the schedule from the table",
        ),
        _members_check(members),
    ]


def topology_words(found: list[Server]) -> str:
    """The servers written to, in words: a primary (or a replica) and its replicas with their
    lag, or each master of a cluster with its replicas."""
    if len(found) == 1 and not found[0].address:  # one server, named by the URL
        (server,) = found
        if server.role != "master":
            return f"a replica of {server.primary}"
        return f"a primary with {_replicas(server)}"
    masters = "; ".join(f"{server.address} with {_replicas(server)}" for server in found)
    return f"a cluster of {len(found)} masters: {masters}"


def _topology_check(found: list[Server], where: str) -> Check:
    words = topology_words(found)
    if len(found) == 1 and not found[0].address:
        return verdict(
            found[0].role == "master",
            "topology",
            words,
            f"{where} is {words}: it takes no writes (or drops them at its next sync); "
            "name the primary, or the sentinels with redis+sentinel://",
            FAIL,
        )
    alone = [server.address for server in found if not server.replicas]
    return verdict(
        not alone,
        "topology",
        words,
        f"{words}; with no replica, {', '.join(alone)} takes its hash slots down with it when "
        "it fails",
    )


def _replicas(server: Server) -> str:
    if not (count := len(server.replicas)):
        return "no replica"
    return f"{count} replica{'s' * (count > 1)}: {', '.join(server.replicas)}"


def _members_check(members: dict[str, Members]) -> Check:
    counts = ", ".join(
        f"{queue} {found.strays}" for queue, found in members.items() if found.strays
    )
    sizes = {queue: found.size for queue, found in members.items() if found.sampled}
    note = _sample_words(sizes)
    if not counts:
        return Check(OK, "members", f"every schedule member is a job id{f' ({note})' * bool(note)}")
    return Check(
        WARN,
        "members",
        f"schedule members that are not job ids ({counts}{f'; {note}' * bool(note)}): another "
        "producer wrote them; a run drops them when they fall due, `delayq reconcile` at once",
    )


def _sample_words(sizes: dict[str, int]) -> str:
    """How the members were sampled, of the queues whose schedule was not read whole."""
    if not sizes:
        return ""
    if len(sizes) == 1:
        (size,) = sizes.values()
        whole = f"{size:,}"
    else:
        whole = "each of " + ", ".join(f"{queue} {size:,}" for queue, size in sizes.items())
    return (
        f"sampled: the {SAMPLE:,} due first and {SAMPLE:,} at random of {whole}; "
        "`doctor --full` checks all"
    )


def consistency_checks(
    table: Table, index: Index, servers_checks: list[Check], scope: Scope | None = None
) -> list[Check]:
    """An ok or warn line for pending rows the schedule lost (an index write that failed after
    its INSERT, a Redis that lost data) and for journal fields no run will read again; runs
    repair both, doctor only counts them. Not made, and said so, after a FAIL among
    `servers_checks` (the database's and Redis's): there would be nothing sound to compare.
    The journal holds the jobs in flight, not the table's: it is read whole."""
    if failed := [check.name for check in servers_checks if check.level == FAIL]:
        names = ", ".join(dict.fromkeys(failed))
        check = "check" if len(set(failed)) == 1 else "checks"
        return skipped(CONSISTENCY_CHECKS, f"the {names} {check} FAILed")
    scope = scope or Scope()
    try:
        now = index.clock.now()
        unscheduled, stale, capped = 0, 0, False
        for queue in queues_in_use(table, index):
            found = unscheduled_rows(table, index, queue, now - ORPHAN_GRACE, scope)
            unscheduled, capped = unscheduled + found.count, capped or found.capped
            stale += _stale_journal_fields(table, index, queue)
    except (ANY_DATABASE_ERROR, redis.RedisError) as exc:
        detail = f"could not compare table and schedule: {one_line(exc)}"
        return [Check(FAIL, "consistency", detail)]
    return [
        _orphans_check(unscheduled, capped),
        verdict(
            not stale,
            "journal",
            "no journal fields left by runs that are gone",
            f"{stale} journal fields belong to no running job; recovery of the runs that left "
            "them clears them, or they expire with the journal",
        ),
        flow_check(table),
        *_failover_check(index),
    ]


def flow_check(table: Table) -> Check:
    """What holds jobs back on purpose: a warn line naming the paused queues (a pause left
    behind after an incident is a classic cause of jobs that never start), the limits and
    how many per-key locks are held, from the table."""
    flows = QueueSettings(table).flows()
    paused = [
        f"{name} (since {format_instant(flow.paused_at)})"
        for name, flow in flows.items()
        if flow.paused_at is not None
    ]
    limited = [
        f"{name} " + " and ".join(_limits(flow)) for name, flow in flows.items() if flow.limited
    ]
    held = len(Locks(table).held())
    parts = [f"paused: {', '.join(paused)}"] if paused else []
    parts += [f"limited: {', '.join(limited)}"] if limited else []
    parts += [f"{held} per-key lock{'s' * (held != 1)} held"] if held else []
    if paused:
        resume = "`delayq resume NAME` lets a paused queue's jobs start again"
        return Check(WARN, "flow", f"{'; '.join(parts)}; {resume}")
    return Check(OK, "flow", "; ".join(parts) or "no queue is paused or limited")


def _limits(flow: QueueFlow) -> list[str]:
    found = [] if flow.rate is None else [format_rate(flow.rate)]
    return found + ([] if flow.concurrency is None else [f"{flow.concurrency} at once"])


def _failover_check(index: Index) -> list[Check]:
    """A line, for a week after it, on what the last failover of the database took, as the
    run that met the new server found it (worker/database_failovers.py); none before."""
    found = index.registry.database_failover()
    if not found:
        return []
    level = WARN if found.get("missing", "0") != "0" else OK
    at = format_instant(float(found.get("at") or 0))
    return [Check(level, "failover", f"at {at}: {found.get('said', '')}")]


def _orphans_check(unscheduled: int, capped: bool) -> Check:
    note = f"the {SAMPLE:,} overdue longest of each queue; `doctor --full` checks all"
    if not unscheduled:
        sampled = f" (checked: {note})" if capped else ""
        return Check(OK, "orphans", f"every overdue pending row is on the schedule{sampled}")
    among = f" (among {note})" if capped else ""
    return Check(
        WARN,
        "orphans",
        f"{unscheduled} pending rows overdue by {ORPHAN_GRACE:g}s are not on the schedule"
        f"{among}; the next run's sweep puts them back",
    )


def _stale_journal_fields(table: Table, index: Index, queue: str) -> int:
    """Fields of the queue's journal whose job or run holds no RUNNING row: an outcome
    already in the table, or the batch order and start notes of a run that is gone."""
    fields = index.journal.fields(queue)
    held = Inspection(table).running_leases(queue)
    ids = {str(job_id) for job_id, _ in held}
    tokens = {token for _, token in held if token}
    return sum(1 for field in fields if not _is_live(field, ids, tokens))


def _is_live(field: str, running_ids: set[str], running_tokens: set[str]) -> bool:
    if field.isdigit():
        return field in running_ids
    kind, _, rest = field.partition(":")
    if kind in ("order", "starts"):
        return rest in running_tokens
    if kind == "start":
        return rest.rpartition(":")[0] in running_tokens
    return True  # not ours to judge
