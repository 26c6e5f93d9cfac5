"""The names of delayq's Redis keys, built in one place: each queue's schedule (the default
queue's fixed by the contract), its helper keys in the same hash slot, and the global ones.
"""

from __future__ import annotations

from ...config import DEFAULT_QUEUE

DEFAULT_QUEUE_KEY = "delay_queue_job"
QUEUES_KEY = "delay_queue_queues"
# Set after a full rebuild; its absence means Redis lost data (or never had it) and the
# next run must rebuild the schedule from the table before trusting it.
INDEXED_KEY = "delay_queue_indexed"
# While the schedule is rebuilt: a hash of how far each queue's walk of the table in due order
# has gone (everything before its mark is back), and the lock of the run doing it.
REBUILD_KEY = "delay_queue_rebuild"
REBUILDING_KEY = "delay_queue_rebuilding"
# A hash each run overwrites with when it started, how long it took, its outcome and how
# many jobs it ran; `delayq status` reads it to tell whether cron is alive.
LAST_RUN_KEY = "delay_queue_last_run"
# The MySQL server the table was last seen on (store/table/primaries.py), and what the last
# failover to another one took, as worker/failovers.py found it.
DATABASE_SERVER_KEY = "delay_queue_database_server"
DATABASE_FAILOVER_KEY = "delay_queue_database_failover"
# Set for an hour by the run that checks the kept pending counts against the table, so that
# one run of them all does (worker/recovery.py).
COUNTS_CHECKED_KEY = "delay_queue_counts_checked"
# The handlers that have a metrics label of their own (tallies.Tallies).
METRICS_HANDLERS_KEY = "delay_queue_metrics_handlers"
# Outcomes a run journaled but has not yet written to the table live this long at most.
JOURNAL_TTL = 7 * 86400


# The largest id a BIGINT (MySQL) or INTEGER (SQLite) column holds.
MAX_ID = 2**63 - 1


def job_id_of(member: str) -> int | None:
    """The job id a schedule member names, or None: only the canonical decimal counts (ASCII
    digits, no leading zero, within MAX_ID), so "²" or "٣" (digits to str.isdigit), "-1",
    "007" or a number no column holds is never an id, and str(id) is the member itself
    (ZREM by id removes it)."""
    if not (member.isascii() and member.isdigit()) or member.startswith("0"):
        return None
    job_id = int(member) if len(member) <= 19 else MAX_ID + 1
    return job_id if job_id <= MAX_ID else None


def schedule_key(queue: str) -> str:
    """The sorted-set key of a queue; the default queue's is fixed by the contract."""
    return DEFAULT_QUEUE_KEY if queue == DEFAULT_QUEUE else f"{DEFAULT_QUEUE_KEY}:{queue}"


def queue_key(queue: str, suffix: str) -> str:
    """A helper key of a queue, in the schedule's hash slot so scripts work on a Cluster."""
    return f"{{{schedule_key(queue)}}}:{suffix}"


def horizon_key(queue: str) -> str:
    """The hash of a queue's horizon (store/index/horizons.py), which add_jobs.lua reads."""
    return queue_key(queue, "horizon")


def flow_key(queue: str) -> str:
    """The hash mirroring a queue's flow settings (flow.py), which the claim reads."""
    return queue_key(queue, "flow")


def starts_key(queue: str) -> str:
    """The sorted set of a rate-limited queue's recent start grants (score = claim time),
    which the claim counts and trims (claim_due.lua)."""
    return queue_key(queue, "starts")


def slots_key(queue: str) -> str:
    """The sorted set of a concurrency-limited queue's running slots (member = job id, score =
    when its lease lapses), which the claim counts and trims (claim_due.lua)."""
    return queue_key(queue, "slots")


def minute_key(queue: str, minute: int) -> str:
    """The hash of one queue's aggregates over the minute starting at epoch second `minute`."""
    return queue_key(queue, f"minute:{minute}")


def text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
