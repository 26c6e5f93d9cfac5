"""After a failover: put back on the schedule the jobs whose entries the new primary never got.

Redis replicates asynchronously. A replica promoted to primary lacks what the old primary
acknowledged in its last moments, and an old primary that has not heard it was replaced
takes writes for seconds more, dropped when it is demoted. Those jobs' rows are in the
table; only their schedule entries are gone, and a job due in a week would wait that long
for the orphan sweep to notice. A promoted replica starts a replication history under a new
id, so a run that finds a queue's keys on a server with another id than the one it noted
checks the rows changed since it last saw the old one, then, for a while, the rows changed
since its previous check, until no old primary can still be taking writes.
"""

from __future__ import annotations

import logging

from ..store import queries
from ..store.index import Index
from ..store.registry import ServerNote
from ..store.table import Table
from .recovery import SWEEP_LIMIT, put_back_lost

logger = logging.getLogger(__name__)

# Rows changed this long before a check are checked too: a producer commits its row before it
# puts the job on the schedule (seconds before, when that add is retried through a failover),
# and clocks differ.
LOOKBACK = 60.0
# For this long after a run found a queue on a new server, each sweep checks the rows changed
# since the one before: an old primary cut off from the sentinels or the cluster takes writes
# until it is demoted (8 to 17 s after a SENTINEL FAILOVER on Redis 7.0 here).
WATCH = 120.0


def reindex_after_failover(table: Table, index: Index, queue: str, now: float) -> int:
    """Put back the pending jobs of `queue` a failover dropped from the schedule, if the
    queue's keys are on a new server or were found on one lately; how many."""
    replication_id = index.registry.replication_id(queue)
    if replication_id is None:
        return 0
    note = index.registry.server_note(queue)
    moved = note.moved if note is not None else None
    since = None
    if note is not None and note.replication_id != replication_id:
        logger.warning(
            "queue %s: Redis is not the server the schedule was last seen on (a failover?);"
            " putting back the jobs added since, which it may not have",
            queue,
        )
        moved, since = now, note.seen
    elif note is not None and moved is not None and now - moved < WATCH:
        since = note.seen
    found = 0
    if since is not None:
        batches = queries.pending_changed_since(table, queue, since - LOOKBACK, SWEEP_LIMIT)
        found = sum(put_back_lost(table, index, queue, dict(batch), now) for batch in batches)
    if found:
        logger.warning("queue %s: put back %d jobs a failover took off the schedule", queue, found)
    index.registry.note_server(queue, ServerNote(replication_id, now, moved))
    return found
