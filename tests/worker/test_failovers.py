"""A run that finds a queue's keys on another Redis server than the one it noted (a failover
promoted a replica: a new replication id) puts back the jobs added since that the schedule
lacks, not yet due ones too; and for a while after, those added since its previous check
(an old primary not yet demoted takes writes that are then dropped). On the suite's one
server the failover is played by rewriting the note; tests/store/index/test_sentinel.py and
tests/store/index/test_cluster.py roll back real servers."""

from __future__ import annotations

import logging
import time

import pytest

from delayq.store.index.keys import queue_key, schedule_key
from delayq.store.index.registry import ServerNote
from delayq.store.table.model import utc_stamp
from delayq.worker.recovery import LOOKBACK, WATCH

H = "tests.sample_handlers.jobs"


def lose(queue, job_id: int) -> None:
    """Take a job off the schedule, as a rolled-back write would (the tests' jobs are due in
    30 minutes: within the horizon, where the schedule holds them)."""
    assert queue.index.schedule.remove("default", [job_id]) == 1


def on_schedule(queue, job_id: int) -> bool:
    return queue.index.client.zscore(schedule_key("default"), str(job_id)) is not None


def renote(queue, replication_id: str | None = None, moved: float | None = None) -> None:
    """Rewrite the queue's note: another server (a failover), or a move found at `moved`."""
    note = queue.index.registry.server_note("default")
    assert note is not None
    queue.index.registry.note_server(
        "default",
        ServerNote(replication_id or note.replication_id, note.seen, moved or note.moved),
    )


def test_a_run_notes_the_server_each_queue_is_on(queue):
    assert queue.index.registry.server_note("default") is None

    queue.run()

    note = queue.index.registry.server_note("default")
    assert note is not None
    assert note.replication_id == queue.index.client.info("replication")["master_replid"]
    assert note.moved is None


def test_a_run_on_a_new_server_puts_back_the_jobs_added_since(queue, log, caplog):
    queue.run()
    before = queue.add(H, "record", {"log": log, "n": "before"}, delay="30m")
    lost = queue.add(H, "record", {"log": log, "n": "lost"}, delay="30m")
    lose(queue, lost)
    renote(queue, replication_id="the-old-primary")

    with caplog.at_level(logging.WARNING, logger="delayq"):
        report = queue.run()

    assert on_schedule(queue, lost) and on_schedule(queue, before)
    assert report.reindexed == 1
    assert [record.getMessage() for record in caplog.records] == [
        "queue default: Redis is not the server the schedule was last seen on (a failover?);"
        " putting back the jobs added since, which it may not have",
        "queue default: put back 1 jobs a failover took off the schedule",
    ]
    note = queue.index.registry.server_note("default")
    assert note is not None and note.moved is not None


def test_jobs_changed_long_before_the_server_was_last_seen_are_left_to_the_orphan_sweep(queue):
    queue.run()
    old = queue.add(H, "record", {"n": "old"}, delay="30m")
    lose(queue, old)
    Job = queue.table.model
    Job.update(modified=utc_stamp(time.time() - LOOKBACK - 60)).where(Job.id == old).execute()
    renote(queue, replication_id="the-old-primary")

    report = queue.run()

    assert report.reindexed == 0
    assert not on_schedule(queue, old)


def test_for_a_while_after_a_move_each_run_puts_back_what_was_added_since(queue, log):
    queue.run()
    renote(queue, replication_id="the-old-primary")
    queue.run()  # finds the move
    late = queue.add(H, "record", {"log": log, "n": "late"}, delay="30m")
    lose(queue, late)  # its add reached the old primary, which dropped it when demoted

    report = queue.run()

    assert report.reindexed == 1
    assert on_schedule(queue, late)


def test_long_after_a_move_runs_check_nothing_more(queue, log):
    queue.run()
    note = queue.index.registry.server_note("default")
    assert note is not None
    renote(queue, moved=note.seen - WATCH - 1)
    late = queue.add(H, "record", {"log": log, "n": "late"}, delay="30m")
    lose(queue, late)

    report = queue.run()

    assert report.reindexed == 0
    assert not on_schedule(queue, late)


@pytest.mark.parametrize("junk", ["", "replication_id", "seen"])
def test_a_note_delayq_did_not_write_is_taken_as_none(queue, junk):
    queue.index.client.hset(queue_key("default", "server"), mapping={"seen": "x", junk or "a": "b"})

    queue.run()

    note = queue.index.registry.server_note("default")
    assert note is not None and note.moved is None
