"""The kept pending counts (store/table/counts.py) equal a count of the table after everything that
moves a row into or out of PENDING: adds, a PHP-style INSERT, claims, outcomes, retries,
deferrals, cancels, replaces, a run that died, requeue, purge, a DELETE and an UPDATE by
hand; and `init` on a table that had none counts what is there. On SQLite and on the MariaDB
that trusts function creators: where the server refuses the triggers to the application's user
(the suite's own MariaDB, as production runs it), tests/faults/test_least_privilege.py."""

from __future__ import annotations

import json
import time

import pytest
from peewee import fn

from delayq import JobSpec, Status
from delayq.errors import BadInput
from delayq.ops.overview import JobFilter
from delayq.store.table import counts
from delayq.store.table.counts import Counts
from delayq.store.table.model import TABLE_NAME
from tests.conftest import with_kept_counts

H = "tests.sample_handlers.jobs"


def counted(queue) -> dict[str, int]:
    """Pending rows by queue, counted from the table itself."""
    Job = queue.table.model
    query = (
        Job.select(Job.queue, fn.COUNT(Job.id))
        .where(Job.status == Status.PENDING)
        .group_by(Job.queue)
    )
    return {name: count for name, count in query.tuples()}


def kept(queue) -> dict[str, int]:
    assert Counts(queue.table).installed()
    return Counts(queue.table).pending_by_queue()


@with_kept_counts
def test_the_kept_counts_follow_every_way_a_row_moves(queue, log):
    now = time.time()
    Job = queue.table.model
    first = queue.add(H, "record", {"log": log}, at=now - 5)
    queue.add_many([JobSpec(H, "record", {"log": log}, queue="mail", delay=60) for _ in range(5)])
    failing = queue.add(H, "fail", {"log": log}, at=now - 5, ext="order:1")
    assert kept(queue) == counted(queue) == {"default": 2, "mail": 5}

    # another producer's INSERT, as the seed's PHP code writes it
    params = json.dumps({"class": H, "method": "record", "data": {"log": log}})
    queue.db.execute_sql(
        f"INSERT INTO {TABLE_NAME} (params, ext_string, run_at) VALUES (%s, %s, %s)"
        if queue.table.mysql
        else f"INSERT INTO {TABLE_NAME} (params, ext_string, run_at) VALUES (?, ?, ?)",
        (params, "php:1", now - 5),
    )
    assert kept(queue) == counted(queue)

    queue.run(now=now)  # three succeed or fail; the failure's retry is a new pending row
    assert kept(queue) == counted(queue)
    assert Job.get_by_id(first).status == Status.SUCCESS

    replaced = queue.add(H, "record", {"log": log}, ext="order:2", delay=60)
    queue.add(H, "record", {"log": log}, ext="order:2", delay=90, replace=True)
    assert kept(queue) == counted(queue)
    queue.cancel(replaced)
    queue.cancel(ext="order:1")
    assert kept(queue) == counted(queue)

    # a run that died holding a job: its row goes back to pending when the lease lapses
    held = queue.add(H, "record", {"log": log}, queue="mail", at=now - 5)
    Job.update(status=Status.RUNNING, lease_until=now - 1, lease_token="dead").where(
        Job.id == held
    ).execute()
    assert kept(queue) == counted(queue)
    queue.run(now=now + 1, queues=["mail"])
    assert kept(queue) == counted(queue)

    queue.requeue(JobFilter(statuses=(Status.FAILED, Status.SUCCESS)), now=now + 2)
    assert kept(queue) == counted(queue)
    Job.update(queue="other").where(Job.queue == "mail", Job.status == Status.PENDING).execute()
    assert kept(queue) == counted(queue)
    Job.delete().where(Job.id == failing).execute()
    queue.purge(older_than=0)
    Job.delete().where(Job.queue == "other").execute()
    assert kept(queue) == counted(queue)


@with_kept_counts
def test_init_on_a_table_without_the_counts_counts_what_is_there(queue, log):
    queue.add_many([JobSpec(H, "record", {"log": log}, delay=60) for _ in range(7)])
    for name in counts.TRIGGERS:
        queue.db.execute_sql(f"DROP TRIGGER {name}")
    queue.db.execute_sql(f"DELETE FROM {counts.COUNTS_TABLE}")
    queue.add(H, "record", {"log": log}, queue="mail", delay=60)  # no trigger counts it
    assert not Counts(queue.table).installed()
    assert Counts(queue.table).pending_by_queue() == {"default": 7, "mail": 1}  # from the index

    changes = queue.init()

    assert counts.ADDED in changes
    assert kept(queue) == {"default": 7, "mail": 1}
    assert queue.init() == []  # then nothing to do


