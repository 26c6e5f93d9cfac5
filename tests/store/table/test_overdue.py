"""`overdue_pending`, which a run's sweep for lost schedule entries and `doctor` call for
every queue: undated rows first, then by due time; and on SQLite a read of the due rows, not
of every pending row of the queue (tests/support/sqlite_steps.py counts the work)."""

from __future__ import annotations

import pytest

from delayq import JobSpec, Status
from delayq.store.table.due_rows import DueRows
from tests.support.sqlite_steps import sqlite_steps

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0
DAY = 86400.0


def add_later(queue, n: int) -> None:
    queue.add_many(
        [JobSpec(H, "record", {}, at=NOW + DAY + i, queue="mail") for i in range(n)], now=NOW
    )


def test_undated_rows_come_first_then_the_longest_due(queue):
    Job = queue.table.model
    ids = queue.add_many(
        [JobSpec(H, "record", {}, at=NOW - 60 * i, queue="mail") for i in range(1, 5)], now=NOW
    )
    add_later(queue, 3)
    Job.update(run_at=None).where(Job.id == ids[1]).execute()  # a PHP producer's row
    Job.update(status=Status.SUCCESS).where(Job.id == ids[0]).execute()

    found = DueRows(queue.table).overdue_pending("mail", NOW, 10)

    assert [job_id for job_id, _ in found] == [ids[1], ids[3], ids[2]]
    assert [due for _, due in found[1:]] == [NOW - 240, NOW - 180]
    assert DueRows(queue.table).overdue_pending("mail", NOW, 2) == found[:2]
    assert DueRows(queue.table).overdue_pending("default", NOW, 10) == []


@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
def test_on_sqlite_the_work_follows_the_due_rows_not_the_pending_ones(queue):
    queue.add_many([JobSpec(H, "record", {}, at=NOW - i, queue="mail") for i in (1, 2)], now=NOW)
    add_later(queue, 100)
    few, before = sqlite_steps(queue, lambda: DueRows(queue.table).overdue_pending("mail", NOW, 10))
    add_later(queue, 3000)

    many, after = sqlite_steps(queue, lambda: DueRows(queue.table).overdue_pending("mail", NOW, 10))

    assert len(few) == len(many) == 2
    assert after < 2 * before  # reading every pending row of the queue takes 30 times more
