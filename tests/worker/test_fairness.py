"""Several queues in one run: served in turn, each its weight in batches a turn, so a
backlog in one queue delays another queue's due job by about one batch, not by the backlog.
Order is read from the handlers' own log."""

from __future__ import annotations

import time

import pytest

from delayq import JobSpec
from delayq.errors import BadInput
from delayq.store.table.leases import Leases
from tests.sample_handlers.jobs import read_log
from tests.support.invoke import invoke

H = "tests.sample_handlers.jobs"
NOW = 1_800_000_000.0
BATCH = 50


def backlog(queue, log: str, name: str, count: int, due: float, now: float = NOW) -> None:
    """`count` jobs of queue `name`, due a millisecond apart from `due` on."""
    specs = [
        JobSpec(H, "record", {"log": log, "n": f"{name}-{n}"}, at=due + n / 1000, queue=name)
        for n in range(count)
    ]
    queue.add_many(specs, now=now)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_backlog_in_one_queue_delays_another_queues_job_by_about_one_batch(
    make_queue, log, concurrency
):
    queue = make_queue(batch_size=BATCH)
    backlog(queue, log, "bulk", 1000, NOW - 100)  # due long before the urgent one
    backlog(queue, log, "urgent", 1, NOW - 1)

    report = queue.run(now=NOW, concurrency=concurrency, queues=["bulk", "urgent"])

    order = read_log(log)
    assert report.succeeded == 1001 and len(order) == 1001
    assert order.index("urgent-0") <= BATCH + concurrency


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_batch_cut_short_by_another_run_does_not_end_its_queues_turns(
    make_queue, log, concurrency
):
    # Another run holds some of the first batch's rows: the claim wins fewer than it took
    # off the schedule. The turn must still go on to a whole batch, and the queue keep its
    # place in the next rounds, not drop out of the pass with its backlog left behind.
    queue = make_queue(batch_size=BATCH)
    backlog(queue, log, "bulk", 300, NOW - 100)
    backlog(queue, log, "urgent", 1, NOW - 1)
    held = [
        job.id
        for job in queue.table.model.select()
        .where(queue.table.model.queue == "bulk")
        .order_by(queue.table.model.id)
        .limit(10)
    ]
    Leases(queue.table).mark_running(held, "another-run", NOW + 3600, NOW)

    report = queue.run(now=NOW, concurrency=concurrency, queues=["bulk", "urgent"])

    assert report.succeeded == 291
    assert len(read_log(log)) == 291


def test_weights_give_each_queue_its_share_of_every_round(make_queue, log):
    queue = make_queue(batch_size=BATCH)
    backlog(queue, log, "a", 600, NOW - 10)
    backlog(queue, log, "b", 600, NOW - 10)

    queue.run(now=NOW, queues=["a", "b"], weights={"a": 3, "b": 1})

    first = read_log(log)[:400]  # two rounds: a 150 and b 50 in each
    assert sum(line.startswith("a-") for line in first) == 300
    assert sum(line.startswith("b-") for line in first) == 100


def test_a_queue_alone_is_drained_in_one_turn(make_queue, log):
    queue = make_queue(batch_size=BATCH)
    backlog(queue, log, "a", 120, NOW - 10)

    report = queue.run(now=NOW, queues=["a", "b"])

    assert report.succeeded == 120
    assert read_log(log) == [f"a-{n}" for n in range(120)]


@pytest.mark.parametrize("weights", [{"a": 0}, {"a": 101}, {"a": True}, {"a": 1.5}, {"a b": 1}])
def test_a_bad_weight_is_refused_before_anything_runs(queue, log, weights):
    backlog(queue, log, "a", 1, NOW - 10)

    with pytest.raises(BadInput):
        queue.run(now=NOW, weights=weights)

    assert read_log(log) == []


def test_the_command_line_takes_queues_with_weights(queue, cli_env, log):
    backlog(queue, log, "a", 3, time.time() - 10, now=time.time())
    backlog(queue, log, "b", 2, time.time() - 10, now=time.time())

    result = invoke(cli_env, "run", "--queues", "a:3,b")

    assert result.exit_code == 0, result.stderr
    assert sorted(read_log(log)) == ["a-0", "a-1", "a-2", "b-0", "b-1"]


@pytest.mark.parametrize("text", ["a b:2", "a:0", "a:²", ",", "a:1000"])
def test_bad_queues_exit_2_with_one_line_and_run_nothing(queue, cli_env, log, text):
    backlog(queue, log, "a", 1, time.time() - 10, now=time.time())

    result = invoke(cli_env, "run", "--queues", text)

    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("delayq: error: ")
    assert read_log(log) == []