# The insert trigger as delayq wrote it before it tested first: one statement, run for
# every row.
EARLIER_INSERT_TRIGGER = (
    f"CREATE TRIGGER {counts.TRIGGERS[0]} AFTER INSERT ON {TABLE_NAME} FOR EACH ROW "
    f"INSERT INTO {counts.COUNTS_TABLE} (queue, slot, pending) "
    "SELECT NEW.queue, MOD(CONNECTION_ID(), 64), 1 FROM DUAL "
    "WHERE NEW.status = 1 AND @delayq_counted IS NULL "
    "ON DUPLICATE KEY UPDATE pending = pending + (1)"
)


# The delete trigger as delayq wrote it before every trigger tested first.
EARLIER_DELETE_TRIGGER = (
    f"CREATE TRIGGER {counts.TRIGGERS[1]} AFTER DELETE ON {TABLE_NAME} FOR EACH ROW "
    f"INSERT INTO {counts.COUNTS_TABLE} (queue, slot, pending) "
    "SELECT OLD.queue, MOD(CONNECTION_ID(), 64), -1 FROM DUAL WHERE OLD.status = 1 "
    "ON DUPLICATE KEY UPDATE pending = pending + (-1)"
)


@pytest.mark.parametrize("backend", ["mariadb_trusting"], indirect=True)
@pytest.mark.parametrize(
    "name, earlier",
    [
        (counts.TRIGGERS[0], EARLIER_INSERT_TRIGGER),
        (counts.TRIGGERS[1], EARLIER_DELETE_TRIGGER),
    ],
)
def test_init_replaces_an_earlier_trigger_and_the_counts_stay_exact(
    queue, backend, log, name, earlier
):
    queue.db.execute_sql(f"DROP TRIGGER {name}")
    queue.db.execute_sql(earlier)
    queue.add_many([JobSpec(H, "record", {"log": log}, delay=60) for _ in range(600)])
    queue.add(H, "record", {"log": log}, queue="mail", delay=60)  # the earlier trigger counts
    assert kept(queue) == counted(queue) == {"default": 600, "mail": 1}

    assert counts.UPGRADED in queue.init()

    assert kept(queue) == counted(queue) == {"default": 600, "mail": 1}
    assert queue.init() == []  # then nothing to do
    queue.add_many([JobSpec(H, "record", {"log": log}, queue="mail") for _ in range(600)])
    queue.add(H, "record", {"log": log}, delay=60)
    assert kept(queue) == counted(queue) == {"default": 601, "mail": 601}
    queue.db.execute_sql(f"DELETE FROM {TABLE_NAME} WHERE queue = 'mail' LIMIT 1")
    assert kept(queue) == counted(queue) == {"default": 601, "mail": 600}


@with_kept_counts
@pytest.mark.parametrize("rows", [1, 3])
def test_a_queue_s_count_is_the_sum_of_its_count_rows(queue, log, rows):
    queue.add_many([JobSpec(H, "record", {"log": log}, delay=60) for _ in range(4)])
    for row in range(1, rows):
        queue.db.execute_sql(
            f"INSERT INTO {counts.COUNTS_TABLE} (queue, slot, pending) "
            f"VALUES ('default', {row + 100}, 0)"
        )

    assert kept(queue) == {"default": 4}


@with_kept_counts
def test_an_add_many_that_fails_leaves_the_counts_and_the_connection_as_they_were(queue, log):
    queue.add_many([JobSpec(H, "record", {"log": log}, delay=60) for _ in range(3)])
    specs = [JobSpec(H, "record", {"log": log}, delay=60) for _ in range(3000)]
    specs.append(JobSpec(H, "no_such_method", {}, delay=60))  # refused as its chunk is built

    with pytest.raises(BadInput):
        queue.add_many(specs)

    assert kept(queue) == counted(queue) == {"default": 3}
    queue.add(H, "record", {"log": log}, delay=60)  # on the same connection: its trigger counts
    queue.add_many([JobSpec(H, "record", {"log": log}, queue="mail") for _ in range(2)])
    assert kept(queue) == counted(queue) == {"default": 4, "mail": 2}
