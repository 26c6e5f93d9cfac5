"""The table face of the store: every SQL statement delayq runs, behind repositories.

A repository is a class holding one `Table`, one per concept, each method a statement or a
transaction named for its intent: `Jobs` (rows by id, business key and queue), `DueRows`
(pending rows by due time, what the schedule is built from), `Inserts` (new jobs), `Leases`
(the rows a run holds), `Outcomes` (what runs came to), `Chains` (a job's retries and
occurrences), `Counts`, `QueueSettings` (pause and limits), `Locks` (per-key locks), and for
the operator `QueueFigures`, `Listing`, `Maintenance` and `Inspection`. Beside them: the model
(`Table`, `Job`, `JobRow`, `Status`), opening a database, and what the columns hold (params,
retry policies, schedules).

Code above the store imports from here, never from a module of this package
(tests/project/test_layers.py); the modules are this face's own business.
"""

from .chains import Attempt, Chains
from .counts import Counts, added, is_notice
from .database import (
    ANY_DATABASE_ERROR,
    DATABASE_ERRORS,
    Database,
    bound_replies,
    close_connection,
    is_read_only,
    open_database,
    ping,
    sqlite_file,
    sqlite_url,
)
from .due_rows import DueBatch, DueCursor, DueRows
from .figures import Count, QueueFigures
from .inserts import Inserts
from .inspection import DatabaseServer, Inspection
from .jobs import Jobs
from .leases import Lapsed, Leases
from .listing import Listing, RowFilter
from .locks import LOCK_MAX, Locks
from .maintenance import Maintenance
from .model import (
    EXT_MAX,
    MESSAGE_MAX,
    TABLE_NAME,
    TEXT_MAX,
    TRACEBACK_START,
    ClaimedJob,
    JobRow,
    Status,
    Table,
    create_tables,
    failure_parts,
    stamp_epoch,
    status_word,
    storable,
    utc_stamp,
)
from .outcomes import Outcome, Outcomes, Written
from .params import (
    Call,
    is_php,
    may_nest_deeper,
    nests_deeper,
    payload_or_empty,
    python_class,
    read_call,
    read_payload,
    too_deep,
)
from .policies import POLICY_MAX, RetryPolicy, check_policy, policy_text, read_policy
from .primaries import Primaries
from .queue_settings import RUNNING, UNCHANGED, QueueFlow, QueueSettings, Unchanged
from .recurrence import parse_schedule
from .schema import Schema
from .transactions import add_through

__all__ = [
    "ANY_DATABASE_ERROR",
    "Attempt",
    "Call",
    "Chains",
    "ClaimedJob",
    "Count",
    "Counts",
    "DATABASE_ERRORS",
    "Database",
    "DatabaseServer",
    "DueBatch",
    "DueCursor",
    "DueRows",
    "EXT_MAX",
    "Inserts",
    "Inspection",
    "JobRow",
    "Jobs",
    "LOCK_MAX",
    "Lapsed",
    "Leases",
    "Listing",
    "Locks",
    "MESSAGE_MAX",
    "Maintenance",
    "Outcome",
    "Outcomes",
    "POLICY_MAX",
    "QueueFigures",
    "QueueFlow",
    "Primaries",
    "QueueSettings",
    "RUNNING",
    "RetryPolicy",
    "RowFilter",
    "Schema",
    "Status",
    "TABLE_NAME",
    "TEXT_MAX",
    "TRACEBACK_START",
    "Table",
    "UNCHANGED",
    "Unchanged",
    "Written",
    "add_through",
    "added",
    "bound_replies",
    "check_policy",
    "close_connection",
    "create_tables",
    "failure_parts",
    "is_notice",
    "is_php",
    "is_read_only",
    "may_nest_deeper",
    "nests_deeper",
    "open_database",
    "parse_schedule",
    "payload_or_empty",
    "ping",
    "policy_text",
    "python_class",
    "read_call",
    "read_payload",
    "read_policy",
    "sqlite_file",
    "sqlite_url",
    "stamp_epoch",
    "status_word",
    "storable",
    "too_deep",
    "utc_stamp",
]
