"""`async def` handlers: awaited on the runner's one event loop, up to N in flight with
--concurrency N, mixed with plain handlers in one queue, cancelled at their time limit."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from delayq import JobSpec, Status
from tests.sample_handlers.aio import pool_threads
from tests.sample_handlers.jobs import read_log
from tests.worker.test_concurrency import most_at_once, statuses

A = "tests.sample_handlers.aio"
H = "tests.sample_handlers.jobs"


def test_an_async_handler_runs_and_its_result_is_recorded(queue, log):
    job_id = queue.add(A, "slow", {"log": log, "n": 1, "seconds": 0.01}, now=time.time() - 1)

    report = queue.run()

    assert report.succeeded == 1
    assert read_log(log) == ["start 1", "done 1"]
    assert queue.show(job_id)["message"] == "awaited"


def test_current_job_inside_a_coroutine_is_its_own_job(queue, log):
    ids = queue.add_many([JobSpec(A, "whoami", {"log": log}) for _ in range(6)], now=time.time())

    queue.run(concurrency=3)

    assert sorted(read_log(log)) == sorted(f"job {job_id}" for job_id in ids)
    assert [queue.show(job_id)["message"] for job_id in ids] == [f"job {i}" for i in ids]


# 100 in flight: past pool.GATHER_FROM, the main thread collects finished tasks in groups.
@pytest.mark.parametrize("concurrency", [10, 100])
def test_async_handlers_overlap_up_to_the_concurrency(queue, log, concurrency):
    count = 3 * concurrency
    queue.add_many(
        [JobSpec(A, "slow", {"log": log, "n": n, "seconds": 0.3}) for n in range(count)],
        now=time.time() - 1,
    )

    report = queue.run(concurrency=concurrency)

    assert report.succeeded == count
    assert most_at_once(log) == concurrency
    done = sorted(line for line in read_log(log) if line.startswith("done"))
    assert done == sorted(f"done {n}" for n in range(count))  # each once


def test_async_calls_take_no_thread(queue, log):
    before = pool_threads()  # threads other tests left stuck in a handler, if any
    queue.add_many(
        [JobSpec(A, "count_pool_threads", {"log": log}) for _ in range(12)], now=time.time() - 1
    )

    report = queue.run(concurrency=8)

    assert report.succeeded == 12
    counts = [int(line.rsplit(" ", 1)[1]) for line in read_log(log)]
    assert len(counts) == 12
    assert max(counts) <= before


def test_async_and_plain_handlers_share_one_queue_and_its_pool(queue, log):
    specs = [JobSpec(A, "slow", {"log": log, "n": f"a{n}", "seconds": 0.2}) for n in range(4)]
    specs += [JobSpec(H, "slow", {"log": log, "n": f"s{n}", "seconds": 0.2}) for n in range(4)]
    specs += [
        JobSpec(A, "fail", {"log": log}),
        JobSpec(f"{A}.Notifier", "send", {"log": log, "to": "ann"}),
    ]
    queue.add_many(specs, now=time.time() - 1)

    report = queue.run(concurrency=8)

    assert (report.succeeded, report.failed) == (9, 1)
    assert most_at_once(log) == 8
    assert "sent ann" in read_log(log)
    assert statuses(queue) == Counter({"success": 9, "failed": 1, "pending": 1})
    model = queue.table.model
    failed = model.get(model.status == Status.FAILED)
    head, traceback = failed.message.split("\n", 1)
    assert head == "ValueError: async boom"
    assert "sample_handlers/aio.py" in traceback and "in fail\n" in traceback


def test_an_async_handler_past_its_limit_is_cancelled_on_the_main_thread(queue, log):
    job_id = queue.add(A, "slow", {"log": log, "n": 1, "seconds": 30}, timeout=1, now=time.time())

    report = queue.run()

    assert (report.succeeded, report.failed) == (0, 1)
    assert queue.show(job_id)["message"] == "JobTimeout: ran longer than its 1s time limit"
    assert read_log(log) == ["start 1", "cancelled 1"]


def test_an_async_handler_past_its_limit_is_cancelled_in_the_pool(queue, log):
    hung = queue.add(A, "slow", {"log": log, "n": 1, "seconds": 30}, timeout=1, now=time.time())
    quick = queue.add(A, "slow", {"log": log, "n": 2, "seconds": 0}, now=time.time())

    report = queue.run(concurrency=4)

    assert (report.succeeded, report.failed, report.stuck) == (1, 1, 0)
    assert queue.show(hung)["message"] == "JobTimeout: ran longer than its 1s time limit"
    assert queue.show(quick)["status"] == "success"
    assert "cancelled 1" in read_log(log)


def test_an_async_handler_that_swallows_its_cancellation_is_still_timed_out(queue, log):
    job_id = queue.add(A, "ignores_cancel", {"log": log}, timeout=1, now=time.time())

    report = queue.run(concurrency=2)

    assert (report.succeeded, report.failed, report.stuck) == (0, 1, 0)
    assert queue.show(job_id)["message"] == "JobTimeout: ran longer than its 1s time limit"
    assert read_log(log)[:2] == ["start", "ignored cancel"]
    assert "done" not in read_log(log)  # cancelled again when it was given up on


def test_an_async_handler_s_own_timeout_is_its_failure_not_the_time_limit(queue, log):
    one = queue.add(A, "upstream_timeout", {}, timeout=60, now=time.time())
    queue.run()  # one at a time: awaited on the loop for the main thread
    pooled = queue.add(A, "upstream_timeout", {}, timeout=60, now=time.time())
    queue.run(concurrency=2)  # a task of its own on the loop

    for job_id in (one, pooled):
        message = queue.show(job_id)["message"]
        assert message.startswith("TimeoutError"), message
        assert "JobTimeout" not in message
