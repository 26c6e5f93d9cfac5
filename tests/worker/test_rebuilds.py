"""Rebuilding the schedule after Redis lost it (worker/rebuilds.py): due rows first, the rest
from a thread, one run at a time, going on from where a stopped one left off, and never
bringing back a job cancelled meanwhile or losing one added meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from delayq import JobSpec
from delayq.store.index.keys import INDEXED_KEY, REBUILD_KEY, schedule_key
from delayq.store.table.due_rows import DueCursor, DueRows
from delayq.worker import rebuilds
from delayq.worker.rebuilds import Rebuild

H = "tests.sample_handlers.jobs"


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Small batches and no foreground beyond the due rows: a rebuild that takes a while; its
    thread goes on once the event returned is set."""
    monkeypatch.setattr(rebuilds, "BATCH", 50)
    monkeypatch.setattr(rebuilds, "FOREGROUND", 0.0)
    gate = threading.Event()
    go_on = Rebuild._go_on

    def when_let(self, walks):
        gate.wait(60)
        go_on(self, walks)

    monkeypatch.setattr(Rebuild, "_go_on", when_let)
    yield gate
    gate.set()


def schedule(queue, name: str = "default") -> dict[int, float]:
    entries = queue.index.client.zrange(schedule_key(name), 0, -1, withscores=True)
    return {int(member): score for member, score in entries}


def fill(queue, log: str, later: int, due: int, now: float) -> tuple[list[int], list[int]]:
    """`later` jobs due in ten minutes or more (within the horizon, so a rebuild puts them
    back) and `due` jobs due a minute ago, in both queues."""
    far = [
        JobSpec(H, "record", {"log": log}, at=now + 600 + n, queue=("default", "mail")[n % 2])
        for n in range(later)
    ]
    near = [
        JobSpec(H, "record", {"log": log}, at=now - 60 + n, queue=("default", "mail")[n % 2])
        for n in range(due)
    ]
    return queue.add_many(far, now=now), queue.add_many(near, now=now)


def test_the_walk_in_due_order_reads_undated_rows_first_then_by_due_time_and_id(queue):
    now = time.time()
    ids = queue.add_many([JobSpec(H, "record", {}, at=now + n % 3) for n in range(7)], now=now)
    undated = queue.add(H, "record", {}, at=now)
    queue.table.model.update(run_at=None).where(queue.table.model.id == undated).execute()
    walked, cursor = [], None
    while (batch := DueRows(queue.table).pending_by_due("default", cursor, 2)).count:
        dues, members = batch.packed.split()[::2], batch.packed.split()[1::2]
        walked += [(int(member), float(due)) for due, member in zip(dues, members, strict=True)]
        cursor = batch.last

    rows = {row.id: row for row in queue.table.model.select()}
    expected = sorted(ids, key=lambda job_id: ((job_id - ids[0]) % 3, job_id))
    assert [job_id for job_id, _ in walked] == [undated, *expected]
    # every due time exactly as the table has it (`created` for the row without run_at)
    assert dict(walked[1:]) == {job_id: rows[job_id].run_at for job_id in expected}
    assert DueCursor.from_mark(DueCursor(None, 5).mark()) == DueCursor(None, 5)
    assert DueCursor.from_mark(DueCursor(1.5, 5).mark()) == DueCursor(1.5, 5)
    assert DueCursor.from_mark("junk") is None


def test_due_rows_are_back_before_the_rest_and_the_thread_finishes_it(queue, log, slow):
    now = time.time()
    later, due = fill(queue, log, 600, 20, now)
    queue.index.client.flushdb()
    rebuild = Rebuild(queue.table, queue.index)

    rebuild.due_first(lambda: now, lambda: None)

    on_schedule = {**schedule(queue), **schedule(queue, "mail")}
    assert set(due) <= set(on_schedule)
    assert len(on_schedule) < len(due) + len(later)  # the rest is still to come
    slow.set()
    rebuild._thread.join(timeout=60)
    on_schedule = {**schedule(queue), **schedule(queue, "mail")}
    assert set(on_schedule) == set(due) | set(later)
    assert queue.index.client.exists(INDEXED_KEY)
    assert not queue.index.client.exists(REBUILD_KEY)
    assert rebuild.added == len(due) + len(later)


def test_a_second_run_waits_for_the_due_rows_only_and_repeats_nothing(queue, log, slow):
    now = time.time()
    later, due = fill(queue, log, 600, 20, now)
    queue.index.client.flushdb()
    first, second = Rebuild(queue.table, queue.index), Rebuild(queue.table, queue.index)
    first.due_first(lambda: now, lambda: None)

    assert second.due_first(lambda: now, lambda: None) == 0
    assert set(due) <= set(schedule(queue)) | set(schedule(queue, "mail"))
    slow.set()
    first._thread.join(timeout=60)
    assert (first.added, second.added) == (len(due) + len(later), 0)


def test_a_stopped_rebuild_is_taken_up_where_it_left_off(queue, log, slow):
    now = time.time()
    later, due = fill(queue, log, 600, 20, now)
    queue.index.client.flushdb()
    first = Rebuild(queue.table, queue.index)
    first.due_first(lambda: now, lambda: None)
    first._stop.set()
    slow.set()
    first.close()  # before the thread took a batch
    assert not queue.index.client.exists(INDEXED_KEY)
    assert queue.index.client.hgetall(REBUILD_KEY)

    second = Rebuild(queue.table, queue.index)
    second.rebuild_all(lambda: None)

    assert first.added + second.added == len(due) + len(later)  # no row walked twice
    on_schedule = {**schedule(queue), **schedule(queue, "mail")}
    assert set(on_schedule) == set(due) | set(later)
    assert queue.index.client.exists(INDEXED_KEY)


def test_a_job_cancelled_during_the_rebuild_stays_off_and_one_added_stays_on(
    queue, log, slow, monkeypatch
):
    now = time.time()
    later, due = fill(queue, log, 600, 0, now)
    queue.index.client.flushdb()
    last_default = later[-2]  # the queues alternate, the default one first
    rebuild = Rebuild(queue.table, queue.index)
    steps = 0
    put_back = Rebuild._put_back

    def and_meanwhile(self, walk, batch):
        nonlocal steps, added
        steps += 1
        if steps == 3:  # while the rebuild is under way, after its reader has read ahead
            queue.cancel(last_default)
            added = queue.add(H, "record", {"log": log}, at=now + 3000)  # within the horizon
        put_back(self, walk, batch)

    added = 0
    monkeypatch.setattr(Rebuild, "_put_back", and_meanwhile)
    rebuild.rebuild_all(lambda: None)

    assert last_default not in schedule(queue)
    assert schedule(queue)[added] == pytest.approx(now + 3000)


def test_a_rebuild_that_lost_its_lock_stops(queue, log, slow):
    now = time.time()
    fill(queue, log, 600, 20, now)
    queue.index.client.flushdb()
    rebuild = Rebuild(queue.table, queue.index)
    rebuild.due_first(lambda: now, lambda: None)
    queue.index.client.delete("delay_queue_rebuilding")  # it lapsed: a stalled process

    slow.set()
    rebuild._thread.join(timeout=60)

    assert not queue.index.client.exists(INDEXED_KEY)  # another run takes it up
    assert Rebuild(queue.table, queue.index).rebuild_all(lambda: None) > 0
    assert queue.index.client.exists(INDEXED_KEY)
