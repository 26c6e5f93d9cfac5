"""`delayq init`: the table made, or an existing one (the seed's, an older delayq's) brought
up to the model in place, with the tables beside it (counts, settings, locks), and every
pending job put on its schedule.
"""

from __future__ import annotations

from collections.abc import Callable

from ..store.index import Index
from ..store.table import (
    TABLE_NAME,
    Counts,
    Locks,
    QueueSettings,
    Schema,
    Table,
    added,
    create_tables,
)
from ..worker.rebuilds import Rebuild


def initialise(
    table: Table, index: Index, clock: Callable[[], float], schedule_lost: bool
) -> list[str]:
    """One line per change made. `schedule_lost`: upgrade the seed's table though Redis holds
    none of its due times (its waiting jobs become missed)."""
    changes = [f"created table {TABLE_NAME}"]
    if not create_tables(table):
        changes = Schema(table).upgrade(index, clock(), schedule_lost)
        changes += Counts(table).install() + QueueSettings(table).install()
        changes += Locks(table).install()
    else:  # the counts come with the table; only a failure to keep them is news
        changes += [line for line in Counts(table).install() if not added(line)]
        QueueSettings(table).install()
        Locks(table).install()
    complete = index.registry.is_complete()
    # Also raises the horizons that are near, and gives one to a queue that has none.
    count = Rebuild(table, index).rebuild_all(lambda: None, clock)
    if not complete:
        changes.append(f"built the schedule index from {count} pending job(s)")
    return changes
