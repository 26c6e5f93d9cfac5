"""`reconcile` (worker/reconciling.py) walks the table and the schedule side by side in due
order: every kind of difference fixed, nothing that agrees touched, in small batches whose
edges fall between equal due times."""

from __future__ import annotations

import time

import pytest

from delayq import JobSpec, Status
from delayq.store.index.keys import queue_key, schedule_key
from delayq.store.table.counts import Counts
from delayq.worker import reconciling
from tests.conftest import with_kept_counts

H = "tests.sample_handlers.jobs"


def members(queue, name: str = "default") -> dict[str, float]:
    entries = queue.index.client.zrange(schedule_key(name), 0, -1, withscores=True)
    return {member.decode(): score for member, score in entries}


@pytest.mark.parametrize("batch", [3, 20000])
def test_every_difference_is_fixed_and_nothing_else_moves(queue, monkeypatch, batch):
    monkeypatch.setattr(reconciling, "BATCH", batch)
    now = time.time()
    # Ten jobs on five due times: batches of three end between equal due times.
    ids = queue.add_many([JobSpec(H, "record", {}, at=now + 60 + n // 2) for n in range(10)])
    Job = queue.table.model
    lost, cancelled, moved, claimed, undated = ids[1], ids[4], ids[6], ids[8], ids[9]
    client = queue.index.client
    client.zrem(schedule_key("default"), lost, claimed)
    client.zadd(queue_key("default", "claimed"), {str(claimed): now})  # a live run's claim
    Job.update(status=Status.CANCELLED).where(Job.id == cancelled).execute()
    client.zadd(schedule_key("default"), {str(moved): now + 3600})  # a later score: kept
    Job.update(run_at=None).where(Job.id == undated).execute()  # the seed's: due at its score
    client.zadd(schedule_key("default"), {"junk": now + 61, "999999999": now + 62})
    done = queue.add(H, "record", {}, queue="mail", at=now + 60)
    Job.update(status=Status.SUCCESS).where(Job.id == done).execute()
    seen = []

    result = queue.reconcile(seen.append)

    assert dict(result.reindexed) == {"default": 1, "mail": 0}
    assert dict(result.removed) == {"default": 3, "mail": 1}
    expected = {str(job_id) for job_id in ids} - {str(cancelled), str(claimed)}
    assert set(members(queue)) == expected
    assert members(queue)[str(moved)] == pytest.approx(now + 3600)
    assert members(queue, "mail") == {}
    assert seen[-1] == result.rows == 9  # the pending rows: ten, one cancelled
    assert seen == sorted(seen)


def test_a_second_reconcile_finds_nothing(queue):
    queue.add_many([JobSpec(H, "record", {}, delay=60 + n) for n in range(50)])
    queue.index.client.zrem(
        schedule_key("default"), *queue.index.client.zrange(schedule_key("default"), 0, 9)
    )
    first = queue.reconcile()

    second = queue.reconcile()

    assert (first.reindexed["default"], second.reindexed["default"]) == (10, 0)
    assert second.removed["default"] == 0
    assert len(members(queue)) == 50


@with_kept_counts
def test_reconcile_corrects_kept_counts_a_truncate_left_wrong(queue):
    queue.add_many([JobSpec(H, "record", {}, delay=60) for _ in range(3)])
    queue.db.execute_sql(
        "TRUNCATE TABLE delay_queue" if queue.table.mysql else "DELETE FROM delay_queue"
    )
    if not queue.table.mysql:  # SQLite's DELETE fires the triggers: a count edited by hand
        queue.db.execute_sql("UPDATE delay_queue_counts SET pending = pending + 3")
    queue.add(H, "record", {}, delay=60)

    result = queue.reconcile()

    assert result.counts_corrected == {"default": -3}
    assert Counts(queue.table).pending_by_queue() == {"default": 1}
    assert queue.reconcile().counts_corrected == {}
