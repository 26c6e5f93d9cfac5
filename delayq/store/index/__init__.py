"""The index face of the store: every Redis key and Lua script delayq uses.

`Index` holds one Redis connection and its parts: the schedule (due times and the claim),
the journal (outcomes on their way to the table), the horizon (how far ahead the schedule
holds jobs), the registry (runners, and which server the schedule was last seen on), the
flow mirror (pause and limits as the claim reads them), lock waits, tallies (the metrics'
counters) and the clock. What is derived here is never the truth: the table is, and each
part says how it comes back from it.

Code above the store imports from here, never from a module of this package; this face
imports nothing of the table face (tests/project/test_layers.py).
"""

from .flow import START_SLACK, Flow, FlowUnknown
from .horizons import Horizon
from .journal import Journal
from .keys import INDEXED_KEY, LAST_RUN_KEY, MAX_ID, job_id_of, schedule_key, text
from .lock_waits import PARKED_FOR, Waiter
from .parts import Index
from .registry import Registry, ServerNote
from .schedule import Claimed, packed, packed_by_queue
from .sentinels import SCHEME
from .tallies import (
    DURATION_BOUNDS,
    LATENESS_BOUNDS,
    OUTCOMES,
    SEPARATOR,
    UNNAMED,
    UNREADABLE,
    Tally,
    bucket_field,
    handler_label,
)
from .topology import Server, servers

__all__ = [
    "Claimed",
    "DURATION_BOUNDS",
    "Flow",
    "FlowUnknown",
    "Horizon",
    "INDEXED_KEY",
    "Index",
    "Journal",
    "LAST_RUN_KEY",
    "LATENESS_BOUNDS",
    "MAX_ID",
    "OUTCOMES",
    "PARKED_FOR",
    "Registry",
    "SCHEME",
    "SEPARATOR",
    "START_SLACK",
    "Server",
    "ServerNote",
    "Tally",
    "UNNAMED",
    "UNREADABLE",
    "Waiter",
    "bucket_field",
    "handler_label",
    "job_id_of",
    "packed",
    "packed_by_queue",
    "schedule_key",
    "servers",
    "text",
]
