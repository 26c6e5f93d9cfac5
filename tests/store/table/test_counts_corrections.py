"""Two corrections of the kept pending counts at once (two `reconcile`, two `init`, or one of
each) add the table's difference once between them, not once each (store/table/counts.py
`correct`), on SQLite and on a MariaDB that lets `init` keep them (`with_kept_counts`),
while writers go on."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import delayq
from delayq import JobSpec
from delayq.store.table import counts
from delayq.store.table.counts import Counts
from tests.conftest import with_kept_counts
from tests.store.table.test_counts import counted
from tests.support.waiting import at_once

H = "tests.sample_handlers.jobs"
# How long a correction that has read its snapshot waits for the other to read its own: long
# enough for both to get there when nothing keeps them apart, and waited out (the barrier
# breaks) when a lock does.
MEETING = 2.0


def pause_after_the_snapshot(queue: delayq.Queue, barrier: threading.Barrier) -> None:
    """Make `queue`'s connection wait at `barrier` after its first read of the kept counts,
    the read of a correction's snapshot: the statements still run on the real server, only
    the thread waits between them, as a slow network or a busy host would make it."""
    db = queue.db
    run = db.execute_sql
    waited: list[bool] = []

    def execute_sql(sql: str, *args: Any, **kwargs: Any) -> Any:
        cursor = run(sql, *args, **kwargs)
        if not waited and sql.lstrip().upper().startswith("SELECT") and counts.COUNTS_TABLE in sql:
            waited.append(True)
            # Broken when the other correction is held back, as it should be: go on alone.
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()
        return cursor

    db.execute_sql = execute_sql  # type: ignore[method-assign]


@with_kept_counts
def test_two_corrections_at_once_add_the_difference_once(make_queue, log):
    first, second = make_queue(), make_queue()
    first.add_many([JobSpec(H, "record", {"log": log}, delay=60) for _ in range(40)])
    first.add_many([JobSpec(H, "record", {"log": log}, queue="mail", delay=60) for _ in range(3)])
    first.db.execute_sql(f"DELETE FROM {counts.COUNTS_TABLE}")  # as after a TRUNCATE
    barrier = threading.Barrier(2, timeout=MEETING)
    for queue in (first, second):
        pause_after_the_snapshot(queue, barrier)

    assert (
        at_once([lambda: Counts(first.table).correct(), lambda: Counts(second.table).correct()], 60)
        == []
    )

    assert Counts(first.table).pending_by_queue() == counted(first) == {"default": 40, "mail": 3}


@with_kept_counts
def test_writers_go_on_while_two_corrections_run(make_queue, log):
    first, second, writer = make_queue(), make_queue(), make_queue()
    first.add_many([JobSpec(H, "record", {"log": log}, delay=60) for _ in range(20)])
    first.db.execute_sql(f"DELETE FROM {counts.COUNTS_TABLE}")
    barrier = threading.Barrier(2, timeout=MEETING)
    for queue in (first, second):
        pause_after_the_snapshot(queue, barrier)
    added: list[int] = []

    def write() -> None:
        for _ in range(30):
            added.append(writer.add(H, "record", {"log": log}, delay=60))
        writer.cancel(added[0])

    both = [lambda: Counts(first.table).correct(), lambda: Counts(second.table).correct(), write]
    assert at_once(both, 60) == []

    assert len(added) == 30
    assert Counts(first.table).pending_by_queue() == counted(first) == {"default": 49}
